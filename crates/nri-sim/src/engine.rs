//! The simulation engine: an embedded `nri-runtime` on a private socket,
//! plugin processes, and the replay of a [`Scenario`].

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use nri_api::api::{
    Container, ContainerEviction, ContainerState, ContainerUpdate, LinuxContainer, LinuxCpu,
    LinuxMemory, LinuxNamespace, LinuxPids, LinuxPodSandbox, LinuxResources, Mount, OptionalInt64,
    OptionalUInt64, OwningPlugins, PodSandbox,
};
use nri_runtime::{
    Adaptation, BoxFuture, CallbackError, ErrorClass, FailurePolicy, Metrics, PluginPolicy,
    RuntimeCallbacks, Snapshot,
};
use oci_spec::runtime::Spec;
use serde_saphyr::Spanned;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::task::JoinSet;

use crate::bundled;
use crate::error::Error;
use crate::report::{
    Call, Change, EventResult, Eviction, PluginFailure, Record, Reporter, Summary, Update,
};
use crate::scenario::{ResourcesSpec, Scenario, Step, field_name, parse_duration, parse_event};
use crate::spec;

/// A plugin executable given outside the scenario (`--plugin PATH[:IDX]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraPlugin {
    /// The executable.
    pub path: PathBuf,
    /// Plugin name.
    pub name: String,
    /// Two-digit index.
    pub index: String,
}

impl ExtraPlugin {
    /// Parses `PATH[:IDX]`; the name (and the index, if not given) come
    /// from a file name `NN-name`, else the name is the file name and the
    /// index `50` (a `.wasm` suffix is not part of the name).
    pub fn parse(arg: &str) -> Result<ExtraPlugin, String> {
        let (path, idx) = match arg.rsplit_once(':') {
            Some((p, i)) if i.len() == 2 && i.bytes().all(|b| b.is_ascii_digit()) => {
                (p, Some(i.to_owned()))
            }
            _ => (arg, None),
        };
        let file = std::path::Path::new(path)
            .file_name()
            .and_then(|f| f.to_str())
            .ok_or_else(|| format!("{arg:?}: expected PATH[:IDX] naming an executable"))?;
        let file = file.strip_suffix(".wasm").unwrap_or(file);
        let (fidx, name) = match nri_api::parse_plugin_file_name(file) {
            Ok((i, n)) => (Some(i.to_owned()), n.to_owned()),
            Err(_) => (None, file.to_owned()),
        };
        let name: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        Ok(ExtraPlugin {
            path: PathBuf::from(path),
            name,
            index: idx.or(fidx).unwrap_or_else(|| "50".into()),
        })
    }
}

/// How to run a scenario.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The `nri` executable, re-executed as `nri __bundled-plugin KIND`
    /// for bundled plugins. Without it bundled plugins cannot start.
    pub self_exe: Option<PathBuf>,
    /// Extra plugin executables (started with the runtime).
    pub extra_plugins: Vec<ExtraPlugin>,
    /// A plugin directory the runtime launches plugins from (`NN-name`
    /// executables, `NN-name.conf` configuration beside them).
    pub plugin_dir: Option<PathBuf>,
    /// Do not start the scenario's bundled plugins.
    pub no_bundled: bool,
    /// Failure policies by plugin name, on top of the scenario's.
    pub policies: Vec<(String, FailurePolicy)>,
    /// The runtime's configuration file (YAML or TOML, see
    /// `docs/runtime/config.md`), applied before the scenario's `runtime`
    /// settings and `policies`. Its socket, plugin directory and peer
    /// allow-lists are not used: the simulator has its own.
    pub config_file: Option<PathBuf>,
    /// Report every line plugins write.
    pub plugin_output: bool,
    /// Executables by plugin name, replacing the scenario's `path` (to run
    /// one scenario against different builds of a plugin).
    pub plugin_paths: BTreeMap<String, PathBuf>,
}

impl Options {
    /// What a scenario run with these options may name besides its own
    /// plugins: the extra plugins, and any plugin of the plugin directory
    /// (for [`Scenario::parse_with`]).
    pub fn parse_options(&self) -> crate::scenario::ParseOptions {
        crate::scenario::ParseOptions::default()
            .extra_plugins(
                self.extra_plugins
                    .iter()
                    .map(|x| format!("{}-{}", x.index, x.name)),
            )
            .plugin_dir(self.plugin_dir.is_some())
    }
}

/// A scenario's plugin path: relative paths with a directory part are
/// relative to the scenario file; bare names are looked up in `PATH`.
fn scenario_path(scenario: &Scenario, path: &str) -> PathBuf {
    let path = PathBuf::from(path);
    if path.is_relative()
        && path.components().count() > 1
        && scenario.base_dir != std::path::Path::new(".")
    {
        scenario.base_dir.join(path)
    } else {
        path
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e5).round() / 100.0
}

/// State shared by the engine, the runtime callbacks and the metrics sink.
#[derive(Default)]
struct World {
    pods: Mutex<BTreeMap<String, PodSandbox>>,
    containers: Mutex<BTreeMap<String, Container>>,
    /// Container id -> (pod/ctr, base spec, current spec), in creation order.
    specs: Mutex<Vec<(String, String, Spec, Spec)>>,
    /// Records produced in the background.
    queue: Mutex<Vec<Record>>,
    calls: Mutex<Vec<Call>>,
    counts: Mutex<BTreeMap<(String, String), u64>>,
    conflicts: Mutex<Vec<String>>,
    /// Container id -> pod/ctr.
    names: Mutex<BTreeMap<String, String>>,
    /// pod/ctr -> field changes at creation.
    owners: Mutex<BTreeMap<String, Vec<Change>>>,
}

impl World {
    fn name_of(&self, id: &str) -> String {
        lock(&self.names)
            .get(id)
            .cloned()
            .unwrap_or_else(|| id.to_owned())
    }

    fn drain_calls(&self) -> Vec<Call> {
        std::mem::take(&mut *lock(&self.calls))
    }

    fn push(&self, r: Record) {
        lock(&self.queue).push(r);
    }

    /// Applies updates to the specs; returns them for the report.
    fn apply_updates(&self, updates: &[ContainerUpdate]) -> (Vec<Update>, Vec<String>) {
        let applier = spec::applier();
        let mut out = Vec::new();
        let mut errors = Vec::new();
        for u in updates {
            let Some(res) = u.linux.as_ref().and_then(|l| l.resources.as_ref()) else {
                continue;
            };
            let name = self.name_of(&u.container_id);
            let mut specs = lock(&self.specs);
            if let Some(entry) = specs.iter_mut().find(|e| e.0 == u.container_id)
                && let Err(e) = applier.apply_update(&mut entry.3, res)
            {
                errors.push(format!("applying update to {name}: {e}"));
            }
            out.push(Update {
                container: name,
                resources: compact(serde_json::to_value(res).unwrap_or_default()),
            });
        }
        (out, errors)
    }

