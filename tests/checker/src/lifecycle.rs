//! The model runtime's side of each lifecycle step: the NRI events it
//! sends (through the runtime library, or the upstream library in proxy
//! mode) and what it does to the truth with their outcomes.
//!
//! What the model does, as containerd does it: an object is stored only
//! once its creation event succeeded; a failed creation is told to plugins
//! with its teardown events when the set-up says `undo`; a failed
//! StartContainer leaves the container exited (StopContainer follows); a
//! container that exits on its own changes the truth at once and
//! StopContainer follows later; stopping a pod stops its running
//! containers first, removing it removes its containers first.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use nri_api::api::{Container, ContainerState, Event, LinuxResources, PodSandbox};
use nri_runtime::{
    Adaptation, CreateContainerOutcome, Error, EventReport, PluginError, RunPodSandboxOutcome,
    StopContainerOutcome, UpdateContainerOutcome,
};
use tokio::time::Instant;

use crate::model::{Model, Request, TPod, ctr_object, pod_object, set_resources};
use crate::observe::lock;

/// Memory limit of a new container.
pub const CREATE_MEM: i64 = 256 << 20;

/// What the outcome of an event reports about plugins that failed
/// without failing it.
pub trait Reported {
    /// The reported plugin failures.
    fn reported(&self) -> &[PluginError];
}

macro_rules! reported {
    ($($t:ty),*) => {$(
        impl Reported for $t {
            fn reported(&self) -> &[PluginError] {
                &self.errors
            }
        }
    )*};
}
reported!(
    RunPodSandboxOutcome,
    CreateContainerOutcome,
    EventReport,
    UpdateContainerOutcome,
    StopContainerOutcome
);

/// The plugin an error names, if any.
pub fn blamed(e: &Error) -> Option<String> {
    match e {
        Error::PluginFailed { plugin, .. }
        | Error::RequiredPluginMissing { plugin, .. }
        | Error::ValidationRejected { plugin, .. }
        | Error::InvalidAdjustment { plugin, .. }
        | Error::InvalidUpdate { plugin, .. } => Some(plugin.clone()),
        _ => None,
    }
}

/// The runtime side of a run.
#[derive(Debug)]
pub struct Ctx {
    /// The library the runtime sends its events to (proxy mode: the
    /// upstream one, replaced when it restarts).
    pub nri: Mutex<Adaptation>,
    /// The truth.
    pub model: Arc<Model>,
    /// The deadline of every request (runtime mode).
    pub deadline: Option<Duration>,
    /// Tell plugins about failed creations.
    pub undo: bool,
    /// Proxy mode: the library behind the proxy (its plugins).
    pub behind: Option<Adaptation>,
}

/// A request under way: when it started.
struct Begun {
    event: Event,
    active: Vec<String>,
    behind: Vec<String>,
    object: String,
    tick: u64,
    at: Instant,
    deadline: Option<Duration>,
}

impl Ctx {
    /// The library handle for one request (with its deadline).
    fn handle(&self, event: Event, object: &str) -> (Adaptation, Begun) {
        let a = lock(&self.nri).clone();
        let at = Instant::now();
        let a = match self.deadline {
            Some(d) => a.with_deadline(at + d),
            None => a,
        };
        let names = |a: &Adaptation| a.plugins().iter().map(|p| p.id.to_string()).collect();
        let active = names(&a);
        let behind = self.behind.as_ref().map_or_else(Vec::new, names);
        let begun = Begun {
            event,
            active,
            behind,
            object: object.to_owned(),
            tick: self.model.clock.tick(),
            at,
            deadline: self.deadline,
        };
        (a, begun)
    }

