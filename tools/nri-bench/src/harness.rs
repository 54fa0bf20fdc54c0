//! The Rust runtime harness: `nri-go-bench` re-created on `nri-runtime`.
//!
//! One call of [`run`] is one measurement run, meant to be the only work of
//! its process (the runtime's RSS is this process's RSS): an
//! [`Adaptation`] on a socket in a fresh temp dir, plugin and config dirs
//! that do not exist, K external plugin processes (`PLUGIN --bench --socket
//! S --name bench --idx 10+i --adjust FLAVOUR --log-level L`, the flags of
//! `nri-go-plugin`), launch -> K registered+synchronized (the
//! [`Metrics::active_plugins`] hook, as Go's `UpdatePluginCount`), idle RSS
//! after `idle_wait`, then the mode's work. The request shape, warm-up,
//! the merged-adjustment check, the statistics and the JSON fields are
//! those of `nri-go-bench`.
//!
//! With [`HarnessOptions::wasm`] the K plugins are WebAssembly modules
//! instead (as `nri-go-bench --wasm`): K copies of the module in the plugin
//! directory, loaded by [`Adaptation::start`], and the startup time is
//! their load, Configure and Synchronize.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nri_api::api::{Container, ContainerUpdate, PodSandbox};
use nri_runtime::{Adaptation, BoxFuture, CallbackError, Metrics, RuntimeCallbacks, Snapshot};
use prost::Message as _;
use tokio::sync::watch;

use crate::procfs::{self, Mem};
use crate::result::{RunResult, SyncResult};
use crate::stats::{round1, stats};
use crate::{Error, Event, Flavour, Mode};

/// The tokio scheduler the harness runs the adaptation on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TokioFlavour {
    /// `current_thread`: everything on the calling thread.
    CurrentThread,
    /// `multi_thread` with [`HarnessOptions::workers`] workers.
    MultiThread,
}

/// Options of one harness run (the flags of `nri-go-bench`).
#[derive(Debug, Clone)]
pub struct HarnessOptions {
    /// Plugin executable, run with the `nri-go-plugin` bench flags.
    pub plugin_bin: PathBuf,
    /// Number of plugin processes (indices 10, 11, ...).
    pub k: usize,
    /// Plugins whose adjustments the merged reply must carry in the
    /// adjusting flavour; `None`: `k` (a proxy started in place of the
    /// plugins answers for the plugins behind it).
    pub adjusting_plugins: Option<usize>,
    /// Timed calls (latency mode).
    pub n: usize,
    /// Warm-up calls (latency mode).
    pub warmup: usize,
    /// Concurrent callers, each on distinct containers (latency mode).
    pub concurrency: usize,
    /// Start one timed call every this long instead of back to back
    /// (latency mode, one caller): a node's pace, where every event finds
    /// the plugins asleep. `None`: back to back.
    pub pace: Option<Duration>,
    /// Plugin flavour.
    pub flavour: Flavour,
    /// Timed event.
    pub event: Event,
    /// What to measure.
    pub mode: Mode,
    /// Pods in the sync state (sync mode).
    pub sync_pods: usize,
    /// Containers per pod in the sync state (sync mode).
    pub sync_containers_per_pod: usize,
    /// Wait after registration before reading idle RSS.
    pub idle_wait: Duration,
    /// Give up if the plugins are not all registered+synchronized by then.
    pub registration_wait: Duration,
    /// `--log-level` passed to the plugins.
    pub plugin_log_level: String,
    /// tokio scheduler.
    pub tokio: TokioFlavour,
    /// Worker threads for [`TokioFlavour::MultiThread`].
    pub workers: usize,
    /// The runtime's spin budget (`Builder::spin_budget`); `None`: the
    /// library's default.
    pub spin_budget: Option<Duration>,
    /// A WebAssembly plugin: K copies of it in the plugin directory
    /// (`10-bench`, `11-bench`, ...) instead of K plugin processes, with
    /// `bench=noop` as their configuration (noop flavour only).
    pub wasm: Option<PathBuf>,
}

impl Default for HarnessOptions {
    fn default() -> Self {
        HarnessOptions {
            plugin_bin: PathBuf::from("nri-bench-plugin"),
            k: 1,
            adjusting_plugins: None,
            n: 20000,
            warmup: 1000,
            concurrency: 1,
            pace: None,
            flavour: Flavour::Noop,
            event: Event::CreateContainer,
            mode: Mode::Latency,
            sync_pods: 1000,
            sync_containers_per_pod: 5,
            idle_wait: Duration::from_millis(500),
            registration_wait: Duration::from_secs(60),
            plugin_log_level: "warn".into(),
            tokio: TokioFlavour::MultiThread,
            workers: 2,
            spin_budget: None,
            wasm: None,
        }
    }
}

