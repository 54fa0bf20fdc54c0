//! The `nri-proxy` binary: reads the configuration file, runs the proxy
//! until SIGTERM or SIGINT.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use tokio_util::sync::CancellationToken;

/// An NRI plugin that runs NRI plugins with nri-runtime's failure
/// policies, deadlines, metrics and audit trail.
#[derive(Debug, Parser)]
#[command(name = "nri-proxy", version)]
struct Args {
    /// The configuration file (YAML, or TOML for a name ending in .toml).
    #[arg(long, short, default_value = "/etc/nri-proxy/config.yaml")]
    config: PathBuf,
    /// Check the configuration file and exit.
    #[arg(long)]
    check: bool,
    /// Log as JSON lines.
    #[arg(long)]
    log_json: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("NRI_PROXY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let log = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    if args.log_json {
        log.json().init();
    } else {
        log.init();
    }
    let config = nri_proxy::ProxyConfig::load(&args.config)?;
    if args.check {
        eprintln!("{}: ok", args.config.display());
        return Ok(());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async move {
        let proxy = nri_proxy::Proxy::new(config)?;
        let shutdown = CancellationToken::new();
        let signals = shutdown.clone();
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("cannot watch SIGTERM")?;
        let watch = async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            tracing::info!("nri-proxy: signal received, stopping");
            signals.cancel();
        };
        let run = proxy.run(shutdown.clone());
        tokio::pin!(run);
        tokio::select! {
            r = &mut run => r?,
            () = watch => run.await?,
        }
        Ok(())
    })
}
