//! The paced cells and the "plain" variants.
//!
//! Back-to-back cells measure latency while events come as fast as the
//! stack takes them, which is when spinning pays. A node sees an event
//! every few milliseconds at most: the paced cell sends one CreateContainer
//! every [`PACE_MS`] ms for 10 s and reports what each event costs in CPU
//! (runtime and plugins, from `/proc`), beside the back-to-back cells.
//! Each is run twice in one run, with the defaults and in "plain" mode (no
//! spinning anywhere: our runtime's and our plugins' spin budgets zero), so
//! that what the latency machinery costs and buys is an A/B pair.
//!
//! Our bench plugin answers CreateContainer without decoding the request
//! (`Plugin::create_container_encoded`: its answer does not depend on it),
//! where the Go stub has to decode all of it. The "decoding" twins of the
//! paced cell and of the K=1 back-to-back cells have our plugins decode the
//! whole request, as a plugin that reads it all would: what decoding costs,
//! beside the cells with the defaults.

use serde::Serialize;

use crate::matrix::{BenchOptions, Cell, Stack};
use crate::report::{BenchReport, TargetCheck};
use crate::targets::{Want, ratio_check, ratio_check_between};
use crate::{Event, Flavour, Mode};

/// Milliseconds between two calls of the paced cell.
pub const PACE_MS: u64 = 2;

/// Calls of the paced cell: 10 s at [`PACE_MS`].
const PACED_N: usize = 5000;

/// Environment of `nri-bench-plugin`: its spin budget in µs.
pub const ENV_PLUGIN_SPIN_US: &str = "NRI_BENCH_PLUGIN_SPIN_US";

/// Environment of `nri-bench-plugin`: what it decodes of a CreateContainer
/// request (`none`, its default; `container`; `all`).
pub const ENV_PLUGIN_DECODE: &str = "NRI_BENCH_PLUGIN_DECODE";

/// The paced cells (go/go, go/rust, rust/rust; the plain one without
/// go/go, which has nothing to turn off) and the plain twins of the
/// back-to-back CreateContainer cells (rust/rust).
pub(crate) fn cells(o: &BenchOptions) -> Vec<Cell> {
    let n = if o.quick { 100 } else { PACED_N };
    let with_go = |stacks: &[Stack]| -> Vec<Stack> {
        stacks
            .iter()
            .copied()
            .filter(|s| o.with_go || *s == Stack::RustRust)
            .collect()
    };
    let paced = |twin: Twin| Cell {
        id: format!("paced-noop-k1{}", twin.id_suffix()),
        label: format!(
            "CreateContainer noop K=1, one every {PACE_MS} ms{}",
            twin.label_suffix()
        ),
        mode: Mode::Latency,
        event: Event::CreateContainer,
        flavour: Flavour::Noop,
        k: 1,
        n,
        warmup: (n / 20).max(10),
        concurrency: 1,
        stacks: match twin {
            Twin::Defaults => with_go(&[Stack::GoGo, Stack::GoRust, Stack::RustRust]),
            Twin::Plain | Twin::Decoding => with_go(&[Stack::GoRust, Stack::RustRust]),
        },
        pace_ms: Some(PACE_MS),
        twin,
    };
    let mut cells = vec![
        paced(Twin::Defaults),
        paced(Twin::Plain),
        paced(Twin::Decoding),
    ];
    if o.quick {
        // The twins double the back-to-back cells: not in the smoke run.
        return cells;
    }
    // Back to back, rust/rust: the plain twins, then the decoding twins.
    for twin in [Twin::Plain, Twin::Decoding] {
        for flavour in [Flavour::Noop, Flavour::Adjusting] {
            for k in [1usize, 4, 8] {
                let n = (o.n / k).max(200);
                cells.push(Cell {
                    id: format!("create-{}-k{k}{}", flavour.as_str(), twin.id_suffix()),
                    label: format!(
                        "CreateContainer {} K={k}{}",
                        flavour.as_str(),
                        twin.label_suffix()
                    ),
                    mode: Mode::Latency,
                    event: Event::CreateContainer,
                    flavour,
                    k,
                    n,
                    warmup: (n / 20).max(10),
                    concurrency: 1,
                    stacks: vec![Stack::RustRust],
                    pace_ms: None,
                    twin,
                });
            }
        }
    }
    cells
}

/// A cell run with the defaults, or one of its twins beside it in the
/// same run: what the latency machinery and decoding cost, as A/B pairs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Twin {
    /// What ships.
    #[default]
    Defaults,
    /// "Plain" mode: no spinning anywhere (our runtime's and plugins' spin
    /// budgets zero).
    Plain,
    /// Our plugins decode the whole CreateContainer request, as the Go
    /// stub does, instead of nothing (their answer does not depend on it).
    Decoding,
}

impl Twin {
    /// Whether this is the cell with the defaults (it carries no twin tag).
    pub(crate) fn is_defaults(&self) -> bool {
        *self == Twin::Defaults
    }

