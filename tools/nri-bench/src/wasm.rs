//! The WebAssembly plugin cells: the same Go-built module (the interop
//! `wasm-guest`, configured `bench=noop`) loaded K times by the Go runtime
//! (containerd/nri's wazero host) and by the Rust runtime (wasmi): load
//! time, CreateContainer latency at K = 1 and 4, and the runtime's RSS
//! per loaded module. Beside them the same cells with a guest written in
//! WAT that answers every call at once ([`WatGuest`]): what each host
//! costs per call apart from the Go guest's own work.

use std::io::Write;
use std::path::PathBuf;

use crate::matrix::{BenchOptions, Cell, Stack};
use crate::paced::Twin;
use crate::report::{BenchReport, CellReport, MetricSummary, TargetCheck};
use crate::targets::{Want, ratio_check};
use crate::{Error, Event, Flavour, Mode};

/// File name of the guest module in the Go peers' directory (built by
/// `scripts/build-go-peers.sh`).
pub(crate) const GUEST: &str = "wasm-guest.wasm";

/// The plugin counts of the cells.
const KS: [usize; 2] = [1, 4];

/// Target: a no-op CreateContainer through one WebAssembly plugin.
const NOOP_CALL_TARGET_US: f64 = 100.0;

/// Target: loading the Go-built guest, Go's host time over ours.
const LOAD_SPEEDUP_TARGET: f64 = 10.0;

fn cell_id(k: usize) -> String {
    format!("wasm-noop-k{k}")
}

fn wat_cell_id(k: usize) -> String {
    format!("wasm-wat-noop-k{k}")
}

/// The cells (`o` already has the `--quick` sizes applied): the Go-built
/// guest, then the WAT guest, each at K = 1 and 4.
pub(crate) fn cells(o: &BenchOptions) -> Vec<Cell> {
    let min_n = if o.quick { 40 } else { 200 };
    let kinds = [
        (Stack::GoWasm, Stack::RustWasm, "the Go-built guest"),
        (Stack::GoWat, Stack::RustWat, "the WAT no-op guest"),
    ];
    let mut cells = Vec::new();
    for (go, rust, what) in kinds {
        let stacks = if o.with_go {
            vec![go, rust]
        } else {
            vec![rust]
        };
        for &k in &KS {
            let n = (o.n / k).max(min_n);
            cells.push(Cell {
                id: if go.wat() { wat_cell_id(k) } else { cell_id(k) },
                label: format!("CreateContainer noop K={k} WebAssembly plugins ({what})"),
                mode: Mode::Latency,
                event: Event::CreateContainer,
                flavour: Flavour::Noop,
                k,
                n,
                warmup: (n / 20).max(10),
                concurrency: 1,
                stacks: stacks.clone(),
                pace_ms: None,
                twin: Twin::Defaults,
            });
        }
    }
    cells
}

/// Where the WAT no-op guest is put for the runs of one matrix
/// (the temporary directory, process id in the name); removed when
/// dropped.
pub(crate) struct WatGuest {
    path: Option<PathBuf>,
}

