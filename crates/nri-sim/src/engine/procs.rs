//! Plugin processes the engine starts (their connection on fd 3, their
//! output read line by line), kills and watches, and the reports about
//! the plugins the runtime launches itself.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nri_runtime::{InstanceState, PluginInfo};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::task::JoinSet;

use super::world::World;
use super::{Engine, Options, lock, ms};
use crate::error::Error;
use crate::launch::Launched;
use crate::report::{Call, Record, Reporter};

/// Lets the output readers of a process that ended finish (briefly).
async fn drain_readers(readers: &mut JoinSet<()>) {
    let _ = tokio::time::timeout(Duration::from_millis(200), async {
        while readers.join_next().await.is_some() {}
    })
    .await;
}

/// A plugin process the engine starts.
#[derive(Debug, Clone)]
pub(super) struct ProcSpec {
    pub(super) name: String,
    pub(super) index: String,
    pub(super) exe: PathBuf,
    pub(super) args: Vec<String>,
    pub(super) env: Vec<(String, String)>,
    pub(super) source: String,
    pub(super) start: bool,
}

impl ProcSpec {
    pub(super) fn id(&self) -> String {
        format!("{}-{}", self.index, self.name)
    }
}

pub(super) struct Proc {
    pub(super) spec: ProcSpec,
    pub(super) child: Option<tokio::process::Child>,
    pub(super) tail: Arc<Mutex<VecDeque<String>>>,
    pub(super) readers: JoinSet<()>,
}

const TAIL: usize = 8;

