//! `nri-differ`: see the crate docs and README.md.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use nri_differ::{Config, DEFAULT_INDICES, DifferInstance, Shared, parse_indices};
use nri_plugin::{Builder, ConnectMode, Error as PluginError, PluginHandle, ReconnectPolicy};
use nri_sample_common::{
    COMMON_USAGE, CommonArgs, LogOutput, init_logging, parse_args, usage_exit,
};
use tokio::task::JoinSet;

fn usage() -> String {
    format!(
        "usage: nri-differ [flags]\n  \
         -indices LIST          comma-separated indices to register at (default \"0,99\")\n  \
         -verbose-level N       0 changes only (default), 1 + first input, 2 + objects before/after, 3 + Synchronize\n  \
         -yaml                  print YAML line diffs\n  \
         (-config FILE: YAML with indices, logFile, socketPath, verboseLevel, yaml)\n\
         {COMMON_USAGE}\n\
         (-idx is the index of a pre-launched instance; external instances use -indices)"
    )
}

const DEFAULT_NAME: &str = "differ";

fn main() -> ExitCode {
    let mut cfg = Config {
        indices: DEFAULT_INDICES.into(),
        ..Default::default()
    };
    let args = match parse_args(std::env::args().skip(1), |name, value| {
        match name {
            "indices" => cfg.indices = value.string()?,
            "verbose-level" => {
                let v = value.string()?;
                cfg.verbose_level = v.parse().map_err(|_| {
                    PluginError::usage(format!("invalid value {v:?} for -verbose-level"))
                })?;
            }
            "yaml" => cfg.yaml = value.bool()?,
            _ => return Ok(false),
        }
        Ok(true)
    }) {
        Ok(a) => a,
        Err(e) => return usage_exit(&e, &usage()),
    };
    if let Some(s) = &args.socket_path {
        cfg.socket_path = s.display().to_string();
    }
    if let Some(f) = &args.log_file {
        cfg.log_file = f.display().to_string();
    }
    if let Some(path) = &args.config_file {
        let merged = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))
            .and_then(|t| cfg.merge_yaml(&t).map_err(|e| e.to_string()));
        match merged {
            Ok(c) => cfg = c,
            Err(e) => {
                eprintln!("nri-differ: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if let Err(e) = parse_indices(&cfg.indices) {
        eprintln!("nri-differ: {e}");
        return ExitCode::from(2);
    }
    let log_file = (!cfg.log_file.is_empty()).then(|| PathBuf::from(&cfg.log_file));
    let log = match init_logging(args.log_level, log_file.as_deref()) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("nri-differ: {e}");
            return ExitCode::FAILURE;
        }
    };
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
    rt.block_on(run(cfg, args, log))
}

fn prelaunched() -> bool {
    std::env::var_os("NRI_PLUGIN_SOCKET").is_some_and(|v| !v.is_empty())
}

fn base_name(args: &CommonArgs) -> String {
    args.name
        .clone()
        .or_else(|| {
            std::env::var("NRI_PLUGIN_NAME")
                .ok()
                .filter(|n| !n.is_empty())
        })
        .unwrap_or_else(|| DEFAULT_NAME.to_owned())
}

struct Instances {
    set: JoinSet<(u8, Result<(), PluginError>)>,
    handles: Vec<PluginHandle>,
}

impl Instances {
    fn spawn_external(&mut self, idx: u8, shared: &Arc<Shared>, args: &CommonArgs, socket: &str) {
        let plugin = DifferInstance::new(idx, Arc::clone(shared), None, None);
        let mut b = Builder::new(plugin)
            .name(base_name(args))
            .index(format!("{idx:02}"))
            .mode(ConnectMode::External);
        if !socket.is_empty() {
            b = b.socket_path(socket);
        }
        if !args.no_reconnect {
            b = b.reconnect(ReconnectPolicy::default());
        }
        self.spawn(idx, b);
    }

