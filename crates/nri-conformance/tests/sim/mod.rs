//! A simulated runtime for the checker: pods and containers kept in memory,
//! every lifecycle step sent to plugins through `nri_runtime::Adaptation`
//! on a private socket, the CRI side offered as [`nri_conformance::Cri`].
//! [`Faults`] make it break one clause at a time, the way real runtimes do.

#![allow(dead_code)] // each test binary uses part of it

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nri_api::api::{Container, ContainerUpdate, PodSandbox};
use nri_conformance::{
    ContainerSpec, ContainerState, ContainerStatus, Cri, CriResult, PodSpec, PodState, PodStatus,
};
use nri_mux::sync::lock;
use nri_runtime::{
    Adaptation, BoxFuture, CallbackError, PluginFailure, RuntimeCallbacks, Snapshot,
};

/// Ways the simulated runtime breaks the contract (all off: it conforms).
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Pod events carry no pod UID.
    pub drop_pod_uid: bool,
    /// A container exiting on its own gets StopContainer only when removed.
    pub no_stop_on_exit: bool,
    /// StopPodSandbox goes to plugins before the containers are stopped.
    pub stop_pod_before_containers: bool,
    /// Stopping a stopped pod sends StopPodSandbox again.
    pub second_stop_event: bool,
    /// Containers can be created in a stopped pod.
    pub create_in_stopped_pod: bool,
    /// A pod whose RunPodSandbox failed stays listed.
    pub keep_failed_pod: bool,
    /// A pod is listed ready (and takes containers) before RunPodSandbox.
    pub list_pod_during_run: bool,
    /// A container is listed created before CreateContainer.
    pub list_container_during_create: bool,
    /// A container whose creation failed stays listed.
    pub keep_failed_container: bool,
    /// StopPodSandbox fails when a plugin failed it.
    pub fail_stop_pod_on_plugin_error: bool,
    /// Containers named `during-*` are made without telling plugins.
    pub hide_during_sync: bool,
    /// Containers named `during-*` cannot be created.
    pub refuse_during_sync: bool,
    /// RunPodSandbox goes to plugins after the pod's first CreateContainer,
    /// RemovePodSandbox before its containers' RemoveContainer.
    pub pod_events_out_of_place: bool,
    /// The first this many runs of the pods of the checker's RunPodSandbox
    /// phases (held: `*-runblk*`, refused: `*-runerr*`, each counted on its
    /// own) go to no plugin, as when a plugin that answered Synchronize is
    /// not active yet.
    pub missed_runs: u64,
}

#[derive(Debug, Clone)]
struct Pod {
    api: PodSandbox,
    ready: bool,
    /// RunPodSandbox not sent yet (fault `pod_events_out_of_place`).
    run_pending: bool,
}

#[derive(Debug, Clone)]
struct Ctr {
    api: Container,
    state: ContainerState,
    stop_sent: bool,
    exits: bool,
}

#[derive(Debug, Default)]
struct State {
    pods: BTreeMap<String, Pod>,
    ctrs: BTreeMap<String, Ctr>,
}

type Shared = Arc<Mutex<State>>;

struct Callbacks(Shared);

impl RuntimeCallbacks for Callbacks {
    fn list_pods_and_containers(&self) -> BoxFuture<'_, Result<Snapshot, CallbackError>> {
        let st = lock(&self.0);
        let pods = st.pods.values().map(|p| p.api.clone()).collect();
        let ctrs = st.ctrs.values().map(|c| c.api.clone()).collect();
        Box::pin(async move { Ok(Snapshot::new(pods, ctrs)) })
    }

    fn update_containers(
        &self,
        _updates: Vec<ContainerUpdate>,
    ) -> BoxFuture<'_, Result<Vec<ContainerUpdate>, CallbackError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// The simulated runtime.
pub struct Sim {
    nri: Adaptation,
    state: Shared,
    faults: Faults,
    next: AtomicU64,
    /// Runs left out of NRI so far, by phase (fault `missed_runs`).
    missed: Mutex<BTreeMap<&'static str, u64>>,
    _dir: tempfile::TempDir,
    socket: std::path::PathBuf,
}

