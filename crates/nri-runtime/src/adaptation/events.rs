//! The lifecycle events of [`Adaptation`] but CreateContainer
//! (`create.rs`): each fans the event out to the subscribed plugins, in
//! turn, or, for teardown events, to all of them at once. The methods of
//! the events that only notify are generated from the schema
//! (`src/generated/event_wrappers.rs`, by `cargo xtask codegen`).

use std::future::Future;
use std::sync::Arc;

use nri_api::api::{
    Container, Event, LinuxResources, PodSandbox, StopContainerResponse, UpdateContainerResponse,
    UpdatePodSandboxRequest, UpdatePodSandboxResponse, ValidateContainerAdjustmentRequest,
};
use nri_api::method;

use super::{
    Adaptation, EventReport, RunPodSandboxOutcome, StopContainerOutcome, UpdateContainerOutcome,
};
use crate::error::Error;
use crate::failure::{PluginError, PluginFailure};
use crate::grants::Changes;
use crate::latency::Turns;
use crate::metrics::{audit_owners_of, instance_in};
use crate::plugin::{Answer, Notification, Plugin, Replay, Within};
use nri_merge::{StopResult, UpdateResult};

include!("../generated/event_wrappers.rs");

impl Adaptation {
    /// RunPodSandbox. Fails when a `required` plugin is missing or a plugin
    /// with policy `fail`/`required` fails.
    pub async fn run_pod_sandbox(&self, pod: &PodSandbox) -> Result<RunPodSandboxOutcome, Error> {
        self.check_started()?;
        let ev = Event::RunPodSandbox;
        let n = Notification::new(ev, pod, None);
        self.await_required(ev, pod).await;
        let (plugins, guard) =
            (self.shared.registry).begin_creation(ev, pod, None, n.request().clone());
        self.check_required(ev, &plugins, pod)?;
        let mut errors = Vec::new();
        let mut turns = Turns::new(&plugins, ev);
        while let Some(p) = turns.next_call() {
            if let Err(f) = p
                .notify_prepared(&*self.shared.metrics, &n, self.budget, guard.replay())
                .await
            {
                self.on_failure(p, ev, f, pod, &mut errors)?;
            }
        }
        guard.set_outcome(true);
        Ok(RunPodSandboxOutcome { errors, guard })
    }

    /// UpdatePodSandbox (policy applies).
    pub async fn update_pod_sandbox(
        &self,
        pod: &PodSandbox,
        overhead: Option<LinuxResources>,
        resources: Option<LinuxResources>,
    ) -> Result<EventReport, Error> {
        self.check_started()?;
        let ev = Event::UpdatePodSandbox;
        let req = UpdatePodSandboxRequest {
            pod: Some(pod.clone()),
            overhead_linux_resources: overhead,
            linux_resources: resources,
        };
        let payload = bytes::Bytes::from(prost::Message::encode_to_vec(&req));
        let (plugins, in_flight) = (self.shared.registry).begin_event(ev, &payload, None);
        let turn = InTurn::new(ev, method::UPDATE_POD_SANDBOX, Answer::Counted, pod)
            .replay(in_flight.replay());
        let mut errors = Vec::new();
        let mut turns = Turns::new(&plugins, ev);
        while let Some(p) = turns.next_call() {
            let _: Option<UpdatePodSandboxResponse> = self
                .call_in_turn(p, &turn, payload.clone(), &mut errors)
                .await?;
        }
        Ok(EventReport { errors })
    }

    /// UpdateContainer: updates (the target's last) and evictions.
    pub async fn update_container(
        &self,
        pod: &PodSandbox,
        container: &Container,
        resources: Option<LinuxResources>,
    ) -> Result<UpdateContainerOutcome, Error> {
        self.check_started()?;
        let ev = Event::UpdateContainer;
        let op = ev.pretty_name();
        let sh = &self.shared;
        let mut result = UpdateResult::new(pod.clone(), container.clone(), resources);
        let first = bytes::Bytes::from(prost::Message::encode_to_vec(&result.request()));
        let (plugins, in_flight) = sh.registry.begin_event(ev, &first, Some(&container.id));
        let mut errors = Vec::new();
        let turn = InTurn::new(ev, method::UPDATE_CONTAINER, Answer::Merged, pod)
            .replay(in_flight.replay());
        let mut turns = Turns::new(&plugins, ev);
        let mut unchanged = Some(first);
        while let Some(p) = turns.next_call() {
            // The request as the first plugin gets it is encoded already.
            let req = unchanged.take().unwrap_or_else(|| {
                bytes::Bytes::from(prost::Message::encode_to_vec(&result.request()))
            });
            let resp: UpdateContainerResponse =
                match self.call_in_turn(p, &turn, req, &mut errors).await? {
                    Some(resp) => resp,
                    None => continue,
                };
            let changes = Changes {
                updates: &resp.update,
                evictions: &resp.evict,
                ..Changes::answer(op, Some(pod), Some(&container.id))
            };
            if let Err(f) = sh.answer_granted(p, &changes).await {
                self.on_failure(p, ev, f, pod, &mut errors)?;
                continue;
            }
            let (nu, ne) = (resp.update.len(), resp.evict.len());
            match result.apply_response(&p.id, resp) {
                Ok(()) => sh.merge_succeeded(p, op, nu, ne),
                Err(e) => {
                    let f = sh.merge_failure(p, op, e);
                    self.on_failure(p, ev, f, pod, &mut errors)?;
                }
            }
        }
        let owners = result.owners().to_wire();
        sh.validate_merged_updates(op, result.updates(), &owners, &plugins)?;
        audit_owners_of(op, &owners, &|n| instance_in(&plugins, n));
        let resp = result.into_response();
        Ok(UpdateContainerOutcome {
            updates: resp.update,
            evictions: resp.evict,
            errors,
        })
    }

