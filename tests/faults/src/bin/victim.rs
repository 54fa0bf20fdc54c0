//! The victim of the memory attack tests (`tests/memory_attacks.rs`): a
//! real `nri_runtime::Adaptation` in its own process, so that its peak
//! memory (`VmHWM` in `/proc/<pid>/status`) is its own and nothing else's.
//!
//! It listens on `--socket` and is driven by lines on stdin, answering on
//! stdout:
//!
//! - it prints `listening` once the socket is up, and `active N` whenever
//!   the number of registered plugins changes;
//! - `cycle N` runs N container lifecycles (CreateContainer,
//!   UpdateContainer, StopContainer, RemoveContainer, each on a new
//!   container of one pod) and prints `cycled OK BAD`: OK counts the
//!   creations whose merged adjustment carries the annotation
//!   [`GOOD_KEY`] of the well-behaved plugin, BAD the others;
//! - `report` prints `refused REASON=N ...` (the refusals counted by
//!   `Metrics::peer_refused`) and `failed PLUGIN=N ...` (failed plugin
//!   calls, by plugin);
//! - `slowest` prints `slowest PLUGIN=MS ...`: each plugin's longest call
//!   (`Metrics::plugin_latency`), in milliseconds;
//! - `quit` (or the end of stdin) stops the runtime and exits.
//!
//! With `--plugin-dir DIR` it also loads the plugins of DIR (the
//! WebAssembly guests of `tests/wasm_guests.rs`), with `--request-timeout-ms`
//! as every plugin's request timeout, `--registration-timeout-ms` as the
//! bound of each load and `--wasm-max-memory-mib` as each guest's memory
//! cap.
//!
//! Every plugin's failure policy is `ignore`, so that a hostile plugin
//! whose answers are refused costs only its own part of each event.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use clap::Parser;
use nri_api::api::{Container, ContainerUpdate, LinuxResources, PodSandbox};
use nri_runtime::{
    Adaptation, BoxFuture, CallbackError, ErrorClass, FailurePolicy, Metrics, PluginPolicy,
    RuntimeCallbacks, Snapshot, WasmLimits,
};
use tokio::io::{AsyncBufReadExt, BufReader};

/// Annotation the well-behaved plugin of the tests adds in CreateContainer
/// (the same key as the fault suite's `Good` plugin).
const GOOD_KEY: &str = "faults.example.com/good";

#[derive(Parser)]
#[command(about = "NRI runtime process attacked by the memory tests of the fault suite")]
struct Args {
    /// Socket for external plugins.
    #[arg(long)]
    socket: PathBuf,
    /// Plugin directory to load (default: none, nothing launched).
    #[arg(long)]
    plugin_dir: Option<PathBuf>,
    /// Request timeout of every plugin, in milliseconds (default: the
    /// library's).
    #[arg(long)]
    request_timeout_ms: Option<u64>,
    /// Registration timeout, in milliseconds (default: the library's);
    /// bounds the load of a WebAssembly plugin.
    #[arg(long)]
    registration_timeout_ms: Option<u64>,
    /// Linear memory cap of a WebAssembly plugin, in MiB (default: the
    /// library's).
    #[arg(long)]
    wasm_max_memory_mib: Option<usize>,
}

/// What the runtime has: one pod and the containers being cycled.
#[derive(Default)]
struct World {
    pods: Mutex<Vec<PodSandbox>>,
    containers: Mutex<Vec<Container>>,
}

impl RuntimeCallbacks for World {
    fn list_pods_and_containers(&self) -> BoxFuture<'_, Result<Snapshot, CallbackError>> {
        Box::pin(async move {
            let pods = self.pods.lock().map_err(|e| e.to_string())?.clone();
            let ctrs = self.containers.lock().map_err(|e| e.to_string())?.clone();
            Ok(Snapshot::new(pods, ctrs))
        })
    }

    fn update_containers(
        &self,
        _updates: Vec<ContainerUpdate>,
    ) -> BoxFuture<'_, Result<Vec<ContainerUpdate>, CallbackError>> {
        Box::pin(async move { Ok(Vec::new()) })
    }
}

/// Counts refusals and failed calls, prints changes of the plugin count.
#[derive(Default)]
struct Counts {
    refused: Mutex<BTreeMap<String, u64>>,
    failed: Mutex<BTreeMap<String, u64>>,
    slowest: Mutex<BTreeMap<String, u64>>,
}

