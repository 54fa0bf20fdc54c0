//! `nri-bench`: runs the side-by-side matrix (Rust vs Go, interleaved,
//! repeated) and prints Markdown tables with medians, p99, ratios and the
//! targets, or the whole report as JSON.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use nri_bench::harness::TokioFlavour;
use nri_bench::{BenchOptions, print_table};

#[derive(Parser, Debug)]
#[command(
    about = "Side-by-side NRI benchmark: Rust plugin SDK and runtime library vs containerd/nri (Go)"
)]
struct Args {
    /// Repetitions of the whole matrix (default 3; 1 with --quick).
    #[arg(long)]
    reps: Option<usize>,
    /// Short smoke variant: small N, small sync state.
    #[arg(long)]
    quick: bool,
    /// Print the whole report as JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Also write the whole report as JSON to this file.
    #[arg(long)]
    json_out: Option<PathBuf>,
    /// Timed calls at K=1 in the runtime cells (K plugins: n/K).
    #[arg(long)]
    n: Option<usize>,
    /// Events of the plugin CPU/memory cell.
    #[arg(long)]
    plugin_n: Option<usize>,
    /// Events of the plugin growth cell.
    #[arg(long)]
    plugin_long_n: Option<usize>,
    /// Pods in the sync state.
    #[arg(long)]
    sync_pods: Option<usize>,
    /// Only these cells: runtime | plugin.
    #[arg(long)]
    only: Option<String>,
    /// Skip the Go stacks (no Go peers needed).
    #[arg(long)]
    no_go: bool,
    /// Directory of nri-go-bench and nri-go-plugin (default $NRI_INTEROP_BIN or <repo>/interop/bin).
    #[arg(long)]
    go_bin_dir: Option<PathBuf>,
    /// Directory of nri-bench-runtime and nri-bench-plugin (default: beside this binary).
    #[arg(long)]
    rust_bin_dir: Option<PathBuf>,
    /// Rust bench plugin binary to use instead of the one in the Rust bin
    /// dir, e.g. the static min-size build (see docs/benchmarks/nri.md).
    #[arg(long)]
    rust_plugin_bin: Option<PathBuf>,
    /// tokio scheduler of the Rust runtime harness: multi | current.
    #[arg(long, default_value = "multi")]
    tokio: String,
    /// tokio workers of the Rust runtime harness.
    #[arg(long, default_value_t = 2)]
    workers: usize,
}

fn main() -> ExitCode {
    let a = Args::parse();
    let mut o = BenchOptions {
        quick: a.quick,
        with_go: !a.no_go,
        workers: a.workers,
        ..Default::default()
    };
    if let Some(v) = a.reps {
        o.reps = v;
    } else if a.quick {
        o.reps = 1;
    }
    if let Some(v) = a.n {
        o.n = v;
    }
    if let Some(v) = a.plugin_n {
        o.plugin_n = v;
    }
    if let Some(v) = a.plugin_long_n {
        o.plugin_long_n = v;
    }
    if let Some(v) = a.sync_pods {
        o.sync_pods = v;
    }
    if let Some(d) = a.go_bin_dir {
        o.go_bin_dir = d;
    }
    if let Some(d) = a.rust_bin_dir {
        o.rust_bin_dir = d;
    }
    o.rust_plugin_bin = a.rust_plugin_bin;
    o.tokio = match a.tokio.as_str() {
        "multi" => TokioFlavour::MultiThread,
        "current" => TokioFlavour::CurrentThread,
        other => {
            eprintln!("invalid --tokio {other:?}");
            return ExitCode::from(2);
        }
    };
    match a.only.as_deref() {
        None => {}
        Some("runtime") => o.plugin_cells = false,
        Some("plugin") => o.runtime_cells = false,
        Some(other) => {
            eprintln!("invalid --only {other:?} (runtime | plugin)");
            return ExitCode::from(2);
        }
    }
    let report = match nri_bench::run(&o, |line| eprintln!("{line}")) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("nri-bench: {e}");
            return ExitCode::from(1);
        }
    };
    if let Some(path) = &a.json_out {
        let written = serde_json::to_vec_pretty(&report)
            .map_err(std::io::Error::from)
            .and_then(|v| std::fs::write(path, v));
        if let Err(e) = written {
            eprintln!("nri-bench: writing {}: {e}", path.display());
            return ExitCode::from(1);
        }
    }
    let mut out = std::io::stdout().lock();
    let r = if a.json {
        serde_json::to_writer_pretty(&mut out, &report)
            .map_err(|e| nri_bench::Error::Output(e.into()))
            .and_then(|()| {
                use std::io::Write;
                writeln!(out).map_err(nri_bench::Error::Output)
            })
    } else {
        print_table(&report, &mut out)
    };
    if let Err(e) = r {
        eprintln!("nri-bench: {e}");
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