    /// StopContainer (teardown: every subscribed plugin, never fails);
    /// returns the plugins' updates of other containers.
    pub async fn stop_container(
        &self,
        pod: &PodSandbox,
        container: &Container,
    ) -> Result<StopContainerOutcome, Error> {
        let ev = Event::StopContainer;
        if let Err(e) = self.check_started() {
            // As every teardown call: never an error, whatever the state.
            tracing::debug!(event = ev.pretty_name(), error = %e, "teardown event ignored");
            return Ok(StopContainerOutcome {
                updates: Vec::new(),
                errors: Vec::new(),
            });
        }
        let op = ev.pretty_name();
        let sh = &self.shared;
        // The request does not depend on other plugins' answers: send it to
        // every plugin at once, then merge the answers in plugin order.
        let req = crate::encode::pod_container_request(pod, Some(container));
        let (plugins, in_flight) = sh.registry.begin_event(ev, &req, Some(&container.id));
        let targets: Vec<&Arc<Plugin>> = plugins.iter().filter(|p| p.subscribed(ev)).collect();
        let budget = self.budget;
        let replay = in_flight.replay();
        let answers = join_all(targets.iter().map(|p| {
            let req = req.clone();
            async move {
                p.call_encoded::<StopContainerResponse>(
                    &*sh.metrics,
                    op,
                    method::STOP_CONTAINER,
                    req,
                    Within { budget, replay },
                    Answer::Merged,
                )
                .await
            }
        }))
        .await;
        let mut result = StopResult::new();
        let mut errors = Vec::new();
        for (p, r) in targets.into_iter().zip(answers) {
            match r {
                Ok(resp) => {
                    let nu = resp.update.len();
                    let changes = Changes {
                        updates: &resp.update,
                        ..Changes::answer(op, Some(pod), Some(&container.id))
                    };
                    if let Err(f) = sh.answer_granted(p, &changes).await {
                        self.on_failure(p, ev, f, pod, &mut errors)?;
                        continue;
                    }
                    match result.apply_response(&p.id, resp) {
                        Ok(()) => sh.merge_succeeded(p, op, nu, 0),
                        Err(e) => {
                            let f = sh.merge_failure(p, op, e);
                            self.on_failure(p, ev, f, pod, &mut errors)?;
                        }
                    }
                }
                Err(f) => self.on_failure(p, ev, f, pod, &mut errors)?,
            }
        }
        let owners = result.owners().to_wire();
        // Teardown never fails: rejected updates are dropped and reported.
        let updates = match sh.validate_merged_updates(op, result.updates(), &owners, &plugins) {
            Ok(()) => {
                audit_owners_of(op, &owners, &|n| instance_in(&plugins, n));
                result.into_response().update
            }
            Err(Error::ValidationRejected { plugin, reason }) => {
                let failure = PluginFailure::Rejected { reason };
                errors.push(PluginError::new(plugin, ev, failure));
                Vec::new()
            }
            Err(e) => return Err(e),
        };
        Ok(StopContainerOutcome { updates, errors })
    }

    /// ValidateContainerAdjustment sent by a runtime above this one (a
    /// proxy's case: the adjustment of every plugin of that runtime):
    /// runs the in-process validators and the validator plugins on `req`
    /// as given, with the same fail-closed rules as the validation of this
    /// library's own CreateContainer. `Ok` when no validator rejected it.
    ///
    /// # Errors
    ///
    /// [`Error::ValidationRejected`] naming the validator, a
    /// validator that failed closed ([`Error::PluginFailed`]), or
    /// [`Error::InvalidState`] before [`Adaptation::start`].
    pub async fn validate_container_adjustment(
        &self,
        req: &ValidateContainerAdjustmentRequest,
    ) -> Result<EventReport, Error> {
        self.check_started()?;
        let sh = &self.shared;
        let plugins = sh.registry.snapshot();
        let no_pod = PodSandbox::default();
        let pod = req.pod.as_ref().unwrap_or(&no_pod);
        let mut errors = Vec::new();
        sh.run_validators(&plugins, pod, req, &mut errors, self.budget)
            .await?;
        Ok(EventReport { errors })
    }

