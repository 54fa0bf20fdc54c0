//! The matrix runner: cells x stacks x repetitions, interleaved, each run
//! a fresh harness process, aggregated into medians with min-max.

use std::process::{Command, Stdio};
use std::time::Instant;

use crate::Error;
use crate::bins::Bins;
use crate::harness::TokioFlavour;
use crate::matrix::{BenchOptions, Cell, Stack, idle_wait_ms};
use crate::report::{BenchReport, CellReport, Machine, StackResult};
use crate::result::RunResult;
use crate::stats::{median, round1};
use crate::targets::targets;

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

/// Runs the matrix. `progress` gets one line per run (for stderr).
///
/// # Errors
///
/// A missing binary. Failed runs do not stop the matrix: they are listed
/// in [`StackResult::errors`] and make the affected targets unmeasured.
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
    let loadavg_start = loadavg();
    let round_trips = match crate::probe::round_trips(o.quick) {
        Ok(r) => {
            progress(&format!(
                "socketpair round trip: {} us back to back, {} us {} ms apart",
                r.busy_us,
                r.idle_us,
                crate::probe::PACE.as_millis()
            ));
            Some(r)
        }
        Err(e) => {
            progress(&format!("socketpair round trip not measured: {e}"));
            None
        }
    };
    let (raw, loads) = run_matrix(&bins, &o, &cells, &mut progress);
    let reports = cells
        .into_iter()
        .zip(raw)
        .map(|(cell, per_stack)| {
            let stacks = cell
                .stacks
                .iter()
                .zip(per_stack)
                .map(|(stack, results)| StackResult::aggregate(*stack, results))
                .collect();
            CellReport { cell, stacks }
        })
        .collect();
    let mut report = BenchReport {
        options: o,
        machine: machine(loadavg_start, loads, round_trips, t0),
        cells: reports,
        targets: Vec::new(),
    };
    report.targets = targets(&report);
    Ok(report)
}

/// Every run's result: by cell, then by stack (in the cell's order), then
/// by repetition.
type RawResults = Vec<Vec<Vec<Result<RunResult, String>>>>;

/// Runs every cell's stacks `o.reps` times, the stacks' order rotating;
/// returns the results and the 1-minute load sampled before each run.
fn run_matrix(
    bins: &Bins,
    o: &BenchOptions,
    cells: &[Cell],
    progress: &mut impl FnMut(&str),
) -> (RawResults, Vec<f64>) {
    let mut loads = Vec::new();
    let mut raw: RawResults = cells
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
                let r = run_one(bins, o, cell, stack);
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
    (raw, loads)
}

/// `/proc/loadavg`, trimmed (empty if unreadable).
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// The first `model name` of `/proc/cpuinfo` (empty if unreadable).
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|rest| rest.split_once(':'))
        .map_or_else(String::new, |(_, v)| v.trim().to_owned())
}

/// The machine's facts at the end of a run that started at `t0`.
fn machine(
    loadavg_start: String,
    mut loads: Vec<f64>,
    round_trips: Option<crate::probe::RoundTrips>,
    t0: Instant,
) -> Machine {
    loads.sort_by(f64::total_cmp);
    Machine {
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
        cpu_model: cpu_model(),
        round_trips,
        wall_s: round1(t0.elapsed().as_secs_f64()),
    }
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
