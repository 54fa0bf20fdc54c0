//! The WebAssembly plugin cells: the same Go-built module (the interop
//! `wasm-guest`, configured `bench=noop`) loaded K times by the Go runtime
//! (containerd/nri's wazero host) and by the Rust runtime (wasmi): load
//! time, CreateContainer latency at K = 1 and 4, and the runtime's RSS
//! per loaded module.

use std::io::Write;

use crate::driver::{
    BenchOptions, BenchReport, Cell, CellReport, MetricSummary, Stack, TargetCheck, Want,
    ratio_check,
};
use crate::{Event, Flavour, Mode};

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

/// The cells (`o` already has the `--quick` sizes applied).
pub(crate) fn cells(o: &BenchOptions) -> Vec<Cell> {
    let stacks = if o.with_go {
        vec![Stack::GoWasm, Stack::RustWasm]
    } else {
        vec![Stack::RustWasm]
    };
    let min_n = if o.quick { 40 } else { 200 };
    KS.iter()
        .map(|&k| {
            let n = (o.n / k).max(min_n);
            Cell {
                id: cell_id(k),
                label: format!("CreateContainer noop K={k} WebAssembly plugins"),
                mode: Mode::Latency,
                event: Event::CreateContainer,
                flavour: Flavour::Noop,
                k,
                n,
                warmup: (n / 20).max(10),
                concurrency: 1,
                stacks: stacks.clone(),
                pace_ms: None,
                plain: false,
            }
        })
        .collect()
}

/// The targets: load time against Go's host, and the no-op call.
pub(crate) fn targets(report: &BenchReport) -> Vec<TargetCheck> {
    let id = cell_id(1);
    let Some(cell) = report.cell(&id) else {
        return Vec::new();
    };
    let load = ratio_check(
        report,
        &id,
        "startup_ms",
        Stack::GoWasm,
        Stack::RustWasm,
        "WebAssembly plugin load (Go-built guest, load+Configure+Synchronize): Go's wazero host over ours"
            .into(),
        Want::AtLeast(LOAD_SPEEDUP_TARGET),
    );
    let name = "CreateContainer noop through one WebAssembly plugin (rust/wasm median)".to_owned();
    let target = format!("< {NOOP_CALL_TARGET_US:.0} µs");
    let call = match cell.metric(Stack::RustWasm, "latency_median_us") {
        Some(m) => {
            let go = cell
                .metric(Stack::GoWasm, "latency_median_us")
                .map_or(String::new(), |g| format!(" (go/wasm {} µs)", g.median));
            TargetCheck {
                name,
                target,
                value: Some(m.median),
                detail: format!("{} µs{go}", m.median),
                met: Some(m.median < NOOP_CALL_TARGET_US),
            }
        }
        None => TargetCheck {
            name,
            target,
            value: None,
            detail: "not measured".into(),
            met: None,
        },
    };
    vec![load, call]
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

/// The WebAssembly table: per stack, load time, latency and RSS at K = 1
/// and 4, and the RSS each further loaded module costs.
pub(crate) fn table(r: &BenchReport, w: &mut dyn Write) -> std::io::Result<()> {
    let cells: Vec<&CellReport> = KS.iter().filter_map(|&k| r.cell(&cell_id(k))).collect();
    let Some(first) = cells.first() else {
        return Ok(());
    };
    writeln!(
        w,
        "### WebAssembly plugins (the Go-built guest, noop)\n\nload = runtime start to K modules loaded, configured and synchronized\n"
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
