//! Phases where a plugin holds or fails a hook while the checker looks at
//! the runtime through CRI: StopPodSandbox held, RunPodSandbox failed,
//! RunPodSandbox held, CreateContainer held.

use std::time::Duration;

use crate::Error;
use crate::check::{CreateBlockedOutcome, RunBlockedOutcome, RunErrorOutcome, StopPodStateOutcome};
use crate::cri::{ContainerSpec, Cri, PodSpec, must};
use crate::instances::wait_until;
use crate::record::{EventKind, Record};
use crate::recorder::{Behaviour, Held, HoldPoint};

use tokio::sync::mpsc::UnboundedReceiver;

use super::{Driver, HOLD_ATTEMPTS, boxed, release_late, while_held};

/// Index of the holding instances: after the main one, before the tail.
const HOLD_INDEX: &str = "50";
/// Name of the container held in CreateContainer (of its first try).
const CREATE_HELD: &str = "cblk-held";

fn holding(event: EventKind, prefix: &str, point: HoldPoint) -> Behaviour {
    Behaviour {
        hold: Some((event, prefix.to_owned(), point)),
        ..Behaviour::default()
    }
}

/// Runs `f` with a deadline; `None` when it did not finish in time.
async fn within<T>(budget: Duration, f: impl Future<Output = T>) -> Option<T> {
    tokio::time::timeout(budget, f).await.ok()
}

/// The tag of pod `tag`'s `attempt`-th try (see [`HOLD_ATTEMPTS`]); the
/// holding instance's prefix, the first try's name, matches them all.
fn attempt_tag(tag: &str, attempt: u32) -> String {
    if attempt == 1 {
        tag.to_owned()
    } else {
        format!("{tag}-try{attempt}")
    }
}

/// Logs that the first try of `clause` missed its new instance; `late`:
/// whether the missed event reached the instance afterwards.
fn trying_again(clause: &str, late: bool) {
    tracing::info!(
        clause,
        late,
        "the first try missed the new instance (not active yet in the runtime); trying once more"
    );
}

/// Whether a hold is of the pod named `name`.
fn of_pod(name: &str) -> impl Fn(&Held) -> bool + '_ {
    move |h| h.pod.as_ref().is_some_and(|p| p.name == name)
}

/// Whether a hold is of the container named `name`.
fn of_container(name: &str) -> impl Fn(&Held) -> bool + '_ {
    move |h| h.container.as_ref().is_some_and(|c| c.name == name)
}