    /// The id suffix of a twin cell.
    fn id_suffix(self) -> &'static str {
        match self {
            Twin::Defaults => "",
            Twin::Plain => "-plain",
            Twin::Decoding => "-decoding",
        }
    }

    /// The label suffix of a twin cell.
    fn label_suffix(self) -> &'static str {
        match self {
            Twin::Defaults => "",
            Twin::Plain => ", plain",
            Twin::Decoding => ", plugins decode the request",
        }
    }
}

/// Adds what `cell` asks of a run beyond the common flags: the pace; in
/// plain mode zero spin budgets for our runtime (`--spin-budget`) and our
/// plugins (their environment); for a decoding twin, our plugins decoding
/// the whole request (their environment).
pub(crate) fn configure(cmd: &mut std::process::Command, cell: &Cell, stack: Stack) {
    if let Some(ms) = cell.pace_ms {
        cmd.arg("--pace").arg(format!("{ms}ms"));
    }
    match cell.twin {
        Twin::Defaults => {}
        Twin::Plain => {
            if matches!(stack, Stack::RustRust | Stack::RustGo) {
                cmd.arg("--spin-budget").arg("0us");
            }
            cmd.env(ENV_PLUGIN_SPIN_US, "0");
        }
        Twin::Decoding => {
            cmd.env(ENV_PLUGIN_DECODE, "all");
        }
    }
}

/// The targets of the paced cells, and the runtime's CPU per event.
pub(crate) fn targets(report: &BenchReport) -> Vec<TargetCheck> {
    let (gg, gr, rr) = (Stack::GoGo, Stack::GoRust, Stack::RustRust);
    let mut t = Vec::new();
    if report.cell("paced-noop-k1").is_some() {
        t.push(ratio_check(
            report,
            "paced-noop-k1",
            "plugins_cpu_us_per_event",
            gr,
            gg,
            format!("plugin CPU per CreateContainer under the Go runtime, one every {PACE_MS} ms"),
            Want::AtMost(0.25),
        ));
        t.push(default_vs_plain(report, gr));
    }
    if report.cell("paced-noop-k1-decoding").is_some() {
        t.push(ratio_check_between(
            report,
            "plugins_cpu_us_per_event",
            ("paced-noop-k1-decoding", gr),
            ("paced-noop-k1", gg),
            format!(
                "plugin CPU per CreateContainer under the Go runtime, one every {PACE_MS} ms, plugin decodes the request"
            ),
            Want::AtMost(0.25),
        ));
    }
    if report.cell("create-noop-k1").is_some() {
        for f in ["noop", "adjusting"] {
            for k in [1, 4, 8] {
                t.push(ratio_check(
                    report,
                    &format!("create-{f}-k{k}"),
                    "runtime_cpu_us_per_event",
                    rr,
                    gg,
                    format!("CreateContainer {f} K={k} runtime CPU per event (Rust stack)"),
                    Want::AtMost(0.25),
                ));
            }
        }
    }
    if report.cell("create-noop-k1-decoding").is_some() {
        for f in ["noop", "adjusting"] {
            for k in [1, 4, 8] {
                t.push(ratio_check_between(
                    report,
                    "latency_median_us",
                    (&format!("create-{f}-k{k}-decoding"), rr),
                    (&format!("create-{f}-k{k}"), gg),
                    format!("CreateContainer {f} K={k} median latency (Rust stack, plugins decode the request)"),
                    Want::AtMost(0.2),
                ));
            }
        }
    }
    t
}

/// How far apart two runs of the same code land in the paced cell (plugin
/// CPU per event, measured on the 2-vCPU machine of docs/benchmarks: up to
/// 10% from one run to the next, either way).
const SAME_CODE_SPREAD: f64 = 1.10;

/// Our plugin under the Go runtime, at a node's pace: no more CPU per event
/// with the defaults than in plain mode. Under the Go runtime the plugin
/// does not spin with either (`crates/nri-plugin/tests/go_runtime.rs`), so
/// the two run the same code, and the check allows their run-to-run
/// spread ([`SAME_CODE_SPREAD`]).
fn default_vs_plain(report: &BenchReport, stack: Stack) -> TargetCheck {
    let metric = "plugins_cpu_us_per_event";
    let get = |id: &str| report.cell(id).and_then(|c| c.metric(stack, metric));
    let name = format!(
        "plugin CPU per CreateContainer under the Go runtime, one every {PACE_MS} ms: defaults vs plain"
    );
    match (get("paced-noop-k1"), get("paced-noop-k1-plain")) {
        (Some(d), Some(p)) if p.median > 0.0 => {
            let r = d.median / p.median;
            TargetCheck {
                name,
                target: format!("<= 1.00x (same code: <= {SAME_CODE_SPREAD:.2}x)"),
                value: Some((r * 1000.0).round() / 1000.0),
                detail: format!("defaults {} vs plain {} = {r:.3}x", d.median, p.median),
                met: Some(r <= SAME_CODE_SPREAD),
            }
        }
        _ => TargetCheck {
            name,
            target: format!("<= 1.00x (same code: <= {SAME_CODE_SPREAD:.2}x)"),
            value: None,
            detail: "not measured".into(),
            met: None,
        },
    }
}
