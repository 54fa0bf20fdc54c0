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
pub(crate) fn targets(report: &BenchReport) -> Vec<TargetCheck> {
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
