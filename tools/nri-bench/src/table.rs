//! Markdown tables of a [`BenchReport`].

use std::io::Write;

use crate::matrix::Stack;
use crate::report::{BenchReport, CellReport, MetricSummary};
use crate::{Error, Mode, probe};

fn num(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn cell_value(m: Option<MetricSummary>) -> String {
    match m {
        None => "-".into(),
        Some(m) if m.runs <= 1 || m.min == m.max => num(m.median),
        Some(m) => format!("{} [{}–{}]", num(m.median), num(m.min), num(m.max)),
    }
}

fn mb(m: Option<MetricSummary>) -> String {
    match m {
        None => "-".into(),
        Some(m) if m.runs <= 1 || m.min == m.max => format!("{:.1}", m.median / 1024.0),
        Some(m) => format!(
            "{:.1} [{:.1}–{:.1}]",
            m.median / 1024.0,
            m.min / 1024.0,
            m.max / 1024.0
        ),
    }
}

fn ratio(c: &CellReport, s: Stack, metric: &str) -> String {
    match (c.metric(s, metric), c.metric(Stack::GoGo, metric)) {
        (Some(a), Some(b)) if s != Stack::GoGo && b.median > 0.0 => {
            format!("{:.3}x", a.median / b.median)
        }
        _ => "".into(),
    }
}

/// Prints `report` as Markdown tables: latency and throughput, sync,
/// plugin memory and CPU, runtime RSS per plugin, and the targets.
///
/// # Errors
///
/// [`Error::Output`] if writing fails.
pub fn print_table(report: &BenchReport, w: &mut dyn Write) -> Result<(), Error> {
    write_all(report, w).map_err(Error::Output)
}

fn write_all(r: &BenchReport, w: &mut dyn Write) -> std::io::Result<()> {
    header(r, w)?;
    latency_table(r, w)?;
    sync_table(r, w)?;
    plugin_table(r, w)?;
    proxy_table(r, w)?;
    crate::wasm::table(r, w)?;
    targets_table(r, w)
}

/// The run's options and machine, and how to read the values.
fn header(r: &BenchReport, w: &mut dyn Write) -> std::io::Result<()> {
    let m = &r.machine;
    writeln!(
        w,
        "nri-bench: {} rep(s){}, {} CPUs, kernel {}, load1 during runs min/median/max {:.1}/{:.1}/{:.1} (loadavg start `{}`, end `{}`), {:.0} s",
        r.options.reps,
        if r.options.quick { ", quick" } else { "" },
        m.cpus,
        m.kernel,
        m.load1_min_median_max[0],
        m.load1_min_median_max[1],
        m.load1_min_median_max[2],
        m.loadavg_start,
        m.loadavg_end,
        m.wall_s
    )?;
    if let Some(rt) = &m.round_trips {
        writeln!(
            w,
            "machine: {}; socketpair round trip ({} B request, {} B answer, two blocking threads): {} µs back to back, {} µs one every {} ms (each pays two wake-ups of an idle CPU)",
            if m.cpu_model.is_empty() {
                "CPU model unknown"
            } else {
                &m.cpu_model
            },
            probe::REQUEST_LEN,
            probe::ANSWER_LEN,
            rt.busy_us,
            rt.idle_us,
            probe::PACE.as_millis()
        )?;
    }
    writeln!(
        w,
        "stacks are runtime/plugins; values: median of per-run values [min–max over runs]; ratios vs go/go\n"
    )
}

/// The runtime's latency cells, then its RSS per connected plugin.
fn latency_table(r: &BenchReport, w: &mut dyn Write) -> std::io::Result<()> {
    let lat: Vec<&CellReport> = r
        .cells
        .iter()
        .filter(|c| c.cell.mode == Mode::Latency && !c.cell.id.starts_with("plugin-"))
        .collect();
    if !lat.is_empty() {
        writeln!(w, "### Runtime: latency and throughput\n")?;
        writeln!(
            w,
            "| cell | N | stack | median µs | ratio | p99 µs | events/s | ratio | runtime CPU µs/ev | plugins CPU µs/ev | adjust check |"
        )?;
        writeln!(w, "|---|---|---|---|---|---|---|---|---|---|---|")?;
        for c in lat {
            for s in &c.stacks {
                let g = |k: &str| c.metric(s.stack, k);
                writeln!(
                    w,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    c.cell.label,
                    c.cell.n,
                    s.stack.label(),
                    cell_value(g("latency_median_us")),
                    ratio(c, s.stack, "latency_median_us"),
                    cell_value(g("latency_p99_us")),
                    cell_value(g("events_per_sec")),
                    ratio(c, s.stack, "events_per_sec"),
                    cell_value(g("runtime_cpu_us_per_event")),
                    cell_value(g("plugins_cpu_us_per_event")),
                    if s.errors.is_empty() {
                        s.adjust_checks.join("; ")
                    } else {
                        format!("ERRORS: {}", s.errors.join("; "))
                    }
                )?;
            }
        }
        writeln!(w)?;
        rss_table(r, w)?;
    }
    Ok(())
}

/// Runtime RSS per connected plugin, from the idle RSS at K=1 and K=8.
fn rss_table(r: &BenchReport, w: &mut dyn Write) -> std::io::Result<()> {
    if let (Some(k1), Some(k8)) = (r.cell("create-noop-k1"), r.cell("create-noop-k8")) {
        writeln!(w, "### Runtime: RSS per connected plugin (idle, noop)\n")?;
        writeln!(
            w,
            "| stack | runtime RSS K=1 MB | runtime RSS K=8 MB | per extra plugin KiB | runtime RSS after K=1 run MB |"
        )?;
        writeln!(w, "|---|---|---|---|---|")?;
        for s in &k1.stacks {
            let a = k1.metric(s.stack, "runtime_idle_rss_kb");
            let b = k8.metric(s.stack, "runtime_idle_rss_kb");
            let per = match (a, b) {
                (Some(a), Some(b)) => format!("{:.0}", (b.median - a.median) / 7.0),
                _ => "-".into(),
            };
            writeln!(
                w,
                "| {} | {} | {} | {} | {} |",
                s.stack.label(),
                mb(a),
                mb(b),
                per,
                mb(k1.metric(s.stack, "runtime_after_rss_kb"))
            )?;
        }
        writeln!(w)?;
    }
    Ok(())
}

/// The registration-and-sync cells.
fn sync_table(r: &BenchReport, w: &mut dyn Write) -> std::io::Result<()> {
    let sync: Vec<&CellReport> = r
        .cells
        .iter()
        .filter(|c| c.cell.mode == Mode::Sync)
        .collect();
    if !sync.is_empty() {
        writeln!(w, "### Register + sync\n")?;
        writeln!(
            w,
            "| cell | stack | launch → registered+synced ms | ratio | sync part ms | runtime RSS after sync MB | plugin RSS after sync MB | plugin peak (HWM) MB | ratio |"
        )?;
        writeln!(w, "|---|---|---|---|---|---|---|---|---|")?;
        for c in sync {
            for s in &c.stacks {
                let g = |k: &str| c.metric(s.stack, k);
                writeln!(
                    w,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} |{}",
                    c.cell.label,
                    s.stack.label(),
                    cell_value(g("startup_ms")),
                    ratio(c, s.stack, "startup_ms"),
                    cell_value(g("sync_callback_ms")),
                    mb(g("runtime_idle_rss_kb")),
                    mb(g("plugin_idle_rss_kb")),
                    mb(g("plugin_hwm_kb")),
                    ratio(c, s.stack, "plugin_hwm_kb"),
                    if s.errors.is_empty() {
                        String::new()
                    } else {
                        format!(" ERRORS: {}", s.errors.join("; "))
                    }
                )?;
            }
        }
        writeln!(w)?;
    }
    Ok(())
}