    fn evictions(&self, ev: &[ContainerEviction]) -> Vec<Eviction> {
        ev.iter()
            .map(|e| Eviction {
                container: self.name_of(&e.container_id),
                reason: e.reason.clone(),
            })
            .collect()
    }
}

impl RuntimeCallbacks for World {
    fn list_pods_and_containers(&self) -> BoxFuture<'_, Result<Snapshot, CallbackError>> {
        Box::pin(async move {
            let pods: Vec<_> = lock(&self.pods).values().cloned().collect();
            let ctrs: Vec<_> = lock(&self.containers).values().cloned().collect();
            self.push(Record::Sync {
                pods: pods.len(),
                containers: ctrs.len(),
            });
            Ok(Snapshot::new(pods, ctrs))
        })
    }

    fn update_containers(
        &self,
        updates: Vec<ContainerUpdate>,
    ) -> BoxFuture<'_, Result<Vec<ContainerUpdate>, CallbackError>> {
        Box::pin(async move {
            let (u, _) = self.apply_updates(&updates);
            if !u.is_empty() {
                self.push(Record::Unsolicited {
                    updates: u,
                    evictions: Vec::new(),
                });
            }
            Ok(Vec::new())
        })
    }

    fn evict_containers(
        &self,
        evictions: Vec<ContainerEviction>,
    ) -> BoxFuture<'_, Result<(), CallbackError>> {
        Box::pin(async move {
            let e = self.evictions(&evictions);
            self.push(Record::Unsolicited {
                updates: Vec::new(),
                evictions: e,
            });
            Ok(())
        })
    }
}

struct WorldMetrics(Arc<World>);

impl Metrics for WorldMetrics {
    fn plugin_latency(&self, plugin: &str, operation: &str, latency: Duration) {
        *lock(&self.0.counts)
            .entry((plugin.to_owned(), operation.to_owned()))
            .or_default() += 1;
        lock(&self.0.calls).push(Call {
            plugin: plugin.to_owned(),
            operation: operation.to_owned(),
            ms: Some(ms(latency)),
            result: String::new(),
        });
    }

    fn plugin_invocation(&self, plugin: &str, operation: &str, result: Result<(), ErrorClass>) {
        let res = match result {
            Ok(()) => "ok".to_owned(),
            Err(c) => c.as_str().to_owned(),
        };
        let mut calls = lock(&self.0.calls);
        if let Some(c) = calls
            .iter_mut()
            .rev()
            .find(|c| c.plugin == plugin && c.operation == operation && c.result.is_empty())
        {
            c.result = res;
        } else {
            calls.push(Call {
                plugin: plugin.to_owned(),
                operation: operation.to_owned(),
                ms: None,
                result: res,
            });
        }
    }

    fn plugin_conflict(&self, plugin: &str, _operation: &str) {
        lock(&self.0.conflicts).push(plugin.to_owned());
    }
}

/// A plugin process the engine starts.
#[derive(Debug, Clone)]
struct ProcSpec {
    name: String,
    index: String,
    exe: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    source: String,
    start: bool,
}

impl ProcSpec {
    fn id(&self) -> String {
        format!("{}-{}", self.index, self.name)
    }
}

struct Proc {
    spec: ProcSpec,
    child: Option<tokio::process::Child>,
    tail: Arc<Mutex<VecDeque<String>>>,
    readers: JoinSet<()>,
}

const TAIL: usize = 8;

/// Everything a step needs; cheap to clone into parallel tasks.
#[derive(Clone)]
struct Exec {
    nri: Adaptation,
    world: Arc<World>,
    scenario: Arc<Scenario>,
    /// Attribute drained calls to each event (not in parallel groups).
    drain: bool,
}

