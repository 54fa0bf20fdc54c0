//! The driven scenario: pods and containers made through [`Cri`] while the
//! recording instances watch, phase by phase; what each phase observed goes
//! into [`Driven`] for the checks.

use std::future::Future;
use std::pin::{Pin, pin};
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;

use crate::Error;
use crate::check::{
    CreateBlockedOutcome, CreateErrorOutcome, MetadataExpectation, RunBlockedOutcome,
    RunErrorOutcome, SelfExitOutcome, StopPodStateOutcome, StopTwiceOutcome, SyncHoldOutcome,
    TeardownErrorOutcome, TeardownExpectation, TimeoutOutcome,
};
use crate::cri::{ContainerSpec, Cri, CriResult, PodSpec, must};
use crate::instances::Instances;
use crate::recorder::Held;

mod basic;
mod errors;
mod hooks;
mod sync;

/// How long to wait for a held call to reach the holding instance.
const REACH_TIMEOUT: Duration = Duration::from_secs(30);

/// How many times a hold phase makes its call before it reports that the
/// call never reached the holding instance. That instance is new: it has
/// answered Synchronize, but the runtime may not have made it active yet,
/// and what the runtime does with an event in that window is its own
/// business (ours delivers it after the event, see docs/runtime/sync.md;
/// another may leave the new plugin out). A first miss can be that
/// window's; a second, after the first try's event reached the instance
/// late (so the instance is active) or not at all within
/// [`Driver::late_budget`], is the runtime's.
pub(crate) const HOLD_ATTEMPTS: u32 = 2;

/// What the driver did and observed.
#[derive(Debug, Default)]
pub(crate) struct Driven {
    /// Pods made and not yet removed (ids).
    pub(crate) live_pods: Vec<String>,
    pub(crate) teardown: TeardownExpectation,
    pub(crate) metadata: MetadataExpectation,
    /// Instances besides the main one whose order and scope are checked.
    pub(crate) observers: Vec<String>,
    pub(crate) sync_pods: Vec<String>,
    pub(crate) sync_containers: Vec<String>,
    pub(crate) sync_instances: Vec<String>,
    pub(crate) self_exit: Option<SelfExitOutcome>,
    pub(crate) stop_twice: Option<StopTwiceOutcome>,
    pub(crate) stop_pod_state: Option<StopPodStateOutcome>,
    pub(crate) run_error: Option<RunErrorOutcome>,
    pub(crate) run_blocked: Option<RunBlockedOutcome>,
    pub(crate) create_blocked: Option<CreateBlockedOutcome>,
    pub(crate) create_error: Option<CreateErrorOutcome>,
    pub(crate) teardown_error: Option<TeardownErrorOutcome>,
    pub(crate) sync_held: Option<SyncHoldOutcome>,
    pub(crate) sync_late: Option<SyncHoldOutcome>,
    pub(crate) timeout: Option<TimeoutOutcome>,
}

/// The scenario's settings.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// The main recording instance.
    pub(crate) main: String,
    /// Prefix of pod names (`nc-<run id>`).
    pub(crate) prefix: String,
    /// Run id (part of pod UIDs).
    pub(crate) run_id: String,
    /// Namespace of the pods.
    pub(crate) namespace: String,
    /// The runtime's request timeout.
    pub(crate) request_timeout: Duration,
    /// Creation rounds of the sync-race phase.
    pub(crate) sync_rounds: usize,
    /// Run the phases that wait past the request timeout.
    pub(crate) slow_phases: bool,
}

pub(crate) struct Driver<'a, C> {
    pub(crate) cri: &'a C,
    pub(crate) inst: &'a mut Instances,
    pub(crate) plan: Plan,
    pub(crate) d: Driven,
}

