//! Process measurements from `/proc`: resident set (VmRSS/VmHWM) and CPU
//! time, the same sources the Go harness reads.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `USER_HZ`, the unit of utime/stime in `/proc/<pid>/stat` (100 on every
/// mainstream Linux configuration; the Go harness assumes the same).
pub const CLOCK_TICKS: u64 = 100;

/// A process's resident set in KiB (`VmRSS`, `VmHWM` of `/proc/<pid>/status`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mem {
    /// Current resident set, KiB.
    pub rss_kb: u64,
    /// Peak resident set ("high water mark"), KiB.
    pub hwm_kb: u64,
}

fn proc_path(pid: Option<u32>, file: &str) -> PathBuf {
    match pid {
        Some(p) => PathBuf::from(format!("/proc/{p}/{file}")),
        None => PathBuf::from(format!("/proc/self/{file}")),
    }
}

/// VmRSS and VmHWM of `pid` (`None` = this process). Zeroes if the process
/// is gone.
pub fn read_mem(pid: Option<u32>) -> Mem {
    let mut m = Mem::default();
    let Ok(text) = std::fs::read_to_string(proc_path(pid, "status")) else {
        return m;
    };
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let n = v
            .split_whitespace()
            .next()
            .and_then(|x| x.parse().ok())
            .unwrap_or(0);
        match k {
            "VmRSS" => m.rss_kb = n,
            "VmHWM" => m.hwm_kb = n,
            _ => {}
        }
    }
    m
}

/// utime+stime of `pid` (`None` = this process) in clock ticks
/// ([`CLOCK_TICKS`] per second), all threads, from `/proc/<pid>/stat`.
pub fn cpu_ticks(pid: Option<u32>) -> u64 {
    let Ok(s) = std::fs::read_to_string(proc_path(pid, "stat")) else {
        return 0;
    };
    let Some(i) = s.rfind(')') else { return 0 };
    let f: Vec<&str> = s[i + 1..].split_whitespace().collect();
    // After ")": state is field 3; utime is field 14, stime 15 (1-based).
    let get = |n: usize| f.get(n).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    get(11) + get(12)
}

/// CPU time of `pid` (`None` = this process) in nanoseconds: the sum of
/// the per-thread `se.sum_exec_runtime` (`/proc/<pid>/task/*/schedstat`,
/// nanosecond resolution) of its live threads. Falls back to
/// [`cpu_ticks`] when schedstat is not available. Threads that exited are
/// not counted, so take both readings while the same threads are alive.
pub fn cpu_ns(pid: Option<u32>) -> u64 {
    let mut total = 0u64;
    let mut any = false;
    if let Ok(dir) = std::fs::read_dir(proc_path(pid, "task")) {
        for e in dir.flatten() {
            let p = e.path().join("schedstat");
            if let Ok(s) = std::fs::read_to_string(p)
                && let Some(ns) = s
                    .split_whitespace()
                    .next()
                    .and_then(|x| x.parse::<u64>().ok())
            {
                total += ns;
                any = true;
            }
        }
    }
    if any {
        total
    } else {
        cpu_ticks(pid) * (1_000_000_000 / CLOCK_TICKS)
    }
}

/// CPU time of this process in nanoseconds ([`cpu_ns`]).
pub fn self_cpu_ns() -> u64 {
    cpu_ns(None)
}

/// [`cpu_ns`] of `pid` plus that of its live descendants (from
/// `/proc/<pid>/task/*/children`): a plugin process that runs others, such
/// as `nri-proxy` with its plugins, is measured with them.
pub fn tree_cpu_ns(pid: u32) -> u64 {
    let mut total = cpu_ns(Some(pid));
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return total;
    };
    for t in tasks.flatten() {
        let Ok(children) = std::fs::read_to_string(t.path().join("children")) else {
            continue;
        };
        // A child that exited between the two reads counts nothing.
        total += children
            .split_whitespace()
            .filter_map(|c| c.parse::<u32>().ok())
            .map(tree_cpu_ns)
            .sum::<u64>();
    }
    total
}
