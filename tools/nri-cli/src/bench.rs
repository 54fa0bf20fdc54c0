//! `nri bench`: the side-by-side benchmark of the Rust NRI stack against
//! the Go reference (engine: `nri-bench`).

use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;

use nri_bench::BenchOptions;
use nri_bench::harness::TokioFlavour;

use crate::{EXIT_OK, EXIT_USAGE};

const AFTER_HELP: &str = "\
Examples:
  nri bench --quick
      Smoke run: small N, small sync state, one repetition (a few minutes).
  nri bench --reps 3 --json-out bench.json
      The full matrix three times, interleaved; tables on stdout, the whole
      report also as JSON in bench.json (tens of minutes).
  nri bench --only runtime --no-go --tokio current
      Only the runtime-library cells, only the Rust stacks, on a
      current-thread tokio scheduler.
  NRI_INTEROP_BIN=/opt/nri-go nri bench --quick --json > report.json
      Go peers from another directory; the report as JSON.

Needs, before running:
  the Go peers nri-go-bench and nri-go-plugin (unless --no-go):
      bash scripts/build-go-peers.sh      (into interop/bin; or --go-bin-dir / NRI_INTEROP_BIN)
  the Rust helpers nri-bench-runtime and nri-bench-plugin:
      cargo build --release -p nri-bench  (found beside `nri`, or --rust-bin-dir)

Progress goes to stderr when it is a terminal (always with -v).

Exit status: 0 the matrix ran (failed runs are listed in the report),
2 usage error, missing binaries, or the benchmark could not run.";

/// Arguments of `nri bench`.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// Repetitions of the whole matrix (default 3; 1 with --quick).
    #[arg(long, value_name = "N")]
    reps: Option<usize>,
    /// Short smoke variant: small N, small sync state.
    #[arg(long)]
    quick: bool,
    /// Print the whole report as JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Also write the whole report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json_out: Option<PathBuf>,
    /// Timed calls at K=1 in the runtime cells (K plugins: N/K).
    #[arg(long, value_name = "N")]
    n: Option<usize>,
    /// Events of the plugin CPU/memory cell.
    #[arg(long, value_name = "N")]
    plugin_n: Option<usize>,
    /// Events of the plugin growth cell.
    #[arg(long, value_name = "N")]
    plugin_long_n: Option<usize>,
    /// Pods in the sync state.
    #[arg(long, value_name = "N")]
    sync_pods: Option<usize>,
    /// Only these cells.
    #[arg(long, value_name = "CELLS", value_parser = ["runtime", "plugin"])]
    only: Option<String>,
    /// Skip the Go stacks (no Go peers needed).
    #[arg(long)]
    no_go: bool,
    /// Directory of nri-go-bench and nri-go-plugin (default $NRI_INTEROP_BIN
    /// or interop/bin of the source tree).
    #[arg(long, value_name = "DIR")]
    go_bin_dir: Option<PathBuf>,
    /// Directory of nri-bench-runtime and nri-bench-plugin (default: beside
    /// this binary).
    #[arg(long, value_name = "DIR")]
    rust_bin_dir: Option<PathBuf>,
    /// tokio scheduler of the Rust runtime harness.
    #[arg(long, value_name = "FLAVOUR", default_value = "multi", value_parser = ["multi", "current"])]
    tokio: String,
    /// tokio workers of the Rust runtime harness.
    #[arg(long, value_name = "N", default_value_t = 2)]
    workers: usize,
}

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("nri bench: error: {msg}");
    ExitCode::from(EXIT_USAGE)
}

fn options(a: &Args) -> BenchOptions {
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
    if let Some(d) = &a.go_bin_dir {
        o.go_bin_dir = d.clone();
    }
    if let Some(d) = &a.rust_bin_dir {
        o.rust_bin_dir = d.clone();
    }
    o.tokio = if a.tokio == "current" {
        TokioFlavour::CurrentThread
    } else {
        TokioFlavour::MultiThread
    };
    match a.only.as_deref() {
        Some("runtime") => o.plugin_cells = false,
        Some("plugin") => o.runtime_cells = false,
        _ => {}
    }
    o
}

/// Every missing binary with the command that builds it (the engine stops
/// at the first one; this names them all at once).
fn missing(o: &BenchOptions) -> Vec<String> {
    let mut out = Vec::new();
    let mut check = |dir: &PathBuf, names: &[&str], build: &str| {
        let gone: Vec<String> = names
            .iter()
            .map(|n| dir.join(n))
            .filter(|p| !p.is_file())
            .map(|p| p.display().to_string())
            .collect();
        if !gone.is_empty() {
            out.push(format!("missing {}\n  build: {build}", gone.join(", ")));
        }
    };
    if o.with_go {
        check(
            &o.go_bin_dir,
            &["nri-go-bench", "nri-go-plugin"],
            "bash scripts/build-go-peers.sh  (Go peers into interop/bin; \
             or point --go-bin-dir / NRI_INTEROP_BIN at them; or --no-go)",
        );
    }
    check(
        &o.rust_bin_dir,
        &["nri-bench-runtime", "nri-bench-plugin"],
        "cargo build --release -p nri-bench  (then --rust-bin-dir target/release \
         unless `nri` is in that directory too)",
    );
    out
}

/// Runs `nri bench`.
pub fn run(args: Args, verbose: u8) -> ExitCode {
    let o = options(&args);
    if o.reps == 0 {
        return fail("--reps must be at least 1");
    }
    let gone = missing(&o);
    if !gone.is_empty() {
        return fail(format!("cannot run the benchmark:\n{}", gone.join("\n")));
    }
    let progress = verbose > 0 || std::io::stderr().is_terminal();
    let report = match nri_bench::run(&o, |line| {
        if progress {
            eprintln!("{line}");
        }
    }) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    if let Some(path) = &args.json_out {
        let written = serde_json::to_vec_pretty(&report)
            .map_err(std::io::Error::from)
            .and_then(|v| std::fs::write(path, v));
        if let Err(e) = written {
            return fail(format!("writing {}: {e}", path.display()));
        }
    }
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        serde_json::to_writer_pretty(&mut out, &report)
            .map_err(std::io::Error::from)
            .and_then(|()| writeln!(out))
            .map_err(|e| e.to_string())
    } else {
        nri_bench::print_table(&report, &mut out).map_err(|e| e.to_string())
    };
    match written {
        Ok(()) => ExitCode::from(EXIT_OK),
        Err(e) => fail(format!("writing the report: {e}")),
    }
}
