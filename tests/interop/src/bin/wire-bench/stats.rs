//! Latency statistics of one run, and CPU time of a process.

use std::time::Duration;

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Stats {
    pub(crate) n: usize,
    pub(crate) median_ns: u64,
    pub(crate) p90_ns: u64,
    pub(crate) p99_ns: u64,
    pub(crate) min_ns: u64,
    pub(crate) max_ns: u64,
    pub(crate) mean_ns: u64,
    pub(crate) total_ns: u64,
    /// CPU time per call of the client / server process (Rust only; 10 ms
    /// tick resolution over the whole timed loop).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) client_cpu_us_per_call: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) server_cpu_us_per_call: Option<f64>,
}

/// Nearest-rank percentile of sorted samples (as the Go bench client).
pub(crate) fn rank(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let r = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[r.clamp(1, sorted.len()) - 1]
}

pub(crate) fn stats(mut samples: Vec<u64>, total: Duration) -> Stats {
    samples.sort_unstable();
    let n = samples.len();
    let sum: u128 = samples.iter().map(|&x| u128::from(x)).sum();
    Stats {
        n,
        median_ns: rank(&samples, 50.0),
        p90_ns: rank(&samples, 90.0),
        p99_ns: rank(&samples, 99.0),
        min_ns: samples.first().copied().unwrap_or(0),
        max_ns: samples.last().copied().unwrap_or(0),
        mean_ns: u64::try_from(sum / (n.max(1) as u128)).unwrap_or(u64::MAX),
        total_ns: u64::try_from(total.as_nanos()).unwrap_or(u64::MAX),
        client_cpu_us_per_call: None,
        server_cpu_us_per_call: None,
    }
}

pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// utime + stime of a process in clock ticks (10 ms), from /proc.
pub(crate) fn cpu_ticks(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = s.rsplit_once(')')?.1;
    let f: Vec<&str> = after.split_whitespace().collect();
    // after ")": state is field 3, utime 14, stime 15 (1-based) -> idx 11, 12
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

pub(crate) struct CpuWindow {
    pub(crate) client: Option<u64>,
    pub(crate) server: Option<u64>,
    pub(crate) server_pid: Option<u32>,
}

impl CpuWindow {
    pub(crate) fn start(server_pid: Option<u32>) -> Self {
        CpuWindow {
            client: cpu_ticks(std::process::id()),
            server: server_pid.and_then(cpu_ticks),
            server_pid,
        }
    }

    pub(crate) fn finish(self, st: &mut Stats) {
        let per_call = |a: Option<u64>, b: Option<u64>| {
            let (a, b) = (a?, b?);
            Some((b.saturating_sub(a)) as f64 * 10_000.0 / st.n.max(1) as f64)
        };
        st.client_cpu_us_per_call = per_call(self.client, cpu_ticks(std::process::id()));
        st.server_cpu_us_per_call = per_call(self.server, self.server_pid.and_then(cpu_ticks));
    }
}
