//! `nri-bench`: runs the side-by-side matrix (Rust vs Go, interleaved,
//! repeated) and prints Markdown tables with medians, p99, ratios and the
//! targets, or the whole report as JSON.

use std::process::ExitCode;

use clap::Parser;
use nri_bench::BenchArgs;

#[derive(Parser, Debug)]
#[command(
    about = "Side-by-side NRI benchmark: Rust plugin SDK and runtime library vs containerd/nri (Go)"
)]
struct Args {
    #[command(flatten)]
    bench: BenchArgs,
}

fn main() -> ExitCode {
    let a = Args::parse().bench;
    let report = match nri_bench::run(&a.options(), |line| eprintln!("{line}")) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("nri-bench: {e}");
            return ExitCode::from(1);
        }
    };
    if let Err(e) = a.write_report(&report, &mut std::io::stdout().lock()) {
        eprintln!("nri-bench: {e}");
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
