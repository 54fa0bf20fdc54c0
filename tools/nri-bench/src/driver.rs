//! The matrix: cells x stacks x repetitions, interleaved, aggregated into
//! medians with min-max, and the target checks.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use serde::Serialize;

use crate::bins::Bins;
use crate::harness::TokioFlavour;
use crate::result::RunResult;
use crate::stats::{median, round1};
use crate::{Error, Event, Flavour, Mode};

/// Which runtime and which plugins a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stack {
    /// Go runtime (`nri-go-bench`), Go plugins (`nri-go-plugin`): the baseline.
    GoGo,
    /// Go runtime, Rust plugins (`nri-bench-plugin`): the plugin SDK under test.
    GoRust,
    /// Rust runtime (`nri-bench-runtime`), Rust plugins: the whole Rust stack.
    RustRust,
    /// Rust runtime, Go plugins: the runtime library under test.
    RustGo,
    /// Go runtime, `nri-proxy` (`nri-bench-proxy`) with K Rust plugins
    /// behind it: the proxy on the runtime operators run.
    GoProxy,
    /// Rust runtime, `nri-proxy` with K Rust plugins behind it (beside
    /// `RustRust`: the latency the proxy adds).
    RustProxy,
    /// Go runtime with K WebAssembly plugins in-process (containerd/nri's
    /// wazero host), the interop wasm-guest module.
    GoWasm,
    /// Rust runtime with the same K WebAssembly plugins (wasmi).
    RustWasm,
    /// Go runtime (wazero) with K copies of a guest written in WAT that
    /// answers every call at once: the host's own cost per call.
    GoWat,
    /// Rust runtime (wasmi) with the same K WAT guests.
    RustWat,
}

impl Stack {
    /// Short label (`go/go` = runtime/plugins).
    pub fn label(self) -> &'static str {
        match self {
            Stack::GoGo => "go/go",
            Stack::GoRust => "go/rust",
            Stack::RustRust => "rust/rust",
            Stack::RustGo => "rust/go",
            Stack::GoProxy => "go/proxy/rust",
            Stack::RustProxy => "rust/proxy/rust",
            Stack::GoWasm => "go/wasm",
            Stack::RustWasm => "rust/wasm",
            Stack::GoWat => "go/wat",
            Stack::RustWat => "rust/wat",
        }
    }

    pub(crate) fn go_runtime(self) -> bool {
        matches!(
            self,
            Stack::GoGo | Stack::GoRust | Stack::GoProxy | Stack::GoWasm | Stack::GoWat
        )
    }

    /// The K plugins are WebAssembly modules in the runtime's process.
    pub(crate) fn wasm(self) -> bool {
        matches!(
            self,
            Stack::GoWasm | Stack::RustWasm | Stack::GoWat | Stack::RustWat
        )
    }

    /// The modules are the WAT no-op guest, not the Go-built one.
    pub(crate) fn wat(self) -> bool {
        matches!(self, Stack::GoWat | Stack::RustWat)
    }

    pub(crate) fn proxy(self) -> bool {
        matches!(self, Stack::GoProxy | Stack::RustProxy)
    }

    pub(crate) fn go_plugin(self) -> bool {
        matches!(self, Stack::GoGo | Stack::RustGo)
    }
}

/// One harness configuration of the matrix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cell {
    /// Stable identifier, e.g. `create-noop-k8`.
    pub id: String,
    /// Human label.
    pub label: String,
    /// Harness mode.
    pub mode: Mode,
    /// Timed event.
    pub event: Event,
    /// Plugin flavour.
    pub flavour: Flavour,
    /// Plugins.
    pub k: usize,
    /// Timed calls.
    pub n: usize,
    /// Warm-up calls.
    pub warmup: usize,
    /// Concurrent callers.
    pub concurrency: usize,
    /// Stacks run in this cell.
    pub stacks: Vec<Stack>,
    /// One call every this many ms instead of back to back (a node's
    /// pace): the paced cells.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pace_ms: Option<u64>,
    /// "Plain" mode: no spinning anywhere (our runtime's and plugins' spin
    /// budgets zero), beside the same cell with the defaults.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub plain: bool,
}