    /// Records a finished request; its outcome if it succeeded.
    fn end<T: Reported>(&self, b: Begun, r: Result<T, Error>) -> Option<T> {
        let (error, failed_by, reported) = match &r {
            Ok(out) => (None, None, classes(out.reported())),
            Err(e) => (Some(e.to_string()), blamed(e), Vec::new()),
        };
        let failed_class = match &r {
            Err(Error::PluginFailed { cause, .. }) => Some(cause.class()),
            _ => None,
        };
        self.model.push(Request {
            event: b.event,
            object: b.object,
            ticks: (b.tick, self.model.clock.tick()),
            elapsed: b.at.elapsed(),
            deadline: b.deadline,
            error,
            failed_by,
            failed_class,
            reported,
            active: b.active,
            behind: b.behind,
        });
        r.ok()
    }

    fn pod(&self, id: &str) -> Option<TPod> {
        lock(&self.model.truth).pods.get(id).cloned()
    }

    fn ctr(&self, id: &str) -> Option<(PodSandbox, Container)> {
        let t = lock(&self.model.truth);
        let c = t.ctrs.get(id)?.clone();
        let pod = t.pods.get(&c.pod_sandbox_id)?.pod.clone();
        Some((pod, c))
    }

    /// The container and its pod, if the pod is ready (a container of a
    /// stopped pod is neither started nor updated).
    fn ready_ctr(&self, id: &str) -> Option<(PodSandbox, Container)> {
        let ready = {
            let t = lock(&self.model.truth);
            let c = t.ctrs.get(id)?;
            t.pods.get(&c.pod_sandbox_id)?.ready
        };
        if ready { self.ctr(id) } else { None }
    }

    fn set_state(&self, id: &str, state: ContainerState) {
        if let Some(c) = lock(&self.model.truth).ctrs.get_mut(id) {
            c.state = state as i32;
        }
    }

    fn begun(&self, id: &str) -> bool {
        lock(&self.model.began).contains_key(id)
    }

    /// RunPodSandbox of pod `n` (if it was never created).
    pub async fn run_pod(&self, n: u32) {
        let pod = pod_object(n);
        if self.begun(&pod.id) || self.pod(&pod.id).is_some() {
            return;
        }
        self.model.begin(&pod.id);
        let (a, b) = self.handle(Event::RunPodSandbox, &pod.id);
        let r = a.run_pod_sandbox(&pod).await;
        match self.end(b, r) {
            Some(out) => {
                let id = pod.id.clone();
                lock(&self.model.truth)
                    .pods
                    .insert(id, TPod { pod, ready: true });
                drop(out.guard);
            }
            None if self.undo => {
                self.stop_pod_events(&pod).await;
                self.remove_pod_event(&pod).await;
            }
            None => {}
        }
    }

    /// CreateContainer of container `n` in pod `p` (if it was never
    /// created and its pod is ready), then PostCreateContainer; when
    /// `abandon`, the runtime gives it up after NRI created it (told to
    /// plugins as a failed creation when the set-up says `undo`).
    pub async fn create(&self, n: u32, p: u32, abandon: bool) {
        let pod_id = format!("p{p}");
        let Some(TPod { pod, ready: true }) = self.pod(&pod_id) else {
            return;
        };
        let ctr = ctr_object(n, &pod_id, Some(CREATE_MEM));
        if self.begun(&ctr.id) || self.ctr(&ctr.id).is_some() {
            return;
        }
        self.model.begin(&ctr.id);
        let (a, b) = self.handle(Event::CreateContainer, &ctr.id);
        let r = a.create_container(&pod, &ctr).await;
        let out = self.end(b, r);
        let Some(out) = out.filter(|_| !abandon) else {
            if self.undo {
                self.stop_event(&pod, &ctr).await;
                self.remove_event(&pod, &ctr).await;
            }
            return;
        };
        let id = ctr.id.clone();
        lock(&self.model.asked_mem).insert(id.clone(), Some(CREATE_MEM));
        lock(&self.model.truth).ctrs.insert(id, ctr.clone());
        drop(out.guard);
        self.notify(Event::PostCreateContainer, &pod, Some(&ctr))
            .await;
    }

