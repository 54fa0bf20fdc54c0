//! Soak test: a real `nri_runtime::Adaptation` (this process) and K plugins
//! on the `nri-plugin` SDK, each a child process (this binary, `plugin`
//! subcommand), so their memory is measured per process. Drives N lifecycle
//! events from concurrent tasks while plugins are restarted at random
//! (SIGKILL + relaunch, or a clean disconnect + reconnect under a new name).
//!
//! Checks, and exits 1 if any fails:
//! - no event lost: per plugin connection (each connection registers under
//!   its own name), what the plugin received is at least what the runtime
//!   counted as delivered, and at most delivered + failed calls; connections
//!   that were never restarted received exactly what was delivered, with no
//!   failures; the plugins that are never restarted received every event;
//! - no growth of open fds or of alive tokio tasks between the start (after
//!   warm-up) and the end (all plugins connected again);
//! - memory is reported (RSS of the runtime and of every plugin, start and
//!   end) and must stay under a generous bound (`--max-rss-growth-kib`).
//!
//! ```text
//! cargo run --release -p nri-fault-tests --bin soak -- --plugins 8 --events 1000000
//! ```

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use nri_api::api::{
    Container, ContainerAdjustment, ContainerEviction, ContainerState, ContainerUpdate,
    CreateContainerResponse, Event, PodSandbox, StopContainerResponse,
};
use nri_fault_tests::{open_fds, rss_kib};
use nri_plugin::{HandlerResult, Plugin, SyncKind};
use nri_runtime::{
    Adaptation, BoxFuture, CallbackError, ErrorClass, Metrics, RuntimeCallbacks, Snapshot,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::watch;

#[derive(Parser)]
#[command(about = "NRI soak test: runtime + K plugin processes, N events, random restarts")]
struct Args {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// Number of plugin processes.
    #[arg(long, default_value_t = 8)]
    plugins: usize,
    /// Number of runtime events to send (each is fanned out to every plugin).
    #[arg(long, default_value_t = 1_000_000)]
    events: u64,
    /// Concurrent event drivers (pods in flight).
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Number of random plugin restarts during the run.
    #[arg(long, default_value_t = 100)]
    restarts: u64,
    /// Plugins 0..stable are never restarted (they must see every event).
    #[arg(long, default_value_t = 2)]
    stable: usize,
    /// Seed of the restart choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Fail if the runtime's RSS grows by more than this (KiB) over the
    /// second half of the run (a leak grows there; warm-up does not).
    #[arg(long, default_value_t = 16 * 1024)]
    max_rss_growth_kib: u64,
    /// Fail if the runtime's RSS ever exceeds this (KiB).
    #[arg(long, default_value_t = 256 * 1024)]
    max_rss_kib: u64,
    /// Restart kinds: `both`, `kill` (SIGKILL + relaunch) or `reconnect`.
    #[arg(long, default_value = "both")]
    restart_kind: String,
    /// Runtime worker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
}

#[derive(Subcommand)]
enum Cmd {
    /// Internal: run one soak plugin (started by the soak runtime).
    Plugin {
        #[arg(long)]
        socket: PathBuf,
        #[arg(long)]
        idx: String,
        /// Base name; each connection registers as `<name>g<generation>`.
        #[arg(long)]
        name: String,
        /// First generation number.
        #[arg(long, default_value_t = 0)]
        generation: u64,
    },
}

const EVENTS: &[Event] = &[
    Event::RunPodSandbox,
    Event::CreateContainer,
    Event::StartContainer,
    Event::StopContainer,
    Event::RemoveContainer,
    Event::StopPodSandbox,
    Event::RemovePodSandbox,
];

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    match args.cmd {
        Some(Cmd::Plugin {
            ref socket,
            ref idx,
            ref name,
            generation,
        }) => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let r = rt.block_on(plugin_main(socket, idx, name, generation));
            // The stdin reader is a blocking read that may never return:
            // do not wait for it.
            rt.shutdown_background();
            r
        }
        None => {
            // The runtime's warnings (timeouts, refused answers) go to
            // stderr, which the soak tests print when a run fails.
            tracing_subscriber::fmt()
                .with_writer(std::io::stderr)
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
                )
                .init();
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(args.threads)
                .enable_all()
                .build()?;
            let handle = rt.handle().clone();
            rt.block_on(runtime_main(args, handle))
        }
    }
}

// ------------------------------------------------------------------ plugin