/// Options of a benchmark run.
#[derive(Debug, Clone, Serialize)]
pub struct BenchOptions {
    /// Repetitions of the whole matrix.
    pub reps: usize,
    /// Short smoke variant (small N, small sync state, 1 rep unless set).
    pub quick: bool,
    /// Timed calls at K=1 in the runtime cells; K plugins get `n / K`
    /// (at least 200), so every cell makes about the same number of plugin
    /// calls.
    pub n: usize,
    /// Events of the plugin memory/CPU cells (the anchor's 20000).
    pub plugin_n: usize,
    /// Events of the plugin growth cell (100000).
    pub plugin_long_n: usize,
    /// Sync state: pods.
    pub sync_pods: usize,
    /// Sync state: containers per pod.
    pub sync_containers_per_pod: usize,
    /// Run the runtime-library cells.
    pub runtime_cells: bool,
    /// Run the plugin-SDK cells.
    pub plugin_cells: bool,
    /// Run the proxy cells (`nri-proxy` between the runtime and K plugins).
    pub proxy_cells: bool,
    /// Run the WebAssembly plugin cells (the Go guest in both runtimes).
    pub wasm_cells: bool,
    /// Include the Go stacks (needs the Go peers).
    pub with_go: bool,
    /// Directory of `nri-go-bench` and `nri-go-plugin`.
    pub go_bin_dir: PathBuf,
    /// Directory of `nri-bench-runtime` and `nri-bench-plugin`.
    pub rust_bin_dir: PathBuf,
    /// The Rust bench plugin to run instead of the one in `rust_bin_dir`
    /// (e.g. a static `min-size` build, as the plugin images ship).
    pub rust_plugin_bin: Option<PathBuf>,
    /// tokio scheduler of the Rust runtime harness.
    pub tokio: TokioFlavour,
    /// tokio workers of the Rust runtime harness (multi_thread).
    pub workers: usize,
    /// Idle wait before the idle RSS reading, ms.
    pub idle_wait_ms: u64,
}

impl Default for BenchOptions {
    fn default() -> Self {
        let exe_dir = std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or_default();
        let go_bin_dir = std::env::var_os("NRI_INTEROP_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../interop/bin"));
        BenchOptions {
            reps: 3,
            quick: false,
            n: 4000,
            plugin_n: 20000,
            plugin_long_n: 100000,
            sync_pods: 1000,
            sync_containers_per_pod: 5,
            runtime_cells: true,
            plugin_cells: true,
            proxy_cells: true,
            wasm_cells: true,
            with_go: true,
            go_bin_dir,
            rust_bin_dir: exe_dir,
            rust_plugin_bin: None,
            tokio: TokioFlavour::MultiThread,
            workers: 2,
            idle_wait_ms: 500,
        }
    }
}

/// The shortest idle wait of a proxy cell (ms). The harness sees one
/// plugin, the proxy, register; the proxy starts the plugins behind it
/// only once it is synchronized upstream, and the harness's adjustment
/// check (the first CreateContainer after the idle wait) needs all of them
/// registered. With `--quick`'s 100 ms, four plugin processes on a loaded
/// machine were not always there yet.
const PROXY_IDLE_WAIT_MS: u64 = 3000;

/// The idle wait a run of `stack` gets: [`BenchOptions::idle_wait_ms`],
/// and at least [`PROXY_IDLE_WAIT_MS`] through the proxy.
fn idle_wait_ms(o: &BenchOptions, stack: Stack) -> u64 {
    if stack.proxy() {
        o.idle_wait_ms.max(PROXY_IDLE_WAIT_MS)
    } else {
        o.idle_wait_ms
    }
}

impl BenchOptions {
    /// Applies the `--quick` sizes (called by [`run`] when `quick` is set).
    fn effective(&self) -> BenchOptions {
        let mut o = self.clone();
        if o.quick {
            o.n = o.n.min(200);
            o.plugin_n = o.plugin_n.min(300);
            o.plugin_long_n = o.plugin_long_n.min(1500);
            o.sync_pods = o.sync_pods.min(50);
            o.idle_wait_ms = o.idle_wait_ms.min(100);
        }
        o
    }