/// The simulated runtime's request timeout (short: tests wait past it).
pub const REQUEST_TIMEOUT: Duration = Duration::from_millis(500);

impl Sim {
    /// Starts a simulated runtime with `faults`.
    pub async fn start(faults: Faults) -> anyhow::Result<Sim> {
        let dir = tempfile::tempdir()?;
        let socket = dir.path().join("nri.sock");
        let state = Shared::default();
        let nri = Adaptation::builder("sim", "v0.0.1")
            .socket_path(&socket)
            .disable_launch(true)
            .request_timeout(REQUEST_TIMEOUT)
            .registration_timeout(Duration::from_secs(5))
            .build(Arc::new(Callbacks(state.clone())))?;
        nri.start().await?;
        Ok(Sim {
            nri,
            state,
            faults,
            next: AtomicU64::new(1),
            missed: Mutex::default(),
            _dir: dir,
            socket,
        })
    }

    /// Its NRI socket.
    pub fn socket(&self) -> &std::path::Path {
        &self.socket
    }

    /// Stops the adaptation (plugins get Shutdown).
    pub async fn stop(&self) {
        self.nri.stop().await;
    }

    fn id(&self, kind: &str) -> String {
        format!("{kind}{:04}", self.next.fetch_add(1, Ordering::Relaxed))
    }

    /// Whether this run of pod `name` goes to no plugin (fault `missed_runs`).
    fn misses(&self, name: &str) -> bool {
        let Some(phase) = ["-runblk", "-runerr"]
            .into_iter()
            .find(|t| name.contains(t))
        else {
            return false;
        };
        let mut missed = lock(&self.missed);
        let n = missed.entry(phase).or_default();
        *n += 1;
        *n <= self.faults.missed_runs
    }

    fn pod(&self, id: &str) -> Option<Pod> {
        lock(&self.state).pods.get(id).cloned()
    }

    fn ctr(&self, id: &str) -> Option<(Ctr, PodSandbox)> {
        let st = lock(&self.state);
        let c = st.ctrs.get(id)?.clone();
        let p = st
            .pods
            .get(&c.api.pod_sandbox_id)
            .map(|p| p.api.clone())
            .unwrap_or_default();
        Some((c, p))
    }

    fn set_ctr(&self, id: &str, f: impl FnOnce(&mut Ctr)) {
        if let Some(c) = lock(&self.state).ctrs.get_mut(id) {
            f(c);
        }
    }

    /// Sends StopContainer once per container.
    async fn send_stop(&self, id: &str) {
        let Some((c, p)) = self.ctr(id) else { return };
        if c.stop_sent {
            return;
        }
        self.set_ctr(id, |c| {
            c.stop_sent = true;
            c.state = ContainerState::Exited;
        });
        let _ = self.nri.stop_container(&p, &c.api).await;
    }

    async fn stop_containers_of(&self, pod: &str) {
        let ids: Vec<String> = lock(&self.state)
            .ctrs
            .values()
            .filter(|c| c.api.pod_sandbox_id == pod)
            .map(|c| c.api.id.clone())
            .collect();
        for id in ids {
            self.send_stop(&id).await;
        }
    }
}

fn refused<T>(msg: impl Into<String>) -> CriResult<T> {
    Ok(Err(msg.into()))
}

impl Cri for Sim {
    async fn run_pod(&self, spec: &PodSpec) -> CriResult<String> {
        let id = self.id("pod");
        let api = PodSandbox {
            id: id.clone(),
            name: spec.name.clone(),
            namespace: spec.namespace.clone(),
            uid: if self.faults.drop_pod_uid {
                String::new()
            } else {
                spec.uid.clone()
            },
            ..PodSandbox::default()
        };
        let pod = |ready| Pod {
            api: api.clone(),
            ready,
            run_pending: false,
        };
        if self.faults.list_pod_during_run {
            lock(&self.state).pods.insert(id.clone(), pod(true));
        }
        if self.misses(&spec.name) {
            lock(&self.state).pods.insert(id.clone(), pod(true));
            return Ok(Ok(id));
        }
        if self.faults.pod_events_out_of_place {
            let mut p = pod(true);
            p.run_pending = true;
            lock(&self.state).pods.insert(id.clone(), p);
            return Ok(Ok(id));
        }
        match self.nri.run_pod_sandbox(&api).await {
            Ok(outcome) => {
                lock(&self.state).pods.insert(id.clone(), pod(true));
                drop(outcome.guard);
                Ok(Ok(id))
            }
            Err(e) => {
                // Undo for the plugins that saw it, as containerd does.
                let _ = self.nri.stop_pod_sandbox(&api).await;
                let _ = self.nri.remove_pod_sandbox(&api).await;
                let mut st = lock(&self.state);
                if self.faults.keep_failed_pod {
                    st.pods.insert(id.clone(), pod(false));
                } else {
                    st.pods.remove(&id);
                }
                refused(format!("NRI RunPodSandbox failed: {e}"))
            }
        }
    }

