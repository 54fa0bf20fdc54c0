//! Latency statistics, computed exactly as the Go harness does
//! (nearest-rank percentiles, values in µs rounded to 0.1).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Latency statistics in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// 50th percentile.
    pub median: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Fastest sample.
    pub min: f64,
    /// Slowest sample.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
}

/// Rounds to one decimal, as the Go harness.
pub fn round1(f: f64) -> f64 {
    (f * 10.0).round() / 10.0
}

/// Nearest-rank statistics of `samples` (sorted in place); `None` if empty.
pub fn stats(samples: &mut [Duration]) -> Option<Stats> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_unstable();
    let us = |d: Duration| round1(d.as_nanos() as f64 / 1e3);
    let len = samples.len();
    let q = |p: f64| {
        let i = ((p * len as f64).ceil() as usize).clamp(1, len) - 1;
        us(samples[i])
    };
    let sum: Duration = samples.iter().sum();
    Some(Stats {
        median: q(0.5),
        p90: q(0.9),
        p99: q(0.99),
        p999: q(0.999),
        min: us(samples[0]),
        max: us(samples[len - 1]),
        mean: us(sum / len as u32),
    })
}

/// Median of `v` (the lower middle for even lengths is not used: the mean
/// of the two middle values), `None` if empty.
pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    Some(if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    })
}