    fn spawn(&mut self, idx: u8, b: Builder<DifferInstance>) {
        // The runtime's state is dumped one message at a time (verbose
        // level 3), never held whole.
        let b = b.sync_mode(nri_plugin::SyncMode::Streaming);
        match b.build() {
            Ok(stub) => {
                self.handles.push(stub.handle());
                self.set.spawn(async move { (idx, stub.run().await) });
            }
            Err(e) => {
                self.set.spawn(async move { (idx, Err(e)) });
            }
        }
    }
}

#[allow(clippy::too_many_lines)]
async fn run(cfg: Config, args: CommonArgs, log: LogOutput) -> ExitCode {
    let mut inst = Instances {
        set: JoinSet::new(),
        handles: Vec::new(),
    };
    let socket = cfg.socket_path.clone();
    let mut config_rx = None;
    let shared;
    if prelaunched() {
        // The runtime's socket carries one instance; the other indices of
        // the configuration dial the runtime's socket (`socketPath`).
        let idx = args
            .idx
            .clone()
            .or_else(|| std::env::var("NRI_PLUGIN_IDX").ok())
            .and_then(|i| i.parse::<u8>().ok().filter(|i| *i <= 99));
        let Some(idx) = idx else {
            tracing::error!("pre-launched without a valid NRI_PLUGIN_IDX");
            return ExitCode::FAILURE;
        };
        shared = Shared::new(cfg, vec![idx]);
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        config_rx = Some(rx);
        let plugin = DifferInstance::new(idx, Arc::clone(&shared), Some(log), Some(tx));
        let mut b = Builder::new(plugin).mode(ConnectMode::PreLaunched);
        if let Some(n) = &args.name {
            b = b.name(n.clone());
        }
        inst.spawn(idx, b);
    } else {
        let indices = parse_indices(&cfg.indices).unwrap_or_default();
        shared = Shared::new(cfg, indices.clone());
        for idx in indices {
            inst.spawn_external(idx, &shared, &args, &socket);
        }
    }

    let mut code = ExitCode::SUCCESS;
    let mut signals = Signals::new();
    loop {
        tokio::select! {
            text = async {
                match config_rx.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                let Some(_text) = text else { config_rx = None; continue };
                // Configure of the pre-launched instance: start the others once.
                config_rx = None;
                let cfg = shared.config();
                let launched = shared.indices();
                let mut all = parse_indices(&cfg.indices).unwrap_or_default();
                all.extend(launched.iter().copied());
                all.sort_unstable();
                all.dedup();
                shared.set_indices(all.clone());
                if all.len() < 2 {
                    tracing::warn!("only one index: nothing to compare (set `indices` in the configuration)");
                }
                for idx in all.into_iter().filter(|i| !launched.contains(i)) {
                    inst.spawn_external(idx, &shared, &args, &cfg.socket_path);
                }
            }
            done = inst.set.join_next() => {
                match done {
                    None => break,
                    Some(Ok((_, Ok(())))) | Some(Ok((_, Err(PluginError::ShutDownByRuntime)))) => {}
                    Some(Ok((idx, Err(e)))) => {
                        tracing::error!(idx, "plugin exited with error: {e}");
                        code = ExitCode::FAILURE;
                        inst.handles.iter().for_each(PluginHandle::stop);
                    }
                    Some(Err(e)) => {
                        tracing::error!("instance task failed: {e}");
                        code = ExitCode::FAILURE;
                        inst.handles.iter().for_each(PluginHandle::stop);
                    }
                }
            }
            sig = signals.next() => {
                tracing::info!(signal = sig, "stopping");
                inst.handles.iter().for_each(PluginHandle::stop);
            }
        }
    }
    code
}

/// SIGINT and SIGTERM, installed once.
struct Signals {
    int: Option<tokio::signal::unix::Signal>,
    term: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn new() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        let int = signal(SignalKind::interrupt()).ok();
        let term = signal(SignalKind::terminate()).ok();
        if int.is_none() || term.is_none() {
            tracing::warn!("cannot install signal handlers");
        }
        Signals { int, term }
    }

    async fn next(&mut self) -> &'static str {
        let (Some(int), Some(term)) = (self.int.as_mut(), self.term.as_mut()) else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = int.recv() => "SIGINT",
            _ = term.recv() => "SIGTERM",
        }
    }
}
