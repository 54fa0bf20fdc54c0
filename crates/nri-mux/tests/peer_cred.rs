//! Peer credentials (SO_PEERCRED) of a trunk socket.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::MetadataExt;
use std::process::{Command, Stdio};

use nri_mux::{into_tokio, peer_credentials, socketpair};

const CHILD_MODE: &str = "NRI_MUX_TEST_CHILD";
const SOCK_PATH: &str = "NRI_MUX_TEST_SOCK";

/// Not a real test: the body of the child process, which connects to the
/// socket path it is given and waits for the parent to hang up.
#[test]
fn child_entry() {
    if std::env::var(CHILD_MODE).as_deref() != Ok("connect") {
        return;
    }
    let mut s = std::os::unix::net::UnixStream::connect(std::env::var(SOCK_PATH).unwrap()).unwrap();
    let mut v = Vec::new();
    let _ = std::io::Read::read_to_end(&mut s, &mut v);
}

fn my_ids() -> (u32, u32) {
    let m = std::fs::metadata("/proc/self").unwrap();
    (m.uid(), m.gid())
}

#[tokio::test]
async fn socketpair_peer_is_this_process() {
    let (a, _b) = socketpair().unwrap();
    let a = into_tokio(a).unwrap();
    let c = peer_credentials(&a).unwrap();
    let (uid, gid) = my_ids();
    assert_eq!((c.uid, c.gid), (uid, gid));
    assert_eq!(c.pid, Some(std::process::id() as i32));
}

#[tokio::test]
async fn connected_child_is_reported_with_its_pid() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nri.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["child_entry", "--exact", "--test-threads=1"])
        .env(CHILD_MODE, "connect")
        .env(SOCK_PATH, &path)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let (stream, _) = listener.accept().await.unwrap();
    let c = peer_credentials(&stream).unwrap();
    let (uid, gid) = my_ids();
    assert_eq!((c.uid, c.gid), (uid, gid));
    assert_eq!(c.pid, Some(child.id() as i32));
    drop(stream);
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
}
