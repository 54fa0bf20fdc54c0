//! The simulation engine: an embedded `nri-runtime` on a private socket,
//! plugin processes, and the replay of a [`Scenario`].
//!
//! - this module: the options, the set-up of the runtime and the plugins,
//!   and the end of a run (specs, plugin problems, expectations);
//! - `world`: the simulated runtime's state, its callbacks and metrics;
//! - `procs`: plugin processes (started, killed, watched) and the
//!   plugins the runtime launches;
//! - `steps`: the step runner;
//! - `lifecycle`: the events of each step, and what they did to the specs.

mod lifecycle;
mod procs;
mod steps;
#[cfg(test)]
mod tests;
mod world;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nri_mux::sync::lock;
use nri_runtime::{Adaptation, Builder, FailurePolicy, PluginPolicy};
use serde_saphyr::Spanned;

use crate::bundled;
use crate::error::Error;
use crate::launch::Launched;
use crate::report::{Record, Reporter, Summary};
use crate::scenario::{PluginSpec, Scenario, parse_duration, parse_event};
use lifecycle::Exec;
use procs::{Proc, ProcSpec};
use world::{World, WorldMetrics};

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
    ///
    /// # Errors
    ///
    /// [`Error::PluginArg`](crate::Error::PluginArg) when `arg` names no
    /// file.
    pub fn parse(arg: &str) -> Result<ExtraPlugin, crate::Error> {
        let (path, idx) = match arg.rsplit_once(':') {
            Some((p, i)) if i.len() == 2 && i.bytes().all(|b| b.is_ascii_digit()) => {
                (p, Some(i.to_owned()))
            }
            _ => (arg, None),
        };
        let file = std::path::Path::new(path)
            .file_name()
            .and_then(|f| f.to_str())
            .ok_or_else(|| crate::Error::PluginArg {
                arg: arg.to_owned(),
            })?;
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
    /// Where the output of WebAssembly plugins arrives (they run inside
    /// the embedded runtime, which logs it through `tracing`): with
    /// `plugin_output`, its lines for this run's WebAssembly plugins are
    /// reported like any plugin's. Install [`PluginLog::layer`] in the
    /// process's subscriber.
    ///
    /// [`PluginLog::layer`]: crate::PluginLog::layer
    pub plugin_log: Option<crate::PluginLog>,
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

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e5).round() / 100.0
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
    let mut eng = set_up(scenario, opts, dir.path(), reporter).await?;
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
    let summary = eng.finish(started, reporter).await;
    drop(dir);
    Ok(summary)
}

/// Builds and starts the embedded runtime in `dir` (its socket, launch
/// and log directories) and reports the start and the plugins it launched:
/// the engine, ready for the scenario's plugins and steps.
async fn set_up(
    scenario: &Scenario,
    opts: &Options,
    dir: &Path,
    reporter: &mut dyn Reporter,
) -> Result<Engine, Error> {
    let socket = dir.join("nri.sock");
    let world = Arc::new(World::default());
    let b = runtime_builder(scenario, opts, &socket, &world)?;
    let reg_timeout = b.current_config().registration_timeout;
    let (b, procs, launched) = plugins(scenario, opts, b)?;
    let (b, logs) = launch_dir(b, dir, &launched)?;
    // Lines left from an earlier run are not this run's.
    let wasm_log = opts.plugin_log.clone();
    if let Some(l) = &wasm_log {
        l.drain();
    }
    let wasm_ids = launched
        .iter()
        .filter(|l| l.wasm)
        .map(|l| l.id.clone())
        .collect();
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
            world,
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
        wasm_log,
        wasm_ids,
    };
    eng.report_launched(&launched, reporter);
    eng.report_missing(opts, &launched, reporter);
    Ok(eng)
}

/// The plugin directory the runtime launches `launched` from (under
/// `dir`, their logs beside it), or launching disabled when there are none.
fn launch_dir(
    b: Builder,
    dir: &Path,
    launched: &[Launched],
) -> Result<(Builder, crate::launch::Logs), Error> {
    let launch_dir = dir.join("launch");
    let log_dir = dir.join("logs");
    let b = if launched.is_empty() {
        b.disable_launch(true)
    } else {
        crate::launch::write_dir(&launch_dir, &log_dir, launched)?;
        b.plugin_dir(&launch_dir)
            .config_dir(&launch_dir)
            .disable_launch(false)
    };
    Ok((b, crate::launch::Logs::new(&log_dir, launched)))
}

/// The embedded runtime's builder: the configuration file, the scenario's
/// `runtime` settings, the private socket, the metrics sink.
fn runtime_builder(
    scenario: &Scenario,
    opts: &Options,
    socket: &Path,
    world: &Arc<World>,
) -> Result<Builder, Error> {
    let rt = &scenario.runtime;
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
        .socket_path(socket)
        .disable_connections(false)
        .metrics(Arc::new(WorldMetrics(world.clone())))
        .stop_grace(Duration::from_millis(500))
        // It applies adjustments with nri-oci, fills in what it hands over,
        // calls every event method and records evictions: it does all.
        .capabilities(nri_api::CapabilitySet::all(), nri_api::EventMask::ALL);
    if let Some(t) = duration(&rt.request_timeout) {
        b = b.request_timeout(t);
    }
    if let Some(t) = duration(&rt.registration_timeout) {
        b = b.registration_timeout(t);
    }
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
    for (name, p) in &opts.policies {
        b = b.failure_policy(name.clone(), *p);
    }
    Ok(b)
}

/// A checked duration of the scenario.
fn duration(d: &Option<Spanned<String>>) -> Option<Duration> {
    d.as_ref().and_then(|d| parse_duration(&d.value).ok())
}

