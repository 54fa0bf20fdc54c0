//! Dial failures keep the OS cause: no socket, connection refused and
//! permission denied are told apart.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::io::ErrorKind;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use common::*;
use nri_plugin::{Builder, Error};

fn stub_at(path: &std::path::Path) -> nri_plugin::Stub<Recorder> {
    Builder::new(Recorder::new().0)
        .name("test")
        .index("10")
        .socket_path(path)
        .build()
        .unwrap()
}

#[tokio::test]
async fn missing_socket() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nri.sock");
    let err = stub_at(&path).run().await.unwrap_err();
    assert!(err.is_socket_missing(), "{err:?}");
    assert_eq!(err.io_kind(), Some(ErrorKind::NotFound));
    match &err {
        Error::Connect { path: p, source } => {
            assert_eq!(p, &path);
            assert_eq!(source.kind(), ErrorKind::NotFound);
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("nri.sock"), "{err}");
    assert!(err.is_retryable());
}

#[tokio::test]
async fn refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nri.sock");
    // A stale socket file: bound, then the listener is gone.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let err = stub_at(&path).run().await.unwrap_err();
    assert!(err.is_connection_refused(), "{err:?}");
    assert!(!err.is_socket_missing());
}

#[tokio::test]
async fn permission_denied() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nri.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let me = std::fs::metadata(dir.path()).unwrap().uid();
    if me != 0 {
        // Not root: make the socket inaccessible to ourselves.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
        let err = stub_at(&path).run().await.unwrap_err();
        assert!(err.is_permission_denied(), "{err:?}");
        return;
    }
    // Root bypasses file permissions: run the example plugin as `nobody`
    // against the root-owned 0600 socket (dir must be traversable).
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // The build dir may not be reachable for `nobody` (e.g. under /root):
    // run a copy from the test's own directory.
    let bin = dir.path().join("logger");
    std::fs::copy(example_bin("logger"), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = tokio::process::Command::new(&bin)
        .args([
            "--socket",
            path.to_str().unwrap(),
            "--name",
            "logger",
            "--index",
            "10",
        ])
        .uid(65534)
        .gid(65534)
        .env_remove("NRI_PLUGIN_SOCKET")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains("kind=PermissionDenied"), "stderr: {stderr}");
}