/// The WAT no-op guest: every export of the plugin ABI, `malloc` always
/// answering one buffer at 64 KiB (growing the memory to fit the
/// request), and every method answering an empty response at once (its
/// Configure answer subscribes to every event).
pub(crate) const WAT_NOOP_GUEST: &str = r#"(module
  (memory (export "memory") 2)
  (func (export "_initialize"))
  (func (export "malloc") (param $n i32) (result i32) (local $need i32)
    (local.set $need
      (i32.shr_u (i32.add (i32.add (local.get $n) (i32.const 65536)) (i32.const 65535))
                 (i32.const 16)))
    (if (i32.gt_u (local.get $need) (memory.size))
      (then (drop (memory.grow (i32.sub (local.get $need) (memory.size))))))
    (i32.const 65536))
  (func (export "free") (param i32))
  (func (export "plugin_api_version") (result i64) (i64.const 1))
  (func $empty (param i32 i32) (result i64) (i64.const 0))
  (export "plugin_configure" (func $empty))
  (export "plugin_synchronize" (func $empty))
  (export "plugin_shutdown" (func $empty))
  (export "plugin_run_pod_sandbox" (func $empty))
  (export "plugin_update_pod_sandbox" (func $empty))
  (export "plugin_post_update_pod_sandbox" (func $empty))
  (export "plugin_stop_pod_sandbox" (func $empty))
  (export "plugin_remove_pod_sandbox" (func $empty))
  (export "plugin_create_container" (func $empty))
  (export "plugin_post_create_container" (func $empty))
  (export "plugin_start_container" (func $empty))
  (export "plugin_post_start_container" (func $empty))
  (export "plugin_update_container" (func $empty))
  (export "plugin_post_update_container" (func $empty))
  (export "plugin_stop_container" (func $empty))
  (export "plugin_remove_container" (func $empty))
  (export "plugin_state_change" (func $empty))
  (export "plugin_validate_container_adjustment" (func $empty)))"#;

impl WatGuest {
    /// Assembles and writes the guest when one of `cells` runs it.
    pub(crate) fn write(cells: &[Cell]) -> Result<Self, Error> {
        if !cells.iter().any(|c| c.stacks.iter().any(|s| s.wat())) {
            return Ok(Self { path: None });
        }
        let wasm = wat::parse_str(WAT_NOOP_GUEST)
            .map_err(|e| Error::Options(format!("the WAT no-op guest does not assemble: {e}")))?;
        let path = std::env::temp_dir().join(format!("nri-bench-wat-{}.wasm", std::process::id()));
        std::fs::write(&path, wasm).map_err(|source| Error::Io {
            what: "writing the WAT no-op guest",
            source,
        })?;
        Ok(Self { path: Some(path) })
    }

    /// The module's file (empty when no cell runs it).
    pub(crate) fn path(&self) -> PathBuf {
        self.path.clone().unwrap_or_default()
    }
}