/// The runtime's state and the sync timing probe.
struct State {
    pods: Arc<Vec<PodSandbox>>,
    ctrs: Arc<Vec<Container>>,
    list_at: Mutex<Vec<Instant>>,
}

impl RuntimeCallbacks for State {
    fn list_pods_and_containers(&self) -> BoxFuture<'_, Result<Snapshot, CallbackError>> {
        Box::pin(async move {
            if let Ok(mut v) = self.list_at.lock() {
                v.push(Instant::now());
            }
            // Shared, as a runtime keeping its NRI view in `Arc`s would.
            Ok(Snapshot::shared(self.pods.clone(), self.ctrs.clone()))
        })
    }

    fn update_containers(
        &self,
        _updates: Vec<ContainerUpdate>,
    ) -> BoxFuture<'_, Result<Vec<ContainerUpdate>, CallbackError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// The "registered and synchronized" hook: active plugin count and when it
/// last changed.
struct Count {
    tx: watch::Sender<(usize, Instant)>,
}

impl Metrics for Count {
    fn active_plugins(&self, count: usize) {
        self.tx.send_replace((count, Instant::now()));
    }
}

/// Runs one measurement in this process (builds its own tokio runtime) and
/// returns the result; failures are reported in [`RunResult::error`] with
/// whatever was measured up to then.
pub fn run(o: &HarnessOptions) -> RunResult {
    run_with_grants(o, None)
}

/// [`run`] with `grants` configured in the runtime (`None`: none, every
/// plugin may do everything): every answer is then checked against its
/// plugin's grant, which is what a run with [`bench_grant`] beside one
/// without measures.
pub fn run_with_grants(o: &HarnessOptions, grants: Option<Vec<nri_runtime::Grant>>) -> RunResult {
    let mut res = RunResult {
        implementation: "rust".into(),
        nri_version: nri_api::NRI_VERSION.into(),
        tokio_flavour: Some(
            match o.tokio {
                TokioFlavour::CurrentThread => "current_thread",
                TokioFlavour::MultiThread => "multi_thread",
            }
            .into(),
        ),
        worker_threads: Some(match o.tokio {
            TokioFlavour::CurrentThread => 1,
            TokioFlavour::MultiThread => o.workers.max(1),
        }),
        mode: o.mode.as_str().into(),
        flavour: o.flavour.as_str().into(),
        k: o.k,
        ..Default::default()
    };
    let rt = match o.tokio {
        TokioFlavour::CurrentThread => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        TokioFlavour::MultiThread => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(o.workers.max(1))
            .enable_all()
            .build(),
    };
    let rt = match rt {
        Ok(rt) => rt,
        Err(e) => {
            res.error = Some(format!("tokio runtime: {e}"));
            return res;
        }
    };
    let mut children = Vec::new();
    let r = rt.block_on(run_async(o, grants, &mut res, &mut children));
    if let Err(e) = r {
        res.error = Some(e.to_string());
    }
    reap(&mut children, &mut res);
    drop(rt);
    res
}

/// The runtime's state: in sync mode the configured pods and containers
/// (recorded in `res.sync`), otherwise none.
fn runtime_state(o: &HarnessOptions, res: &mut RunResult) -> Arc<State> {
    let (pods, ctrs) = if o.mode == Mode::Sync {
        crate::shape::state(o.sync_pods, o.sync_containers_per_pod)
    } else {
        (Vec::new(), Vec::new())
    };
    if o.mode == Mode::Sync {
        let bytes = pods.iter().map(|p| p.encoded_len()).sum::<usize>()
            + ctrs.iter().map(|c| c.encoded_len()).sum::<usize>();
        res.sync = Some(SyncResult {
            pods: pods.len(),
            containers: ctrs.len(),
            proto_bytes: bytes,
            ..Default::default()
        });
    }
    Arc::new(State {
        pods: Arc::new(pods),
        ctrs: Arc::new(ctrs),
        list_at: Mutex::new(Vec::new()),
    })
}

