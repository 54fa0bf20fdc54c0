//! The `nri` command: tools for NRI plugin authors and operators.
//!
//! Subcommands live in their own modules (`sim`, the hidden
//! `__bundled-plugin`); `conformance` and `bench` are to be added the same
//! way: a module with an `Args` struct (clap `Args` derive, with
//! `after_help` examples) and a `run(args) -> ExitCode` function, plus one
//! variant in [`Command`].

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bundled_plugin;
mod human;
mod sim;

/// Exit status: every expectation held.
pub const EXIT_OK: u8 = 0;
/// Exit status: an expectation failed.
pub const EXIT_FAILED: u8 = 1;
/// Exit status: usage error, bad scenario, or the simulation could not run.
pub const EXIT_USAGE: u8 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "nri",
    version,
    about = "NRI (Node Resource Interface) tools: simulate a runtime for your plugins",
    after_help = "Examples:\n  nri sim                          run the built-in demo with the bundled plugins\n  nri sim my-scenario.yaml         replay a scenario\n  nri sim --plugin ./target/debug/my-plugin   try your plugin on a standard lifecycle\n  nri sim --help                   scenario options"
)]
struct Cli {
    /// More logs from the embedded runtime on stderr (-v warnings, -vv info, -vvv debug).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Replay a scenario against NRI plugins in an embedded runtime.
    Sim(sim::Args),
    /// Runs a bundled plugin (started by `nri sim`; not for direct use).
    #[command(name = "__bundled-plugin", hide = true)]
    BundledPlugin(bundled_plugin::Args),
}

fn init_logs(verbose: u8) {
    let default = match verbose {
        0 => "off",
        1 => "warn",
        2 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .try_init();
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { EXIT_OK });
        }
    };
    match cli.command {
        Command::Sim(args) => {
            init_logs(cli.verbose);
            sim::run(args)
        }
        Command::BundledPlugin(args) => bundled_plugin::run(args),
    }
}