/// Runs `scenario` and reports every record to `reporter`. Returns the
/// totals; [`Summary::passed`] says whether every expectation held.
///
/// # Errors
///
/// Only set-up problems (temporary directory, runtime start). Plugin and
/// event failures are reported, not returned.
pub async fn run(
    scenario: &Scenario,
    opts: &Options,
    reporter: &mut dyn Reporter,
) -> Result<Summary, Error> {
    let started = Instant::now();
    let dir = tempfile::Builder::new()
        .prefix("nri-sim-")
        .tempdir()
        .map_err(|e| Error::io("creating a temporary directory", e))?;
    let socket = dir.path().join("nri.sock");
    let world = Arc::new(World::default());
    let rt = &scenario.runtime;
    let dur = |d: &Option<Spanned<String>>| d.as_ref().and_then(|d| parse_duration(&d.value).ok());
    let mut b = Adaptation::builder("nri-sim", env!("CARGO_PKG_VERSION"));
    if let Some(path) = &opts.config_file {
        // The runtime's own configuration file; the scenario and the
        // command line override it. The simulator keeps its own socket,
        // plugin directory and peer rules.
        b = b
            .config_file(path)
            .map_err(|source| Error::Runtime { source })?
            .allowed_uids([])
            .allowed_gids([]);
    }
    b = b
        .socket_path(&socket)
        .disable_connections(false)
        .metrics(Arc::new(WorldMetrics(world.clone())))
        .stop_grace(Duration::from_millis(500));
    if let Some(t) = dur(&rt.request_timeout) {
        b = b.request_timeout(t);
    }
    if let Some(t) = dur(&rt.registration_timeout) {
        b = b.registration_timeout(t);
    }
    let reg_timeout = b.current_config().registration_timeout;
    if let Some(n) = rt.strike_limit {
        b = b.strike_limit(n);
    }
    if let Some(p) = rt
        .default_policy
        .as_ref()
        .and_then(|p| FailurePolicy::parse(&p.value))
    {
        let mut default = b.current_config().default_policy.clone();
        default.failure = Some(p);
        b = b.default_policy(default);
    }
    for (name, p) in &rt.policies {
        if let Some(p) = FailurePolicy::parse(&p.value) {
            b = b.failure_policy(name.clone(), p);
        }
    }

    // Plugin processes, and plugins the runtime launches.
    let mut procs: Vec<Proc> = Vec::new();
    let mut launched = Vec::new();
    for (i, sp) in scenario.plugins.iter().enumerate() {
        let p = &sp.value;
        let index = scenario.plugin_index(i);
        let id = format!("{index}-{}", p.name);
        // No `policy`: the entry sets none, so the default policy applies.
        let mut pol = PluginPolicy::default();
        pol.failure = p
            .policy
            .as_ref()
            .and_then(|x| FailurePolicy::parse(&x.value));
        for (ev, x) in &p.event_policy {
            if let (Ok(ev), Some(x)) = (parse_event(ev), FailurePolicy::parse(&x.value)) {
                pol = pol.with_event(ev, x);
            }
        }
        if let Some(t) = dur(&p.timeout) {
            pol = pol.with_request_timeout(t);
        }
        if p.policy.is_some() || !p.event_policy.is_empty() || p.timeout.is_some() {
            b = b.plugin_policy(id.clone(), pol);
        }
        let mut env: Vec<(String, String)> =
            p.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        if p.launch {
            let path =
                opts.plugin_paths.get(&p.name).cloned().unwrap_or_else(|| {
                    scenario_path(scenario, p.path.as_deref().unwrap_or_default())
                });
            launched.push(crate::launch::Launched {
                id,
                exe: crate::launch::resolve(&path),
                args: p.args.clone(),
                env,
                config: p.config_text.clone(),
                wasm: false,
            });
            continue;
        }
        let (exe, args, source) = if let Some(kind) = &p.bundled {
            if opts.no_bundled {
                continue;
            }
            env.push((
                bundled::ENV_CONFIG.into(),
                serde_json::to_string(&p.config).unwrap_or_default(),
            ));
            if let Some(evs) = &p.events {
                env.push((bundled::ENV_EVENTS.into(), evs.value.join(",")));
            }
            let exe = opts.self_exe.clone().unwrap_or_default();
            (
                exe,
                vec![bundled::SUBCOMMAND.to_owned(), kind.value.clone()],
                format!("bundled:{}", kind.value),
            )
        } else {
            let path =
                opts.plugin_paths.get(&p.name).cloned().unwrap_or_else(|| {
                    scenario_path(scenario, p.path.as_deref().unwrap_or_default())
                });
            let src = path.display().to_string();
            (path, p.args.clone(), src)
        };
        procs.push(Proc::new(ProcSpec {
            name: p.name.clone(),
            index,
            exe,
            args,
            env,
            source,
            start: p.start,
        }));
    }
    // WebAssembly plugins given with --plugin are loaded by the runtime
    // from its plugin directory, beside those of --plugin-dir.
    let mut extra_wasm = Vec::new();
    for x in &opts.extra_plugins {
        if nri_runtime::launch::is_wasm(&x.path) {
            extra_wasm.push(crate::launch::Launched {
                id: format!("{}-{}", x.index, x.name),
                exe: crate::launch::resolve(&x.path),
                args: Vec::new(),
                env: Vec::new(),
                config: None,
                wasm: true,
            });
            continue;
        }
        procs.push(Proc::new(ProcSpec {
            name: x.name.clone(),
            index: x.index.clone(),
            exe: x.path.clone(),
            args: Vec::new(),
            env: Vec::new(),
            source: x.path.display().to_string(),
            start: true,
        }));
    }
    for (name, p) in &opts.policies {
        b = b.failure_policy(name.clone(), *p);
    }
    if let Some(d) = &opts.plugin_dir {
        if !launched.is_empty() {
            return Err(Error::Invalid {
                at: crate::Position {
                    file: scenario.file.clone(),
                    line: 0,
                    column: 0,
                },
                message: "plugins with `launch: true` cannot be combined with --plugin-dir".into(),
            });
        }
        launched = crate::launch::from_dir(d)?;
    }
    launched.extend(extra_wasm);
    let launch_dir = dir.path().join("launch");
    let log_dir = dir.path().join("logs");
    if launched.is_empty() {
        b = b.disable_launch(true);
    } else {
        crate::launch::write_dir(&launch_dir, &log_dir, &launched)?;
        b = b
            .plugin_dir(&launch_dir)
            .config_dir(&launch_dir)
            .disable_launch(false);
    }
    let logs = crate::launch::Logs::new(&log_dir, &launched);

    let nri = b
        .build(world.clone())
        .map_err(|source| Error::Runtime { source })?;
    reporter.report(&Record::Start {
        schema: crate::report::SCHEMA_VERSION,
        scenario: scenario.name.clone(),
        description: scenario.description.trim().to_owned(),
        file: scenario.file.clone(),
    });
    if !launched.is_empty() {
        reporter.progress("launching plugins from the plugin directory");
    }
    nri.start()
        .await
        .map_err(|source| Error::Runtime { source })?;
    let mut eng = Engine {
        exec: Exec {
            nri: nri.clone(),
            world: world.clone(),
            scenario: Arc::new(scenario.clone()),
            drain: true,
        },
        procs,
        socket,
        reg_timeout,
        plugin_output: opts.plugin_output,
        summary: Summary::default(),
        outcomes: BTreeMap::new(),
        problems: Vec::new(),
        in_failing_step: false,
        logs,
    };
    eng.report_launched(&launched, reporter);
    for i in 0..eng.procs.len() {
        if eng.procs[i].spec.start {
            eng.start_plugin(i, reporter).await;
        }
    }
    for (n, s) in scenario.steps.iter().enumerate() {
        eng.flush(reporter);
        eng.step(&(n + 1).to_string(), s, reporter).await;
        eng.check_exits(reporter).await;
    }
    eng.flush(reporter);

    // Expectations that need the live runtime.
    let registered: Vec<String> = nri.plugins().iter().map(|p| p.id.to_string()).collect();
    reporter.progress("stopping the runtime and plugins");
    nri.stop().await;
    eng.stop_all(reporter).await;
    let shutdown = world.drain_calls();
    if !shutdown.is_empty() {
        reporter.report(&Record::Calls { calls: shutdown });
    }
    eng.flush_output(true, reporter);
    eng.flush(reporter);
    reporter.progress("");

    for (_, name, base, cur) in lock(&world.specs).iter() {
        reporter.report(&Record::Spec {
            container: name.clone(),
            diff: spec::diff(base, cur),
            spec: nri_oci::spec_json(cur).unwrap_or_default(),
        });
    }
    eng.summary.conflicts = lock(&world.conflicts).len();
    eng.summary.unexpected_plugin_problems = eng
        .problems
        .iter()
        .filter(|(id, in_failing_step)| {
            !in_failing_step && !crate::expect::expects_unregistered(scenario, id)
        })
        .count();
    crate::expect::check_all(
        scenario,
        &world_view(&world, &registered, &eng.outcomes),
        &mut eng.summary,
        reporter,
    );
    eng.summary.ms = ms(started.elapsed());
    reporter.report(&Record::Summary(eng.summary.clone()));
    drop(dir);
    Ok(eng.summary)
}

fn world_view<'a>(
    world: &'a World,
    registered: &'a [String],
    outcomes: &'a BTreeMap<String, bool>,
) -> crate::expect::View<'a> {
    crate::expect::View {
        specs: lock(&world.specs)
            .iter()
            .map(|(_, n, _, cur)| (n.clone(), cur.clone()))
            .collect(),
        owners: lock(&world.owners).clone(),
        counts: lock(&world.counts).clone(),
        conflicts: lock(&world.conflicts).clone(),
        registered,
        outcomes,
    }
}

struct Engine {
    exec: Exec,
    procs: Vec<Proc>,
    socket: PathBuf,
    reg_timeout: Duration,
    plugin_output: bool,
    summary: Summary,
    /// Step label -> succeeded.
    outcomes: BTreeMap<String, bool>,
    /// Plugin problems: plugin id, and whether it happened in a step
    /// expected to fail.
    problems: Vec<(String, bool)>,
    /// The current step is expected to fail.
    in_failing_step: bool,
    /// Output of the plugins the runtime launched.
    logs: crate::launch::Logs,
}