struct SoakPlugin {
    /// `NN-name` of this connection: the annotation it sets is its own (a
    /// new generation that registers while a creation is in flight is a
    /// different plugin whose adjustment also counts, see
    /// docs/runtime/sync.md).
    id: String,
}

/// One line per event on stdout ("e"); flushed per line (stdout is line
/// buffered), so a SIGKILL loses nothing the runtime got an answer for.
fn count() {
    let _ = std::io::stdout().lock().write_all(b"e\n");
}

#[nri_plugin::plugin]
impl Plugin for SoakPlugin {
    async fn synchronize(
        &self,
        _pods: Vec<PodSandbox>,
        _containers: Vec<Container>,
        _kind: SyncKind,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        Ok(Vec::new())
    }
    async fn run_pod_sandbox(&self, _pod: PodSandbox) -> HandlerResult<()> {
        count();
        Ok(())
    }
    async fn create_container(
        &self,
        _pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        count();
        let mut adjust = ContainerAdjustment::default();
        adjust
            .annotations
            .insert(format!("soak.example.com/{}", self.id), ctr.id);
        Ok(CreateContainerResponse {
            adjust: Some(adjust),
            ..Default::default()
        })
    }
    async fn start_container(&self, _pod: PodSandbox, _c: Container) -> HandlerResult<()> {
        count();
        Ok(())
    }
    async fn stop_container(
        &self,
        _pod: PodSandbox,
        _c: Container,
    ) -> HandlerResult<StopContainerResponse> {
        count();
        Ok(StopContainerResponse::default())
    }
    async fn remove_container(&self, _pod: PodSandbox, _c: Container) -> HandlerResult<()> {
        count();
        Ok(())
    }
    async fn stop_pod_sandbox(&self, _pod: PodSandbox) -> HandlerResult<()> {
        count();
        Ok(())
    }
    async fn remove_pod_sandbox(&self, _pod: PodSandbox) -> HandlerResult<()> {
        count();
        Ok(())
    }
}

/// Runs connections one after the other: a line `r` on stdin ends the
/// current one cleanly and reconnects under the next generation's name;
/// end of stdin ends the process.
async fn plugin_main(socket: &Path, idx: &str, name: &str, mut gen_no: u64) -> anyhow::Result<()> {
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    loop {
        let full = format!("{name}g{gen_no}");
        println!("g {idx}-{full}");
        let stub = nri_plugin::Builder::new(SoakPlugin {
            id: format!("{idx}-{full}"),
        })
        .name(full)
        .index(idx)
        .socket_path(socket)
        .build()?;
        let handle = stub.handle();
        let run = stub.run();
        tokio::pin!(run);
        tokio::select! {
            r = &mut run => {
                return match r {
                    // The runtime stopped: the normal end of a soak run.
                    Ok(()) | Err(nri_plugin::Error::ShutDownByRuntime)
                    | Err(nri_plugin::Error::ConnectionLost { phase: nri_plugin::Phase::Running, .. }) => Ok(()),
                    Err(e) => Err(e).context("plugin run"),
                };
            }
            line = stdin.next_line() => {
                handle.stop();
                let _ = run.await;
                match line? {
                    Some(_) => gen_no += 1,
                    None => return Ok(()),
                }
            }
        }
    }
}

// ----------------------------------------------------------------- runtime

#[derive(Default)]
struct Store {
    pods: Mutex<HashMap<String, PodSandbox>>,
    containers: Mutex<HashMap<String, Container>>,
}

impl RuntimeCallbacks for Store {
    fn list_pods_and_containers(&self) -> BoxFuture<'_, Result<Snapshot, CallbackError>> {
        Box::pin(async move {
            let pods = lock(&self.pods).values().cloned().collect();
            let ctrs = lock(&self.containers).values().cloned().collect();
            Ok(Snapshot::new(pods, ctrs))
        })
    }
    fn update_containers(
        &self,
        _updates: Vec<ContainerUpdate>,
    ) -> BoxFuture<'_, Result<Vec<ContainerUpdate>, CallbackError>> {
        Box::pin(async move { Ok(Vec::new()) })
    }
    fn evict_containers(
        &self,
        _evictions: Vec<ContainerEviction>,
    ) -> BoxFuture<'_, Result<(), CallbackError>> {
        Box::pin(async move { Ok(()) })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Per plugin connection (name): calls the runtime counted as delivered,
/// and failed calls.
#[derive(Default)]
struct Counts {
    per_conn: Mutex<BTreeMap<String, (u64, u64)>>,
    /// Per plugin connection: failed calls by event and error class, so a
    /// failure of a plugin that should never fail says what it was.
    failures: Mutex<BTreeMap<String, BTreeMap<String, u64>>>,
    active: watch::Sender<usize>,
}

