//! The proxy's command line, shared by the `nri-proxy` binary and the
//! `nri proxy` command: read the configuration file, log on stderr, run
//! until SIGTERM or SIGINT.

use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

use crate::{Error, Proxy, ProxyConfig};

/// Default configuration file.
pub const DEFAULT_CONFIG_FILE: &str = "/etc/nri-proxy/config.yaml";

/// Command-line options of the proxy (flatten into a clap parser with
/// `#[command(flatten)]`).
#[derive(Debug, Clone, clap::Args)]
#[non_exhaustive]
pub struct Args {
    /// The configuration file (YAML, or TOML for a name ending in .toml).
    #[arg(long, short, default_value = DEFAULT_CONFIG_FILE)]
    pub config: PathBuf,
    /// Check the configuration file and exit.
    #[arg(long)]
    pub check: bool,
    /// Log as JSON lines.
    #[arg(long)]
    pub log_json: bool,
}

/// Runs the proxy as `args` say: logs on stderr (`NRI_PROXY_LOG` sets the
/// filter, default `info`), the configuration file read (and with
/// `--check` only checked: "FILE: ok" on stderr), then the proxy until
/// SIGTERM or SIGINT.
///
/// # Errors
///
/// A bad configuration file ([`Error::Config`], [`Error::InvalidSetting`]),
/// what [`Proxy::new`] and [`Proxy::run`] return, [`Error::Io`] when the
/// async runtime or the signal handlers cannot be set up.
pub fn main(args: &Args) -> Result<(), Error> {
    let filter = tracing_subscriber::EnvFilter::try_from_env("NRI_PROXY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let log = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    // A caller that set up logging already keeps its own.
    let _ = if args.log_json {
        log.json().try_init()
    } else {
        log.try_init()
    };
    let config = ProxyConfig::load(&args.config)?;
    if args.check {
        tracing::info!(file = %args.config.display(), "configuration ok");
        eprintln!("{}: ok", args.config.display());
        return Ok(());
    }
    let io = |what| move |source| Error::Io { what, source };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(io("starting the async runtime"))?;
    rt.block_on(async move {
        let proxy = Proxy::new(config)?;
        let shutdown = CancellationToken::new();
        let signals = shutdown.clone();
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(io("watching SIGTERM"))?;
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
            r = &mut run => r,
            () = watch => run.await,
        }
    })
}