    /// StartContainer of a created container, then PostStartContainer; a
    /// failed start leaves it exited (and StopContainer follows).
    pub async fn start(&self, n: u32) {
        let id = format!("c{n}");
        let Some((pod, ctr)) = self.ready_ctr(&id) else {
            return;
        };
        if ctr.state != ContainerState::ContainerCreated as i32 {
            return;
        }
        let (a, b) = self.handle(Event::StartContainer, &id);
        let r = a.start_container(&pod, &ctr).await;
        if self.end(b, r).is_some() {
            self.set_state(&id, ContainerState::ContainerRunning);
            let ctr = self.ctr(&id).map_or(ctr, |(_, c)| c);
            self.notify(Event::PostStartContainer, &pod, Some(&ctr))
                .await;
        } else {
            self.stop_event(&pod, &ctr).await;
        }
    }

    /// UpdateContainer to `mem_mib`, then PostUpdateContainer.
    pub async fn update(&self, n: u32, mem_mib: u32) {
        let id = format!("c{n}");
        let Some((pod, ctr)) = self.ready_ctr(&id) else {
            return;
        };
        if ctr.state == ContainerState::ContainerStopped as i32 {
            return;
        }
        let mut res = LinuxResources::default();
        res.memory_mut().limit = Some((i64::from(mem_mib) << 20).into());
        let (a, b) = self.handle(Event::UpdateContainer, &id);
        let r = a.update_container(&pod, &ctr, Some(res.clone())).await;
        let Some(out) = self.end(b, r) else { return };
        let target = out.updates.iter().rev().find(|u| u.container_id == id);
        let applied = target
            .and_then(|u| u.linux.as_ref())
            .and_then(|l| l.resources.clone())
            .unwrap_or(res);
        let updated = {
            let mut t = lock(&self.model.truth);
            t.ctrs.get_mut(&id).map(|c| {
                set_resources(c, Some(&applied));
                c.clone()
            })
        };
        if let Some(c) = updated {
            lock(&self.model.asked_mem).insert(id, c.memory_limit());
            self.notify(Event::PostUpdateContainer, &pod, Some(&c))
                .await;
        }
    }

    /// The runtime stops a running container.
    pub async fn stop(&self, n: u32) {
        let id = format!("c{n}");
        let Some((pod, ctr)) = self.ctr(&id) else {
            return;
        };
        if ctr.state != ContainerState::ContainerRunning as i32 {
            return;
        }
        self.stop_event(&pod, &ctr).await;
    }

    /// A running container exits on its own: the truth changes now;
    /// returns what the StopContainer sent later needs.
    pub fn exit(&self, n: u32) -> Option<(PodSandbox, Container)> {
        let id = format!("c{n}");
        let (pod, ctr) = self.ctr(&id)?;
        if ctr.state != ContainerState::ContainerRunning as i32 {
            return None;
        }
        self.set_state(&id, ContainerState::ContainerStopped);
        let (_, ctr) = self.ctr(&id)?;
        Some((pod, ctr))
    }

    /// The StopContainer of a container that exited `after` ago.
    pub async fn exit_notify(&self, pod: PodSandbox, ctr: Container, after: Duration) {
        tokio::time::sleep(after).await;
        self.stop_event(&pod, &ctr).await;
    }

    /// RemoveContainer of a created or stopped container.
    pub async fn remove(&self, n: u32) {
        let id = format!("c{n}");
        let Some((pod, ctr)) = self.ctr(&id) else {
            return;
        };
        if ctr.state == ContainerState::ContainerRunning as i32 {
            return;
        }
        self.remove_event(&pod, &ctr).await;
        lock(&self.model.truth).ctrs.remove(&id);
        lock(&self.model.asked_mem).remove(&id);
    }

    /// UpdatePodSandbox, then PostUpdatePodSandbox.
    pub async fn update_pod(&self, n: u32) {
        let Some(TPod { pod, ready: true }) = self.pod(&format!("p{n}")) else {
            return;
        };
        let mut res = LinuxResources::default();
        res.cpu_mut().shares = Some(1024u64.into());
        let (a, b) = self.handle(Event::UpdatePodSandbox, &pod.id);
        let r = a.update_pod_sandbox(&pod, None, Some(res)).await;
        if self.end(b, r).is_some() {
            self.notify(Event::PostUpdatePodSandbox, &pod, None).await;
        }
    }

