//! `nri __bundled-plugin KIND`: the bundled plugins of `nri sim`, run as
//! their own processes (socket on fd 3, like pre-launched plugins).

use std::process::ExitCode;

/// Arguments of the hidden subcommand.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Plugin kind (see `nri sim --list-bundled`).
    kind: String,
}

pub fn run(args: Args) -> ExitCode {
    // The simulator shows this output when the plugin fails.
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .without_time()
        .with_target(false)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("NRI_SIM_PLUGIN_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .try_init();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("nri: cannot start the async runtime: {e}");
            return ExitCode::from(crate::EXIT_USAGE);
        }
    };
    match rt.block_on(nri_sim::bundled::run(&args.kind)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::from(crate::EXIT_FAILED)
        }
    }
}