    async fn create_container(
        &self,
        pod_id: &str,
        _spec: &PodSpec,
        ctr: &ContainerSpec,
    ) -> CriResult<String> {
        let Some(pod) = self.pod(pod_id) else {
            return refused(format!("pod {pod_id} not found"));
        };
        if !pod.ready && !self.faults.create_in_stopped_pod {
            return refused(format!("pod {pod_id} is not ready"));
        }
        let during = ctr.name.starts_with("during-");
        if during && self.faults.refuse_during_sync {
            return refused("refused during a sync (fault)");
        }
        let id = self.id("ctr");
        let api = Container {
            id: id.clone(),
            pod_sandbox_id: pod_id.to_owned(),
            name: ctr.name.clone(),
            ..Container::default()
        };
        let exits = ctr
            .command
            .as_ref()
            .is_some_and(|c| c.iter().any(|a| a.contains("exit")));
        let entry = Ctr {
            api: api.clone(),
            state: ContainerState::Created,
            stop_sent: false,
            exits,
        };
        if self.faults.list_container_during_create || (during && self.faults.hide_during_sync) {
            lock(&self.state).ctrs.insert(id.clone(), entry.clone());
        }
        if during && self.faults.hide_during_sync {
            return Ok(Ok(id));
        }
        let created = self.nri.create_container(&pod.api, &api).await;
        if pod.run_pending {
            if let Some(p) = lock(&self.state).pods.get_mut(pod_id) {
                p.run_pending = false;
            }
            let _ = self.nri.run_pod_sandbox(&pod.api).await;
        }
        match created {
            Ok(outcome) => {
                lock(&self.state).ctrs.insert(id.clone(), entry);
                drop(outcome.guard);
                let _ = self.nri.post_create_container(&pod.api, &api).await;
                Ok(Ok(id))
            }
            Err(e) => {
                let _ = self.nri.stop_container(&pod.api, &api).await;
                let _ = self.nri.remove_container(&pod.api, &api).await;
                if self.faults.keep_failed_container {
                    lock(&self.state).ctrs.insert(id.clone(), entry);
                } else {
                    lock(&self.state).ctrs.remove(&id);
                }
                refused(format!("NRI CreateContainer failed: {e}"))
            }
        }
    }

    async fn start_container(&self, id: &str) -> CriResult<()> {
        let Some((c, p)) = self.ctr(id) else {
            return refused("no such container");
        };
        self.set_ctr(id, |c| c.state = ContainerState::Running);
        let _ = self.nri.start_container(&p, &c.api).await;
        let _ = self.nri.post_start_container(&p, &c.api).await;
        if c.exits {
            // It exits at once, on its own.
            self.set_ctr(id, |c| c.state = ContainerState::Exited);
            if !self.faults.no_stop_on_exit {
                self.send_stop(id).await;
            }
        }
        Ok(Ok(()))
    }

    async fn update_container(&self, id: &str, _cpu_shares: u64) -> CriResult<()> {
        let Some((c, p)) = self.ctr(id) else {
            return refused("no such container");
        };
        if let Err(e) = self.nri.update_container(&p, &c.api, None).await {
            return refused(e.to_string());
        }
        let _ = self.nri.post_update_container(&p, &c.api).await;
        Ok(Ok(()))
    }

    async fn stop_container(&self, id: &str) -> CriResult<()> {
        if self.ctr(id).is_none() {
            return Ok(Ok(()));
        }
        self.send_stop(id).await;
        Ok(Ok(()))
    }