impl Metrics for Counts {
    fn plugin_invocation(&self, plugin: &str, operation: &str, result: Result<(), ErrorClass>) {
        if !EVENTS.iter().any(|e| e.pretty_name() == operation) {
            return;
        }
        let mut m = lock(&self.per_conn);
        let e = m.entry(plugin.to_owned()).or_default();
        match result {
            Ok(()) => e.0 += 1,
            Err(class) => {
                e.1 += 1;
                drop(m);
                *lock(&self.failures)
                    .entry(plugin.to_owned())
                    .or_default()
                    .entry(format!("{operation}: {}", class.as_str()))
                    .or_default() += 1;
            }
        }
    }
    fn active_plugins(&self, count: usize) {
        self.active.send_replace(count);
    }
}

/// What the parent knows of one plugin process.
struct Child {
    proc: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    reader: tokio::task::JoinHandle<()>,
}

/// Received counts per connection name, filled by the stdout readers.
type Received = Arc<Mutex<BTreeMap<String, u64>>>;

fn launch(socket: &Path, i: usize, generation: u64, received: &Received) -> anyhow::Result<Child> {
    let mut proc = tokio::process::Command::new(std::env::current_exe()?)
        .arg("plugin")
        .arg("--socket")
        .arg(socket)
        .args(["--idx", &format!("{}", 10 + i)])
        .args(["--name", &format!("soak{i}")])
        .args(["--generation", &generation.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdin = proc.stdin.take().context("stdin")?;
    let stdout = proc.stdout.take().context("stdout")?;
    let received = received.clone();
    let reader = tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        let mut current = String::new();
        while let Ok(Some(l)) = lines.next_line().await {
            if let Some(name) = l.strip_prefix("g ") {
                current = name.to_owned();
                lock(&received).entry(current.clone()).or_insert(0);
            } else if l == "e" {
                *lock(&received).entry(current.clone()).or_insert(0) += 1;
            }
        }
    });
    Ok(Child {
        proc,
        stdin,
        reader,
    })
}

struct Xorshift(u64);
impl Xorshift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

async fn wait_active(counts: &Counts, n: usize) -> anyhow::Result<()> {
    let mut rx = counts.active.subscribe();
    tokio::time::timeout(Duration::from_secs(60), rx.wait_for(|c| *c == n))
        .await
        .with_context(|| format!("{n} plugins not active in time"))??;
    Ok(())
}

