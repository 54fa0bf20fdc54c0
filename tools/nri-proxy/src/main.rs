//! The `nri-proxy` binary: reads the configuration file, runs the proxy
//! until SIGTERM or SIGINT (the same code as `nri proxy`).

use clap::Parser;

/// An NRI plugin that runs NRI plugins with nri-runtime's failure
/// policies, deadlines, metrics and audit trail.
#[derive(Debug, Parser)]
#[command(name = "nri-proxy", version)]
struct Cli {
    #[command(flatten)]
    args: nri_proxy::cli::Args,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    nri_proxy::cli::main(&cli.args)?;
    Ok(())
}