impl Proc {
    fn new(spec: ProcSpec) -> Proc {
        Proc {
            spec,
            child: None,
            tail: Arc::new(Mutex::new(VecDeque::new())),
            readers: JoinSet::new(),
        }
    }

    fn tail(&self) -> Vec<String> {
        lock(&self.tail).iter().cloned().collect()
    }
}

async fn forward<R: AsyncRead + Unpin>(
    r: R,
    plugin: String,
    tail: Arc<Mutex<VecDeque<String>>>,
    world: Option<Arc<World>>,
) {
    let mut lines = BufReader::new(r).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        {
            let mut t = lock(&tail);
            if t.len() == TAIL {
                t.pop_front();
            }
            t.push_back(line.clone());
        }
        if let Some(w) = &world {
            w.push(Record::PluginOutput {
                plugin: plugin.clone(),
                line,
            });
        }
    }
}

impl Engine {
    /// Reports the plugins the runtime launched at its start: registered
    /// (with their calls), or failed with the reason and their output.
    fn report_launched(
        &mut self,
        launched: &[crate::launch::Launched],
        reporter: &mut dyn Reporter,
    ) {
        let mut calls = self.exec.world.drain_calls();
        self.flush_output(false, reporter);
        let up = self.exec.nri.plugins();
        for l in launched
            .iter()
            .filter(|l| !up.iter().any(|p| p.id.to_string() == l.id))
        {
            // The runtime does not tell why (a failed Configure, an exit, a
            // timeout): the plugin's output does.
            let reason = format!(
                "launched by the runtime from {}, did not register",
                l.exe.display()
            );
            reporter.report(&Record::PluginFailed {
                plugin: l.id.clone(),
                reason,
                output: self.logs.tail(&l.id, TAIL),
            });
            self.problem(&l.id);
        }
        for p in up {
            let id = p.id.to_string();
            let (mine, rest): (Vec<Call>, Vec<Call>) =
                calls.into_iter().partition(|c| c.plugin == id);
            calls = rest;
            reporter.report(&Record::PluginRegistered {
                plugin: id,
                events: p
                    .events
                    .iter()
                    .map(|e| e.pretty_name().to_owned())
                    .collect(),
                ms: 0.0,
                calls: mine,
                synced: None,
            });
        }
    }

    /// Reports the output of launched plugins written since the last call
    /// (with `plugin_output`); `all` includes a last unterminated line.
    fn flush_output(&mut self, all: bool, reporter: &mut dyn Reporter) {
        let lines = self.logs.poll(all);
        if self.plugin_output {
            for (plugin, line) in lines {
                reporter.report(&Record::PluginOutput { plugin, line });
            }
        }
    }

    fn flush(&mut self, reporter: &mut dyn Reporter) {
        self.flush_output(false, reporter);
        let recs = std::mem::take(&mut *lock(&self.exec.world.queue));
        for r in &recs {
            reporter.report(r);
        }
        let calls = self.exec.world.drain_calls();
        if !calls.is_empty() {
            reporter.report(&Record::Calls { calls });
        }
    }

    fn find_proc(&self, name: &str) -> Option<usize> {
        self.procs
            .iter()
            .position(|p| p.spec.name == name || p.spec.id() == name)
    }