/// The grant of `nri-bench-runtime --grants`: the bench plugins (any
/// name) may set env variables and annotations (what the adjusting
/// flavour sets) of containers of the benchmark's namespace; with
/// `processes`, plugin processes must run as this process's uid (not for
/// WebAssembly plugins, which have no process). Every answer is then
/// checked: its kinds, and the event's pod against the namespace.
pub fn bench_grant(processes: bool) -> nri_runtime::Grant {
    use nri_api::{Capability, CapabilitySet};
    use std::os::unix::fs::MetadataExt as _;
    let mut identity = nri_runtime::GrantIdentity::default();
    if processes {
        if let Ok(me) = std::fs::metadata("/proc/self") {
            identity.uids = vec![me.uid()];
        }
    }
    let namespace = crate::shape::pod(0).namespace;
    nri_runtime::Grant::new(["*"])
        .role("bench")
        .identity(identity)
        .allow(CapabilitySet::of(&[
            Capability::AdjustEnv,
            Capability::AdjustAnnotations,
        ]))
        .pods(nri_runtime::PodSelector::namespaces([namespace]))
}

async fn run_async(
    o: &HarnessOptions,
    grants: Option<Vec<nri_runtime::Grant>>,
    res: &mut RunResult,
    children: &mut Vec<Child>,
) -> Result<(), Error> {
    let dir = TempDir::new()?;
    let sock = dir.0.join("nri.sock");
    let state = runtime_state(o, res);
    let (tx, mut rx) = watch::channel((0usize, Instant::now()));
    let mut builder = Adaptation::builder("nri-bench-runtime", env!("CARGO_PKG_VERSION"));
    if let Some(budget) = o.spin_budget {
        builder = builder.spin_budget(budget);
    }
    if let Some(grants) = grants {
        builder = builder.grants(grants);
    }
    if o.wasm.is_some() {
        // The load is what is measured, not refused: as Go's host, which
        // has no deadline for it.
        builder = builder.registration_timeout(o.registration_wait);
    }
    let (plugin_dir, config_dir) = match &o.wasm {
        Some(wasm) => install_wasm(wasm, o.k, &dir.0)?,
        None => (dir.0.join("no-plugins"), dir.0.join("no-conf.d")),
    };
    let a = builder
        .socket_path(&sock)
        .plugin_dir(plugin_dir)
        .config_dir(config_dir)
        .metrics(Arc::new(Count { tx }))
        .build(state.clone())?;
    let t_start = Instant::now();
    a.start().await?;

    let result = async {
        let t0 = if o.wasm.is_some() {
            t_start
        } else {
            Instant::now()
        };
        if o.wasm.is_none() {
            spawn_plugins(o, &sock, children)?;
        }
        let active_at = registered(o, &mut rx).await?;
        res.startup_ms = ms(active_at.saturating_duration_since(t0));
        if let Some(s) = res.sync.as_mut() {
            s.registered_synced_ms = res.startup_ms;
            let lists = state.list_at.lock().map(|v| v.clone()).unwrap_or_default();
            for l in lists {
                s.sync_callback_ms
                    .push(ms(active_at.saturating_duration_since(l)));
            }
        }
        tokio::time::sleep(o.idle_wait).await;
        res.rss.runtime_idle = procfs::read_mem(None);
        res.rss.plugins_idle = plugin_mem(children);
        if o.mode != Mode::Latency {
            return Ok(());
        }
        res.event = Some(o.event.as_str().into());
        res.n = Some(o.n);
        res.warmup = Some(o.warmup);
        res.concurrency = Some(o.concurrency);
        latency(o, &a, res, children).await
    }
    .await;
    a.stop().await;
    result
}

/// Starts the `k` plugin processes on `sock` (indices 10, 11, ...).
fn spawn_plugins(
    o: &HarnessOptions,
    sock: &std::path::Path,
    children: &mut Vec<Child>,
) -> Result<(), Error> {
    for i in 0..o.k {
        let child = Command::new(&o.plugin_bin)
            .args(["--bench", "--socket"])
            .arg(sock)
            .args(["--name", "bench", "--idx"])
            .arg(format!("{:02}", 10 + i))
            .args(["--adjust", o.flavour.as_str(), "--log-level"])
            .arg(&o.plugin_log_level)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| Error::Spawn {
                program: o.plugin_bin.display().to_string(),
                source: e,
            })?;
        children.push(child);
    }
    Ok(())
}

/// Waits until `k` plugins are active (counted by the metrics hook);
/// returns when the last became active.
async fn registered(
    o: &HarnessOptions,
    rx: &mut watch::Receiver<(usize, Instant)>,
) -> Result<Instant, Error> {
    let wait = tokio::time::timeout(o.registration_wait, rx.wait_for(|(n, _)| *n >= o.k)).await;
    match wait.map(|r| r.map(|v| v.1)) {
        Ok(Ok(at)) => Ok(at),
        _ => {
            let n = rx.borrow().0;
            Err(Error::Registration {
                registered: n,
                wanted: o.k,
                after: o.registration_wait,
            })
        }
    }
}