impl Proc {
    pub(super) fn new(spec: ProcSpec) -> Proc {
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
    pub(super) fn report_launched(
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
    pub(super) fn flush_output(&mut self, all: bool, reporter: &mut dyn Reporter) {
        let mut lines = self.logs.poll(all);
        if let Some(log) = &self.wasm_log {
            lines.extend(
                log.drain()
                    .into_iter()
                    .filter(|(id, _)| self.wasm_ids.contains(id)),
            );
        }
        if self.plugin_output {
            for (plugin, line) in lines {
                reporter.report(&Record::PluginOutput { plugin, line });
            }
        }
    }

    pub(super) fn flush(&mut self, reporter: &mut dyn Reporter) {
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

    pub(super) fn find_proc(&self, name: &str) -> Option<usize> {
        self.procs
            .iter()
            .position(|p| p.spec.name == name || p.spec.id() == name)
    }

    pub(super) async fn start_plugin(&mut self, i: usize, reporter: &mut dyn Reporter) -> bool {
        self.start_instance(i, 0, reporter).await
    }

    /// Starts plugin `i` and waits until an instance of it newer than
    /// `after` (the number of the connection, see
    /// [`PluginInfo::instance`]; 0: any) is active.
    async fn start_instance(&mut self, i: usize, after: u64, reporter: &mut dyn Reporter) -> bool {
        let spec = self.procs[i].spec.clone();
        let id = spec.id();
        let t0 = Instant::now();
        let mut child = match self.spawn(&spec) {
            Ok(c) => c,
            Err(reason) => {
                reporter.report(&Record::PluginFailed {
                    plugin: id.clone(),
                    reason: reason.to_string(),
                    output: Vec::new(),
                });
                self.problem(&id);
                return false;
            }
        };
        reporter.report(&Record::PluginStarted {
            plugin: id.clone(),
            source: spec.source.clone(),
            pid: child.id(),
        });
        let world = self.plugin_output.then(|| self.exec.world.clone());
        let proc = &mut self.procs[i];
        lock(&proc.tail).clear();
        if let Some(out) = child.stdout.take() {
            proc.readers
                .spawn(forward(out, id.clone(), proc.tail.clone(), world.clone()));
        }
        if let Some(err) = child.stderr.take() {
            proc.readers
                .spawn(forward(err, id.clone(), proc.tail.clone(), world));
        }
        reporter.progress(&format!("waiting for plugin {id} to register"));
        let outcome = self.wait_registered(i, &mut child, t0, after).await;
        reporter.progress("");
        match outcome {
            Ok(p) => {
                self.registered(&id, &p, t0, reporter);
                self.procs[i].child = Some(child);
                true
            }
            Err(reason) => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                let proc = &mut self.procs[i];
                drain_readers(&mut proc.readers).await;
                reporter.report(&Record::PluginFailed {
                    plugin: id.clone(),
                    reason: reason.to_string(),
                    output: proc.tail(),
                });
                self.problem(&id);
                false
            }
        }
    }

    /// Starts the process of `spec` with its connection to the runtime
    /// on fd 3; why not, if it cannot.
    fn spawn(&self, spec: &ProcSpec) -> Result<tokio::process::Child, Error> {
        if spec.exe.as_os_str().is_empty() {
            return Err(Error::NoSelfExe);
        }
        let stream = std::os::unix::net::UnixStream::connect(&self.socket)
            .map_err(|e| Error::io("cannot connect to the runtime", e))?;
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
        cmd.spawn()
            .map_err(|e| Error::io(format!("cannot start {}", spec.exe.display()), e))
    }

    /// Waits until plugin `i` is registered (and synchronized) as an
    /// active instance newer than `after`, has exited or is past the
    /// registration timeout.
    async fn wait_registered(
        &mut self,
        i: usize,
        child: &mut tokio::process::Child,
        t0: Instant,
        after: u64,
    ) -> Result<PluginInfo, Error> {
        let id = self.procs[i].spec.id();
        let deadline = t0 + self.reg_timeout + Duration::from_millis(500);
        loop {
            if let Some(p) = self.exec.nri.plugins().into_iter().find(|p| {
                p.id.to_string() == id && p.instance > after && p.state == InstanceState::Active
            }) {
                return Ok(p);
            }
            match child.try_wait() {
                Ok(Some(status)) => {
                    drain_readers(&mut self.procs[i].readers).await;
                    return Err(Error::ExitedBeforeRegistering { status });
                }
                Ok(None) => {}
                Err(e) => return Err(Error::io("cannot check the process", e)),
            }
            if Instant::now() > deadline {
                return Err(Error::RegistrationTimeout {
                    timeout: self.reg_timeout,
                });
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Reports a registration with the calls it took and the Synchronize
    /// it got (answered when the plugin is active).
    fn registered(&mut self, id: &str, p: &PluginInfo, t0: Instant, reporter: &mut dyn Reporter) {
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
            plugin: id.to_owned(),
            events: p
                .events
                .iter()
                .map(|e| e.pretty_name().to_owned())
                .collect(),
            ms: ms(t0.elapsed()),
            calls,
            synced,
        });
    }
    /// `start-plugin` of a running plugin (an upgrade): starts a new instance of running plugin `i` while
    /// the old one runs, waits until the new one is active (it took over:
    /// the old one gets no more events), then stops the old one, as a
    /// DaemonSet rolling with a surge does. If the new instance fails, the
    /// old one keeps running (the runtime hands back to it).
    pub(super) async fn upgrade_plugin(&mut self, i: usize, reporter: &mut dyn Reporter) -> bool {
        let id = self.procs[i].spec.id();
        let Some(mut old) = self.procs[i].child.take() else {
            reporter.report(&Record::PluginFailed {
                plugin: id.clone(),
                reason: "not running: there is no instance to upgrade".into(),
                output: Vec::new(),
            });
            self.problem(&id);
            return false;
        };
        let mut old_readers = std::mem::take(&mut self.procs[i].readers);
        let before = self.active_instance(&id).unwrap_or(0);
        if !self.start_instance(i, before, reporter).await {
            self.procs[i].child = Some(old);
            self.procs[i].readers = old_readers;
            return false;
        }
        let _ = old.start_kill();
        let status = (old.wait().await)
            .map(|s| s.to_string())
            .unwrap_or_else(|e| e.to_string());
        drain_readers(&mut old_readers).await;
        reporter.report(&Record::PluginExited {
            plugin: id.clone(),
            status,
            expected: true,
            output: Vec::new(),
        });
        // Wait until the runtime has dropped the old instance.
        let t0 = Instant::now();
        while (self.exec.nri.plugins().iter())
            .any(|p| p.id.to_string() == id && p.instance <= before)
            && t0.elapsed() < Duration::from_secs(2)
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }

    /// The newest active instance of plugin `id`.
    fn active_instance(&self, id: &str) -> Option<u64> {
        (self.exec.nri.plugins().iter())
            .filter(|p| p.id.to_string() == id && p.state == InstanceState::Active)
            .map(|p| p.instance)
            .max()
    }

    pub(super) async fn kill_plugin(&mut self, i: usize, reporter: &mut dyn Reporter) -> bool {
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
        drain_readers(&mut proc.readers).await;
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
    pub(super) fn problem(&mut self, id: &str) {
        self.summary.plugin_problems += 1;
        self.problems.push((id.to_owned(), self.in_failing_step));
    }

    /// Reports plugins that exited on their own.
    pub(super) async fn check_exits(&mut self, reporter: &mut dyn Reporter) {
        let mut crashed = Vec::new();
        for proc in &mut self.procs {
            let Some(child) = proc.child.as_mut() else {
                continue;
            };
            if let Ok(Some(status)) = child.try_wait() {
                proc.child = None;
                drain_readers(&mut proc.readers).await;
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

    pub(super) async fn stop_all(&mut self, reporter: &mut dyn Reporter) {
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

    /// Reports, as a plugin problem, each plugin the scenario or the
    /// command line names (expectations, owners, policies) that the run
    /// has not got: with a plugin directory, one the directory lacks.
    pub(super) fn report_missing(
        &mut self,
        opts: &Options,
        launched: &[Launched],
        reporter: &mut dyn Reporter,
    ) {
        let sc = self.exec.scenario.clone();
        let mut have: Vec<String> = launched.iter().map(|l| l.id.clone()).collect();
        have.extend(self.procs.iter().map(|p| p.spec.id()));
        have.extend(
            sc.plugins
                .iter()
                .enumerate()
                .map(|(i, p)| format!("{}-{}", sc.plugin_index(i), p.value.name)),
        );
        let mut names = sc.plugin_refs();
        names.extend(opts.policies.iter().map(|(n, _)| n.clone()));
        names.sort();
        names.dedup();
        for name in names {
            if have.iter().any(|id| crate::expect::same_plugin(id, &name)) {
                continue;
            }
            let reason = match &opts.plugin_dir {
                Some(d) => format!(
                    "not found in the plugin directory {} (it has {})",
                    d.display(),
                    launched
                        .iter()
                        .map(|l| l.id.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None => {
                    "not found: no plugin of the scenario or the command line has this name".into()
                }
            };
            reporter.report(&Record::PluginFailed {
                plugin: name.clone(),
                reason,
                output: Vec::new(),
            });
            self.problem(&name);
        }
    }
}