    /// StopPodSandbox, its running containers stopped first.
    pub async fn stop_pod(&self, n: u32) {
        let Some(TPod { pod, ready: true }) = self.pod(&format!("p{n}")) else {
            return;
        };
        for (pod, ctr) in self.containers_of(&pod.id) {
            if ctr.state == ContainerState::ContainerRunning as i32 {
                self.stop_event(&pod, &ctr).await;
            }
        }
        self.stop_pod_events(&pod).await;
        if let Some(p) = lock(&self.model.truth).pods.get_mut(&pod.id) {
            p.ready = false;
        }
    }

    /// RemovePodSandbox of a stopped pod, its containers removed first.
    pub async fn remove_pod(&self, n: u32) {
        let Some(TPod { pod, ready: false }) = self.pod(&format!("p{n}")) else {
            return;
        };
        for (pod, ctr) in self.containers_of(&pod.id) {
            self.remove_event(&pod, &ctr).await;
            lock(&self.model.truth).ctrs.remove(&ctr.id);
            lock(&self.model.asked_mem).remove(&ctr.id);
        }
        self.remove_pod_event(&pod).await;
        lock(&self.model.truth).pods.remove(&pod.id);
    }

    fn containers_of(&self, pod: &str) -> Vec<(PodSandbox, Container)> {
        let t = lock(&self.model.truth);
        let Some(p) = t.pods.get(pod) else {
            return Vec::new();
        };
        (t.ctrs.values())
            .filter(|c| c.pod_sandbox_id == pod)
            .map(|c| (p.pod.clone(), c.clone()))
            .collect()
    }

    /// The container is stopped (in the truth, if there), then
    /// StopContainer tells plugins, with the stopped container (as when
    /// containerd's exit handler reports an exit).
    async fn stop_event(&self, pod: &PodSandbox, ctr: &Container) {
        self.set_state(&ctr.id, ContainerState::ContainerStopped);
        let mut ctr = ctr.clone();
        ctr.state = ContainerState::ContainerStopped as i32;
        let (a, b) = self.handle(Event::StopContainer, &ctr.id);
        let r = a.stop_container(pod, &ctr).await;
        self.end(b, r);
    }

    async fn remove_event(&self, pod: &PodSandbox, ctr: &Container) {
        self.notify(Event::RemoveContainer, pod, Some(ctr)).await;
    }

    async fn stop_pod_events(&self, pod: &PodSandbox) {
        self.notify(Event::StopPodSandbox, pod, None).await;
    }

    async fn remove_pod_event(&self, pod: &PodSandbox) {
        self.notify(Event::RemovePodSandbox, pod, None).await;
    }

    /// One of the events that only notify.
    async fn notify(&self, ev: Event, pod: &PodSandbox, ctr: Option<&Container>) {
        let object = ctr.map_or(&pod.id, |c| &c.id);
        let (a, b) = self.handle(ev, object);
        let r = match (ev, ctr) {
            (Event::PostCreateContainer, Some(c)) => a.post_create_container(pod, c).await,
            (Event::PostStartContainer, Some(c)) => a.post_start_container(pod, c).await,
            (Event::PostUpdateContainer, Some(c)) => a.post_update_container(pod, c).await,
            (Event::RemoveContainer, Some(c)) => a.remove_container(pod, c).await,
            (Event::StopPodSandbox, _) => a.stop_pod_sandbox(pod).await,
            (Event::RemovePodSandbox, _) => a.remove_pod_sandbox(pod).await,
            (Event::PostUpdatePodSandbox, _) => a.post_update_pod_sandbox(pod).await,
            _ => return,
        };
        self.end(b, r);
    }
}

fn classes(errors: &[PluginError]) -> Vec<(String, nri_runtime::ErrorClass)> {
    errors
        .iter()
        .map(|e| (e.plugin.clone(), e.failure.class()))
        .collect()
}