    async fn start_plugin(&mut self, i: usize, reporter: &mut dyn Reporter) -> bool {
        let spec = self.procs[i].spec.clone();
        let id = spec.id();
        let t0 = Instant::now();
        let fail = |reason: String, output: Vec<String>| Record::PluginFailed {
            plugin: id.clone(),
            reason,
            output,
        };
        if spec.exe.as_os_str().is_empty() {
            reporter.report(&fail(
                "bundled plugins need the `nri` executable (Options::self_exe)".into(),
                Vec::new(),
            ));
            self.problem(&id);
            return false;
        }
        let stream = match std::os::unix::net::UnixStream::connect(&self.socket) {
            Ok(s) => s,
            Err(e) => {
                reporter.report(&fail(
                    format!("cannot connect to the runtime: {e}"),
                    Vec::new(),
                ));
                self.problem(&id);
                return false;
            }
        };
        let mut cmd = tokio::process::Command::new(&spec.exe);
        cmd.args(&spec.args)
            .env(nri_api::ENV_PLUGIN_NAME, &spec.name)
            .env(nri_api::ENV_PLUGIN_IDX, &spec.index)
            .envs(spec.env.iter().cloned())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        nri_mux::pass_to_child(cmd.as_std_mut(), stream);
        let spawned = cmd.spawn();
        drop(cmd);
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                reporter.report(&fail(
                    format!("cannot start {}: {e}", spec.exe.display()),
                    Vec::new(),
                ));
                self.problem(&id);
                return false;
            }
        };
        reporter.report(&Record::PluginStarted {
            plugin: id.clone(),
            source: spec.source.clone(),
            pid: child.id(),
        });
        let proc = &mut self.procs[i];
        lock(&proc.tail).clear();
        let world = self.plugin_output.then(|| self.exec.world.clone());
        if let Some(out) = child.stdout.take() {
            proc.readers
                .spawn(forward(out, id.clone(), proc.tail.clone(), world.clone()));
        }
        if let Some(err) = child.stderr.take() {
            proc.readers
                .spawn(forward(err, id.clone(), proc.tail.clone(), world));
        }
        reporter.progress(&format!("waiting for plugin {id} to register"));
        let deadline = t0 + self.reg_timeout + Duration::from_millis(500);
        let outcome = loop {
            if let Some(p) = self
                .exec
                .nri
                .plugins()
                .into_iter()
                .find(|p| p.id.to_string() == id)
            {
                break Ok(p);
            }
            match child.try_wait() {
                Ok(Some(status)) => {
                    // Let the output readers finish.
                    let _ = tokio::time::timeout(Duration::from_millis(200), async {
                        while proc.readers.join_next().await.is_some() {}
                    })
                    .await;
                    break Err(format!("exited before registering ({status})"));
                }
                Ok(None) => {}
                Err(e) => break Err(format!("cannot check the process: {e}")),
            }
            if Instant::now() > deadline {
                break Err(format!(
                    "did not register within {:?} (registration timeout); killed",
                    self.reg_timeout
                ));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        reporter.progress("");
        match outcome {
            Ok(p) => {
                // Synchronize has been answered when the plugin is active.
                let calls = self.exec.world.drain_calls();
                let queued = std::mem::take(&mut *lock(&self.exec.world.queue));
                let mut synced = None;
                for r in &queued {
                    match r {
                        Record::Sync { pods, containers } => synced = Some((*pods, *containers)),
                        other => reporter.report(other),
                    }
                }
                reporter.report(&Record::PluginRegistered {
                    plugin: id,
                    events: p
                        .events
                        .iter()
                        .map(|e| e.pretty_name().to_owned())
                        .collect(),
                    ms: ms(t0.elapsed()),
                    calls,
                    synced,
                });
                proc.child = Some(child);
                true
            }
            Err(reason) => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                let _ = tokio::time::timeout(Duration::from_millis(200), async {
                    while proc.readers.join_next().await.is_some() {}
                })
                .await;
                reporter.report(&fail(reason, proc.tail()));
                self.problem(&id);
                false
            }
        }
    }

    async fn kill_plugin(&mut self, i: usize, reporter: &mut dyn Reporter) -> bool {
        let id = self.procs[i].spec.id();
        let proc = &mut self.procs[i];
        let Some(mut child) = proc.child.take() else {
            return false;
        };
        let _ = child.start_kill();
        let status = child
            .wait()
            .await
            .map(|s| s.to_string())
            .unwrap_or_else(|e| e.to_string());
        let _ = tokio::time::timeout(Duration::from_millis(200), async {
            while proc.readers.join_next().await.is_some() {}
        })
        .await;
        reporter.report(&Record::PluginExited {
            plugin: id.clone(),
            status,
            expected: true,
            output: Vec::new(),
        });
        // Wait until the runtime has noticed.
        let t0 = Instant::now();
        while self
            .exec
            .nri
            .plugins()
            .iter()
            .any(|p| p.id.to_string() == id)
            && t0.elapsed() < Duration::from_secs(2)
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }

    /// Counts a plugin problem of plugin `id`.
    fn problem(&mut self, id: &str) {
        self.summary.plugin_problems += 1;
        self.problems.push((id.to_owned(), self.in_failing_step));
    }

    /// Reports plugins that exited on their own.
    async fn check_exits(&mut self, reporter: &mut dyn Reporter) {
        let mut crashed = Vec::new();
        for proc in &mut self.procs {
            let Some(child) = proc.child.as_mut() else {
                continue;
            };
            if let Ok(Some(status)) = child.try_wait() {
                proc.child = None;
                let _ = tokio::time::timeout(Duration::from_millis(200), async {
                    while proc.readers.join_next().await.is_some() {}
                })
                .await;
                reporter.report(&Record::PluginExited {
                    plugin: proc.spec.id(),
                    status: status.to_string(),
                    expected: false,
                    output: proc.tail(),
                });
                crashed.push(proc.spec.id());
            }
        }
        for id in crashed {
            self.problem(&id);
        }
    }

    async fn stop_all(&mut self, reporter: &mut dyn Reporter) {
        for proc in &mut self.procs {
            let Some(mut child) = proc.child.take() else {
                continue;
            };
            let status = match tokio::time::timeout(Duration::from_secs(2), child.wait()).await {
                Ok(s) => s.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string()),
                Err(_) => {
                    let _ = child.start_kill();
                    let _ = child.wait().await;
                    "killed (did not exit after Shutdown)".into()
                }
            };
            proc.readers.shutdown().await;
            reporter.report(&Record::PluginExited {
                plugin: proc.spec.id(),
                status,
                expected: true,
                output: Vec::new(),
            });
        }
    }

    async fn step(&mut self, index: &str, s: &Spanned<Step>, reporter: &mut dyn Reporter) {
        let st = &s.value;
        self.in_failing_step = st.expect.as_ref().is_some_and(|e| e.value == "fail");
        let action = st.actions().first().copied().unwrap_or("(none)");
        let target = step_target(st);
        reporter.report(&Record::Step {
            index: index.to_owned(),
            label: st.label.clone(),
            action: action.to_owned(),
            target: target.clone(),
        });
        self.summary.steps += 1;
        let mut ok = true;
        let mut group_calls = Vec::new();
        if let Some(name) = st
            .start_plugin
            .as_ref()
            .or(st.kill_plugin.as_ref())
            .or(st.restart_plugin.as_ref())
        {
            match self.find_proc(&name.value) {
                Some(i) => {
                    if st.kill_plugin.is_some() || st.restart_plugin.is_some() {
                        ok &= self.kill_plugin(i, reporter).await;
                    }
                    if st.start_plugin.is_some() || st.restart_plugin.is_some() {
                        if self.procs[i].child.is_some() {
                            ok = false;
                        } else {
                            ok &= self.start_plugin(i, reporter).await;
                        }
                    }
                }
                None => ok = false, // a bundled plugin left out with --no-bundled
            }
        } else if let Some(d) = &st.sleep {
            reporter.progress(&format!("sleeping {}", d.value));
            tokio::time::sleep(parse_duration(&d.value).unwrap_or_default()).await;
            reporter.progress("");
        } else if let Some(group) = &st.parallel {
            let mut set = JoinSet::new();
            let mut plugin_steps = Vec::new();
            for (j, g) in group.iter().enumerate() {
                let sub = format!("{index}.{}", j + 1);
                let gs = &g.value;
                if gs.start_plugin.is_some()
                    || gs.kill_plugin.is_some()
                    || gs.restart_plugin.is_some()
                {
                    plugin_steps.push((sub, g.clone()));
                    continue;
                }
                let mut exec = self.exec.clone();
                exec.drain = false;
                let gs = gs.clone();
                set.spawn(async move {
                    let evs = exec.lifecycle(&gs).await;
                    (j, sub, gs, evs)
                });
            }
            reporter.progress(&format!("running {} steps at once", group.len()));
            for (sub, g) in plugin_steps {
                Box::pin(self.step(&sub, &g, reporter)).await;
            }
            let mut results = Vec::new();
            while let Some(r) = set.join_next().await {
                match r {
                    Ok(r) => results.push(r),
                    Err(e) => tracing::error!(error = %e, "simulation task failed"),
                }
            }
            reporter.progress("");
            results.sort_by_key(|r| r.0);
            for (_, sub, gs, evs) in results {
                reporter.report(&Record::Step {
                    index: sub.clone(),
                    label: gs.label.clone(),
                    action: gs.actions().first().copied().unwrap_or("(none)").to_owned(),
                    target: step_target(&gs),
                });
                let sub_ok = self.report_events(evs, reporter);
                ok &= sub_ok;
                self.end_step(&sub, &gs, sub_ok, Vec::new(), reporter);
            }
            group_calls = self.exec.world.drain_calls();
        } else {
            reporter.progress(&format!("{action} {target}"));
            let evs = self.exec.lifecycle(st).await;
            reporter.progress("");
            ok = self.report_events(evs, reporter);
        }
        self.end_step(index, st, ok, group_calls, reporter);
    }

    fn end_step(
        &mut self,
        index: &str,
        st: &Step,
        ok: bool,
        calls: Vec<Call>,
        reporter: &mut dyn Reporter,
    ) {
        if let Some(l) = &st.label {
            self.outcomes.insert(l.clone(), ok);
        }
        reporter.report(&Record::StepEnd {
            index: index.to_owned(),
            ok,
            expected: st.expect.as_ref().map(|e| e.value.clone()),
            calls,
        });
        if let Some(e) = &st.expect {
            let want_ok = e.value == "ok";
            let held = want_ok == ok;
            if held {
                self.summary.expectations_held += 1;
            } else {
                self.summary.expectations_failed += 1;
            }
            reporter.report(&Record::Expectation {
                at: self.exec.scenario.pos(&e.referenced).to_string(),
                step: Some(index.to_owned()),
                what: format!(
                    "step {index} ({}) {}",
                    step_target(st),
                    if want_ok { "succeeds" } else { "fails" }
                ),
                held,
                detail: if held {
                    String::new()
                } else if ok {
                    "it succeeded".into()
                } else {
                    "it failed".into()
                },
            });
        }
    }

    fn report_events(&mut self, evs: Vec<EventResult>, reporter: &mut dyn Reporter) -> bool {
        let mut ok = true;
        for e in evs {
            self.summary.events += 1;
            if !e.ok {
                self.summary.failed_events += 1;
                ok = false;
            }
            self.summary.plugin_failures += e.plugin_failures.len();
            reporter.report(&Record::Event(e));
        }
        ok
    }
}

