//! The `nri` command: tools for NRI plugin authors and operators.
//!
//! Subcommands live in their own modules (`sim`, `conformance`, `bench`,
//! the hidden `__bundled-plugin`): each is a module with an `Args` struct
//! (clap `Args` derive, with `after_help` examples) and a `run` function
//! returning the [`ExitCode`], plus one variant in [`Command`]. `proxy` is
//! the `nri-proxy` binary's code (`nri_proxy::cli`).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod bundled_plugin;
mod conformance;
mod human;
mod new;
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
    about = "NRI (Node Resource Interface) tools: simulate a runtime for your plugins, check a runtime's conformance, benchmark",
    after_help = "Examples:\n  nri sim                          run the built-in demo with the bundled plugins\n  nri sim my-scenario.yaml         replay a scenario\n  nri sim --plugin ./target/debug/my-plugin   try your plugin on a standard lifecycle\n  nri sim --help                   scenario options\n  sudo nri conformance --cri-endpoint unix:///run/containerd/containerd.sock --image busybox:latest\n                                   check a runtime against the NRI lifecycle contract\n  nri bench --quick                Rust vs Go benchmark, smoke variant\n  nri proxy --config /etc/nri-proxy/config.yaml   run plugins behind one NRI plugin (as nri-proxy)\n  nri new plugin my-plugin         write a new plugin crate (builds, passes nri sim)"
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
    /// Check a real runtime (containerd, CRI-O) against the NRI lifecycle contract.
    Conformance(conformance::Args),
    /// Benchmark the Rust NRI plugin SDK and runtime library against the Go reference.
    Bench(bench::Args),
    /// Run plugins behind one NRI plugin with nri-runtime's failure policies,
    /// deadlines, metrics and audit trail (the nri-proxy binary).
    Proxy(nri_proxy::cli::Args),
    /// Start a new plugin: `nri new plugin NAME` writes a crate that builds and passes `nri sim`.
    New(new::Args),
    /// Runs a bundled plugin (started by `nri sim`; not for direct use).
    #[command(name = "__bundled-plugin", hide = true)]
    BundledPlugin(bundled_plugin::Args),
}

fn init_logs(verbose: u8) {
    init_logs_default(verbose, "off");
}

/// Logs on stderr: `RUST_LOG` if set, else by `-v`, else `quiet`.
fn init_logs_default(verbose: u8, quiet: &str) {
    init_logs_with(verbose, quiet, None);
}

/// [`init_logs_default`], and with `plugin_log` the output of WebAssembly
/// plugins collected there (whatever the filter of the logs on stderr).
fn init_logs_with(verbose: u8, quiet: &str, plugin_log: Option<&nri_sim::PluginLog>) {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let default = match verbose {
        0 => quiet,
        1 => "warn",
        2 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(filter);
    let _ = tracing_subscriber::registry()
        .with(stderr)
        .with(plugin_log.map(|l| l.layer()))
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
            let plugin_log = args.plugin_output().then(nri_sim::PluginLog::default);
            init_logs_with(cli.verbose, "off", plugin_log.as_ref());
            sim::run(args, plugin_log)
        }
        Command::Conformance(args) => {
            init_logs_default(cli.verbose, "warn,nri_plugin=error,nri_mux=error");
            conformance::run(args)
        }
        Command::Bench(args) => {
            init_logs(cli.verbose);
            bench::run(args, cli.verbose)
        }
        Command::Proxy(args) => match nri_proxy::cli::main(&args) {
            Ok(()) => ExitCode::from(EXIT_OK),
            Err(e) => {
                let mut msg = format!("nri proxy: {e}");
                let mut cause = std::error::Error::source(&e);
                while let Some(c) = cause {
                    msg.push_str(&format!(": {c}"));
                    cause = c.source();
                }
                eprintln!("{msg}");
                ExitCode::from(EXIT_FAILED)
            }
        },
        Command::New(args) => new::run(args),
        Command::BundledPlugin(args) => bundled_plugin::run(args),
    }
}