impl<C: Cri> Driver<'_, C> {
    /// The main recording instance's name.
    pub(crate) fn main_name(&self) -> String {
        self.plan.main.clone()
    }

    /// The pod `tag` of this run.
    pub(crate) fn spec(&self, tag: &str) -> PodSpec {
        PodSpec {
            name: format!("{}-{tag}", self.plan.prefix),
            namespace: self.plan.namespace.clone(),
            uid: format!("{}-{tag}", self.plan.run_id),
        }
    }

    /// Notes a pod the runtime made.
    pub(crate) fn made_pod(&mut self, id: &str, spec: &PodSpec) {
        self.d.live_pods.push(id.to_owned());
        self.d.metadata.pods.insert(id.to_owned(), spec.clone());
    }

    /// Runs pod `tag`; it must work.
    pub(crate) async fn pod(&mut self, tag: &str) -> Result<(String, PodSpec), Error> {
        let spec = self.spec(tag);
        let id = must(
            || format!("run pod {}", spec.name),
            self.cri.run_pod(&spec).await,
        )?;
        self.made_pod(&id, &spec);
        Ok((id, spec))
    }

    /// Notes a container the runtime made (torn down with its pod at the latest).
    pub(crate) fn made_container(&mut self, id: &str, name: &str, pod: &str) {
        self.d.teardown.containers.push(id.to_owned());
        (self.d.metadata.containers).insert(id.to_owned(), (name.to_owned(), pod.to_owned()));
    }

    /// Creates container `name` (default command) in pod `pod`.
    pub(crate) async fn create(
        &mut self,
        pod: &str,
        spec: &PodSpec,
        name: &str,
    ) -> CriResult<String> {
        self.create_cmd(pod, spec, name, None).await
    }

    /// Creates container `name` running `command` in pod `pod`.
    pub(crate) async fn create_cmd(
        &mut self,
        pod: &str,
        spec: &PodSpec,
        name: &str,
        command: Option<Vec<String>>,
    ) -> CriResult<String> {
        let ctr = ContainerSpec {
            name: name.to_owned(),
            command,
        };
        let r = self.cri.create_container(pod, spec, &ctr).await?;
        if let Ok(id) = &r {
            self.made_container(id, name, pod);
        }
        Ok(r)
    }

    /// Creates container `name`; it must work.
    pub(crate) async fn must_create(
        &mut self,
        pod: &str,
        spec: &PodSpec,
        name: &str,
    ) -> Result<String, Error> {
        let r = self.create(pod, spec, name).await;
        must(|| format!("create {name} in {}", spec.name), r)
    }

    /// Creates and starts container `name`; both must work.
    pub(crate) async fn must_run(
        &mut self,
        pod: &str,
        spec: &PodSpec,
        name: &str,
    ) -> Result<String, Error> {
        let id = self.must_create(pod, spec, name).await?;
        let r = self.cri.start_container(&id).await;
        must(|| format!("start {name} in {}", spec.name), r)?;
        Ok(id)
    }

    /// Notes that pod `id` is gone (removed by the runtime as asked).
    pub(crate) fn removed_pod(&mut self, id: &str) {
        self.d.live_pods.retain(|p| p != id);
        self.d.teardown.pods.push(id.to_owned());
    }

    /// Stops and removes a pod (and with it any container left in it).
    pub(crate) async fn remove_pod(&mut self, id: &str) -> Result<(), Error> {
        must(|| format!("stop pod {id}"), self.cri.stop_pod(id).await)?;
        must(|| format!("remove pod {id}"), self.cri.remove_pod(id).await)?;
        self.removed_pod(id);
        Ok(())
    }

    /// Removes whatever pods are left (after an error), best effort.
    pub(crate) async fn cleanup(&mut self) {
        for id in std::mem::take(&mut self.d.live_pods) {
            let _ = self.cri.stop_pod(&id).await;
            let _ = self.cri.remove_pod(&id).await;
        }
    }

    /// How long an instance holds an event at most: well within the
    /// runtime's request timeout, so the runtime does not give up on it.
    pub(crate) fn hold_max(&self) -> Duration {
        self.plan.request_timeout.mul_f64(0.75)
    }

    /// How long probes made during a hold may take.
    pub(crate) fn probe_budget(&self) -> Duration {
        self.plan.request_timeout / 2
    }

    /// How long a try that missed a new instance waits for the instance to
    /// get the missed event after all (see [`HOLD_ATTEMPTS`]): the runtime
    /// makes a plugin active within its request timeout of the answer.
    pub(crate) fn late_budget(&self) -> Duration {
        self.plan.request_timeout * 2
    }
}

