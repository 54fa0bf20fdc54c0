//! Running a sample plugin: build the stub from the common flags, run it
//! on a single-threaded tokio runtime, reconnect when external, stop on
//! SIGINT/SIGTERM, and turn the outcome into an exit status.

use std::process::ExitCode;

use nri_plugin::{Builder, Error as PluginError, Plugin, ReconnectPolicy};

use crate::CommonArgs;

/// Builds the plugin's stub from `args` and runs it until it stops.
///
/// - Identity: `-name`/`-idx` if given, else `NRI_PLUGIN_NAME`/`NRI_PLUGIN_IDX`
///   (pre-launched), else the executable's file name `NN-name`; `default_name`
///   when the name is still unknown (a plugin started by hand as `logger -idx 10`).
/// - External plugins (no `NRI_PLUGIN_SOCKET`) dial `-socket-path` and
///   reconnect with backoff after the runtime restarts, unless
///   `-no-reconnect`. Pre-launched plugins use the runtime's socket and end
///   with their connection (the runtime launches them again).
/// - `customize` may change the builder further (e.g. the subscription).
///
/// Exit status: 0 after SIGINT/SIGTERM; 1 on any other end (the runtime's
/// Shutdown or a lost connection without reconnect, registration refused,
/// bad identity), as the Go samples exit 1 when their connection ends, with
/// the error and its causes logged.
pub fn run_plugin<P, F>(plugin: P, args: &CommonArgs, default_name: &str, customize: F) -> ExitCode
where
    P: Plugin,
    F: FnOnce(Builder<P>) -> Builder<P>,
{
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(run_async(plugin, args, default_name, customize))
}

fn prelaunched() -> bool {
    std::env::var_os(nri_api::ENV_PLUGIN_SOCKET).is_some_and(|v| !v.is_empty())
}

fn default_name_needed(args: &CommonArgs) -> bool {
    if args.name.is_some() {
        return false;
    }
    if std::env::var_os(nri_api::ENV_PLUGIN_NAME).is_some_and(|v| !v.is_empty()) {
        return false;
    }
    let exe = std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
        .unwrap_or_default();
    // `NN-name` gives the name; a bare executable name does too, but only
    // together with an index from elsewhere (the SDK's rule).
    nri_api::parse_plugin_file_name(&exe).is_err() && nri_api::check_plugin_name(&exe).is_err()
}

async fn run_async<P, F>(plugin: P, args: &CommonArgs, default_name: &str, customize: F) -> ExitCode
where
    P: Plugin,
    F: FnOnce(Builder<P>) -> Builder<P>,
{
    let mut b = Builder::new(plugin);
    if let Some(n) = &args.name {
        b = b.name(n.clone());
    } else if default_name_needed(args) {
        b = b.name(default_name);
    }
    if let Some(i) = &args.idx {
        b = b.index(i.clone());
    }
    if let Some(s) = &args.socket_path {
        b = b.socket_path(s.clone());
    }
    if !prelaunched() && !args.no_reconnect {
        b = b.reconnect(ReconnectPolicy::default());
    }
    if !args.ignored.is_empty() {
        tracing::warn!(arguments = ?args.ignored, "ignoring arguments after the flags");
    }
    let b = customize(b);
    let stub = match b.build() {
        Ok(s) => s,
        Err(e) => {
            log_error(&e);
            return ExitCode::FAILURE;
        }
    };
    tracing::info!(plugin = %stub.plugin_name(), external = !prelaunched(), "starting");
    let handle = stub.handle();
    let result = tokio::select! {
        r = stub.run() => r,
        sig = terminated() => {
            tracing::info!(signal = sig, "stopping");
            handle.stop();
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(PluginError::ShutDownByRuntime) => {
            tracing::info!("the runtime shut the plugin down, exiting");
            ExitCode::FAILURE
        }
        Err(e) => {
            log_error(&e);
            ExitCode::FAILURE
        }
    }
}

fn log_error(e: &PluginError) {
    let mut text = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        text.push_str(": ");
        text.push_str(&s.to_string());
        src = s.source();
    }
    if e.is_socket_missing() {
        text.push_str(" (is NRI enabled in the runtime, and the runtime running?)");
    }
    tracing::error!("plugin exited: {text}");
}

/// Resolves on SIGINT or SIGTERM with the signal's name. If the handlers
/// cannot be installed it never resolves (the plugin then ends with its
/// connection).
async fn terminated() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        tracing::warn!("cannot install signal handlers");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}