/// The plugin SDK's cells under the Go runtime.
fn plugin_table(r: &BenchReport, w: &mut dyn Write) -> std::io::Result<()> {
    let pl: Vec<&CellReport> = r
        .cells
        .iter()
        .filter(|c| c.cell.id.starts_with("plugin-"))
        .collect();
    if !pl.is_empty() {
        writeln!(w, "### Plugin SDK under the Go runtime (K=1, noop)\n")?;
        writeln!(
            w,
            "| events | stack | plugin idle RSS MB | ratio | plugin RSS after MB | plugin HWM MB | plugin CPU µs/ev | ratio | median µs (whole call) |"
        )?;
        writeln!(w, "|---|---|---|---|---|---|---|---|---|")?;
        for c in pl {
            for s in &c.stacks {
                let g = |k: &str| c.metric(s.stack, k);
                writeln!(
                    w,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} |{}",
                    c.cell.n,
                    s.stack.label(),
                    mb(g("plugin_idle_rss_kb")),
                    ratio(c, s.stack, "plugin_idle_rss_kb"),
                    mb(g("plugin_after_rss_kb")),
                    mb(g("plugin_hwm_kb")),
                    cell_value(g("plugins_cpu_us_per_event")),
                    ratio(c, s.stack, "plugins_cpu_us_per_event"),
                    cell_value(g("latency_median_us")),
                    if s.errors.is_empty() {
                        String::new()
                    } else {
                        format!(" ERRORS: {}", s.errors.join("; "))
                    }
                )?;
            }
        }
        writeln!(w)?;
    }
    Ok(())
}

