//! CreateContainer: the fan-out in plugin order, each plugin seeing the
//! container as adjusted so far, the late plugins, then validation.
//!
//! The three phases share one [`Fanout`]: the request being built, the
//! result being merged and the plugins' errors so far.

use nri_api::api::{Container, CreateContainerResponse, Event, PodSandbox};
use nri_api::method;

use super::events::InTurn;
use super::{Adaptation, CreateContainerOutcome};
use crate::encode::CreatePayload;
use crate::error::Error;
use crate::failure::PluginError;
use crate::grants::Changes;
use crate::latency::{Turn, Turns};
use crate::metrics::{audit_owners_of, instance_in};
use crate::plugin::{Answer, PluginList};
use crate::registry::CreationGuard;
use nri_merge::{CreateResult, PluginId};

const EVENT: Event = Event::CreateContainer;

/// What the phases of one CreateContainer share.
struct Fanout<'a> {
    pod: &'a PodSandbox,
    container: &'a Container,
    /// The first request, encoded once, and the request cache.
    payload: CreatePayload,
    /// The result so far; it borrows the pod and the container (and copies
    /// the container only when a plugin adjusts it).
    result: CreateResult<&'a PodSandbox, &'a Container>,
    errors: Vec<PluginError>,
    /// The request cache's key: bumped whenever an applied response
    /// changed the container the next plugin sees.
    revision: u64,
    /// The late plugins called, with their instances (for the audit).
    late: Vec<(String, u64)>,
}

impl Adaptation {
    /// CreateContainer: the merged adjustment, updates of other containers
    /// and evictions, after validation.
    pub async fn create_container(
        &self,
        pod: &PodSandbox,
        container: &Container,
    ) -> Result<CreateContainerOutcome, Error> {
        self.check_started()?;
        let sh = &self.shared;
        // The first request is also the barrier's record of the creation.
        self.await_required(EVENT, pod).await;
        let payload = CreatePayload::new(pod, container);
        let (plugins, guard) =
            sh.registry
                .begin_creation(EVENT, pod, Some(container), payload.first());
        self.check_required(EVENT, &plugins, pod)?;
        let mut fanout = Fanout {
            pod,
            container,
            payload,
            result: CreateResult::new(pod, container),
            errors: Vec::new(),
            revision: 0,
            late: Vec::new(),
        };
        let answered = self.create_in_turn(&mut fanout, &plugins, &guard).await?;
        self.create_late(&mut fanout, &guard, &answered).await?;
        self.create_validated(fanout, &plugins, guard).await
    }