    /// The events that only notify (their typed methods are generated:
    /// `src/generated/event_wrappers.rs`).
    async fn notify_event(
        &self,
        ev: Event,
        pod: &PodSandbox,
        container: Option<&Container>,
    ) -> Result<EventReport, Error> {
        if let (Event::RemoveContainer, Some(c)) = (ev, container) {
            self.shared.peers.known.removed(&c.id);
        }
        if ev.is_teardown() {
            // Teardown is delivered even when not started yet is an API misuse;
            // report it but never fail a teardown.
            if let Err(e) = self.check_started() {
                tracing::debug!(event = ev.pretty_name(), error = %e, "teardown event ignored");
                return Ok(EventReport::default());
            }
        } else {
            self.check_started()?;
        }
        let sh = &self.shared;
        let n = Notification::new(ev, pod, container);
        let container_id = container.map(|c| c.id.as_str());
        let (plugins, in_flight) = sh.registry.begin_event(ev, n.request(), container_id);
        let mut errors = Vec::new();
        if ev.is_teardown() {
            // Teardown reaches every plugin whatever the others answer, so
            // nothing orders the calls: deliver to all at once, report the
            // failures in plugin order.
            let targets: Vec<&Arc<Plugin>> = plugins.iter().filter(|p| p.subscribed(ev)).collect();
            let answers = join_all(
                targets
                    .iter()
                    .map(|p| p.notify_prepared(&*sh.metrics, &n, self.budget, in_flight.replay())),
            )
            .await;
            if let (Event::RemoveContainer, Some(c)) = (ev, container) {
                // Again at its end: a listing asked for during the event
                // has the container (the runtime forgets it after the
                // event) and must not keep it known.
                sh.peers.known.removed(&c.id);
            }
            for (p, r) in targets.into_iter().zip(answers) {
                if let Err(f) = r {
                    self.on_failure(p, ev, f, pod, &mut errors)?;
                }
            }
        } else {
            let mut turns = Turns::new(&plugins, ev);
            while let Some(p) = turns.next_call() {
                let replay = in_flight.replay();
                if let Err(f) = p
                    .notify_prepared(&*sh.metrics, &n, self.budget, replay)
                    .await
                {
                    self.on_failure(p, ev, f, pod, &mut errors)?;
                }
            }
        }
        Ok(EventReport { errors })
    }
}

/// Runs the futures concurrently on the calling task; their outputs in input
/// order. One future is simply awaited.
async fn join_all<F: Future>(futs: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let mut futs: Vec<std::pin::Pin<Box<F>>> = futs.into_iter().map(Box::pin).collect();
    if futs.len() <= 1 {
        let mut out = Vec::with_capacity(futs.len());
        if let Some(f) = futs.pop() {
            out.push(f.await);
        }
        return out;
    }
    let mut out: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in futs.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *o = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

/// One event's call to each plugin in turn.
#[derive(Debug, Clone, Copy)]
pub(super) struct InTurn<'a> {
    event: Event,
    method: &'static str,
    answer: Answer,
    pod: &'a PodSandbox,
    replay: Replay<'a>,
}

impl<'a> InTurn<'a> {
    pub(super) fn new(
        event: Event,
        method: &'static str,
        answer: Answer,
        pod: &'a PodSandbox,
    ) -> Self {
        InTurn {
            event,
            method,
            answer,
            pod,
            replay: Replay::Nothing,
        }
    }

    /// What the event leaves for a plugin whose ready gate it waits at
    /// past its timeout.
    pub(super) fn replay(self, replay: Replay<'a>) -> Self {
        InTurn { replay, ..self }
    }
}

impl Adaptation {
    /// One plugin's turn: calls `p` with `req` within the event's budget;
    /// on failure the failure policy decides. The answer, or `None` when
    /// the plugin failed and the event goes on without it (the failure is
    /// in `errors`), or the error that fails the event.
    pub(super) async fn call_in_turn<R: prost::Message + prost::Name + Default>(
        &self,
        p: &Arc<Plugin>,
        turn: &InTurn<'_>,
        req: bytes::Bytes,
        errors: &mut Vec<PluginError>,
    ) -> Result<Option<R>, Error> {
        let metrics = &*self.shared.metrics;
        let op = turn.event.pretty_name();
        let within = Within {
            budget: self.budget,
            replay: turn.replay,
        };
        let answer = p
            .call_encoded(metrics, op, turn.method, req, within, turn.answer)
            .await;
        match answer {
            Ok(resp) => Ok(Some(resp)),
            Err(f) => {
                self.on_failure(p, turn.event, f, turn.pod, errors)?;
                Ok(None)
            }
        }
    }
}