    /// The matrix of cells.
    #[allow(clippy::too_many_lines)]
    pub fn cells(&self) -> Vec<Cell> {
        let o = self.effective();
        let min_n = if o.quick { 40 } else { 200 };
        let rt_stacks: Vec<Stack> = if o.with_go {
            vec![Stack::GoGo, Stack::RustRust, Stack::RustGo]
        } else {
            vec![Stack::RustRust]
        };
        let pl_stacks: Vec<Stack> = if o.with_go {
            vec![Stack::GoGo, Stack::GoRust]
        } else {
            Vec::new()
        };
        let mut cells = Vec::new();
        let lat = |id: String,
                   label: String,
                   event: Event,
                   flavour: Flavour,
                   k: usize,
                   n: usize,
                   conc: usize,
                   stacks: &Vec<Stack>| Cell {
            id,
            label,
            mode: Mode::Latency,
            event,
            flavour,
            k,
            n,
            warmup: (n / 20).max(10),
            concurrency: conc,
            stacks: stacks.clone(),
            pace_ms: None,
            plain: false,
        };
        if o.runtime_cells {
            for flavour in [Flavour::Noop, Flavour::Adjusting] {
                for k in [1usize, 4, 8] {
                    let n = (o.n / k).max(min_n);
                    cells.push(lat(
                        format!("create-{}-k{k}", flavour.as_str()),
                        format!("CreateContainer {} K={k}", flavour.as_str()),
                        Event::CreateContainer,
                        flavour,
                        k,
                        n,
                        1,
                        &rt_stacks,
                    ));
                }
            }
            cells.push(lat(
                "start-noop-k8".into(),
                "StartContainer noop K=8".into(),
                Event::StartContainer,
                Flavour::Noop,
                8,
                (o.n / 8).max(min_n),
                1,
                &rt_stacks,
            ));
            for k in [1usize, 8] {
                cells.push(lat(
                    format!("conc8-noop-k{k}"),
                    format!("CreateContainer noop K={k}, 8 concurrent"),
                    Event::CreateContainer,
                    Flavour::Noop,
                    k,
                    (o.n / k).max(min_n),
                    8,
                    &rt_stacks,
                ));
            }
            cells.push(Cell {
                id: "sync-runtime".into(),
                label: format!(
                    "register+sync 1 plugin, {} pods / {} containers",
                    o.sync_pods,
                    o.sync_pods * o.sync_containers_per_pod
                ),
                mode: Mode::Sync,
                event: Event::CreateContainer,
                flavour: Flavour::Noop,
                k: 1,
                n: 0,
                warmup: 0,
                concurrency: 1,
                stacks: rt_stacks.clone(),
                pace_ms: None,
                plain: false,
            });
            cells.extend(crate::paced::cells(&o));
        }
        if o.proxy_cells {
            let stacks = if o.with_go {
                vec![
                    Stack::GoGo,
                    Stack::GoRust,
                    Stack::GoProxy,
                    Stack::RustRust,
                    Stack::RustProxy,
                ]
            } else {
                vec![Stack::RustRust, Stack::RustProxy]
            };
            // Through the proxy the harnesses start one plugin and check
            // the adjustments of the K behind it (`--adjusting-plugins`).
            for (f, flavour) in [("noop", Flavour::Noop), ("adjusting", Flavour::Adjusting)] {
                for k in [1usize, 4] {
                    let n = (o.n / k).max(min_n);
                    cells.push(lat(
                        format!("proxy-{f}-k{k}"),
                        format!("CreateContainer {f} K={k}, direct and through nri-proxy"),
                        Event::CreateContainer,
                        flavour,
                        k,
                        n,
                        1,
                        &stacks,
                    ));
                }
            }
        }
        if o.wasm_cells {
            cells.extend(crate::wasm::cells(&o));
        }
        if o.plugin_cells && !pl_stacks.is_empty() {
            for (id, n) in [("plugin-n", o.plugin_n), ("plugin-long", o.plugin_long_n)] {
                cells.push(Cell {
                    warmup: 0,
                    ..lat(
                        id.into(),
                        format!("plugin under Go runtime: {n} x CreateContainer noop K=1"),
                        Event::CreateContainer,
                        Flavour::Noop,
                        1,
                        n,
                        1,
                        &pl_stacks,
                    )
                });
            }
            cells.push(Cell {
                id: "sync-plugin".into(),
                label: format!(
                    "plugin under Go runtime: sync of {} pods / {} containers",
                    o.sync_pods,
                    o.sync_pods * o.sync_containers_per_pod
                ),
                mode: Mode::Sync,
                event: Event::CreateContainer,
                flavour: Flavour::Noop,
                k: 1,
                n: 0,
                warmup: 0,
                concurrency: 1,
                stacks: pl_stacks,
                pace_ms: None,
                plain: false,
            });
        }
        cells
    }
}

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
    /// Wall time of the whole matrix, s.
    pub wall_s: f64,
}

/// Everything [`run`] measured.
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

