//! Reliability and security suite for NRI in Rust (not published).
//!
//! The tests in `tests/` drive a real [`nri_runtime::Adaptation`] with
//! hostile and faulty plugins, and the [`nri_plugin`] SDK against hostile
//! runtimes; `src/bin/soak.rs` is the long-running load test. The
//! guarantees and the tests that show them are listed in
//! `docs/reliability.md`.
//!
//! This library holds only small helpers shared by the soak binary and the
//! tests: reading a process's memory and file descriptors from `/proc`,
//! and hand-made oversize messages.

use std::path::Path;

/// Resident set size of process `pid` (`"self"` for this one) in KiB, from
/// `/proc/<pid>/status` (`VmRSS`). `None` if the process is gone.
pub fn rss_kib(pid: &str) -> Option<u64> {
    let s = std::fs::read_to_string(Path::new("/proc").join(pid).join("status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Number of open file descriptors of process `pid` (`"self"` for this
/// one), from `/proc/<pid>/fd`. `None` if it cannot be read.
pub fn open_fds(pid: &str) -> Option<usize> {
    Some(
        std::fs::read_dir(Path::new("/proc").join(pid).join("fd"))
            .ok()?
            .count(),
    )
}

/// Peak resident set size of process `pid` in KiB, from
/// `/proc/<pid>/status` (`VmHWM`, the high-water mark since it started).
/// `None` if the process is gone.
pub fn peak_rss_kib(pid: &str) -> Option<u64> {
    let s = std::fs::read_to_string(Path::new("/proc").join(pid).join("status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// A protobuf message made of `len` bytes of empty entries of the repeated
/// message field whose key byte is `key` (each entry is the two bytes
/// `key, 0`): tiny on the wire, about a kilobyte per entry once decoded.
/// Written by hand because building it with the structs would cost the
/// attacker what it is meant to cost the victim.
pub fn empty_entries(key: u8, len: usize) -> Vec<u8> {
    [key, 0].repeat(len / 2)
}