/// The targets, met or not.
fn targets_table(r: &BenchReport, w: &mut dyn Write) -> std::io::Result<()> {
    if !r.targets.is_empty() {
        writeln!(w, "### Targets\n")?;
        writeln!(w, "| target | wanted | measured | met |")?;
        writeln!(w, "|---|---|---|---|")?;
        for t in &r.targets {
            writeln!(
                w,
                "| {} | {} | {} | {} |",
                t.name,
                t.target,
                t.detail,
                match t.met {
                    Some(true) => "yes",
                    Some(false) => "**no**",
                    None => "n/a",
                }
            )?;
        }
    }
    Ok(())
}

/// The proxy cells: what the proxy adds to a direct connection (median
/// latency, proxy stack minus the direct stack under the same runtime and
/// with the same K Rust plugins), its CPU per event and its RSS.
fn proxy_table(r: &BenchReport, w: &mut dyn Write) -> std::io::Result<()> {
    let cells: Vec<&CellReport> = r
        .cells
        .iter()
        .filter(|c| c.cell.id.starts_with("proxy-"))
        .collect();
    if cells.is_empty() {
        return Ok(());
    }
    writeln!(w, "### nri-proxy beside a direct connection\n")?;
    writeln!(
        w,
        "| cell | stack | median µs | added µs (vs direct) | proxy CPU µs/ev | proxy idle RSS MB | proxy RSS after MB |"
    )?;
    writeln!(w, "|---|---|---|---|---|---|---|")?;
    for c in cells {
        for (proxy, direct) in [
            (Stack::GoProxy, Stack::GoRust),
            (Stack::RustProxy, Stack::RustRust),
        ] {
            let g = |k: &str| c.metric(proxy, k);
            let Some(lat) = g("latency_median_us") else {
                continue;
            };
            let added = c
                .metric(direct, "latency_median_us")
                .map_or("-".to_owned(), |d| num(lat.median - d.median));
            writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} | {} |",
                c.cell.label,
                proxy.label(),
                cell_value(Some(lat)),
                added,
                cell_value(g("plugins_cpu_us_per_event")),
                mb(g("plugin_idle_rss_kb")),
                mb(g("plugin_after_rss_kb")),
            )?;
        }
    }
    writeln!(w)?;
    Ok(())
}
