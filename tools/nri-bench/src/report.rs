//! What a run reports: the per-cell, per-stack aggregates of the
//! repetitions, the machine, and the target checks.

use serde::Serialize;

use crate::matrix::{BenchOptions, Cell, Stack};
use crate::result::RunResult;
use crate::stats::{median, round1};

/// A value aggregated over repetitions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MetricSummary {
    /// Median of the per-run values.
    pub median: f64,
    /// Smallest per-run value.
    pub min: f64,
    /// Largest per-run value.
    pub max: f64,
    /// Number of runs.
    pub runs: usize,
}

impl MetricSummary {
    fn of(v: &[f64]) -> Option<Self> {
        let m = median(v)?;
        Some(MetricSummary {
            median: round1(m),
            min: round1(v.iter().copied().fold(f64::INFINITY, f64::min)),
            max: round1(v.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
            runs: v.len(),
        })
    }
}

/// Results of one cell for one stack.
#[derive(Debug, Clone, Serialize)]
pub struct StackResult {
    /// The stack.
    pub stack: Stack,
    /// Aggregated metrics by name (`latency_median_us`, `latency_p99_us`,
    /// `events_per_sec`, `runtime_cpu_us_per_event`,
    /// `plugins_cpu_us_per_event`, `startup_ms`, `runtime_idle_rss_kb`,
    /// `runtime_after_rss_kb`, `plugin_idle_rss_kb`, `plugin_after_rss_kb`,
    /// `plugin_hwm_kb`, `sync_callback_ms`).
    pub metrics: std::collections::BTreeMap<String, MetricSummary>,
    /// Adjustment checks seen (deduplicated).
    pub adjust_checks: Vec<String>,
    /// Errors of failed runs.
    pub errors: Vec<String>,
    /// Every run's raw result.
    pub runs: Vec<RunResult>,
}

impl StackResult {
    /// Aggregates the repetitions of one stack in one cell: the median
    /// with min-max of each metric, the adjustment checks seen, the errors.
    pub(crate) fn aggregate(stack: Stack, results: Vec<Result<RunResult, String>>) -> Self {
        let mut values: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
        let mut runs = Vec::new();
        let mut errors = Vec::new();
        let mut checks = Vec::new();
        for r in results {
            match r {
                Ok(r) => {
                    for (k, v) in run_metrics(&r) {
                        values.entry(k.to_owned()).or_default().push(v);
                    }
                    if let Some(c) = &r.adjust_check
                        && !checks.contains(c)
                    {
                        checks.push(c.clone());
                    }
                    runs.push(r);
                }
                Err(e) => errors.push(e),
            }
        }
        StackResult {
            stack,
            metrics: values
                .into_iter()
                .filter_map(|(k, v)| MetricSummary::of(&v).map(|s| (k, s)))
                .collect(),
            adjust_checks: checks,
            errors,
            runs,
        }
    }
}

/// Results of one cell.
#[derive(Debug, Clone, Serialize)]
pub struct CellReport {
    /// The cell.
    pub cell: Cell,
    /// One entry per stack.
    pub stacks: Vec<StackResult>,
}

impl CellReport {
    /// The aggregated `metric` of `stack`, if measured.
    pub fn metric(&self, stack: Stack, metric: &str) -> Option<MetricSummary> {
        self.stacks
            .iter()
            .find(|s| s.stack == stack)
            .and_then(|s| s.metrics.get(metric).copied())
    }
}

/// One performance target and whether it was met.
#[derive(Debug, Clone, Serialize)]
pub struct TargetCheck {
    /// What is compared.
    pub name: String,
    /// The target, e.g. `<= 0.20x`.
    pub target: String,
    /// The measured value (ratio or KiB), if both sides were measured.
    pub value: Option<f64>,
    /// Human-readable measured value.
    pub detail: String,
    /// Whether the target was met (`None`: not measured).
    pub met: Option<bool>,
}

/// Facts about the machine during the run.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// `available_parallelism`.
    pub cpus: usize,
    /// `/proc/loadavg` at the start.
    pub loadavg_start: String,
    /// `/proc/loadavg` at the end.
    pub loadavg_end: String,
    /// 1-minute load average sampled before each run: min, median, max.
    pub load1_min_median_max: [f64; 3],
    /// Kernel release.
    pub kernel: String,
    /// CPU model (`model name` of `/proc/cpuinfo`).
    pub cpu_model: String,
    /// What a wake-up costs here, measured before the matrix
    /// ([`crate::probe`]); `None` if the probe failed.
    pub round_trips: Option<crate::probe::RoundTrips>,
    /// Wall time of the whole matrix, s.
    pub wall_s: f64,
}

/// Everything [`crate::run`] measured.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// The options used (after `--quick`).
    pub options: BenchOptions,
    /// The machine.
    pub machine: Machine,
    /// Per cell.
    pub cells: Vec<CellReport>,
    /// Target checks.
    pub targets: Vec<TargetCheck>,
}

impl BenchReport {
    /// The report of cell `id`.
    pub fn cell(&self, id: &str) -> Option<&CellReport> {
        self.cells.iter().find(|c| c.cell.id == id)
    }
}

fn mean_u(v: impl Iterator<Item = u64>) -> Option<f64> {
    let v: Vec<u64> = v.collect();
    if v.is_empty() {
        None
    } else {
        Some(v.iter().sum::<u64>() as f64 / v.len() as f64)
    }
}

/// Per-run scalar metrics of a run result.
fn run_metrics(r: &RunResult) -> Vec<(&'static str, f64)> {
    let mut m = Vec::new();
    if let Some(l) = &r.latency_us {
        m.push(("latency_median_us", l.median));
        m.push(("latency_p99_us", l.p99));
    }
    if let Some(v) = r.events_per_sec {
        m.push(("events_per_sec", v));
    }
    if let Some(v) = r.runtime_cpu_us_per_event {
        m.push(("runtime_cpu_us_per_event", v));
    }
    if let Some(v) = r.plugins_cpu_us_per_event {
        m.push(("plugins_cpu_us_per_event", v));
    }
    m.push(("startup_ms", r.startup_ms));
    m.push(("runtime_idle_rss_kb", r.rss.runtime_idle.rss_kb as f64));
    if let Some(a) = &r.rss.runtime_after {
        m.push(("runtime_after_rss_kb", a.rss_kb as f64));
    }
    if let Some(v) = mean_u(r.rss.plugins_idle.iter().map(|p| p.rss_kb)) {
        m.push(("plugin_idle_rss_kb", v));
    }
    let mut hwm = r.rss.plugins_idle.iter().map(|p| p.hwm_kb).max();
    if let Some(after) = &r.rss.plugins_after {
        if let Some(v) = mean_u(after.iter().map(|p| p.rss_kb)) {
            m.push(("plugin_after_rss_kb", v));
        }
        hwm = hwm.max(after.iter().map(|p| p.hwm_kb).max());
    }
    if let Some(h) = hwm {
        m.push(("plugin_hwm_kb", h as f64));
    }
    if let Some(s) = &r.sync
        && let Some(v) = s.sync_callback_ms.first()
    {
        m.push(("sync_callback_ms", *v));
    }
    m
}