impl Metrics for Counts {
    fn plugin_invocation(&self, plugin: &str, _operation: &str, result: Result<(), ErrorClass>) {
        if result.is_err() {
            if let Ok(mut f) = self.failed.lock() {
                *f.entry(plugin.to_owned()).or_default() += 1;
            }
        }
    }

    fn plugin_latency(&self, plugin: &str, _operation: &str, latency: std::time::Duration) {
        if let Ok(mut s) = self.slowest.lock() {
            let ms = u64::try_from(latency.as_millis()).unwrap_or(u64::MAX);
            let e = s.entry(plugin.to_owned()).or_default();
            *e = (*e).max(ms);
        }
    }

    fn active_plugins(&self, count: usize) {
        say(&format!("active {count}"));
    }

    fn peer_refused(&self, _peer: &str, reason: &str) {
        if let Ok(mut r) = self.refused.lock() {
            *r.entry(reason.to_owned()).or_default() += 1;
        }
    }
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn listed(m: &Mutex<BTreeMap<String, u64>>) -> String {
    m.lock()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!(" {k}={v}"))
                .collect::<String>()
        })
        .unwrap_or_default()
}

/// Runs `n` lifecycles; returns (creations with the good plugin's
/// annotation, others).
async fn cycle(a: &Adaptation, world: &World, next: &mut u64, n: u64) -> (u64, u64) {
    let pod = PodSandbox {
        id: "victim-pod".into(),
        name: "victim".into(),
        namespace: "default".into(),
        uid: "victim-pod-uid".into(),
        ..Default::default()
    };
    let (mut ok, mut bad) = (0, 0);
    for _ in 0..n {
        *next += 1;
        let ctr = Container {
            id: format!("victim-ctr-{next}"),
            pod_sandbox_id: pod.id.clone(),
            name: format!("c{next}"),
            ..Default::default()
        };
        match a.create_container(&pod, &ctr).await {
            Ok(out) if out.adjustment.annotations.get(GOOD_KEY) == Some(&ctr.id) => ok += 1,
            Ok(_) => bad += 1,
            Err(e) => {
                tracing::warn!(container = %ctr.id, error = %e, "creation failed");
                bad += 1;
            }
        }
        if let Ok(mut c) = world.containers.lock() {
            c.push(ctr.clone());
        }
        let resources = LinuxResources::default();
        if let Err(e) = a.update_container(&pod, &ctr, Some(resources)).await {
            tracing::warn!(container = %ctr.id, error = %e, "update failed");
        }
        let _ = a.stop_container(&pod, &ctr).await;
        let _ = a.remove_container(&pod, &ctr).await;
        if let Ok(mut c) = world.containers.lock() {
            c.retain(|x| x.id != ctr.id);
        }
    }
    (ok, bad)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
        .init();
    let args = Args::parse();
    let world = Arc::new(World::default());
    let counts = Arc::new(Counts::default());
    let mut builder = Adaptation::builder("victim", "v0.0.1")
        .socket_path(&args.socket)
        .disable_launch(args.plugin_dir.is_none());
    if let Some(dir) = &args.plugin_dir {
        builder = builder.plugin_dir(dir).config_dir(dir.join("conf.d"));
    }
    if let Some(ms) = args.request_timeout_ms {
        builder = builder.request_timeout(std::time::Duration::from_millis(ms));
    }
    if let Some(ms) = args.registration_timeout_ms {
        builder = builder.registration_timeout(std::time::Duration::from_millis(ms));
    }
    if let Some(mib) = args.wasm_max_memory_mib {
        builder = builder.wasm_limits(WasmLimits::default().with_max_memory(mib << 20));
    }
    let a = builder
        .default_policy(PluginPolicy::new(FailurePolicy::Ignore))
        .metrics(counts.clone())
        .build(world.clone())
        .context("building the runtime")?;
    a.start().await.context("starting the runtime")?;
    say("listening");
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut next = 0;
    while let Some(line) = lines.next_line().await? {
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("cycle"), Some(n)) => {
                let n: u64 = n.parse().context("cycle N")?;
                let (ok, bad) = cycle(&a, &world, &mut next, n).await;
                say(&format!("cycled {ok} {bad}"));
            }
            (Some("report"), None) => {
                say(&format!("refused{}", listed(&counts.refused)));
                say(&format!("failed{}", listed(&counts.failed)));
            }
            (Some("slowest"), None) => say(&format!("slowest{}", listed(&counts.slowest))),
            (Some("quit"), None) => break,
            _ => anyhow::bail!("unknown command {line:?}"),
        }
    }
    a.stop().await;
    Ok(())
}