impl Drop for WatGuest {
    fn drop(&mut self) {
        if let Some(p) = &self.path {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The targets: load time against Go's host, and the no-op call.
pub(crate) fn targets(report: &BenchReport) -> Vec<TargetCheck> {
    let mut t = Vec::new();
    if report.cell(&cell_id(1)).is_some() {
        t.push(ratio_check(
            report,
            &cell_id(1),
            "startup_ms",
            Stack::GoWasm,
            Stack::RustWasm,
            "WebAssembly plugin load (Go-built guest, load+Configure+Synchronize): Go's wazero host over ours"
                .into(),
            Want::AtLeast(LOAD_SPEEDUP_TARGET),
        ));
    }
    if report.cell(&wat_cell_id(1)).is_some() {
        t.push(call_check(report));
    }
    t
}

/// A median of `stack` in `cell` as text, for a target's detail.
fn median_of(report: &BenchReport, cell: &str, stack: Stack) -> Option<String> {
    let m = report.cell(cell)?.metric(stack, "latency_median_us")?;
    Some(format!("{} {:.0} µs", stack.label(), m.median))
}

/// The no-op call target, on the WAT guest (what the host costs per
/// call), with both hosts' figures for the Go-built guest beside it.
fn call_check(report: &BenchReport) -> TargetCheck {
    let name =
        "CreateContainer noop through one WebAssembly plugin (WAT no-op guest, rust/wat median)"
            .to_owned();
    let target = format!("< {NOOP_CALL_TARGET_US:.0} µs");
    let ours = report
        .cell(&wat_cell_id(1))
        .and_then(|c| c.metric(Stack::RustWat, "latency_median_us"));
    let beside: Vec<String> = [
        median_of(report, &wat_cell_id(1), Stack::GoWat),
        median_of(report, &cell_id(1), Stack::RustWasm),
        median_of(report, &cell_id(1), Stack::GoWasm),
    ]
    .into_iter()
    .flatten()
    .collect();
    let beside = if beside.is_empty() {
        String::new()
    } else {
        format!(" ({})", beside.join(", "))
    };
    match ours {
        Some(m) => TargetCheck {
            name,
            target,
            value: Some(m.median),
            detail: format!("{} µs{beside}", m.median),
            met: Some(m.median < NOOP_CALL_TARGET_US),
        },
        None => TargetCheck {
            name,
            target,
            value: None,
            detail: "not measured".into(),
            met: None,
        },
    }
}

fn ms(m: Option<MetricSummary>) -> String {
    m.map_or("-".into(), |m| {
        if m.runs <= 1 || m.min == m.max {
            format!("{:.1}", m.median)
        } else {
            format!("{:.1} [{:.1}–{:.1}]", m.median, m.min, m.max)
        }
    })
}

fn mb(m: Option<MetricSummary>) -> String {
    m.map_or("-".into(), |m| format!("{:.1}", m.median / 1024.0))
}

/// The WebAssembly tables, one per guest: per stack, load time, latency
/// and RSS at K = 1 and 4, and the RSS each further loaded module costs.
pub(crate) fn table(r: &BenchReport, w: &mut dyn Write) -> std::io::Result<()> {
    guest_table(r, w, cell_id, "the Go-built guest, noop")?;
    guest_table(
        r,
        w,
        wat_cell_id,
        "the WAT no-op guest: the host's own cost",
    )
}

fn guest_table(
    r: &BenchReport,
    w: &mut dyn Write,
    id: fn(usize) -> String,
    title: &str,
) -> std::io::Result<()> {
    let cells: Vec<&CellReport> = KS.iter().filter_map(|&k| r.cell(&id(k))).collect();
    let Some(first) = cells.first() else {
        return Ok(());
    };
    writeln!(
        w,
        "### WebAssembly plugins ({title})\n\nload = runtime start to K modules loaded, configured and synchronized\n"
    )?;
    write!(w, "| stack |")?;
    for c in &cells {
        let k = c.cell.k;
        write!(
            w,
            " load K={k} ms | median µs K={k} | p99 µs K={k} | runtime RSS K={k} MB |"
        )?;
    }
    writeln!(w, " RSS per extra module KiB |")?;
    writeln!(w, "|---|{}---|", "---|---|---|---|".repeat(cells.len()))?;
    for s in &first.stacks {
        write!(w, "| {} |", s.stack.label())?;
        for c in &cells {
            let g = |k: &str| c.metric(s.stack, k);
            write!(
                w,
                " {} | {} | {} | {} |",
                ms(g("startup_ms")),
                ms(g("latency_median_us")),
                ms(g("latency_p99_us")),
                mb(g("runtime_idle_rss_kb")),
            )?;
        }
        writeln!(w, " {} |", per_module_kb(&cells, s.stack))?;
    }
    writeln!(w)
}

/// Idle runtime RSS per module beyond the first: (RSS at the largest K -
/// RSS at K=1) / (K - 1).
fn per_module_kb(cells: &[&CellReport], stack: Stack) -> String {
    let (Some(a), Some(b)) = (cells.first(), cells.last()) else {
        return "-".into();
    };
    let extra = b.cell.k.saturating_sub(a.cell.k);
    match (
        a.metric(stack, "runtime_idle_rss_kb"),
        b.metric(stack, "runtime_idle_rss_kb"),
    ) {
        (Some(x), Some(y)) if extra > 0 => format!("{:.0}", (y.median - x.median) / extra as f64),
        _ => "-".into(),
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use std::time::Duration;

    use nri_runtime::wasm::{WasmLimits, check_module};

    #[test]
    fn the_wat_noop_guest_loads_as_a_plugin() {
        let wasm = wat::parse_str(super::WAT_NOOP_GUEST).expect("assembles");
        check_module(&wasm, &WasmLimits::default(), Duration::from_secs(10)).expect("loads");
    }
}