    /// The plugins of the snapshot, in turn; returns those whose answer
    /// was merged.
    async fn create_in_turn<'p>(
        &self,
        f: &mut Fanout<'_>,
        plugins: &'p PluginList,
        guard: &CreationGuard,
    ) -> Result<Vec<&'p PluginId>, Error> {
        let sh = &self.shared;
        let op = EVENT.pretty_name();
        let turn = InTurn::new(EVENT, method::CREATE_CONTAINER, Answer::Merged, f.pod)
            .replay(guard.replay());
        // What the last response that changed the container appended to it,
        // when that is all it did (the next request is then the previous
        // one plus this).
        let mut delta: Option<Container> = None;
        let mut answered: Vec<&PluginId> = Vec::new();
        let mut turns = Turns::new(plugins, EVENT);
        while let Some(next) = turns.next_turn() {
            let p = match next {
                Turn::Call(p) => p,
                Turn::Pass(p) => {
                    // Every plugin is noted in call order.
                    f.result.note_plugin(&p.id);
                    continue;
                }
            };
            let req = (f.payload).request(f.revision, f.result.container(), delta.as_ref());
            let resp: CreateContainerResponse =
                match self.call_in_turn(p, &turn, req, &mut f.errors).await? {
                    Some(resp) => resp,
                    None => continue,
                };
            if let Err(failure) = sh.answer_granted(p, &changes(f, &resp)).await {
                self.on_failure(p, EVENT, failure, f.pod, &mut f.errors)?;
                continue;
            }
            let (nu, ne) = (resp.update.len(), resp.evict.len());
            let adjusted = resp.adjust.is_some();
            let appended = if turns.is_last_call() {
                // No request after this one.
                None
            } else {
                (resp.adjust.as_ref())
                    .and_then(|a| crate::encode::append_delta(f.result.container(), a))
            };
            match f.result.apply_response(&p.id, resp) {
                Ok(()) => {
                    if adjusted {
                        f.revision += 1;
                        delta = appended;
                    }
                    sh.merge_succeeded(p, op, nu, ne);
                    answered.push(&p.id);
                }
                Err(e) => {
                    let failure = sh.merge_failure(p, op, e);
                    self.on_failure(p, EVENT, failure, f.pod, &mut f.errors)?;
                }
            }
        }
        Ok(answered)
    }

    /// Plugins that started synchronizing during the fan-out get the
    /// creation now, and their changes count (see docs/runtime/sync.md).
    async fn create_late(
        &self,
        f: &mut Fanout<'_>,
        guard: &CreationGuard,
        answered: &[&PluginId],
    ) -> Result<(), Error> {
        let sh = &self.shared;
        let op = EVENT.pretty_name();
        for slot in guard.close_late() {
            let req = f.payload.request(f.revision, f.result.container(), None);
            if answered.contains(&&slot.plugin.id) {
                // A new instance of a plugin whose previous instance
                // answered for this container before it disconnected: it
                // learns of the container, the answer already given stands.
                let (p, answer) = sh.call_late(slot, req, self.budget).await;
                if let Ok(resp) = answer {
                    // Answered, not merged: counted as answered.
                    sh.metrics.plugin_invocation(&p.name, op, Ok(()));
                    if resp.adjust.is_some() {
                        tracing::info!(plugin = %p.id, container = %f.container.id, "a plugin that re-registered during CreateContainer: its earlier instance's answer stands");
                    }
                }
                continue;
            }
            let (p, answer) = sh.call_late(slot, req, self.budget).await;
            let p = &p;
            f.late.push((p.name.clone(), p.instance));
            let resp = match answer {
                Ok(resp) => resp,
                Err(failure) => {
                    self.on_failure(p, EVENT, failure, f.pod, &mut f.errors)?;
                    continue;
                }
            };
            if let Err(failure) = sh.answer_granted(p, &changes(f, &resp)).await {
                self.on_failure(p, EVENT, failure, f.pod, &mut f.errors)?;
                continue;
            }
            let (nu, ne) = (resp.update.len(), resp.evict.len());
            let adjusted = resp.adjust.is_some();
            match f.result.apply_response(&p.id, resp) {
                Ok(()) => {
                    f.revision += u64::from(adjusted);
                    sh.merge_succeeded(p, op, nu, ne);
                }
                Err(e) => {
                    let failure = sh.merge_failure(p, op, e);
                    self.on_failure(p, EVENT, failure, f.pod, &mut f.errors)?;
                }
            }
        }
        Ok(())
    }

    /// Validation of the merged result, its audit, and the outcome.
    async fn create_validated(
        &self,
        mut f: Fanout<'_>,
        plugins: &PluginList,
        mut guard: CreationGuard,
    ) -> Result<CreateContainerOutcome, Error> {
        let sh = &self.shared;
        let op = EVENT.pretty_name();
        if !self.committed {
            // A container the runtime already has is not validated: there
            // is nothing left to refuse.
            sh.validate(plugins, f.pod, &f.result, &mut f.errors, self.budget)
                .await?;
        }
        let owners = f.result.owners().to_wire();
        let took_part = f.result.plugins().to_vec();
        let late = std::mem::take(&mut f.late);
        let instance_of = |name: &str| {
            (late.iter().find(|(n, _)| n == name).map(|(_, i)| *i))
                .or_else(|| instance_in(plugins, name))
        };
        for (plugin, n) in audit_owners_of(op, &owners, &instance_of) {
            sh.metrics.plugin_adjustments(&plugin, op, n, 0, 0);
        }
        let resp = f.result.into_response();
        guard.set_outcome(true);
        guard.known_once_released(sh.peers.known.clone());
        Ok(CreateContainerOutcome {
            adjustment: resp.adjust.unwrap_or_default(),
            updates: resp.update,
            evictions: resp.evict,
            owners,
            plugins: took_part,
            errors: f.errors,
            guard,
        })
    }
}

/// What a CreateContainer answer changes, for the plugin's grant.
fn changes<'a>(f: &Fanout<'a>, resp: &'a CreateContainerResponse) -> Changes<'a> {
    Changes {
        adjust: resp.adjust.as_ref(),
        updates: &resp.update,
        evictions: &resp.evict,
        ..Changes::answer(EVENT.pretty_name(), Some(f.pod), Some(&f.container.id))
    }
}