fn step_target(st: &Step) -> String {
    [
        &st.run_pod,
        &st.update_pod,
        &st.stop_pod,
        &st.remove_pod,
        &st.create,
        &st.start,
        &st.update,
        &st.stop,
        &st.remove,
        &st.up,
        &st.down,
        &st.start_plugin,
        &st.kill_plugin,
        &st.restart_plugin,
        &st.sleep,
    ]
    .into_iter()
    .flatten()
    .map(|s| s.value.clone())
    .next()
    .unwrap_or_else(|| {
        st.parallel
            .as_ref()
            .map(|g| format!("{} steps", g.len()))
            .unwrap_or_default()
    })
}

/// Drops nulls and empty lists and maps, and unwraps `{"value": x}`
/// (NRI's optional wrappers), for readable resources.
fn compact(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            if m.len() == 1
                && let Some(x) = m.get("value")
            {
                return x.clone();
            }
            Value::Object(
                m.into_iter()
                    .map(|(k, v)| (k, compact(v)))
                    .filter(|(_, v)| match v {
                        Value::Null => false,
                        Value::Array(a) => !a.is_empty(),
                        Value::Object(o) => !o.is_empty(),
                        _ => true,
                    })
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.into_iter().map(compact).collect()),
        other => other,
    }
}

fn pod_id(name: &str) -> String {
    format!("pod-{name}")
}

fn ctr_id(target: &str) -> String {
    format!("ctr-{}", target.replace('/', "-"))
}

fn resources(r: &ResourcesSpec) -> LinuxResources {
    let mut out = LinuxResources::default();
    if let Some(c) = &r.cpu {
        out.cpu = Some(LinuxCpu {
            shares: c.shares.and_then(OptionalUInt64::some),
            quota: c.quota.and_then(OptionalInt64::some),
            period: c.period.and_then(OptionalUInt64::some),
            cpus: c.cpus.clone().unwrap_or_default(),
            mems: c.mems.clone().unwrap_or_default(),
            ..Default::default()
        });
    }
    if let Some(m) = &r.memory {
        let q = |x: &Option<Spanned<crate::scenario::Quantity>>| {
            x.as_ref()
                .and_then(|x| x.value.bytes().ok())
                .and_then(OptionalInt64::some)
        };
        out.memory = Some(LinuxMemory {
            limit: q(&m.limit),
            reservation: q(&m.reservation),
            swap: q(&m.swap),
            ..Default::default()
        });
    }
    if let Some(p) = r.pids {
        out.pids = Some(LinuxPids { limit: p });
    }
    out
}

fn failures(errs: &[nri_runtime::PluginError]) -> Vec<PluginFailure> {
    errs.iter()
        .map(|e| PluginFailure {
            plugin: e.plugin.clone(),
            event: e.event.pretty_name().to_owned(),
            class: e.failure.class().as_str().to_owned(),
            message: e.failure.to_string(),
        })
        .collect()
}

/// The changes recorded in the owners of container `id`.
pub(crate) fn changes(owners: &OwningPlugins, id: &str) -> Vec<Change> {
    let mut out = Vec::new();
    let Some(fo) = owners.owners.get(id) else {
        return out;
    };
    let split = |owner: &str| -> Vec<(String, bool)> {
        owner
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|s| match s.strip_prefix('-') {
                Some(p) => (p.to_owned(), true),
                None => (s.to_owned(), false),
            })
            .collect()
    };
    for (f, owner) in &fo.simple {
        for (plugin, removed) in split(owner) {
            out.push(Change {
                plugin,
                field: field_name(*f),
                key: String::new(),
                removed,
            });
        }
    }
    for (f, c) in &fo.compound {
        for (key, owner) in &c.owners {
            for (plugin, removed) in split(owner) {
                out.push(Change {
                    plugin,
                    field: field_name(*f),
                    key: key.clone(),
                    removed,
                });
            }
        }
    }
    out
}

struct Ev {
    res: EventResult,
    t0: Instant,
    done: bool,
}

impl Ev {
    fn new(event: &str, target: &str) -> Ev {
        Ev {
            res: EventResult {
                event: event.to_owned(),
                target: target.to_owned(),
                ok: true,
                error: None,
                ms: 0.0,
                calls: Vec::new(),
                plugin_failures: Vec::new(),
                changes: Vec::new(),
                updates: Vec::new(),
                evictions: Vec::new(),
            },
            t0: Instant::now(),
            done: false,
        }
    }

    fn fail(mut self, e: impl ToString) -> Ev {
        self.res.ok = false;
        self.res.error = Some(e.to_string());
        self
    }
}