/// Per-call context shared by the callers.
struct Calls {
    a: Adaptation,
    event: Event,
    pod: PodSandbox,
    tmpl: Container,
    seq: std::sync::atomic::AtomicU64,
    errors: std::sync::atomic::AtomicU64,
}

impl Calls {
    fn new_container(&self) -> Container {
        let mut c = self.tmpl.clone();
        let n = self.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        c.id = crate::shape::hex_id("bench-ctr", n);
        c
    }

    async fn call(&self) -> Duration {
        match self.event {
            Event::StartContainer => {
                let t = Instant::now();
                let r = self.a.start_container(&self.pod, &self.tmpl).await;
                let d = t.elapsed();
                if r.is_err() {
                    self.errors
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                d
            }
            Event::CreateContainer => {
                let c = self.new_container(); // built outside the timed region
                let t = Instant::now();
                let r = self.a.create_container(&self.pod, &c).await;
                let d = t.elapsed();
                if r.is_err() {
                    self.errors
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                drop(r);
                d
            }
        }
    }
}

async fn latency(
    o: &HarnessOptions,
    a: &Adaptation,
    res: &mut RunResult,
    children: &[Child],
) -> Result<(), Error> {
    let pod = crate::shape::pod(0);
    let tmpl = crate::shape::container(&pod, 0, 0);
    let calls = Arc::new(Calls {
        a: a.clone(),
        event: o.event,
        pod,
        tmpl,
        seq: Default::default(),
        errors: Default::default(),
    });

    if o.event == Event::CreateContainer {
        res.adjust_check = Some(adjust_check(o, &calls).await);
    }

    for _ in 0..o.warmup {
        calls.call().await;
    }
    calls.errors.store(0, std::sync::atomic::Ordering::Relaxed);

    let plugins_cpu_ns = || -> u64 { children.iter().map(|c| procfs::tree_cpu_ns(c.id())).sum() };
    let (cpu0, plugins0) = (procfs::self_cpu_ns(), plugins_cpu_ns());
    let t0 = Instant::now();
    let mut lats = timed_calls(o, &calls).await?;
    let wall = t0.elapsed();
    let (cpu1, plugins1) = (procfs::self_cpu_ns(), plugins_cpu_ns());

    let n = o.n as f64;
    res.latency_us = stats(&mut lats);
    res.wall_ms = Some(ms(wall));
    res.events_per_sec = Some(round1(n / wall.as_secs_f64()));
    res.runtime_cpu_us_per_event = Some(round1(cpu1.saturating_sub(cpu0) as f64 / 1e3 / n));
    res.plugins_cpu_us_per_event = Some(round1(plugins1.saturating_sub(plugins0) as f64 / 1e3 / n));
    res.call_errors = calls.errors.load(std::sync::atomic::Ordering::Relaxed);
    res.rss.runtime_after = Some(procfs::read_mem(None));
    res.rss.plugins_after = Some(plugin_mem(children));
    if res.call_errors > 0 {
        return Err(Error::Check(format!("{} calls failed", res.call_errors)));
    }
    if let Some(c) = &res.adjust_check
        && !c.starts_with("ok")
    {
        return Err(Error::Check(format!("adjustment check failed: {c}")));
    }
    Ok(())
}

/// One untimed CreateContainer whose merged adjustment must carry each
/// adjusting plugin's env variable and annotation: `ok: ...`,
/// `mismatch: ...` or `error: ...`.
async fn adjust_check(o: &HarnessOptions, calls: &Calls) -> String {
    let c = calls.new_container();
    match calls.a.create_container(&calls.pod, &c).await {
        Err(e) => format!("error: {e}"),
        Ok(out) => {
            let envs = out
                .adjustment
                .env
                .iter()
                .filter(|e| e.key.starts_with("BENCH_PLUGIN_"))
                .count();
            let anns = out
                .adjustment
                .annotations
                .keys()
                .filter(|k| k.starts_with("bench.example.com/plugin-"))
                .count();
            let want = if o.flavour == Flavour::Adjusting {
                o.adjusting_plugins.unwrap_or(o.k)
            } else {
                0
            };
            if envs == want && anns == want {
                format!("ok: {envs} env, {anns} annotations")
            } else {
                format!("mismatch: {envs} env, {anns} annotations, want {want}")
            }
        }
    }
}

/// The `n` timed calls, by `concurrency` callers (one paced caller when
/// a pace is set); returns every call's latency.
async fn timed_calls(o: &HarnessOptions, calls: &Arc<Calls>) -> Result<Vec<Duration>, Error> {
    let mut lats: Vec<Duration> = Vec::with_capacity(o.n);
    // Each caller is a task of the runtime, as a runtime's request handlers
    // call NRI (not `block_on`'s thread), on distinct containers; the
    // first one takes the remainder of N.
    let callers = o.concurrency.max(1);
    let per = o.n / callers;
    let pace = if callers == 1 { o.pace } else { None };
    let mut set = tokio::task::JoinSet::new();
    for g in 0..callers {
        let cnt = if g == 0 {
            per + o.n - per * callers
        } else {
            per
        };
        let calls = calls.clone();
        set.spawn(async move {
            let mut local = Vec::with_capacity(cnt);
            let start = tokio::time::Instant::now();
            for i in 0..cnt {
                if let Some(p) = pace {
                    let at = p.saturating_mul(u32::try_from(i).unwrap_or(u32::MAX));
                    tokio::time::sleep_until(start + at).await;
                }
                local.push(calls.call().await);
            }
            local
        });
    }
    while let Some(r) = set.join_next().await {
        match r {
            Ok(local) => lats.extend(local),
            Err(e) => return Err(Error::Task(e.to_string())),
        }
    }
    Ok(lats)
}

/// Installs `k` copies of the module `wasm` as `10-bench`, `11-bench`, ...
/// in a plugin directory under `dir`, with `bench=noop` as their drop-in
/// configuration; returns the plugin and configuration directories.
fn install_wasm(
    wasm: &std::path::Path,
    k: usize,
    dir: &std::path::Path,
) -> Result<(PathBuf, PathBuf), Error> {
    use std::os::unix::fs::PermissionsExt as _;
    let io = |what: &'static str| move |source| Error::Io { what, source };
    let (plugins, conf) = (dir.join("plugins"), dir.join("conf.d"));
    std::fs::create_dir(&plugins).map_err(io("creating the plugin dir"))?;
    std::fs::create_dir(&conf).map_err(io("creating the config dir"))?;
    let bytes = std::fs::read(wasm).map_err(io("reading the WebAssembly plugin"))?;
    for i in 0..k {
        let p = plugins.join(format!("{:02}-bench", 10 + i));
        std::fs::write(&p, &bytes).map_err(io("installing a WebAssembly plugin"))?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))
            .map_err(io("making a WebAssembly plugin executable"))?;
    }
    std::fs::write(conf.join("bench.conf"), "bench=noop\n")
        .map_err(io("writing the plugins' configuration"))?;
    Ok((plugins, conf))
}

