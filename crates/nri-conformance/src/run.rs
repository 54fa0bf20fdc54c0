//! [`run`]: register, drive (or watch), check, report.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nri_plugin::api::Event;
use nri_plugin::{Builder, ConnectMode, NriVersion, PluginHandle};
use tokio::task::JoinSet;

use crate::Error;
use crate::check::{self, Clause, CreateErrorOutcome, TeardownExpectation, TimeoutOutcome};
use crate::driver::{CriOptions, Crictl};
use crate::record::{Behaviour, EventKind, EventLog, RecordKind, Recorder};
use crate::report::{ClauseResult, Report, RuntimeSummary, Status};

/// How pods and containers come about during the run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mode {
    /// Drive the runtime through crictl (all clauses).
    Cri(CriOptions),
    /// Only watch whatever happens on the node for this long (order, scope
    /// and teardown of what was seen; the other clauses are skipped).
    Passive {
        /// How long to watch.
        duration: Duration,
    },
}

/// What [`run`] does.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// The runtime's NRI socket.
    pub nri_socket: PathBuf,
    /// Drive or watch.
    pub mode: Mode,
    /// Base name of the recording plugin instances (default `conformance`).
    pub plugin_name: String,
    /// Index of the main recording instance (default `00`: called first).
    pub plugin_index: String,
    /// Creation rounds (pod + container each) of the sync-race phase
    /// (default 4; a second and third plugin register during rounds 1 and 2).
    pub sync_rounds: usize,
    /// Run the request-timeout phase (default true; costs the runtime's
    /// request timeout plus a second).
    pub check_timeout: bool,
    /// A command (argv) that stops the runtime, run at the end to check that
    /// the runtime sends Shutdown (default: none, clause skipped).
    pub stop_runtime: Option<Vec<String>>,
    /// How long to wait for a plugin instance to register and synchronize.
    pub registration_timeout: Duration,
}

impl Options {
    /// Options for the runtime at `nri_socket`, in `mode`, other fields default.
    pub fn new(nri_socket: impl Into<PathBuf>, mode: Mode) -> Self {
        Options {
            nri_socket: nri_socket.into(),
            mode,
            plugin_name: "conformance".into(),
            plugin_index: "00".into(),
            sync_rounds: 4,
            check_timeout: true,
            stop_runtime: None,
            registration_timeout: Duration::from_secs(30),
        }
    }
}

/// The running recording instances.
struct Instances {
    log: Arc<EventLog>,
    opts: Options,
    tasks: JoinSet<()>,
    handles: Vec<(String, PluginHandle)>,
}

impl Instances {
    /// Starts instance `suffix` (empty: the main one) and returns its name.
    fn spawn(&mut self, suffix: &str, index: &str, behaviour: Behaviour) -> Result<String, Error> {
        let name = if suffix.is_empty() {
            self.opts.plugin_name.clone()
        } else {
            format!("{}-{suffix}", self.opts.plugin_name)
        };
        let stub = Builder::new(Recorder::new(&name, self.log.clone(), behaviour))
            .name(name.clone())
            .index(index)
            .mode(ConnectMode::External)
            .socket_path(&self.opts.nri_socket)
            .registration_timeout(self.opts.registration_timeout)
            .build()
            .map_err(|source| Error::Plugin { source })?;
        self.handles.push((name.clone(), stub.handle()));
        let log = self.log.clone();
        let n = name.clone();
        self.tasks.spawn(async move {
            let cause = match stub.run().await {
                Ok(()) => "stopped by the checker".to_owned(),
                Err(e) => error_chain(&e),
            };
            log.push(&n, RecordKind::Disconnected { cause });
        });
        Ok(name)
    }