/// After a try whose call missed the new instance: waits (at most
/// `budget`) for the hold of that call to arrive after all, and lets it go
/// at once. A runtime that queued the event for the instance (ours)
/// delivers it once the instance is active, so the next try meets an
/// active instance; a runtime that left the instance out never delivers
/// it, and the next try goes ahead when the wait runs out. Other holds met
/// on the way are let go too. Whether the late hold came.
pub(crate) async fn release_late(
    rx: &mut UnboundedReceiver<Held>,
    is_ours: impl Fn(&Held) -> bool,
    budget: Duration,
) -> bool {
    let deadline = tokio::time::Instant::now() + budget;
    while let Ok(Some(h)) = tokio::time::timeout_at(deadline, rx.recv()).await {
        let ours = is_ours(&h);
        h.release();
        if ours {
            return true;
        }
    }
    false
}

/// Runs `call` while waiting for the call it makes an instance hold: when a
/// [`Held`] for which `is_ours` is true arrives on `rx`, `on_held` runs
/// beside `call` (and must release it). Holds of earlier attempts (see
/// [`HOLD_ATTEMPTS`]) are released at once and do not count. `None` when
/// `call` finished without anything of ours being held.
pub(crate) async fn while_held<T, U, F, Fut>(
    call: impl Future<Output = T>,
    rx: &mut UnboundedReceiver<Held>,
    is_ours: impl Fn(&Held) -> bool,
    on_held: F,
) -> (T, Option<U>)
where
    F: FnOnce(Held) -> Fut,
    Fut: Future<Output = U>,
{
    let mut call = pin!(call);
    let deadline = tokio::time::Instant::now() + REACH_TIMEOUT;
    let held = loop {
        tokio::select! {
            held = tokio::time::timeout_at(deadline, rx.recv()) => match held {
                Ok(Some(h)) if is_ours(&h) => break Some(h),
                Ok(Some(stale)) => stale.release(),
                Ok(None) | Err(_) => break None,
            },
            t = &mut call => return (t, None),
        }
    };
    match held {
        Some(h) => {
            let (t, u) = tokio::join!(call, on_held(h));
            (t, Some(u))
        }
        None => (call.await, None),
    }
}

/// The future `make` returns, on the heap. It is built in this function's
/// stack frame, which is gone once it returns, so neither the caller's
/// future nor the caller's frame holds it: only a pointer. That matters in
/// debug builds, where every temporary keeps its own stack slot and the
/// future of a phase (CRI calls into a whole runtime, in the simulated
/// one) is tens of KiB; unboxed, `drive` came close to a test thread's
/// 2 MiB stack.
pub(crate) fn boxed<Fut: Future>(make: impl FnOnce() -> Fut) -> Pin<Box<Fut>> {
    Box::pin(make())
}

/// Runs every phase, each on the heap (see [`boxed`]); `plan.slow_phases`
/// adds the two that wait past the runtime's request timeout.
pub(crate) async fn drive<C: Cri>(drv: &mut Driver<'_, C>) -> Result<(), Error> {
    boxed(|| drv.lifecycle()).await?;
    boxed(|| drv.self_exit()).await?;
    boxed(|| drv.stop_twice()).await?;
    boxed(|| drv.stop_pod_state()).await?;
    boxed(|| drv.run_error()).await?;
    boxed(|| drv.run_blocked()).await?;
    boxed(|| drv.create_blocked()).await?;
    boxed(|| drv.sync_race()).await?;
    boxed(|| drv.sync_hold(false)).await?;
    boxed(|| drv.create_error()).await?;
    boxed(|| drv.teardown_error()).await?;
    if drv.plan.slow_phases {
        boxed(|| drv.sync_hold(true)).await?;
        boxed(|| drv.request_timeout()).await?;
    }
    Ok(())
}
