//! Finding a Go peer: present, missing and skipped, missing and required.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use nri_test_support::interop::find;

#[test]
fn a_present_peer_is_found() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("nri-go-runtime"), b"").unwrap();
    assert_eq!(
        find(dir.path(), "nri-go-runtime", true),
        Some(dir.path().join("nri-go-runtime"))
    );
}

#[test]
fn a_missing_peer_is_skipped_when_not_required() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(find(dir.path(), "nri-go-runtime", false), None);
}

#[test]
fn a_directory_is_not_a_peer() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("nri-go-runtime")).unwrap();
    assert_eq!(find(dir.path(), "nri-go-runtime", false), None);
}

#[test]
#[should_panic(expected = "NRI_REQUIRE_INTEROP=1")]
fn a_missing_peer_fails_when_required() {
    let dir = tempfile::tempdir().unwrap();
    let _ = find(dir.path(), "nri-go-runtime", true);
}