fn load1() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Environment of `nri-bench-proxy`: how many plugins it runs behind it.
pub const ENV_PROXY_K: &str = "NRI_BENCH_PROXY_K";
/// Environment of `nri-bench-proxy`: the plugin executable it runs behind it.
pub const ENV_PROXY_PLUGIN: &str = "NRI_BENCH_PROXY_PLUGIN";

fn run_one(bins: &Bins, o: &BenchOptions, cell: &Cell, stack: Stack) -> Result<RunResult, String> {
    let (prog, plugin) = (
        if stack.go_runtime() {
            &bins.go_bench
        } else {
            &bins.rust_runtime
        },
        if stack.proxy() {
            &bins.rust_proxy
        } else if stack.go_plugin() {
            &bins.go_plugin
        } else {
            &bins.rust_plugin
        },
    );
    let mut cmd = Command::new(prog);
    if stack.wasm() {
        cmd.arg("--wasm").arg(bins.guest(stack));
    }
    // Through the proxy the runtime has one plugin, the proxy, with the
    // cell's K plugins behind it.
    let k = if stack.proxy() { 1 } else { cell.k };
    if stack.proxy() {
        cmd.env(ENV_PROXY_K, cell.k.to_string())
            .env(ENV_PROXY_PLUGIN, &bins.rust_plugin)
            .arg("--adjusting-plugins")
            .arg(cell.k.to_string());
    }
    cmd.arg("--mode")
        .arg(cell.mode.as_str())
        .arg("--k")
        .arg(k.to_string())
        .arg("--flavour")
        .arg(cell.flavour.as_str())
        .arg("--event")
        .arg(cell.event.as_str())
        .arg("--n")
        .arg(cell.n.max(1).to_string())
        .arg("--warmup")
        .arg(cell.warmup.to_string())
        .arg("--concurrency")
        .arg(cell.concurrency.to_string())
        .arg("--sync-pods")
        .arg(o.sync_pods.to_string())
        .arg("--sync-containers-per-pod")
        .arg(o.sync_containers_per_pod.to_string())
        .arg("--idle-wait")
        .arg(format!("{}ms", idle_wait_ms(o, stack)))
        .arg("--plugin-bin")
        .arg(plugin)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    crate::paced::configure(&mut cmd, cell, stack);
    if !stack.go_runtime() {
        cmd.arg("--tokio").arg(match o.tokio {
            TokioFlavour::CurrentThread => "current",
            TokioFlavour::MultiThread => "multi",
        });
        cmd.arg("--workers").arg(o.workers.to_string());
    }
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {}: {e}", prog.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().rev().find(|l| l.trim_start().starts_with('{'));
    let Some(line) = line else {
        return Err(format!(
            "{} exited with {} and printed no JSON",
            prog.display(),
            out.status
        ));
    };
    let r: RunResult =
        serde_json::from_str(line).map_err(|e| format!("bad JSON from {}: {e}", prog.display()))?;
    if let Some(e) = &r.error {
        return Err(format!("{}: {e}", stack.label()));
    }
    if !out.status.success() {
        return Err(format!("{} exited with {}", prog.display(), out.status));
    }
    Ok(r)
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

/// Runs the matrix. `progress` gets one line per run (for stderr).
///
/// # Errors
///
/// A missing binary. Failed runs do not stop the matrix: they are listed
/// in [`StackResult::errors`] and make the affected targets unmeasured.
#[allow(clippy::too_many_lines)]
pub fn run(opts: &BenchOptions, mut progress: impl FnMut(&str)) -> Result<BenchReport, Error> {
    let mut o = opts.effective();
    if o.quick && opts.reps == BenchOptions::default().reps {
        o.reps = 1;
    }
    if o.reps == 0 {
        return Err(Error::Options("reps must be at least 1".into()));
    }
    let cells = o.cells();
    let wat = crate::wasm::WatGuest::write(&cells)?;
    let bins = Bins::new(&o, wat.path());
    bins.check(&cells)?;
    let t0 = Instant::now();
    let loadavg = || {
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    let loadavg_start = loadavg();
    let mut loads = Vec::new();
    let mut raw: Vec<Vec<Vec<Result<RunResult, String>>>> = cells
        .iter()
        .map(|c| c.stacks.iter().map(|_| Vec::new()).collect())
        .collect();
    let total = o.reps * cells.iter().map(|c| c.stacks.len()).sum::<usize>();
    let mut done = 0;
    for rep in 0..o.reps {
        for (ci, cell) in cells.iter().enumerate() {
            let ns = cell.stacks.len();
            for j in 0..ns {
                // Rotate the order per repetition and cell, so no stack
                // always runs first (or right after another one).
                let si = (j + rep + ci) % ns;
                let stack = cell.stacks[si];
                if let Some(l) = load1() {
                    loads.push(l);
                }
                let t = Instant::now();
                let r = run_one(&bins, &o, cell, stack);
                done += 1;
                progress(&format!(
                    "[{done}/{total}] rep {} {} {}: {} ({:.1}s)",
                    rep + 1,
                    cell.id,
                    stack.label(),
                    match &r {
                        Ok(r) => summary_line(r),
                        Err(e) => format!("FAILED: {e}"),
                    },
                    t.elapsed().as_secs_f64()
                ));
                raw[ci][si].push(r);
            }
        }
    }

    let mut reports = Vec::new();
    for (cell, per_stack) in cells.into_iter().zip(raw) {
        let mut stacks = Vec::new();
        for (stack, results) in cell.stacks.iter().zip(per_stack) {
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
            stacks.push(StackResult {
                stack: *stack,
                metrics: values
                    .into_iter()
                    .filter_map(|(k, v)| MetricSummary::of(&v).map(|s| (k, s)))
                    .collect(),
                adjust_checks: checks,
                errors,
                runs,
            });
        }
        reports.push(CellReport { cell, stacks });
    }
    loads.sort_by(f64::total_cmp);
    let machine = Machine {
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg_start,
        loadavg_end: loadavg(),
        load1_min_median_max: [
            loads.first().copied().unwrap_or(0.0),
            median(&loads).unwrap_or(0.0),
            loads.last().copied().unwrap_or(0.0),
        ],
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_owned(),
        wall_s: round1(t0.elapsed().as_secs_f64()),
    };
    let mut report = BenchReport {
        options: o,
        machine,
        cells: reports,
        targets: Vec::new(),
    };
    report.targets = targets(&report);
    Ok(report)
}

fn summary_line(r: &RunResult) -> String {
    match (&r.latency_us, &r.sync) {
        (Some(l), _) => format!(
            "median {} us, p99 {} us, {} ev/s",
            l.median,
            l.p99,
            r.events_per_sec.unwrap_or(0.0)
        ),
        (None, Some(s)) => format!("registered+synced {} ms", s.registered_synced_ms),
        _ => format!("startup {} ms", r.startup_ms),
    }
}

/// A ratio target.
#[derive(Clone, Copy)]
pub(crate) enum Want {
    AtMost(f64),
    AtLeast(f64),
}

pub(crate) fn ratio_check(
    report: &BenchReport,
    cell: &str,
    metric: &str,
    num: Stack,
    den: Stack,
    name: String,
    want: Want,
) -> TargetCheck {
    let target = match want {
        Want::AtMost(x) => format!("<= {x:.2}x"),
        Want::AtLeast(x) => format!(">= {x:.1}x"),
    };
    let pair = report
        .cell(cell)
        .and_then(|c| Some((c.metric(num, metric)?, c.metric(den, metric)?)));
    match pair {
        Some((a, b)) if b.median > 0.0 => {
            let r = a.median / b.median;
            let met = match want {
                Want::AtMost(x) => r <= x,
                Want::AtLeast(x) => r >= x,
            };
            TargetCheck {
                name,
                target,
                value: Some((r * 1000.0).round() / 1000.0),
                detail: format!(
                    "{} {} vs {} {} = {:.3}x",
                    num.label(),
                    a.median,
                    den.label(),
                    b.median,
                    r
                ),
                met: Some(met),
            }
        }
        _ => TargetCheck {
            name,
            target,
            value: None,
            detail: "not measured".into(),
            met: None,
        },
    }
}

#[allow(clippy::too_many_lines)]
fn targets(report: &BenchReport) -> Vec<TargetCheck> {
    let mut t = Vec::new();
    let (gg, gr, rr, rg) = (Stack::GoGo, Stack::GoRust, Stack::RustRust, Stack::RustGo);
    // Plugin SDK, under the same Go runtime.
    if report.cell("plugin-n").is_some() {
        t.push(ratio_check(
            report,
            "plugin-n",
            "plugin_idle_rss_kb",
            gr,
            gg,
            "plugin idle RSS".into(),
            Want::AtMost(0.25),
        ));
        t.push(ratio_check(
            report,
            "plugin-n",
            "plugins_cpu_us_per_event",
            gr,
            gg,
            "plugin CPU per CreateContainer".into(),
            Want::AtMost(0.25),
        ));
        t.push(ratio_check(
            report,
            "sync-plugin",
            "plugin_hwm_kb",
            gr,
            gg,
            "plugin peak RSS during/after sync".into(),
            Want::AtMost(0.25),
        ));
        // Growth: after the long run vs after the short run (Rust plugin).
        let short = report
            .cell("plugin-n")
            .and_then(|c| c.metric(gr, "plugin_after_rss_kb"));
        let long = report
            .cell("plugin-long")
            .and_then(|c| c.metric(gr, "plugin_after_rss_kb"));
        let (n_short, n_long) = (
            report.cell("plugin-n").map_or(0, |c| c.cell.n),
            report.cell("plugin-long").map_or(0, |c| c.cell.n),
        );
        t.push(match (short, long) {
            (Some(s), Some(l)) => {
                // Tolerance: 2% + 64 KiB (allocator noise), not growth.
                let limit = s.median * 1.02 + 64.0;
                TargetCheck {
                    name: format!("Rust plugin RSS after {n_long} vs {n_short} events"),
                    target: "no growth (<= +2% +64 KiB)".into(),
                    value: Some(round1(l.median - s.median)),
                    detail: format!("{} KiB vs {} KiB", l.median, s.median),
                    met: Some(l.median <= limit),
                }
            }
            _ => TargetCheck {
                name: "Rust plugin RSS growth".into(),
                target: "no growth".into(),
                value: None,
                detail: "not measured".into(),
                met: None,
            },
        });
    }
    // The proxy: the Go runtime through the proxy to K Rust plugins beats
    // the Go runtime with K Go plugins.
    for (f, k) in [("noop", 1), ("noop", 4), ("adjusting", 1), ("adjusting", 4)] {
        let id = format!("proxy-{f}-k{k}");
        if report.cell(&id).is_some() {
            t.push(ratio_check(
                report,
                &id,
                "latency_median_us",
                Stack::GoProxy,
                gg,
                format!("CreateContainer {f} K={k}: Go runtime -> nri-proxy -> K Rust plugins vs K Go plugins"),
                Want::AtMost(1.0),
            ));
        }
    }
    t.extend(crate::wasm::targets(report));
    t.extend(crate::paced::targets(report));
    // Runtime library.
    if report.cell("create-noop-k1").is_some() {
        for f in ["noop", "adjusting"] {
            for k in [1, 4, 8] {
                let id = format!("create-{f}-k{k}");
                t.push(ratio_check(
                    report,
                    &id,
                    "latency_median_us",
                    rr,
                    gg,
                    format!("CreateContainer {f} K={k} median latency (Rust stack)"),
                    Want::AtMost(0.2),
                ));
                t.push(ratio_check(
                    report,
                    &id,
                    "latency_p99_us",
                    rr,
                    gg,
                    format!("CreateContainer {f} K={k} p99 latency (Rust stack)"),
                    Want::AtMost(0.2),
                ));
                t.push(ratio_check(
                    report,
                    &id,
                    "latency_median_us",
                    rg,
                    gg,
                    format!("CreateContainer {f} K={k} median latency (Rust runtime, Go plugins)"),
                    Want::AtMost(0.2),
                ));
            }
        }
        for k in [1, 8] {
            let id = format!("conc8-noop-k{k}");
            t.push(ratio_check(
                report,
                &id,
                "events_per_sec",
                rr,
                gg,
                format!("throughput, 8 concurrent, K={k} (Rust stack)"),
                Want::AtLeast(5.0),
            ));
            t.push(ratio_check(
                report,
                &id,
                "events_per_sec",
                rg,
                gg,
                format!("throughput, 8 concurrent, K={k} (Rust runtime, Go plugins)"),
                Want::AtLeast(5.0),
            ));
        }
        t.push(ratio_check(
            report,
            "sync-runtime",
            "startup_ms",
            rr,
            gg,
            "register+sync, 1000 pods / 5000 containers (Rust stack)".into(),
            Want::AtMost(0.2),
        ));
        t.push(ratio_check(
            report,
            "sync-runtime",
            "startup_ms",
            rg,
            gg,
            "register+sync (Rust runtime, Go plugin)".into(),
            Want::AtMost(0.2),
        ));
    }
    t
}