impl Exec {
    fn pod(&self, name: &str) -> PodSandbox {
        let spec = self.scenario.pod(name).cloned().unwrap_or_default();
        PodSandbox {
            id: pod_id(name),
            name: name.to_owned(),
            uid: format!("uid-{name}"),
            namespace: spec.namespace.unwrap_or_else(|| "default".into()),
            labels: spec.labels,
            annotations: spec.annotations,
            runtime_handler: spec.runtime_handler,
            linux: (!spec.namespaces.is_empty()).then(|| LinuxPodSandbox {
                namespaces: spec
                    .namespaces
                    .iter()
                    .map(|(t, p)| LinuxNamespace {
                        r#type: t.clone(),
                        path: p.clone(),
                    })
                    .collect(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn container(&self, target: &str) -> Container {
        let Some((pod, c)) = self.scenario.container(target) else {
            return Container::default();
        };
        Container {
            id: ctr_id(target),
            pod_sandbox_id: pod_id(&pod.name),
            name: c.name.clone(),
            state: ContainerState::ContainerUnknown as i32,
            labels: c.labels.clone(),
            annotations: c.annotations.clone(),
            args: c.args.clone(),
            env: c.env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            mounts: c
                .mounts
                .iter()
                .map(|m| Mount {
                    destination: m.destination.clone(),
                    r#type: m.kind.clone().unwrap_or_else(|| "bind".into()),
                    source: m.source.clone(),
                    options: m.options.clone(),
                })
                .collect(),
            linux: c.resources.as_ref().map(|r| LinuxContainer {
                resources: Some(resources(r)),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Ends an event: its time and (outside parallel groups) its calls.
    fn fin(&self, mut ev: Ev) -> Ev {
        if ev.done {
            return ev;
        }
        ev.done = true;
        ev.res.ms = ms(ev.t0.elapsed());
        if self.drain {
            ev.res.calls = self.world.drain_calls();
        }
        ev
    }

    /// Runs a lifecycle step.
    async fn lifecycle(&self, st: &Step) -> Vec<EventResult> {
        let mut out = Vec::new();
        let push = |ev: Ev, out: &mut Vec<EventResult>| {
            out.push(self.fin(ev).res);
        };
        if let Some(p) = &st.run_pod {
            push(self.run_pod(&p.value).await, &mut out);
        } else if let Some(p) = &st.update_pod {
            let res = st.resources.as_ref().map(resources);
            for ev in self.update_pod(&p.value, res).await {
                push(ev, &mut out);
            }
        } else if let Some(p) = &st.stop_pod {
            push(self.pod_teardown(&p.value, false).await, &mut out);
        } else if let Some(p) = &st.remove_pod {
            push(self.pod_teardown(&p.value, true).await, &mut out);
        } else if let Some(c) = &st.create {
            for ev in self.create(&c.value).await {
                push(ev, &mut out);
            }
        } else if let Some(c) = &st.start {
            for ev in self.start(&c.value).await {
                push(ev, &mut out);
            }
        } else if let Some(c) = &st.update {
            let res = st.resources.as_ref().map(resources);
            for ev in self.update(&c.value, res).await {
                push(ev, &mut out);
            }
        } else if let Some(c) = &st.stop {
            push(self.stop(&c.value).await, &mut out);
        } else if let Some(c) = &st.remove {
            push(self.remove(&c.value).await, &mut out);
        } else if let Some(p) = &st.up {
            let ev = self.run_pod(&p.value).await;
            let pod_ok = ev.res.ok;
            push(ev, &mut out);
            if pod_ok {
                let names: Vec<String> = self
                    .scenario
                    .pod(&p.value)
                    .map(|s| s.containers.iter().map(|c| c.name.clone()).collect())
                    .unwrap_or_default();
                for c in names {
                    let t = format!("{}/{c}", p.value);
                    let evs = self.create(&t).await;
                    let created = evs.first().is_some_and(|e| e.res.ok);
                    for ev in evs {
                        push(ev, &mut out);
                    }
                    if created {
                        for ev in self.start(&t).await {
                            push(ev, &mut out);
                        }
                    }
                }
            }
        } else if let Some(p) = &st.down {
            let pid = pod_id(&p.value);
            let mut ids: Vec<(String, String)> = lock(&self.world.containers)
                .values()
                .filter(|c| c.pod_sandbox_id == pid)
                .map(|c| (c.id.clone(), format!("{}/{}", p.value, c.name)))
                .collect();
            ids.sort();
            for (_, t) in ids {
                push(self.stop(&t).await, &mut out);
                push(self.remove(&t).await, &mut out);
            }
            push(self.pod_teardown(&p.value, false).await, &mut out);
            push(self.pod_teardown(&p.value, true).await, &mut out);
        }
        out
    }

    fn stored_pod(&self, name: &str) -> Option<PodSandbox> {
        lock(&self.world.pods).get(&pod_id(name)).cloned()
    }

    fn stored_container(&self, target: &str) -> Option<Container> {
        lock(&self.world.containers).get(&ctr_id(target)).cloned()
    }

    fn set_state(&self, target: &str, state: ContainerState) {
        if let Some(c) = lock(&self.world.containers).get_mut(&ctr_id(target)) {
            c.state = state as i32;
        }
    }

    async fn run_pod(&self, name: &str) -> Ev {
        let ev = Ev::new("RunPodSandbox", name);
        if self.stored_pod(name).is_some() {
            return ev.fail(format!("pod {name} is already running"));
        }
        let pod = self.pod(name);
        match self.nri.run_pod_sandbox(&pod).await {
            Ok(out) => {
                lock(&self.world.pods).insert(pod.id.clone(), pod);
                drop(out.guard);
                let mut ev = ev;
                ev.res.plugin_failures = failures(&out.errors);
                ev
            }
            Err(e) => ev.fail(e),
        }
    }

    async fn update_pod(&self, name: &str, res: Option<LinuxResources>) -> Vec<Ev> {
        let ev = Ev::new("UpdatePodSandbox", name);
        let Some(pod) = self.stored_pod(name) else {
            return vec![ev.fail(format!("pod {name} is not running"))];
        };
        let ev = match self.nri.update_pod_sandbox(&pod, None, res).await {
            Ok(r) => {
                let mut ev = ev;
                ev.res.plugin_failures = failures(&r.errors);
                ev
            }
            Err(e) => return vec![ev.fail(e)],
        };
        let ev = self.fin(ev);
        let mut post = Ev::new("PostUpdatePodSandbox", name);
        if let Ok(r) = self.nri.post_update_pod_sandbox(&pod).await {
            post.res.plugin_failures = failures(&r.errors);
        }
        vec![ev, post]
    }

    async fn pod_teardown(&self, name: &str, remove: bool) -> Ev {
        let mut ev = Ev::new(
            if remove {
                "RemovePodSandbox"
            } else {
                "StopPodSandbox"
            },
            name,
        );
        let Some(pod) = self.stored_pod(name) else {
            return ev.fail(format!("pod {name} is not running"));
        };
        let r = if remove {
            self.nri.remove_pod_sandbox(&pod).await
        } else {
            self.nri.stop_pod_sandbox(&pod).await
        };
        match r {
            Ok(r) => ev.res.plugin_failures = failures(&r.errors),
            Err(e) => ev = ev.fail(e),
        }
        if remove {
            lock(&self.world.pods).remove(&pod.id);
        }
        ev
    }

    async fn create(&self, target: &str) -> Vec<Ev> {
        let mut ev = Ev::new("CreateContainer", target);
        let pod_name = target.split('/').next().unwrap_or_default();
        let Some(pod) = self.stored_pod(pod_name) else {
            return vec![ev.fail(format!("pod {pod_name} is not running"))];
        };
        if self.stored_container(target).is_some() {
            return vec![ev.fail(format!("container {target} already exists"))];
        }
        let mut ctr = self.container(target);
        let out = match self.nri.create_container(&pod, &ctr).await {
            Ok(o) => o,
            Err(e) => {
                let ev = self.fin(ev.fail(e));
                return self.undo_create(ev, &pod, &ctr).await;
            }
        };
        ev.res.plugin_failures = failures(&out.errors);
        ev.res.changes = changes(&out.owners, &ctr.id);
        ev.res.evictions = self.world.evictions(&out.evictions);
        let base = match spec::base_spec(&ctr) {
            Ok(s) => s,
            Err(e) => {
                drop(out.guard);
                let ev = self.fin(ev.fail(format!("building the container's OCI spec: {e}")));
                return self.undo_create(ev, &pod, &ctr).await;
            }
        };
        let mut cur = base.clone();
        if let Err(e) = spec::applier().apply_adjustment(&mut cur, &out.adjustment) {
            ev = ev.fail(format!("applying the merged adjustment: {e}"));
        }
        let (u, errs) = self.world.apply_updates(&out.updates);
        ev.res.updates = u;
        if let Some(e) = errs.into_iter().next() {
            if ev.res.ok {
                ev = ev.fail(e);
            }
        }
        drop(out.guard);
        if !ev.res.ok {
            let ev = self.fin(ev);
            return self.undo_create(ev, &pod, &ctr).await;
        }
        lock(&self.world.names).insert(ctr.id.clone(), target.to_owned());
        lock(&self.world.owners).insert(target.to_owned(), ev.res.changes.clone());
        {
            let mut specs = lock(&self.world.specs);
            specs.retain(|s| s.0 != ctr.id);
            specs.push((ctr.id.clone(), target.to_owned(), base, cur));
        }
        ctr.state = ContainerState::ContainerCreated as i32;
        lock(&self.world.containers).insert(ctr.id.clone(), ctr.clone());
        let ev = self.fin(ev);
        let mut post = Ev::new("PostCreateContainer", target);
        if let Ok(r) = self.nri.post_create_container(&pod, &ctr).await {
            post.res.plugin_failures = failures(&r.errors);
        }
        vec![ev, post]
    }

    /// After a failed creation (a plugin refused it, or the runtime could
    /// not apply the adjustment or an update): no PostCreateContainer, and
    /// the plugins are told the container is gone with StopContainer and
    /// RemoveContainer, as containerd does. The container is not kept.
    async fn undo_create(&self, failed: Ev, pod: &PodSandbox, ctr: &Container) -> Vec<Ev> {
        let target = failed.res.target.clone();
        let mut stop = Ev::new("StopContainer", &target);
        match self.nri.stop_container(pod, ctr).await {
            Ok(out) => stop.res.plugin_failures = failures(&out.errors),
            Err(e) => stop = stop.fail(e),
        }
        let stop = self.fin(stop);
        let mut remove = Ev::new("RemoveContainer", &target);
        match self.nri.remove_container(pod, ctr).await {
            Ok(r) => remove.res.plugin_failures = failures(&r.errors),
            Err(e) => remove = remove.fail(e),
        }
        vec![failed, stop, remove]
    }

    fn both(&self, target: &str) -> Result<(PodSandbox, Container), String> {
        let pod_name = target.split('/').next().unwrap_or_default();
        let pod = self
            .stored_pod(pod_name)
            .ok_or_else(|| format!("pod {pod_name} is not running"))?;
        let ctr = self
            .stored_container(target)
            .ok_or_else(|| format!("container {target} was not created"))?;
        Ok((pod, ctr))
    }

    async fn start(&self, target: &str) -> Vec<Ev> {
        let mut ev = Ev::new("StartContainer", target);
        let (pod, ctr) = match self.both(target) {
            Ok(x) => x,
            Err(e) => return vec![ev.fail(e)],
        };
        match self.nri.start_container(&pod, &ctr).await {
            Ok(r) => ev.res.plugin_failures = failures(&r.errors),
            Err(e) => return vec![ev.fail(e)],
        }
        self.set_state(target, ContainerState::ContainerRunning);
        let ev = self.fin(ev);
        let mut post = Ev::new("PostStartContainer", target);
        if let Ok(r) = self.nri.post_start_container(&pod, &ctr).await {
            post.res.plugin_failures = failures(&r.errors);
        }
        vec![ev, post]
    }

    async fn update(&self, target: &str, res: Option<LinuxResources>) -> Vec<Ev> {
        let mut ev = Ev::new("UpdateContainer", target);
        let (pod, ctr) = match self.both(target) {
            Ok(x) => x,
            Err(e) => return vec![ev.fail(e)],
        };
        let out = match self.nri.update_container(&pod, &ctr, res).await {
            Ok(o) => o,
            Err(e) => return vec![ev.fail(e)],
        };
        ev.res.plugin_failures = failures(&out.errors);
        let (u, errs) = self.world.apply_updates(&out.updates);
        ev.res.updates = u;
        ev.res.evictions = self.world.evictions(&out.evictions);
        if let Some(e) = errs.into_iter().next() {
            // The update was not applied: no PostUpdateContainer.
            return vec![ev.fail(e)];
        }
        let ev = self.fin(ev);
        let mut post = Ev::new("PostUpdateContainer", target);
        if let Ok(r) = self.nri.post_update_container(&pod, &ctr).await {
            post.res.plugin_failures = failures(&r.errors);
        }
        vec![ev, post]
    }

    async fn stop(&self, target: &str) -> Ev {
        let mut ev = Ev::new("StopContainer", target);
        let (pod, ctr) = match self.both(target) {
            Ok(x) => x,
            Err(e) => return ev.fail(e),
        };
        match self.nri.stop_container(&pod, &ctr).await {
            Ok(out) => {
                ev.res.plugin_failures = failures(&out.errors);
                ev.res.updates = self.world.apply_updates(&out.updates).0;
            }
            Err(e) => ev = ev.fail(e),
        }
        self.set_state(target, ContainerState::ContainerStopped);
        ev
    }

    async fn remove(&self, target: &str) -> Ev {
        let mut ev = Ev::new("RemoveContainer", target);
        let (pod, ctr) = match self.both(target) {
            Ok(x) => x,
            Err(e) => return ev.fail(e),
        };
        match self.nri.remove_container(&pod, &ctr).await {
            Ok(r) => ev.res.plugin_failures = failures(&r.errors),
            Err(e) => ev = ev.fail(e),
        }
        lock(&self.world.containers).remove(&ctr.id);
        ev
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn extra_plugin_args() {
        let p = ExtraPlugin::parse("/x/10-my-plugin").unwrap();
        assert_eq!((p.name.as_str(), p.index.as_str()), ("my-plugin", "10"));
        let p = ExtraPlugin::parse("./target/debug/my_plugin:42").unwrap();
        assert_eq!((p.name.as_str(), p.index.as_str()), ("my_plugin", "42"));
        let p = ExtraPlugin::parse("plugin.bin").unwrap();
        assert_eq!((p.name.as_str(), p.index.as_str()), ("plugin-bin", "50"));
    }

    #[test]
    fn field_names_are_kebab_case() {
        use nri_api::api::Field;
        assert_eq!(field_name(Field::Env as i32), "env");
        assert_eq!(field_name(Field::MemLimit as i32), "mem-limit");
    }
}
