//! The Rust runtime harness: `nri-go-bench` re-created on `nri-runtime`.
//! Same flags, same JSON object on stdout (`"impl":"rust"`), exit 1 with
//! `"error"` in the object when plugins do not register in time, a call
//! fails or the adjustment check fails; 2 on a usage error.
//!
//! ```text
//! nri-bench-runtime [--mode latency|sync|idle] [--k 1] [--flavour noop|adjusting]
//!     [--event CreateContainer|StartContainer] [--n 20000] [--warmup 1000]
//!     [--concurrency 1] [--sync-pods 1000] [--sync-containers-per-pod 5]
//!     [--idle-wait 500ms] [--registration-wait 60s]
//!     [--plugin-bin <dir of this binary>/nri-bench-plugin]
//!     [--log-level warn] [--plugin-log-level warn]
//!     [--tokio multi|current] [--workers 2] [--spin-budget <library default>]
//!     [--wasm FILE] [--grants]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use nri_bench::harness::{self, HarnessOptions, TokioFlavour};
use nri_bench::{Event, Flavour, Mode};

fn duration(s: &str) -> Result<Duration, String> {
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("missing unit in duration {s:?}"))?;
    let (v, unit) = s.split_at(split);
    let v: f64 = v.parse().map_err(|_| format!("invalid duration {s:?}"))?;
    let secs = match unit {
        "ns" => v / 1e9,
        "us" | "µs" => v / 1e6,
        "ms" => v / 1e3,
        "s" => v,
        "m" => v * 60.0,
        "h" => v * 3600.0,
        _ => return Err(format!("unknown unit in duration {s:?}")),
    };
    Ok(Duration::from_secs_f64(secs))
}

#[derive(Parser, Debug)]
#[command(about = "Rust NRI runtime harness (nri-go-bench's flags and JSON, on nri-runtime)")]
struct Args {
    /// latency | sync | idle
    #[arg(long, default_value = "latency", value_parser = |s: &str| Mode::parse(s).ok_or(format!("invalid --mode {s:?}")))]
    mode: Mode,
    /// Number of plugin processes (indices 10, 11, ...).
    #[arg(long, default_value_t = 1)]
    k: usize,
    /// Plugins whose adjustments the merged reply must carry (adjusting
    /// flavour; default: --k). A proxy started in place of the plugins
    /// answers for the plugins behind it.
    #[arg(long)]
    adjusting_plugins: Option<usize>,
    /// Timed calls (latency mode).
    #[arg(long, default_value_t = 20000)]
    n: usize,
    /// Warm-up calls (latency mode).
    #[arg(long, default_value_t = 1000)]
    warmup: usize,
    /// Concurrent callers, each on distinct containers (latency mode).
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Start one timed call every this long instead of back to back
    /// (latency mode, concurrency 1), e.g. 2ms: a node's pace.
    #[arg(long, value_parser = duration)]
    pace: Option<Duration>,
    /// Plugin flavour: noop | adjusting.
    #[arg(long, default_value = "noop", value_parser = |s: &str| Flavour::parse(s).ok_or(format!("invalid --flavour {s:?}")))]
    flavour: Flavour,
    /// Timed event: CreateContainer | StartContainer.
    #[arg(long, default_value = "CreateContainer", value_parser = |s: &str| Event::parse(s).ok_or(format!("invalid --event {s:?}")))]
    event: Event,
    /// Pods in the sync state (sync mode).
    #[arg(long, default_value_t = 1000)]
    sync_pods: usize,
    /// Containers per pod in the sync state (sync mode).
    #[arg(long, default_value_t = 5)]
    sync_containers_per_pod: usize,
    /// Wait after registration before reading idle RSS.
    #[arg(long, default_value = "500ms", value_parser = duration)]
    idle_wait: Duration,
    /// Give up if plugins are not all registered+synced by then.
    #[arg(long, default_value = "60s", value_parser = duration)]
    registration_wait: Duration,
    /// Plugin binary (default: nri-bench-plugin beside this binary).
    #[arg(long)]
    plugin_bin: Option<PathBuf>,
    /// stderr log level of the runtime.
    #[arg(long, default_value = "warn")]
    log_level: tracing::Level,
    /// --log-level passed to the plugins.
    #[arg(long, default_value = "warn")]
    plugin_log_level: String,
    /// tokio scheduler: multi | current.
    #[arg(long, default_value = "multi")]
    tokio: String,
    /// tokio worker threads (multi).
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// The runtime's spin budget (default: the library's; 0us turns
    /// spinning off).
    #[arg(long, value_parser = duration)]
    spin_budget: Option<Duration>,
    /// WebAssembly plugin: K copies of it in the plugin directory instead
    /// of K plugin processes (noop flavour only).
    #[arg(long, value_name = "FILE")]
    wasm: Option<PathBuf>,
    /// Configure a grant for the plugins (env and annotations, in the
    /// benchmark's namespace, as this uid): every answer is checked.
    #[arg(long)]
    grants: bool,
}

fn main() -> ExitCode {
    let a = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(a.log_level)
        .init();
    let tokio = match a.tokio.as_str() {
        "multi" | "multi_thread" => TokioFlavour::MultiThread,
        "current" | "current_thread" => TokioFlavour::CurrentThread,
        other => {
            eprintln!("invalid --tokio {other:?} (multi | current)");
            return ExitCode::from(2);
        }
    };
    if a.wasm.is_some() && a.flavour != Flavour::Noop {
        eprintln!("--wasm supports only --flavour noop");
        return ExitCode::from(2);
    }
    if a.n < 1 || a.concurrency < 1 {
        eprintln!("invalid --n/--concurrency");
        return ExitCode::from(2);
    }
    let plugin_bin = a.plugin_bin.unwrap_or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(|d| d.join("nri-bench-plugin")))
            .unwrap_or_else(|| PathBuf::from("nri-bench-plugin"))
    });
    let o = HarnessOptions {
        plugin_bin,
        k: a.k,
        adjusting_plugins: a.adjusting_plugins,
        n: a.n,
        warmup: a.warmup,
        concurrency: a.concurrency,
        pace: a.pace,
        flavour: a.flavour,
        event: a.event,
        mode: a.mode,
        sync_pods: a.sync_pods,
        sync_containers_per_pod: a.sync_containers_per_pod,
        idle_wait: a.idle_wait,
        registration_wait: a.registration_wait,
        plugin_log_level: a.plugin_log_level,
        tokio,
        workers: a.workers,
        spin_budget: a.spin_budget,
        wasm: a.wasm.clone(),
    };
    let grants = a
        .grants
        .then(|| vec![harness::bench_grant(a.wasm.is_none())]);
    let res = harness::run_with_grants(&o, grants);
    match serde_json::to_string(&res) {
        Ok(s) => println!("{s}"),
        Err(e) => {
            eprintln!("nri-bench-runtime: JSON: {e}");
            return ExitCode::from(1);
        }
    }
    if res.error.is_some() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
