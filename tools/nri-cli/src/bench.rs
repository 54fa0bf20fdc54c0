//! `nri bench`: the side-by-side benchmark of the Rust NRI stack against
//! the Go reference (engine: `nri-bench`).

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;

use nri_bench::{BenchArgs, BenchOptions};

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
    #[command(flatten)]
    bench: BenchArgs,
}

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("nri bench: error: {msg}");
    ExitCode::from(EXIT_USAGE)
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
    let build = "cargo build --release -p nri-bench  (then --rust-bin-dir target/release \
         unless `nri` is in that directory too)";
    match &o.rust_plugin_bin {
        None => check(
            &o.rust_bin_dir,
            &["nri-bench-runtime", "nri-bench-plugin"],
            build,
        ),
        Some(plugin) => {
            check(&o.rust_bin_dir, &["nri-bench-runtime"], build);
            if !plugin.is_file() {
                out.push(format!("missing {} (--rust-plugin-bin)", plugin.display()));
            }
        }
    }
    out
}

/// Runs `nri bench`.
pub fn run(args: Args, verbose: u8) -> ExitCode {
    let o = args.bench.options();
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
    match args
        .bench
        .write_report(&report, &mut std::io::stdout().lock())
    {
        Ok(()) => ExitCode::from(EXIT_OK),
        Err(e) => fail(format!("writing the report: {e}")),
    }
}
