//! The socket is installed race-free (bound in a private directory, renamed
//! into place) and never in a directory others could write to or that
//! belongs to another user.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

use common::*;
use nri_runtime::Error;

fn set_mode(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn euid() -> u32 {
    std::fs::metadata("/proc/self").unwrap().uid()
}

async fn start_err(env: &TestEnv) -> Error {
    let a = env.builder().build(env.runtime.clone()).unwrap();
    a.start().await.unwrap_err()
}

#[tokio::test]
async fn a_directory_others_can_write_to_is_refused_with_a_clear_error() {
    for (mode, who) in [(0o777, "others"), (0o1777, "others"), (0o770, "its group")] {
        let env = TestEnv::new();
        let dir = env.socket.parent().unwrap();
        std::fs::create_dir_all(dir).unwrap();
        set_mode(dir, mode);
        match start_err(&env).await {
            Error::InsecureSocketDirectory {
                path,
                owner,
                mode: m,
                reason,
            } => {
                assert_eq!(path, dir.display().to_string());
                assert_eq!((owner, m), (euid(), mode));
                assert!(reason.contains(&format!("writable by {who}")), "{reason}");
                assert!(reason.contains(&format!("{mode:04o}")), "{reason}");
            }
            other => panic!("{mode:o}: {other:?}"),
        }
        assert!(!env.socket.exists());
        assert_eq!(
            std::fs::read_dir(dir).unwrap().count(),
            0,
            "nothing left behind"
        );
    }
}

#[tokio::test]
async fn a_directory_of_another_user_is_refused() {
    if euid() != 0 {
        eprintln!("skipping: needs root to give the directory to uid 65534");
        return;
    }
    let env = TestEnv::new();
    let dir = env.socket.parent().unwrap();
    std::fs::create_dir_all(dir).unwrap();
    std::os::unix::fs::chown(dir, Some(65534), Some(65534)).unwrap();
    match start_err(&env).await {
        Error::InsecureSocketDirectory { owner, reason, .. } => {
            assert_eq!(owner, 65534);
            assert!(reason.contains("owned by uid 65534"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let e = start_err(&env).await;
    assert!(
        e.to_string()
            .starts_with("refusing to create the NRI socket in"),
        "{e}"
    );
}

#[tokio::test]
async fn the_socket_replaces_a_stale_one_or_a_planted_symlink_and_leaves_nothing_behind() {
    let env = TestEnv::new();
    let dir = env.socket.parent().unwrap().to_path_buf();
    std::fs::create_dir_all(&dir).unwrap();
    set_mode(&dir, 0o755);
    // Someone planted a symlink at the socket path, pointing at a file
    // elsewhere: it is replaced, the file is untouched.
    let victim = env.dir.path().join("victim");
    std::fs::write(&victim, "keep").unwrap();
    set_mode(&victim, 0o644);
    std::os::unix::fs::symlink(&victim, &env.socket).unwrap();
    let a = env.start(env.builder()).await;
    let meta = std::fs::symlink_metadata(&env.socket).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.mode() & 0o777, 0o600);
    assert_eq!(meta.uid(), euid());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    assert_eq!(
        std::fs::metadata(&victim).unwrap().mode() & 0o777,
        0o644,
        "the link's target was not chmodded"
    );
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["nri.sock"], "no temporary directory left");
    // A plugin gets in.
    let _c = FakePlugin::new("10", "ok")
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    a.stop().await;
    // A stale socket from a previous run is replaced too.
    let a = env.start(env.builder()).await;
    assert!(
        std::fs::symlink_metadata(&env.socket)
            .unwrap()
            .file_type()
            .is_socket()
    );
    a.stop().await;
}

/// The usual layouts keep working: `/var/run/nri` style (an existing
/// directory, mode 0755, reached through a `/var/run` -> `/run` symlink),
/// and a missing directory, created 0700.
#[tokio::test]
async fn an_existing_0755_directory_behind_a_symlink_and_a_missing_one_are_accepted() {
    let env = TestEnv::new();
    let run = env.dir.path().join("run");
    std::fs::create_dir_all(run.join("nri")).unwrap();
    set_mode(&run.join("nri"), 0o755);
    std::fs::create_dir_all(env.dir.path().join("var")).unwrap();
    std::os::unix::fs::symlink(&run, env.dir.path().join("var/run")).unwrap();
    let socket = env.dir.path().join("var/run/nri/nri.sock");
    let a = env.start(env.builder().socket_path(&socket)).await;
    let meta = std::fs::symlink_metadata(run.join("nri/nri.sock")).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.mode() & 0o777, 0o600);
    assert_eq!(
        std::fs::metadata(run.join("nri")).unwrap().mode() & 0o7777,
        0o755,
        "an existing directory is left as it is"
    );
    let _c = FakePlugin::new("10", "ok").connect(&socket).await.unwrap();
    wait_active(&a, 1).await;
    a.stop().await;
    assert!(!socket.exists(), "removed on stop");

    let socket = env.dir.path().join("new/deeper/nri.sock");
    let a = env.start(env.builder().socket_path(&socket)).await;
    for d in ["new", "new/deeper"] {
        let mode = std::fs::metadata(env.dir.path().join(d)).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o700, "{d}");
    }
    a.stop().await;
}
