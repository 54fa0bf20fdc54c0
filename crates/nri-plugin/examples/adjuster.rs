//! An NRI plugin that adds environment variables and annotations to every
//! container it sees created.
//!
//! ```text
//! adjuster [--socket PATH] [--name NAME] [--index NN]
//!          [--env KEY=VALUE]... [--annotation KEY=VALUE]...
//! ```
//!
//! Also from the environment: `NRI_ADJUSTER_SOCKET`, `NRI_ADJUSTER_ENV` and
//! `NRI_ADJUSTER_ANNOTATIONS` (comma-separated `KEY=VALUE` lists). And from
//! the configuration text the runtime hands over in Configure (a
//! pre-launched plugin's `NN-adjuster.conf`), one setting per line:
//!
//! ```text
//! # comment
//! env GREETING=hello
//! annotation example.com/owner=team-a
//! ```
//!
//! With no setting at all it adds `NRI_ADJUSTED=<plugin name>` and the
//! annotation `adjuster.nri.example/adjusted=true`. It reconnects when the
//! runtime restarts (external mode). Exit status: 0 stopped by a signal,
//! 1 usage error, 2 the plugin failed.

use std::process::ExitCode;
use std::sync::Mutex;

use nri_plugin::api::{Container, ContainerAdjustment, CreateContainerResponse, PodSandbox};
use nri_plugin::{
    Builder, ConfigureInfo, EventMask, HandlerError, HandlerResult, Plugin, ReconnectPolicy,
};

#[derive(Default, Clone)]
struct Settings {
    env: Vec<(String, String)>,
    annotations: Vec<(String, String)>,
}

impl Settings {
    fn is_empty(&self) -> bool {
        self.env.is_empty() && self.annotations.is_empty()
    }

    fn adjustment(&self) -> ContainerAdjustment {
        let mut adjust = ContainerAdjustment::default();
        for (k, v) in &self.env {
            adjust.add_env(k, v);
        }
        for (k, v) in &self.annotations {
            adjust.add_annotation(k, v);
        }
        adjust
    }
}

fn key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

/// Parses the configuration text (see the module docs).
fn parse_config(text: &str, into: &mut Settings) -> Result<(), String> {
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = || {
            format!(
                "line {}: expected `env K=V` or `annotation K=V`, got {line:?}",
                n + 1
            )
        };
        let (what, kv) = line.split_once(char::is_whitespace).ok_or_else(bad)?;
        let kv = key_value(kv.trim()).map_err(|e| format!("line {}: {e}", n + 1))?;
        match what {
            "env" => into.env.push(kv),
            "annotation" => into.annotations.push(kv),
            _ => return Err(bad()),
        }
    }
    Ok(())
}

struct Adjuster {
    /// From flags and environment.
    base: Settings,
    /// Effective settings: `base` plus the runtime-provided config.
    current: Mutex<Settings>,
}

#[nri_plugin::plugin]
impl Plugin for Adjuster {
    async fn configure(&self, info: &ConfigureInfo) -> HandlerResult<Option<EventMask>> {
        let mut settings = self.base.clone();
        parse_config(&info.config, &mut settings).map_err(HandlerError::msg)?;
        if settings.is_empty() {
            let name = std::env::var("NRI_PLUGIN_NAME").unwrap_or_else(|_| "adjuster".into());
            settings.env.push(("NRI_ADJUSTED".into(), name));
            settings
                .annotations
                .push(("adjuster.nri.example/adjusted".into(), "true".into()));
        }
        tracing::info!(
            env = settings.env.len(),
            annotations = settings.annotations.len(),
            "configured"
        );
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = settings;
        Ok(None)
    }

    async fn create_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        let adjust = self
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .adjustment();
        tracing::info!(pod = %pod.name, container = %ctr.name, "adjusting");
        Ok(CreateContainerResponse {
            adjust: Some(adjust),
            ..Default::default()
        })
    }
}

struct Args {
    socket: Option<String>,
    name: Option<String>,
    index: Option<String>,
    settings: Settings,
}

fn parse_args() -> Result<Args, String> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let list = |k: &str| -> Result<Vec<(String, String)>, String> {
        env(k).map_or(Ok(Vec::new()), |v| v.split(',').map(key_value).collect())
    };
    let mut a = Args {
        socket: env("NRI_ADJUSTER_SOCKET"),
        name: None,
        index: None,
        settings: Settings {
            env: list("NRI_ADJUSTER_ENV")?,
            annotations: list("NRI_ADJUSTER_ANNOTATIONS")?,
        },
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--socket" => a.socket = Some(value()?),
            "--name" => a.name = Some(value()?),
            "--index" => a.index = Some(value()?),
            "--env" => a.settings.env.push(key_value(&value()?)?),
            "--annotation" => a.settings.annotations.push(key_value(&value()?)?),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(a)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = match parse_args() {
        Ok(a) => a,
        Err(msg) => {
            eprintln!(
                "{msg}\nusage: adjuster [--socket PATH] [--name NAME] [--index NN] [--env K=V]... [--annotation K=V]..."
            );
            return ExitCode::from(1);
        }
    };
    let plugin = Adjuster {
        base: args.settings.clone(),
        current: Mutex::new(args.settings),
    };
    let mut b = Builder::new(plugin);
    if std::env::var_os("NRI_PLUGIN_SOCKET").is_none() {
        // External: survive runtime restarts. (A pre-launched plugin cannot
        // reconnect; the runtime launches it again.)
        b = b.reconnect(ReconnectPolicy::default());
    }
    if let Some(s) = args.socket {
        b = b.socket_path(s);
    }
    if let Some(n) = args.name {
        b = b.name(n);
    }
    if let Some(i) = args.index {
        b = b.index(i);
    }
    let result = match b.build() {
        Ok(stub) => {
            let handle = stub.handle();
            tokio::select! {
                r = stub.run() => r,
                _ = tokio::signal::ctrl_c() => { handle.stop(); Ok(()) }
            }
        }
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("adjuster: error: {e}");
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                eprintln!("  caused by: {s}");
                src = s.source();
            }
            ExitCode::from(2)
        }
    }
}
