//! Socket security: 0600 socket, 0700 parent directory, stale socket
//! removal, peer uid/gid allow-list.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;

use common::*;

#[tokio::test(flavor = "multi_thread")]
async fn socket_is_0600_in_a_new_0700_directory_and_stale_socket_is_replaced() {
    let env = TestEnv::new();
    let dir = env.socket.parent().unwrap().to_owned();
    assert!(!dir.exists());
    let a = env.start(env.builder()).await;
    let mode = std::fs::metadata(&env.socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    assert_eq!(
        std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    a.stop().await;
    // A stale socket file (or anything) at the path is replaced.
    std::fs::write(&env.socket, b"stale").unwrap();
    let a = env.start(env.builder()).await;
    let _c = FakePlugin::new("10", "x")
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn peers_outside_the_allow_list_are_rejected() {
    let uid = my_uid();
    let env = TestEnv::new();
    let a = env
        .start(
            env.builder()
                .allowed_uids([uid.wrapping_add(4242)])
                .allowed_gids([4242]),
        )
        .await;
    let r = FakePlugin::new("10", "intruder").connect(&env.socket).await;
    assert!(
        r.is_err(),
        "connection from a uid outside the allow-list must be dropped"
    );
    assert!(a.plugins().is_empty());
    a.stop().await;

    let env = TestEnv::new();
    let a = env.start(env.builder().allowed_uids([uid])).await;
    let _c = FakePlugin::new("10", "friend")
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    a.stop().await;
}

fn my_uid() -> u32 {
    // Our own uid, from a socket's peer credentials (no libc call needed).
    let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
    let a = {
        a.set_nonblocking(true).unwrap();
        a
    };
    let rt = tokio::runtime::Handle::current();
    let _g = rt.enter();
    let s = tokio::net::UnixStream::from_std(a).unwrap();
    s.peer_cred().unwrap().uid()
}