    async fn remove_container(&self, id: &str) -> CriResult<()> {
        let Some((c, p)) = self.ctr(id) else {
            return Ok(Ok(()));
        };
        if c.state == ContainerState::Running {
            return refused("container is running");
        }
        self.send_stop(id).await;
        let _ = self.nri.remove_container(&p, &c.api).await;
        lock(&self.state).ctrs.remove(id);
        Ok(Ok(()))
    }

    async fn stop_pod(&self, id: &str) -> CriResult<()> {
        let Some(pod) = self.pod(id) else {
            return Ok(Ok(()));
        };
        if !pod.ready {
            if self.faults.second_stop_event {
                let _ = self.nri.stop_pod_sandbox(&pod.api).await;
            }
            return Ok(Ok(()));
        }
        if self.faults.stop_pod_before_containers {
            let r = self.nri.stop_pod_sandbox(&pod.api).await;
            self.stop_containers_of(id).await;
            return self.stopped(id, r);
        }
        self.stop_containers_of(id).await;
        let r = self.nri.stop_pod_sandbox(&pod.api).await;
        self.stopped(id, r)
    }

    async fn remove_pod(&self, id: &str) -> CriResult<()> {
        let Some(pod) = self.pod(id) else {
            return Ok(Ok(()));
        };
        if pod.ready {
            return refused("pod is not stopped");
        }
        let ids: Vec<String> = lock(&self.state)
            .ctrs
            .values()
            .filter(|c| c.api.pod_sandbox_id == id)
            .map(|c| c.api.id.clone())
            .collect();
        if self.faults.pod_events_out_of_place {
            let _ = self.nri.remove_pod_sandbox(&pod.api).await;
        }
        for c in ids {
            self.remove_container(&c).await?.ok();
        }
        if !self.faults.pod_events_out_of_place {
            let _ = self.nri.remove_pod_sandbox(&pod.api).await;
        }
        lock(&self.state).pods.remove(id);
        Ok(Ok(()))
    }

    async fn list_pods(&self) -> CriResult<Vec<PodStatus>> {
        let st = lock(&self.state);
        Ok(Ok(st.pods.values().map(pod_status).collect()))
    }

    async fn pod_status(&self, id: &str) -> CriResult<PodStatus> {
        match self.pod(id) {
            Some(p) => Ok(Ok(pod_status(&p))),
            None => refused(format!("pod {id} not found")),
        }
    }

    async fn list_containers(&self, pod_id: &str) -> CriResult<Vec<ContainerStatus>> {
        let st = lock(&self.state);
        Ok(Ok(st
            .ctrs
            .values()
            .filter(|c| c.api.pod_sandbox_id == pod_id)
            .map(ctr_status)
            .collect()))
    }

    async fn container_status(&self, id: &str) -> CriResult<ContainerStatus> {
        match self.ctr(id) {
            Some((c, _)) => Ok(Ok(ctr_status(&c))),
            None => refused(format!("container {id} not found")),
        }
    }
}

impl Sim {
    fn stopped(
        &self,
        id: &str,
        r: Result<nri_runtime::EventReport, nri_runtime::Error>,
    ) -> CriResult<()> {
        if let Some(p) = lock(&self.state).pods.get_mut(id) {
            p.ready = false;
        }
        match r {
            Ok(rep)
                if self.faults.fail_stop_pod_on_plugin_error
                    && rep
                        .errors
                        .iter()
                        .any(|e| matches!(e.failure, PluginFailure::Status { .. })) =>
            {
                refused(format!("NRI StopPodSandbox failed: {:?}", rep.errors))
            }
            _ => Ok(Ok(())),
        }
    }
}

fn pod_status(p: &Pod) -> PodStatus {
    PodStatus {
        id: p.api.id.clone(),
        name: p.api.name.clone(),
        state: if p.ready {
            PodState::Ready
        } else {
            PodState::NotReady
        },
    }
}

fn ctr_status(c: &Ctr) -> ContainerStatus {
    ContainerStatus {
        id: c.api.id.clone(),
        name: c.api.name.clone(),
        state: c.state,
    }
}
