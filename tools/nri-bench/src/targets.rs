//! The target checks: ratios of one stack's metric to another's in the
//! same cell.

use crate::matrix::Stack;
use crate::report::{BenchReport, TargetCheck};
use crate::stats::round1;

/// A ratio target.
#[derive(Clone, Copy)]
pub(crate) enum Want {
    AtMost(f64),
    AtLeast(f64),
}

/// `metric` of stack `num` over that of stack `den`, both in `cell`.
pub(crate) fn ratio_check(
    report: &BenchReport,
    cell: &str,
    metric: &str,
    num: Stack,
    den: Stack,
    name: String,
    want: Want,
) -> TargetCheck {
    ratio_check_between(report, metric, (cell, num), (cell, den), name, want)
}

/// `metric` of stack `num` in cell `num_cell` over that of stack `den` in
/// cell `den_cell`: for a twin cell (which does not run the Go stack)
/// against the Go stack of the cell it is the twin of.
pub(crate) fn ratio_check_between(
    report: &BenchReport,
    metric: &str,
    (num_cell, num): (&str, Stack),
    (den_cell, den): (&str, Stack),
    name: String,
    want: Want,
) -> TargetCheck {
    let target = match want {
        Want::AtMost(x) => format!("<= {x:.2}x"),
        Want::AtLeast(x) => format!(">= {x:.1}x"),
    };
    let value = |cell: &str, stack: Stack| report.cell(cell).and_then(|c| c.metric(stack, metric));
    let pair = value(num_cell, num).zip(value(den_cell, den));
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

/// Every target the report's cells allow, in the order of the table.
pub(crate) fn targets(report: &BenchReport) -> Vec<TargetCheck> {
    let mut t = Vec::new();
    if report.cell("plugin-n").is_some() {
        t.extend(plugin_targets(report));
    }
    t.extend(proxy_targets(report));
    t.extend(crate::wasm::targets(report));
    t.extend(crate::paced::targets(report));
    if report.cell("create-noop-k1").is_some() {
        t.extend(runtime_targets(report));
    }
    t
}

/// Plugin SDK, under the same Go runtime: idle RSS, CPU per event, peak
/// RSS of the sync, and no growth over the long run.
fn plugin_targets(report: &BenchReport) -> Vec<TargetCheck> {
    let (gg, gr) = (Stack::GoGo, Stack::GoRust);
    vec![
        ratio_check(
            report,
            "plugin-n",
            "plugin_idle_rss_kb",
            gr,
            gg,
            "plugin idle RSS".into(),
            Want::AtMost(0.25),
        ),
        ratio_check(
            report,
            "plugin-n",
            "plugins_cpu_us_per_event",
            gr,
            gg,
            "plugin CPU per CreateContainer".into(),
            Want::AtMost(0.25),
        ),
        ratio_check(
            report,
            "sync-plugin",
            "plugin_hwm_kb",
            gr,
            gg,
            "plugin peak RSS during/after sync".into(),
            Want::AtMost(0.25),
        ),
        growth_check(report),
    ]
}

/// Growth: the Rust plugin's RSS after the long run vs after the short run.
fn growth_check(report: &BenchReport) -> TargetCheck {
    let gr = Stack::GoRust;
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
    match (short, long) {
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
    }
}

/// The proxy: the Go runtime through the proxy to K Rust plugins beats
/// the Go runtime with K Go plugins.
fn proxy_targets(report: &BenchReport) -> Vec<TargetCheck> {
    let mut t = Vec::new();
    for (f, k) in [("noop", 1), ("noop", 4), ("adjusting", 1), ("adjusting", 4)] {
        let id = format!("proxy-{f}-k{k}");
        if report.cell(&id).is_some() {
            t.push(ratio_check(
                report,
                &id,
                "latency_median_us",
                Stack::GoProxy,
                Stack::GoGo,
                format!("CreateContainer {f} K={k}: Go runtime -> nri-proxy -> K Rust plugins vs K Go plugins"),
                Want::AtMost(1.0),
            ));
        }
    }
    t
}

/// Runtime library: CreateContainer latency, throughput with 8 callers,
/// and registration with sync, against the Go stack.
fn runtime_targets(report: &BenchReport) -> Vec<TargetCheck> {
    let (gg, rr, rg) = (Stack::GoGo, Stack::RustRust, Stack::RustGo);
    let mut t = Vec::new();
    for f in ["noop", "adjusting"] {
        for k in [1, 4, 8] {
            let id = format!("create-{f}-k{k}");
            for (num, metric, what) in [
                (rr, "latency_median_us", "median latency (Rust stack)"),
                (rr, "latency_p99_us", "p99 latency (Rust stack)"),
                (
                    rg,
                    "latency_median_us",
                    "median latency (Rust runtime, Go plugins)",
                ),
            ] {
                t.push(ratio_check(
                    report,
                    &id,
                    metric,
                    num,
                    gg,
                    format!("CreateContainer {f} K={k} {what}"),
                    Want::AtMost(0.2),
                ));
            }
        }
    }
    for k in [1, 8] {
        let id = format!("conc8-noop-k{k}");
        for (num, what) in [(rr, "Rust stack"), (rg, "Rust runtime, Go plugins")] {
            t.push(ratio_check(
                report,
                &id,
                "events_per_sec",
                num,
                gg,
                format!("throughput, 8 concurrent, K={k} ({what})"),
                Want::AtLeast(5.0),
            ));
        }
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
    t
}