/// The plugin processes the engine starts and the plugins the runtime
/// launches (the scenario's, `--plugin`, `--plugin-dir`); `b` with the
/// scenario plugins' policies.
fn plugins(
    scenario: &Scenario,
    opts: &Options,
    mut b: Builder,
) -> Result<(Builder, Vec<Proc>, Vec<Launched>), Error> {
    let mut procs: Vec<Proc> = Vec::new();
    let mut launched = Vec::new();
    for (i, sp) in scenario.plugins.iter().enumerate() {
        let p = &sp.value;
        let index = scenario.plugin_index(i);
        let id = format!("{index}-{}", p.name);
        if let Some(pol) = plugin_policy(p) {
            b = b.plugin_policy(id.clone(), pol);
        }
        if p.launch {
            let path = plugin_path(scenario, opts, p);
            launched.push(Launched {
                id,
                exe: crate::launch::resolve(&path),
                args: p.args.clone(),
                env: p.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                config: p.config_text.clone(),
                wasm: false,
            });
        } else if let Some(spec) = proc_spec(scenario, opts, p, index) {
            procs.push(Proc::new(spec));
        }
    }
    // WebAssembly plugins given with --plugin are loaded by the runtime
    // from its plugin directory, beside those of --plugin-dir.
    let mut extra_wasm = Vec::new();
    for x in &opts.extra_plugins {
        if nri_runtime::launch::is_wasm(&x.path) {
            extra_wasm.push(Launched {
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
    Ok((b, procs, launched))
}

/// The policy a scenario plugin sets, if it sets one. Without `policy`
/// the default policy applies.
fn plugin_policy(p: &PluginSpec) -> Option<PluginPolicy> {
    if p.policy.is_none() && p.event_policy.is_empty() && p.timeout.is_none() {
        return None;
    }
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
    if let Some(t) = duration(&p.timeout) {
        pol = pol.with_request_timeout(t);
    }
    Some(pol)
}

/// A scenario plugin's executable: `--plugin-path`, else its `path`.
fn plugin_path(scenario: &Scenario, opts: &Options, p: &PluginSpec) -> PathBuf {
    opts.plugin_paths
        .get(&p.name)
        .cloned()
        .unwrap_or_else(|| scenario_path(scenario, p.path.as_deref().unwrap_or_default()))
}

/// The process of a scenario plugin the engine starts itself (`None`: a
/// bundled plugin left out with `no_bundled`).
fn proc_spec(
    scenario: &Scenario,
    opts: &Options,
    p: &PluginSpec,
    index: String,
) -> Option<ProcSpec> {
    let mut env: Vec<(String, String)> =
        p.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let (exe, args, source) = if let Some(kind) = &p.bundled {
        if opts.no_bundled {
            return None;
        }
        env.push((
            bundled::ENV_CONFIG.into(),
            serde_json::to_string(&p.config).unwrap_or_default(),
        ));
        if let Some(evs) = &p.events {
            env.push((bundled::ENV_EVENTS.into(), evs.value.join(",")));
        }
        (
            opts.self_exe.clone().unwrap_or_default(),
            vec![bundled::SUBCOMMAND.to_owned(), kind.value.clone()],
            format!("bundled:{}", kind.value),
        )
    } else {
        let path = plugin_path(scenario, opts, p);
        let src = path.display().to_string();
        (path, p.args.clone(), src)
    };
    Some(ProcSpec {
        name: p.name.clone(),
        index,
        exe,
        args,
        env,
        source,
        start: p.start,
    })
}

/// The state of a run.
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
    /// Output of WebAssembly plugins (if the caller collects it).
    wasm_log: Option<crate::PluginLog>,
    /// This run's WebAssembly plugins.
    wasm_ids: Vec<String>,
}

impl Engine {
    /// Ends the run: stops the runtime and the plugins, reports the final
    /// specs, counts the unexpected plugin problems, checks the
    /// expectations and reports the summary.
    async fn finish(&mut self, started: Instant, reporter: &mut dyn Reporter) -> Summary {
        self.flush(reporter);
        let nri = self.exec.nri.clone();
        let world = self.exec.world.clone();
        let scenario = self.exec.scenario.clone();
        // Expectations that need the live runtime.
        let registered: Vec<String> = nri.plugins().iter().map(|p| p.id.to_string()).collect();
        reporter.progress("stopping the runtime and plugins");
        nri.stop().await;
        self.stop_all(reporter).await;
        let shutdown = world.drain_calls();
        if !shutdown.is_empty() {
            reporter.report(&Record::Calls { calls: shutdown });
        }
        self.flush_output(true, reporter);
        self.flush(reporter);
        reporter.progress("");
        for (_, name, base, cur) in lock(&world.specs).iter() {
            reporter.report(&Record::Spec {
                container: name.clone(),
                diff: crate::spec::diff(base, cur),
                spec: nri_oci::spec_json(cur).unwrap_or_default(),
            });
        }
        self.summary.conflicts = lock(&world.conflicts).len();
        self.summary.unexpected_plugin_problems = self
            .problems
            .iter()
            .filter(|(id, in_failing_step)| {
                !in_failing_step && !crate::expect::expects_unregistered(&scenario, id)
            })
            .count();
        crate::expect::check_all(
            &scenario,
            &world::world_view(&world, &registered, &self.outcomes),
            &mut self.summary,
            reporter,
        );
        self.summary.ms = ms(started.elapsed());
        reporter.report(&Record::Summary(self.summary.clone()));
        self.summary.clone()
    }
}
