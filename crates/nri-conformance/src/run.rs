//! [`run`] and [`run_with`]: register, drive (or watch), check, report.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nri_plugin::{NriVersion, PluginHandle};

use crate::Error;
use crate::cri::Cri;
use crate::crictl::{CriOptions, Crictl};
use crate::evaluate::evaluate;
use crate::instances::{Instances, is_disconnect_of, ms, wait_until};
use crate::record::EventKind;
use crate::recorder::Behaviour;
use crate::report::{Report, RuntimeSummary};
use crate::scenario::{Driven, Driver, Plan, drive};

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
    /// Drive or watch (not used by [`run_with`], which drives).
    pub mode: Mode,
    /// Base name of the recording plugin instances (default `conformance`).
    pub plugin_name: String,
    /// Index of the main recording instance (default `00`: called first).
    pub plugin_index: String,
    /// Kubernetes namespace of the pods made (default `nri-conformance`).
    pub namespace: String,
    /// Creation rounds (pod + container each) of the sync-race phase
    /// (default 4; a second and third plugin register during rounds 1 and 2).
    pub sync_rounds: usize,
    /// Run the phases that wait past the runtime's request timeout (a
    /// plugin answering CreateContainer late, a plugin answering
    /// Synchronize late); default true, each costs the request timeout
    /// plus a second.
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
            namespace: "nri-conformance".into(),
            sync_rounds: 4,
            check_timeout: true,
            stop_runtime: None,
            registration_timeout: Duration::from_secs(30),
        }
    }
}

fn run_id() -> String {
    format!(
        "{:x}{:x}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() & 0xffffff)
            .unwrap_or(0)
    )
}

/// Registers with the runtime, drives pods and containers through crictl
/// (or only watches, in [`Mode::Passive`]), checks every clause and returns
/// the report.
///
/// Breaches of the contract are in the report; an error means the run
/// itself could not be done (the plugin could not register, a CRI step
/// that must work failed). Pods made by the run are removed in every case.
///
/// # Errors
///
/// See [`Error`].
pub async fn run(opts: Options) -> Result<Report, Error> {
    match &opts.mode {
        Mode::Cri(cri) => {
            let crictl = Crictl::new(cri.clone(), &run_id())?;
            let r = run_with(opts, &crictl).await;
            crictl.cleanup();
            r
        }
        Mode::Passive { duration } => {
            let duration = *duration;
            let (running, runtime) = start(&opts).await?;
            tokio::time::sleep(duration).await;
            finish(&opts, running, runtime, None).await
        }
    }
}

/// Like [`run`], driving the runtime through `cri` instead of crictl
/// (`opts.mode` is not used): a runtime embedding NRI can check itself.
///
/// # Errors
///
/// See [`Error`].
pub async fn run_with<C: Cri>(opts: Options, cri: &C) -> Result<Report, Error> {
    if opts.sync_rounds < 3 {
        return Err(Error::Options(
            "sync_rounds must be at least 3 (plugins register during rounds 1 and 2)".into(),
        ));
    }
    let (mut running, runtime) = start(&opts).await?;
    let id = run_id();
    let plan = Plan {
        main: running.main.clone(),
        prefix: format!("nc-{id}"),
        run_id: id,
        namespace: opts.namespace.clone(),
        request_timeout: Duration::from_millis(runtime.request_timeout_ms.max(100)),
        sync_rounds: opts.sync_rounds,
        slow_phases: opts.check_timeout,
    };
    let mut drv = Driver {
        cri,
        inst: &mut running.instances,
        plan,
        d: Driven::default(),
    };
    let r = drive(&mut drv).await;
    drv.cleanup().await;
    let mut driven = drv.d;
    if let Err(e) = r {
        running.instances.shutdown().await;
        return Err(e);
    }
    // Every teardown we did must reach the main instance; wait for it.
    let (log, main) = (running.instances.log.clone(), running.main.clone());
    let want = driven.teardown.pods.clone();
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
    driven.observers.push(running.tail.clone());
    finish(&opts, running, runtime, Some(driven)).await
}

/// The instances of a run.
struct Running {
    instances: Instances,
    main: String,
    tail: String,
    t0: Instant,
}

/// Registers the main instance (called first) and the tail instance (called
/// last: it sees each event after every other plugin).
async fn start(opts: &Options) -> Result<(Running, RuntimeSummary), Error> {
    let t0 = Instant::now();
    let mut instances = Instances::new(
        opts.nri_socket.clone(),
        &opts.plugin_name,
        opts.registration_timeout,
    );
    let mut names = Vec::new();
    for (suffix, index) in [("", opts.plugin_index.as_str()), ("tail", "99")] {
        match instances
            .spawn_synced(suffix, index, Behaviour::default())
            .await
        {
            Ok(n) => names.push(n),
            Err(e) => {
                instances.shutdown().await;
                return Err(e);
            }
        }
    }
    let (main, tail) = (names.remove(0), names.remove(0));
    let runtime = summary(instances.handle(&main));
    Ok((
        Running {
            instances,
            main,
            tail,
            t0,
        },
        runtime,
    ))
}

/// Stops the runtime if asked, stops the instances, evaluates.
async fn finish(
    opts: &Options,
    running: Running,
    runtime: RuntimeSummary,
    driven: Option<Driven>,
) -> Result<Report, Error> {
    let shutdown_asked = stop_runtime(opts, &running.instances, &running.main).await;
    let log = running.instances.log.clone();
    running.instances.shutdown().await;
    let shutdown_asked = shutdown_asked?;
    let records = log.snapshot();
    let clauses = evaluate(
        &records,
        &running.main,
        &runtime,
        driven.as_ref(),
        shutdown_asked,
    );
    Ok(Report {
        runtime,
        mode: if driven.is_some() { "cri" } else { "passive" }.into(),
        duration_ms: ms(running.t0.elapsed()),
        clauses,
        records,
    })
}

/// Runs the stop-runtime command, if any, and waits for the main instance
/// to be disconnected. Whether it was run.
async fn stop_runtime(opts: &Options, inst: &Instances, main: &str) -> Result<bool, Error> {
    let Some(argv) = opts.stop_runtime.as_ref().filter(|a| !a.is_empty()) else {
        return Ok(false);
    };
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
    let log = inst.log.clone();
    wait_until(Duration::from_secs(15), || {
        log.any(|r| is_disconnect_of(r, main))
    })
    .await;
    Ok(true)
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
