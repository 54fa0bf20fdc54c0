//! Reliability and security suite for NRI in Rust (not published).
//!
//! The tests in `tests/` drive a real [`nri_runtime::Adaptation`] with
//! hostile and faulty plugins, and the [`nri_plugin`] SDK against hostile
//! runtimes; `src/bin/soak.rs` is the long-running load test. The
//! guarantees and the tests that show them are listed in
//! `docs/reliability.md`.
//!
//! This library holds only small helpers shared by the soak binary and the
//! tests: reading a process's memory and file descriptors from `/proc`.

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
