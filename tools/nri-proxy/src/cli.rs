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
        for p in config.plugins_not_launched() {
            eprintln!(
                "{}: warning: {} is not started: disable-launch is true",
                args.config.display(),
                p.display()
            );
        }
        tracing::info!(file = %args.config.display(), "configuration ok");
        eprintln!("{}: ok", args.config.display());
        return Ok(());
    }
    let io = |what| move |source| Error::Io { what, source };
    let rt = async_runtime().map_err(io("starting the async runtime"))?;
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

/// The async runtime the proxy runs on: a single-threaded tokio runtime.
///
/// An event crosses the proxy as a chain of hand-offs (the runtime's
/// request read, each plugin called in turn and its answer read, the
/// merged answer written), one after the other. On a multi-thread runtime
/// each hand-off may wake the other worker thread, and a cross-CPU wake-up
/// costs tens of microseconds on a virtual machine; on one thread a
/// hand-off is a queue operation. One thread also leaves the node's other
/// CPUs to the runtime and the plugins the proxy waits for. Blocking work
/// (loading WASM plugins) runs on tokio's blocking pool either way.
///
/// # Errors
///
/// The I/O error of building the runtime.
pub fn async_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}
