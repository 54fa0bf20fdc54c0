//! No ANSI colour codes where there is no terminal: on stderr when it is a
//! pipe, and never in `-log-file` (the shared logging set-up of every
//! sample plugin, which the SDK's own logs go through too).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_logger");

/// Runs the logger against a socket that does not exist: it logs its start
/// and the connection error, then exits 1.
fn run(extra: &[&str]) -> (Vec<u8>, std::process::ExitStatus) {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("missing.sock");
    let out = Command::new(BIN)
        .args(["-idx", "10", "-no-reconnect", "-socket-path"])
        .arg(&sock)
        .args(extra)
        .env_remove("NO_COLOR")
        .env_remove("NRI_PLUGIN_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (out.stderr, out.status)
}

#[test]
fn stderr_pipe_has_no_colour() {
    let (stderr, status) = run(&[]);
    assert_eq!(status.code(), Some(1));
    let text = String::from_utf8_lossy(&stderr);
    assert!(text.contains("ERROR"), "{text}");
    assert!(!stderr.contains(&0x1b), "escape codes on a pipe: {text:?}");
}

#[test]
fn log_file_has_no_colour() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("logger.log");
    let (_, status) = run(&["-log-file", log.to_str().unwrap()]);
    assert_eq!(status.code(), Some(1));
    let bytes = std::fs::read(&log).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains("ERROR"), "{text}");
    assert!(!bytes.contains(&0x1b), "escape codes in the file: {text:?}");
}