    /// Waits until `name` synchronized (or failed).
    async fn wait_synced(&self, name: &str) -> Result<(), Error> {
        let deadline = self.opts.registration_timeout + Duration::from_secs(1);
        let t = Instant::now();
        loop {
            let mut cause = None;
            let mut synced = false;
            for r in self.log.snapshot().iter().filter(|r| r.instance == name) {
                match &r.kind {
                    RecordKind::Synchronized { .. } => synced = true,
                    RecordKind::Disconnected { cause: c } => cause = Some(c.clone()),
                    _ => {}
                }
            }
            if synced {
                return Ok(());
            }
            if cause.is_some() || t.elapsed() > deadline {
                return Err(Error::Register {
                    instance: name.to_owned(),
                    timeout: deadline,
                    cause,
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn handle(&self, name: &str) -> Option<&PluginHandle> {
        self.handles.iter().find(|(n, _)| n == name).map(|(_, h)| h)
    }

    fn stop(&self, name: &str) {
        if let Some(h) = self.handle(name) {
            h.stop();
        }
    }

    async fn shutdown(mut self) {
        for (_, h) in &self.handles {
            h.stop();
        }
        while self.tasks.join_next().await.is_some() {}
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

/// Polls `cond` every 20 ms for up to `max`; returns whether it held.
async fn wait_until(max: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if t.elapsed() > max {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What the driver did, for the checks.
#[derive(Default)]
struct Driven {
    /// Pods made and not yet removed: (id, name).
    live_pods: Vec<(String, String)>,
    teardown: TeardownExpectation,
    sync_pods: Vec<String>,
    sync_containers: Vec<String>,
    sync_instances: Vec<String>,
    create_error: Option<CreateErrorOutcome>,
    timeout: Option<TimeoutOutcome>,
}

struct Driver<'a> {
    crictl: &'a Crictl,
    prefix: String,
    d: Driven,
}

impl Driver<'_> {
    async fn pod(&mut self, tag: &str) -> Result<(String, String), Error> {
        let name = format!("{}-{tag}", self.prefix);
        let id = self.crictl.run_pod(&name).await?;
        self.d.live_pods.push((id.clone(), name.clone()));
        Ok((id, name))
    }

    /// Stops and removes a pod (and with it any container left in it).
    async fn remove_pod(&mut self, id: &str) -> Result<(), Error> {
        self.crictl.must(&["stopp", id]).await?;
        self.crictl.must(&["rmp", id]).await?;
        self.d.live_pods.retain(|(p, _)| p != id);
        self.d.teardown.pods.push(id.to_owned());
        Ok(())
    }

    /// Every container created gets torn down (with its pod at the latest).
    fn created(&mut self, id: &str) {
        self.d.teardown.containers.push(id.to_owned());
    }

    /// Removes whatever pods are left (after an error), best effort.
    async fn cleanup(&mut self) {
        for (id, _) in std::mem::take(&mut self.d.live_pods) {
            let _ = self.crictl.call(&["stopp", &id]).await;
            let _ = self.crictl.call(&["rmp", "-f", &id]).await;
        }
    }
}

/// Registers with the runtime, drives (or watches) pods and containers,
/// checks every clause and returns the report.
///
/// Breaches of the contract are in the report; an error means the run
/// itself could not be done (the plugin could not register, a crictl step
/// that must work failed). Pods made by the run are removed in every case.
///
/// # Errors
///
/// See [`Error`].
pub async fn run(opts: Options) -> Result<Report, Error> {
    let t0 = Instant::now();
    if opts.sync_rounds < 3 {
        return Err(Error::Options(
            "sync_rounds must be at least 3 (plugins register during rounds 1 and 2)".into(),
        ));
    }
    let log = Arc::new(EventLog::new());
    let mut inst = Instances {
        log: log.clone(),
        opts: opts.clone(),
        tasks: JoinSet::new(),
        handles: Vec::new(),
    };
    let main = inst.spawn("", &opts.plugin_index, Behaviour::Observe)?;
    if let Err(e) = inst.wait_synced(&main).await {
        inst.shutdown().await;
        return Err(e);
    }
    let runtime = summary(inst.handle(&main));

    let (mode, driven) = match &opts.mode {
        Mode::Passive { duration } => {
            tokio::time::sleep(*duration).await;
            ("passive", None)
        }
        Mode::Cri(cri) => {
            let run_id = format!(
                "{:x}{:x}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis() & 0xffffff)
                    .unwrap_or(0)
            );
            let crictl = match Crictl::new(cri.clone(), &run_id) {
                Ok(c) => c,
                Err(e) => {
                    inst.shutdown().await;
                    return Err(e);
                }
            };
            let mut drv = Driver {
                crictl: &crictl,
                prefix: format!("nc-{run_id}"),
                d: Driven::default(),
            };
            let r = drive(&mut drv, &mut inst, &runtime, &opts).await;
            drv.cleanup().await;
            crictl.cleanup();
            if let Err(e) = r {
                inst.shutdown().await;
                return Err(e);
            }
            // Every teardown we did must reach the main instance; wait for it.
            let want = drv.d.teardown.pods.clone();
            wait_until(Duration::from_secs(5), || {
                want.iter().all(|id| {
                    log.any(|r| {
                        r.instance == main
                            && r.as_event().is_some_and(|(e, p, c)| {
                                e == EventKind::RemovePodSandbox && c.is_none() && &p.id == id
                            })
                    })
                })
            })
            .await;
            ("cri", Some(drv.d))
        }
    };

    // Shutdown: stop the runtime if we were told how.
    let shutdown_asked = match &opts.stop_runtime {
        Some(argv) if !argv.is_empty() => {
            let out = tokio::process::Command::new(&argv[0])
                .args(&argv[1..])
                .stdin(std::process::Stdio::null())
                .output()
                .await
                .map_err(|source| Error::Io {
                    what: format!("run {argv:?}"),
                    source,
                })?;
            if !out.status.success() {
                tracing::warn!(
                    status = %out.status,
                    stderr = %String::from_utf8_lossy(&out.stderr),
                    "the stop-runtime command failed"
                );
            }
            wait_until(Duration::from_secs(15), || {
                log.any(|r| r.instance == main && matches!(r.kind, RecordKind::Disconnected { .. }))
            })
            .await;
            true
        }
        _ => false,
    };
    inst.shutdown().await;

    let records = log.snapshot();
    let clauses = evaluate(&records, &main, &runtime, driven.as_ref(), shutdown_asked);
    Ok(Report {
        runtime,
        mode: mode.into(),
        duration_ms: ms(t0.elapsed()),
        clauses,
        records,
    })
}

fn summary(h: Option<&PluginHandle>) -> RuntimeSummary {
    let Some(info) = h.and_then(PluginHandle::runtime) else {
        return RuntimeSummary::default();
    };
    let v = info.nri_version.version;
    RuntimeSummary {
        name: info.name.clone(),
        version: info.version.clone(),
        nri_version: v.to_string(),
        nri_version_origin: format!("{:?}", info.nri_version.origin),
        dialect: if v >= NriVersion::V0_12_0 {
            "dedicated-rpcs".into()
        } else {
            "state-change".into()
        },
        request_timeout_ms: ms(info.request_timeout),
    }
}

/// The driven scenario.
async fn drive(
    drv: &mut Driver<'_>,
    inst: &mut Instances,
    runtime: &RuntimeSummary,
    opts: &Options,
) -> Result<(), Error> {
    let c = drv.crictl;

    // 1. Lifecycle: a full container lifecycle with an update, then a pod
    //    removed with one started and one never-started container in it.
    let (pa, na) = drv.pod("lc-a").await?;
    let ca = c.must_create(&pa, &na, "c1").await?;
    drv.created(&ca);
    c.must(&["start", &ca]).await?;
    c.must(&["update", "--cpu-share", "512", &ca]).await?;
    c.must(&["stop", "-t", "0", &ca]).await?;
    c.must(&["rm", &ca]).await?;
    drv.remove_pod(&pa).await?;

    let (pb, nb) = drv.pod("lc-b").await?;
    let cb1 = c.must_create(&pb, &nb, "c1").await?;
    drv.created(&cb1);
    c.must(&["start", &cb1]).await?;
    let cb2 = c.must_create(&pb, &nb, "c2").await?;
    drv.created(&cb2);
    drv.remove_pod(&pb).await?;

    // 2. Sync race: two more instances register while pods and containers
    //    are being created (during round 1's RunPodSandbox and round 2's
    //    CreateContainer).
    let mut made = Vec::new();
    for round in 0..opts.sync_rounds {
        let tag = format!("sync-{round}");
        let register = |inst: &mut Instances, n: usize| {
            inst.spawn(&format!("sync{n}"), &format!("1{n}"), Behaviour::Observe)
        };
        let (pod, pname) = if round == 1 {
            let name = register(inst, 1)?;
            drv.d.sync_instances.push(name.clone());
            let (p, w) = tokio::join!(drv.pod(&tag), inst.wait_synced(&name));
            w?;
            p?
        } else {
            drv.pod(&tag).await?
        };
        drv.d.sync_pods.push(pod.clone());
        let ctr = if round == 2 {
            let name = register(inst, 2)?;
            drv.d.sync_instances.push(name.clone());
            let (ct, w) = tokio::join!(c.must_create(&pod, &pname, "c1"), inst.wait_synced(&name));
            w?;
            ct?
        } else {
            c.must_create(&pod, &pname, "c1").await?
        };
        drv.created(&ctr);
        drv.d.sync_containers.push(ctr.clone());
        c.must(&["start", &ctr]).await?;
        made.push(pod);
    }
    for pod in made {
        drv.remove_pod(&pod).await?;
    }
    for name in drv.d.sync_instances.clone() {
        inst.stop(&name);
    }

    // 3. A plugin refuses CreateContainer: that creation fails, the next works.
    let failer = inst.spawn(
        "fail",
        "90",
        Behaviour::FailCreate {
            prefix: "refuse-".into(),
        },
    )?;
    inst.wait_synced(&failer).await?;
    let (pe, ne) = drv.pod("err").await?;
    let refused = c.create(&pe, &ne, "refuse-1").await?;
    let refused_error = match refused {
        Ok(id) => {
            drv.created(&id);
            None
        }
        Err(e) => {
            drv.d
                .teardown
                .failed_creates
                .push((pe.clone(), "refuse-1".into()));
            Some(e)
        }
    };
    let next = c.create(&pe, &ne, "ok-1").await?;
    let next_error = match next {
        Ok(id) => {
            drv.created(&id);
            None
        }
        Err(e) => Some(e),
    };
    inst.stop(&failer);
    drv.remove_pod(&pe).await?;
    drv.d.create_error = Some(CreateErrorOutcome {
        refused_error,
        next_error,
    });

    // 4. A plugin answers CreateContainer after the request timeout.
    if opts.check_timeout {
        let delay =
            Duration::from_millis(runtime.request_timeout_ms.max(100)) + Duration::from_secs(1);
        let slow = inst.spawn(
            "slow",
            "91",
            Behaviour::DelayCreate {
                prefix: "slow-".into(),
                delay,
            },
        )?;
        inst.wait_synced(&slow).await?;
        let (pt, nt) = drv.pod("tmo").await?;
        let t = Instant::now();
        let slow_res = c.create(&pt, &nt, "slow-1").await?;
        let slow_elapsed = t.elapsed();
        let slow_error = match slow_res {
            Ok(id) => {
                drv.created(&id);
                None
            }
            Err(e) => {
                drv.d
                    .teardown
                    .failed_creates
                    .push((pt.clone(), "slow-1".into()));
                Some(e)
            }
        };
        let log = inst.log.clone();
        let is_gone =
            || log.any(|r| r.instance == slow && matches!(r.kind, RecordKind::Disconnected { .. }));
        // The slow handler is still sleeping past the deadline; give the
        // runtime's disconnect a moment to arrive.
        wait_until(Duration::from_secs(2), is_gone).await;
        let next = c.create(&pt, &nt, "after-1").await?;
        let next_error = match next {
            Ok(id) => {
                drv.created(&id);
                None
            }
            Err(e) => Some(e),
        };
        let disconnected = is_gone();
        let next_seen = log.any(|r| {
            r.instance == slow
                && r.as_event().is_some_and(|(e, _, c)| {
                    e == EventKind::CreateContainer && c.is_some_and(|c| c.name == "after-1")
                })
        });
        inst.stop(&slow);
        drv.remove_pod(&pt).await?;
        drv.d.timeout = Some(TimeoutOutcome {
            request_timeout_ms: runtime.request_timeout_ms,
            delay_ms: ms(delay),
            slow_error,
            slow_elapsed_ms: ms(slow_elapsed),
            disconnected,
            next_seen_by_slow_plugin: next_seen,
            next_error,
        });
    }
    Ok(())
}

/// Runs every checker.
fn evaluate(
    records: &[crate::Record],
    main: &str,
    rt: &RuntimeSummary,
    driven: Option<&Driven>,
    shutdown_asked: bool,
) -> Vec<ClauseResult> {
    let (name, ver) = (rt.name.as_str(), rt.version.as_str());
    let classify =
        |c: Clause, s: String, v: Vec<check::Violation>| ClauseResult::classify(c, s, v, name, ver);
    // Order and scope hold for every observing instance.
    let mut observers = vec![main.to_owned()];
    if let Some(d) = driven {
        observers.extend(d.sync_instances.iter().cloned());
    }
    let all = |f: fn(&[crate::Record], &str) -> Vec<check::Violation>| {
        observers
            .iter()
            .flat_map(|i| f(records, i))
            .collect::<Vec<_>>()
    };
    let events = records
        .iter()
        .filter(|r| r.instance == main && r.as_event().is_some())
        .count();
    let mut out = Vec::new();

    let valid = rt
        .nri_version
        .parse::<NriVersion>()
        .unwrap_or(NriVersion::CONSERVATIVE)
        .valid_events();
    let unsupported = Event::ALL_EVENTS
        .iter()
        .filter(|e| !valid.contains(**e))
        .map(|e| e.pretty_name())
        .collect::<Vec<_>>();
    out.push(ClauseResult {
        clause: Clause::Dialect,
        status: Status::Info,
        summary: format!(
            "{} {}: NRI {} ({}): {}{}",
            rt.name,
            rt.version,
            rt.nri_version,
            rt.nri_version_origin.to_lowercase(),
            if rt.dialect == "dedicated-rpcs" {
                "a dedicated RPC per event"
            } else {
                "pod/post events through StateChange"
            },
            if unsupported.is_empty() {
                String::new()
            } else {
                format!("; cannot deliver {}", unsupported.join(", "))
            }
        ),
        findings: Vec::new(),
    });
    let n = observers.len();
    out.push(classify(
        Clause::PodOrder,
        format!("{events} events of {main} (+{} more instances)", n - 1),
        all(check::check_pod_order),
    ));
    out.push(classify(
        Clause::ContainerOrder,
        format!("{events} events of {main} (+{} more instances)", n - 1),
        all(check::check_container_order),
    ));
    out.push(classify(
        Clause::PodScope,
        format!("{events} events of {main} (+{} more instances)", n - 1),
        all(check::check_pod_scope),
    ));
    let teardown = match driven {
        Some(d) => d.teardown.clone(),
        None => passive_teardown(records, main),
    };
    out.push(classify(
        Clause::Teardown,
        format!(
            "{} pods, {} containers removed, {} failed creations",
            teardown.pods.len(),
            teardown.containers.len(),
            teardown.failed_creates.len()
        ),
        check::check_teardown(records, main, &teardown),
    ));
    match driven {
        Some(d) => {
            let v = d
                .sync_instances
                .iter()
                .flat_map(|i| {
                    check::check_sync_exactly_once(records, i, &d.sync_pods, &d.sync_containers)
                })
                .collect();
            out.push(classify(
                Clause::SyncExactlyOnce,
                format!(
                    "{} instances registered during {} pod + {} container creations",
                    d.sync_instances.len(),
                    d.sync_pods.len(),
                    d.sync_containers.len()
                ),
                v,
            ));
            match &d.create_error {
                Some(o) => out.push(classify(
                    Clause::CreateError,
                    match &o.refused_error {
                        Some(e) => format!("refused creation failed: {}", one_line(e)),
                        None => "refused creation succeeded".into(),
                    },
                    check::check_create_error(o),
                )),
                None => out.push(ClauseResult::skipped(Clause::CreateError, "not run")),
            }
            match &d.timeout {
                Some(o) => out.push(classify(
                    Clause::RequestTimeout,
                    format!(
                        "answer after {} ms (timeout {} ms): creation {} in {} ms; plugin {}",
                        o.delay_ms,
                        o.request_timeout_ms,
                        if o.slow_error.is_some() {
                            "failed"
                        } else {
                            "succeeded"
                        },
                        o.slow_elapsed_ms,
                        if o.disconnected {
                            "disconnected by the runtime"
                        } else {
                            "kept"
                        }
                    ),
                    check::check_request_timeout(o),
                )),
                None => out.push(ClauseResult::skipped(
                    Clause::RequestTimeout,
                    "not asked for",
                )),
            }
        }
        None => {
            for c in [
                Clause::SyncExactlyOnce,
                Clause::CreateError,
                Clause::RequestTimeout,
            ] {
                out.push(ClauseResult::skipped(
                    c,
                    "passive mode: needs the CRI driver",
                ));
            }
        }
    }
    if shutdown_asked {
        out.push(classify(
            Clause::Shutdown,
            format!(
                "runtime stopped with the stop command; {}",
                if records
                    .iter()
                    .any(|r| r.instance == main && r.kind == RecordKind::Shutdown)
                {
                    "Shutdown received"
                } else {
                    "no Shutdown received"
                }
            ),
            check::check_shutdown(records, main),
        ));
    } else {
        out.push(ClauseResult::skipped(
            Clause::Shutdown,
            "no stop-runtime command given",
        ));
    }
    out
}

/// Passive teardown expectation: pods seen removed, and the containers
/// seen in them.
fn passive_teardown(records: &[crate::Record], main: &str) -> TeardownExpectation {
    let mut t = TeardownExpectation::default();
    let mine = records.iter().filter(|r| r.instance == main);
    for r in mine.clone() {
        if let Some((EventKind::RemovePodSandbox, p, None)) = r.as_event() {
            if !t.pods.contains(&p.id) {
                t.pods.push(p.id.clone());
            }
        }
    }
    for r in mine {
        if let Some((_, _, Some(c))) = r.as_event() {
            if t.pods.contains(&c.pod_id) && !t.containers.contains(&c.id) {
                t.containers.push(c.id.clone());
            }
        }
    }
    t
}

fn one_line(s: &str) -> String {
    let s = s.lines().last().unwrap_or_default();
    let mut s = s.to_owned();
    if s.len() > 200 {
        let mut cut = 197;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}