impl<C: Cri> Driver<'_, C> {
    /// StopPodSandbox held: the pod's containers must be listed as exited
    /// and the pod's status readable.
    pub(crate) async fn stop_pod_state(&mut self) -> Result<(), Error> {
        let (point, mut rx) = HoldPoint::new(self.hold_max());
        let b = holding(EventKind::StopPodSandbox, &self.spec("stops").name, point);
        let holder = self.inst.spawn_synced("hold-stop", HOLD_INDEX, b).await?;
        let mut attempt = 1;
        let o = loop {
            let tag = attempt_tag("stops", attempt);
            let mut o = self.stop_pod_state_once(&tag, &mut rx).await?;
            o.attempts = attempt;
            if o.held || o.stop_error.is_some() || attempt == HOLD_ATTEMPTS {
                break o;
            }
            // Not held, stopped all the same: remove it and try again.
            must(
                || format!("remove pod {}", o.pod),
                self.cri.remove_pod(&o.pod).await,
            )?;
            self.removed_pod(&o.pod);
            let missed = self.spec(&tag).name;
            let late = release_late(&mut rx, of_pod(&missed), self.late_budget()).await;
            trying_again("stop-pod-state", late);
            attempt += 1;
        };
        // Before the clean-up: a stop that failed is repeated by it.
        self.inst.stop_and_wait(&holder).await;
        let (stopped, pod) = (o.stop_error.is_none(), o.pod.clone());
        self.d.stop_pod_state = Some(o);
        if stopped {
            must(
                || format!("remove pod {pod}"),
                self.cri.remove_pod(&pod).await,
            )?;
            self.removed_pod(&pod);
            Ok(())
        } else {
            self.remove_pod(&pod).await
        }
    }

    async fn stop_pod_state_once(
        &mut self,
        tag: &str,
        rx: &mut UnboundedReceiver<Held>,
    ) -> Result<StopPodStateOutcome, Error> {
        let (pod, spec) = self.pod(tag).await?;
        let ctr = self.must_run(&pod, &spec, "c1").await?;
        let (c, budget, pod_ref) = (self.cri, self.probe_budget(), &pod);
        let (stop, probe) = boxed(|| {
            while_held(
                c.stop_pod(pod_ref),
                rx,
                of_pod(&spec.name),
                |h| async move {
                    let looked = within(budget, async {
                        tokio::join!(c.list_containers(pod_ref), c.pod_status(pod_ref))
                    })
                    .await;
                    h.release();
                    looked
                },
            )
        })
        .await;
        let mut o = StopPodStateOutcome {
            pod: pod.clone(),
            containers: vec![ctr],
            held: probe.is_some(),
            stop_error: stop?.err(),
            ..StopPodStateOutcome::default()
        };
        if let Some(Some((list, status))) = probe {
            o.listed = Some(list?);
            o.pod_status = Some(status?);
        }
        Ok(o)
    }

    /// RunPodSandbox refused once by a plugin: the run fails, nothing is
    /// left, the retry works. A run that worked may have missed the new
    /// refusing instance (see [`HOLD_ATTEMPTS`]): that pod is removed and
    /// the phase tried once more with another.
    pub(crate) async fn run_error(&mut self) -> Result<(), Error> {
        let b = Behaviour {
            fail_run_pod_once: Some(self.spec("runerr").name),
            ..Behaviour::default()
        };
        let failer = self.inst.spawn_synced("fail-run", "92", b).await?;
        let mut attempt = 1;
        let o = loop {
            let mut o = self
                .run_error_once(
                    &attempt_tag("runerr", attempt),
                    &failer,
                    attempt == HOLD_ATTEMPTS,
                )
                .await?;
            o.attempts = attempt;
            if o.failed_error.is_some() || attempt == HOLD_ATTEMPTS {
                break o;
            }
            let seen = |r: &Record| {
                r.instance == failer
                    && r.as_event()
                        .is_some_and(|(e, p, _)| e == EventKind::RunPodSandbox && p.name == o.name)
            };
            let log = &self.inst.log;
            let late = wait_until(self.late_budget(), || log.any(seen)).await;
            trying_again("run-pod-error", late);
            attempt += 1;
        };
        self.inst.stop_and_wait(&failer).await;
        self.d.run_error = Some(o);
        Ok(())
    }

    /// One try of [`Self::run_error`]. A run that worked is removed; on the
    /// `last` try the retry follows all the same (its row is judged whole).
    async fn run_error_once(
        &mut self,
        tag: &str,
        failer: &str,
        last: bool,
    ) -> Result<RunErrorOutcome, Error> {
        let c = self.cri;
        let spec = self.spec(tag);
        let mut o = RunErrorOutcome {
            name: spec.name.clone(),
            ..RunErrorOutcome::default()
        };
        match c.run_pod(&spec).await? {
            Ok(id) => {
                // It should not have worked; take it away.
                self.made_pod(&id, &spec);
                self.remove_pod(&id).await?;
                if !last {
                    return Ok(o);
                }
            }
            Err(e) => {
                o.failed_error = Some(e);
                o.attempted = self.inst.log.snapshot().iter().rev().find_map(|r| {
                    r.as_event()
                        .filter(|(e, p, c)| {
                            r.instance == failer
                                && *e == EventKind::RunPodSandbox
                                && c.is_none()
                                && p.name == spec.name
                        })
                        .map(|(_, p, _)| p.id.clone())
                });
                if let Some(id) = &o.attempted {
                    self.d.metadata.pods.insert(id.clone(), spec.clone());
                }
                let pods = must(|| "list pods".into(), c.list_pods().await)?;
                o.left_behind = pods
                    .iter()
                    .filter(|p| p.name == spec.name || o.attempted.as_ref() == Some(&p.id))
                    .map(|p| p.id.clone())
                    .collect();
                // Whatever was left must go at the end.
                self.d.live_pods.extend(o.left_behind.iter().cloned());
            }
        }
        match c.run_pod(&spec).await? {
            Ok(id) => {
                self.made_pod(&id, &spec);
                o.retry_state = Some(c.pod_status(&id).await?.map(|s| s.state));
                self.remove_pod(&id).await?;
            }
            Err(e) => o.retry_error = Some(e),
        }
        Ok(o)
    }

    /// RunPodSandbox held: the pod must not be listed or ready, and a
    /// container cannot be created in it.
    pub(crate) async fn run_blocked(&mut self) -> Result<(), Error> {
        let (point, mut rx) = HoldPoint::new(self.hold_max());
        let b = holding(EventKind::RunPodSandbox, &self.spec("runblk").name, point);
        let holder = self.inst.spawn_synced("hold-run", HOLD_INDEX, b).await?;
        let mut attempt = 1;
        let o = loop {
            let mut o = self
                .run_blocked_once(&attempt_tag("runblk", attempt), &mut rx)
                .await?;
            o.attempts = attempt;
            if o.held.is_some() || o.run_error.is_some() || attempt == HOLD_ATTEMPTS {
                break o;
            }
            let late = release_late(&mut rx, of_pod(&o.name), self.late_budget()).await;
            trying_again("run-pod-blocked", late);
            attempt += 1;
        };
        self.d.run_blocked = Some(o);
        // Only now: a plugin that just went away can still fail the next
        // creation (containerd 2.3 calls it as a validator).
        self.inst.stop_and_wait(&holder).await;
        Ok(())
    }

    /// One try of [`Self::run_blocked`]; a pod that was run is removed.
    async fn run_blocked_once(
        &mut self,
        tag: &str,
        rx: &mut UnboundedReceiver<Held>,
    ) -> Result<RunBlockedOutcome, Error> {
        let spec = self.spec(tag);
        let (c, budget) = (self.cri, self.probe_budget());
        let in_held = ContainerSpec {
            name: "in-held".into(),
            command: None,
        };
        let (spec_ref, in_held_ref) = (&spec, &in_held);
        let (run, probe) = boxed(|| {
            while_held(
                c.run_pod(spec_ref),
                rx,
                of_pod(&spec.name),
                |h| async move {
                    let id = h.pod.as_ref().map(|p| p.id.clone()).unwrap_or_default();
                    // Both must be answered while the hook is held: a creation that
                    // reached the runtime only after the release proves nothing.
                    let (created, looked) = tokio::join!(
                        within(budget, c.create_container(&id, spec_ref, in_held_ref)),
                        within(budget, async {
                            tokio::join!(c.list_pods(), c.pod_status(&id))
                        })
                    );
                    h.release();
                    (id, created, looked)
                },
            )
        })
        .await;
        let mut o = RunBlockedOutcome {
            name: spec.name.clone(),
            ..RunBlockedOutcome::default()
        };
        if let Some((id, created, looked)) = probe {
            if let Some(created) = created {
                let created = created?;
                if let Ok(cid) = &created {
                    self.made_container(cid, &in_held.name, &id);
                }
                o.create_while_held = Some(created);
            }
            if let Some((list, status)) = looked {
                let state = |pods: Vec<crate::cri::PodStatus>| {
                    pods.iter().find(|p| p.id == id).map(|p| p.state)
                };
                o.listed = Some(list?.map(state));
                o.status = Some(status?.map(|s| s.state));
            }
            self.d.metadata.pods.insert(id.clone(), spec.clone());
            o.held = Some(id);
        }
        match run? {
            Ok(id) => {
                self.made_pod(&id, &spec);
                o.state_after = Some(c.pod_status(&id).await?.map(|s| s.state));
                o.create_after_error = self.create(&id, &spec, "after").await?.err();
                self.remove_pod(&id).await?;
            }
            Err(e) => o.run_error = Some(e),
        }
        Ok(o)
    }

    /// CreateContainer held: the container must not be listed as created.
    pub(crate) async fn create_blocked(&mut self) -> Result<(), Error> {
        let (point, mut rx) = HoldPoint::new(self.hold_max());
        let b = holding(EventKind::CreateContainer, CREATE_HELD, point);
        let holder = self.inst.spawn_synced("hold-create", HOLD_INDEX, b).await?;
        let mut attempt = 1;
        let (o, pod) = loop {
            let (pod, spec) = self.pod(&attempt_tag("ctrblk", attempt)).await?;
            let name = attempt_tag(CREATE_HELD, attempt);
            let mut o = self
                .create_blocked_once(&pod, &spec, &name, &mut rx)
                .await?;
            o.attempts = attempt;
            if o.held.is_some() || o.create_error.is_some() || attempt == HOLD_ATTEMPTS {
                break (o, pod);
            }
            self.remove_pod(&pod).await?;
            let late = release_late(&mut rx, of_container(&o.name), self.late_budget()).await;
            trying_again("create-blocked", late);
            attempt += 1;
        };
        self.inst.stop_and_wait(&holder).await;
        self.d.create_blocked = Some(o);
        self.remove_pod(&pod).await
    }

    async fn create_blocked_once(
        &mut self,
        pod: &str,
        spec: &PodSpec,
        name: &str,
        rx: &mut UnboundedReceiver<Held>,
    ) -> Result<CreateBlockedOutcome, Error> {
        let (c, budget) = (self.cri, self.probe_budget());
        let ctr = ContainerSpec {
            name: name.into(),
            command: None,
        };
        let (created, probe) = boxed(|| {
            while_held(
                c.create_container(pod, spec, &ctr),
                rx,
                of_container(name),
                |h| async move {
                    let id = h
                        .container
                        .as_ref()
                        .map(|c| c.id.clone())
                        .unwrap_or_default();
                    let looked = within(budget, async {
                        tokio::join!(c.list_containers(pod), c.container_status(&id))
                    })
                    .await;
                    h.release();
                    (id, looked)
                },
            )
        })
        .await;
        let mut o = CreateBlockedOutcome {
            name: name.into(),
            ..CreateBlockedOutcome::default()
        };
        if let Some((id, looked)) = probe {
            if let Some((list, status)) = looked {
                let state = |l: Vec<crate::cri::ContainerStatus>| {
                    l.iter().find(|c| c.id == id).map(|c| c.state)
                };
                o.listed = Some(list?.map(state));
                o.status = Some(status?.map(|s| s.state));
            }
            o.held = Some(id);
        }
        match created? {
            Ok(id) => {
                self.made_container(&id, name, pod);
                o.state_after = Some(c.container_status(&id).await?.map(|s| s.state));
            }
            Err(e) => o.create_error = Some(e),
        }
        Ok(o)
    }
}