fn plugin_mem(children: &[Child]) -> Vec<Mem> {
    children
        .iter()
        .map(|c| procfs::read_mem(Some(c.id())))
        .collect()
}

/// Collects the plugins after the adaptation stopped: they should exit by
/// themselves (the runtime sends Shutdown and closes); after 300 ms each
/// remaining one gets SIGTERM, after 3 s more SIGKILL, by PID.
fn reap(children: &mut [Child], res: &mut RunResult) {
    let mut left: Vec<usize> = (0..children.len()).collect();
    let wait = |children: &mut [Child], left: &mut Vec<usize>, d: Duration| -> usize {
        let deadline = Instant::now() + d;
        let before = left.len();
        loop {
            left.retain(|&i| !matches!(children[i].try_wait(), Ok(Some(_))));
            if left.is_empty() || Instant::now() >= deadline {
                return before - left.len();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    res.plugins_exited_by_themselves = wait(children, &mut left, Duration::from_millis(300));
    for &i in &left {
        // SIGTERM without libc: the `kill` utility, by PID.
        let _ = Command::new("kill")
            .args(["-TERM", &children[i].id().to_string()])
            .stderr(Stdio::null())
            .status();
    }
    res.plugins_terminated = wait(children, &mut left, Duration::from_secs(3));
    res.plugins_killed = left.len();
    for &i in &left {
        let _ = children[i].kill();
        let _ = children[i].wait();
    }
}

fn ms(d: Duration) -> f64 {
    round1(d.as_nanos() as f64 / 1e6)
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<Self, Error> {
        let base = std::env::temp_dir();
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        for attempt in 0..100u32 {
            let p = base.join(format!(
                "nri-bench-{}-{stamp:08x}-{attempt}",
                std::process::id()
            ));
            match std::fs::create_dir(&p) {
                Ok(()) => return Ok(TempDir(p)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(Error::Io {
                        what: "creating a temp dir",
                        source: e,
                    });
                }
            }
        }
        Err(Error::Io {
            what: "creating a temp dir",
            source: std::io::Error::other("no free name"),
        })
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