/// Drives events from `concurrency` tasks until `total` events were sent.
async fn drive(
    a: &Arc<Adaptation>,
    store: &Arc<Store>,
    sent: &Arc<AtomicU64>,
    total: u64,
    concurrency: usize,
    prefix: &str,
) -> anyhow::Result<()> {
    let mut set = tokio::task::JoinSet::new();
    for w in 0..concurrency {
        let (a, store, sent) = (a.clone(), store.clone(), sent.clone());
        let prefix = format!("{prefix}w{w}");
        set.spawn(async move {
            let mut cycle = 0u64;
            // One cycle = 7 events; claim them up front so exactly `total`
            // events are sent (the last cycle may be cut short).
            loop {
                let claimed = sent.fetch_add(7, Ordering::SeqCst);
                if claimed >= total {
                    sent.fetch_sub(7, Ordering::SeqCst);
                    return Ok::<(), anyhow::Error>(());
                }
                let budget = (total - claimed).min(7);
                if budget < 7 {
                    sent.fetch_sub(7 - budget, Ordering::SeqCst);
                }
                cycle += 1;
                one_cycle(&a, &store, &format!("{prefix}c{cycle}"), budget).await?;
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    Ok(())
}

async fn one_cycle(a: &Adaptation, store: &Store, id: &str, budget: u64) -> anyhow::Result<()> {
    let pod = PodSandbox {
        id: format!("{id}-pod"),
        name: format!("{id}-pod"),
        uid: id.to_owned(),
        namespace: "soak".into(),
        ..Default::default()
    };
    let ctr = Container {
        id: format!("{id}-ctr"),
        pod_sandbox_id: pod.id.clone(),
        name: "c".into(),
        state: ContainerState::ContainerCreated as i32,
        ..Default::default()
    };
    let mut left = budget;
    let mut step = || {
        if left == 0 {
            false
        } else {
            left -= 1;
            true
        }
    };
    if step() {
        let out = a.run_pod_sandbox(&pod).await?;
        lock(&store.pods).insert(pod.id.clone(), pod.clone());
        out.guard.release();
    }
    if step() {
        let out = a.create_container(&pod, &ctr).await?;
        lock(&store.containers).insert(ctr.id.clone(), ctr.clone());
        out.guard.release();
    }
    if step() {
        a.start_container(&pod, &ctr).await?;
    }
    if step() {
        a.stop_container(&pod, &ctr).await?;
    }
    if step() {
        a.remove_container(&pod, &ctr).await?;
    }
    lock(&store.containers).remove(&ctr.id);
    if step() {
        a.stop_pod_sandbox(&pod).await?;
    }
    if step() {
        a.remove_pod_sandbox(&pod).await?;
    }
    lock(&store.pods).remove(&pod.id);
    Ok(())
}

struct Snap {
    rss_runtime: u64,
    rss_plugins: Vec<Option<u64>>,
    fds: usize,
    tasks: usize,
}

fn snap(children: &[Child], handle: &tokio::runtime::Handle) -> Snap {
    Snap {
        rss_runtime: rss_kib("self").unwrap_or(0),
        rss_plugins: children
            .iter()
            .map(|c| c.proc.id().and_then(|p| rss_kib(&p.to_string())))
            .collect(),
        fds: open_fds("self").unwrap_or(0),
        tasks: handle.metrics().num_alive_tasks(),
    }
}

#[allow(clippy::too_many_lines)]
async fn runtime_main(args: Args, handle: tokio::runtime::Handle) -> anyhow::Result<()> {
    let dir = tempfile_dir()?;
    let socket = dir.join("nri.sock");
    let counts = Arc::new(Counts::default());
    let store = Arc::new(Store::default());
    let a = Arc::new(
        Adaptation::builder("soak-runtime", "v0.0.1")
            .socket_path(&socket)
            .plugin_dir(dir.join("plugins"))
            .config_dir(dir.join("conf.d"))
            .request_timeout(Duration::from_secs(10))
            .metrics(counts.clone())
            .build(store.clone())?,
    );
    a.start().await?;
    let received: Received = Arc::default();
    let mut generation = vec![0u64; args.plugins];
    let mut children = Vec::new();
    for (i, g) in generation.iter().enumerate() {
        children.push(launch(&socket, i, *g, &received)?);
    }
    wait_active(&counts, args.plugins).await?;

    // Warm-up (2 %, no restarts), then the start snapshot.
    let warm = (args.events / 50).max(7 * args.concurrency as u64);
    let sent = Arc::new(AtomicU64::new(0));
    drive(&a, &store, &sent, warm, args.concurrency, "warm").await?;
    tokio::time::sleep(Duration::from_millis(300)).await; // let things settle before measuring
    let start = snap(&children, &handle);
    let t0 = Instant::now();

    // Main phase with restarts.
    let total = args.events;
    let restart_every = (total - warm) / (args.restarts + 1);
    let driver = {
        let (a, store, sent) = (a.clone(), store.clone(), sent.clone());
        let concurrency = args.concurrency;
        tokio::spawn(async move { drive(&a, &store, &sent, total, concurrency, "main").await })
    };
    let mut rng = Xorshift(args.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let (mut kills, mut reconnects) = (0u64, 0u64);
    let restartable = args.plugins.saturating_sub(args.stable);
    let mut next_restart = warm + restart_every;
    // Runtime RSS every 10 % of the events, to tell a plateau from a leak.
    let mut samples: Vec<(u64, u64)> = Vec::new();
    let mut next_sample = 0u64;
    while !driver.is_finished() {
        tokio::time::sleep(Duration::from_millis(5)).await; // pacing of the restart loop only
        let now = sent.load(Ordering::SeqCst);
        if now >= next_sample {
            samples.push((now, rss_kib("self").unwrap_or(0)));
            next_sample = now + total / 10;
        }
        if args.restarts == 0 || restartable == 0 || now < next_restart || next_restart >= total {
            continue;
        }
        next_restart += restart_every;
        let i = args.stable + (rng.next() % restartable as u64) as usize;
        generation[i] += 1;
        let coin = rng.next() % 2 == 0;
        let kill = match args.restart_kind.as_str() {
            "kill" => true,
            "reconnect" => false,
            _ => coin,
        };
        if kill {
            // SIGKILL + relaunch.
            let mut old = std::mem::replace(
                &mut children[i],
                launch(&socket, i, generation[i], &received)?,
            );
            old.proc.start_kill()?;
            old.proc.wait().await?;
            old.reader.await?;
            kills += 1;
        } else {
            // Clean disconnect + reconnect under the next name.
            children[i].stdin.write_all(b"r\n").await?;
            reconnects += 1;
        }
    }
    driver.await??;
    let elapsed = t0.elapsed();
    wait_active(&counts, args.plugins).await?;
    tokio::time::sleep(Duration::from_millis(300)).await; // let closed connections finish their cleanup
    let end = snap(&children, &handle);

    // Stop: close plugins' stdin (they exit), stop the runtime.
    a.stop().await;
    for c in children {
        drop(c.stdin);
        let mut p = c.proc;
        let _ = tokio::time::timeout(Duration::from_secs(5), p.wait()).await;
        let _ = p.start_kill();
        let _ = p.wait().await;
        let _ = c.reader.await;
    }
    let _ = std::fs::remove_dir_all(&dir);

    // ---- checks
    let delivered = lock(&counts.per_conn).clone();
    let failures = lock(&counts.failures).clone();
    let received = lock(&received).clone();
    let mut problems = Vec::new();
    let mut conns = 0;
    for (name, got) in &received {
        conns += 1;
        let (ok, failed) = delivered.get(name).copied().unwrap_or((0, 0));
        if *got < ok || *got > ok + failed {
            problems.push(format!(
                "{name}: received {got}, runtime delivered {ok} (+{failed} failed)"
            ));
        }
    }
    for i in 0..args.stable.min(args.plugins) {
        let name = format!("{}-soak{i}g0", 10 + i);
        let got = received.get(&name).copied().unwrap_or(0);
        let (ok, failed) = delivered.get(&name).copied().unwrap_or((0, 0));
        if got != total || ok != total || failed != 0 {
            problems.push(format!(
                "stable plugin {name}: received {got}, delivered {ok}, failed {failed} {:?}, events sent {total}",
                failures.get(&name)
            ));
        }
    }
    if end.fds > start.fds {
        problems.push(format!("open fds grew: {} -> {}", start.fds, end.fds));
    }
    if end.tasks > start.tasks {
        problems.push(format!(
            "alive tasks grew: {} -> {}",
            start.tasks, end.tasks
        ));
    }
    let half = samples
        .iter()
        .find(|(n, _)| *n >= total / 2)
        .map_or(start.rss_runtime, |s| s.1);
    let growth = end.rss_runtime.saturating_sub(half);
    if growth > args.max_rss_growth_kib {
        problems.push(format!(
            "runtime RSS grew by {growth} KiB over the second half ({half} -> {} KiB)",
            end.rss_runtime
        ));
    }
    let peak = samples
        .iter()
        .map(|s| s.1)
        .chain([end.rss_runtime])
        .max()
        .unwrap_or(0);
    if peak > args.max_rss_kib {
        problems.push(format!("runtime RSS reached {peak} KiB"));
    }
    let failed_total: u64 = delivered.values().map(|v| v.1).sum();
    let report = format!(
        concat!(
            "{{\"plugins\":{},\"events\":{},\"concurrency\":{},\"elapsed_s\":{:.1},\"events_per_s\":{:.0},",
            "\"kills\":{},\"reconnects\":{},\"connections\":{},\"failed_calls\":{},",
            "\"rss_kib\":{{\"runtime_start\":{},\"runtime_end\":{},\"runtime_by_events\":{:?},\"plugins_start\":{:?},\"plugins_end\":{:?}}},",
            "\"fds\":{{\"start\":{},\"end\":{}}},\"tokio_tasks\":{{\"start\":{},\"end\":{}}},\"problems\":{:?}}}"
        ),
        args.plugins,
        total,
        args.concurrency,
        elapsed.as_secs_f64(),
        (total - warm) as f64 / elapsed.as_secs_f64(),
        kills,
        reconnects,
        conns,
        failed_total,
        start.rss_runtime,
        end.rss_runtime,
        samples
            .iter()
            .map(|(n, r)| vec![*n, *r])
            .collect::<Vec<_>>(),
        start
            .rss_plugins
            .iter()
            .map(|r| r.unwrap_or(0))
            .collect::<Vec<_>>(),
        end.rss_plugins
            .iter()
            .map(|r| r.unwrap_or(0))
            .collect::<Vec<_>>(),
        start.fds,
        end.fds,
        start.tasks,
        end.tasks,
        problems,
    );
    println!("{report}");
    if !problems.is_empty() {
        bail!("soak failed: {problems:?}");
    }
    Ok(())
}

fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("nri-soak-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
