//! CreateContainer: the fan-out in plugin order, each plugin seeing the
//! container as adjusted so far, the late plugins, then validation.

use nri_api::api::{Container, CreateContainerResponse, Event, PodSandbox};
use nri_api::method;

use super::events::InTurn;
use super::{Adaptation, CreateContainerOutcome};
use crate::error::Error;
use crate::latency::{Turn, Turns};
use crate::metrics::audit_owners;
use crate::plugin::Answer;
use nri_merge::{CreateResult, PluginId};

impl Adaptation {
    /// CreateContainer: the merged adjustment, updates of other containers
    /// and evictions, after validation.
    #[allow(clippy::too_many_lines)]
    pub async fn create_container(
        &self,
        pod: &PodSandbox,
        container: &Container,
    ) -> Result<CreateContainerOutcome, Error> {
        self.check_started()?;
        let ev = Event::CreateContainer;
        let op = ev.pretty_name();
        let sh = &self.shared;
        // The first request, encoded once, is also the barrier's record of
        // the creation; the result borrows the pod and the container (and
        // copies the container only when a plugin adjusts it).
        sh.await_required(ev, pod).await;
        let mut payload = crate::encode::CreatePayload::new(pod, container);
        let (plugins, guard) =
            sh.registry
                .begin_creation(ev, pod, Some(container), payload.first());
        sh.check_required(ev, &plugins, pod)?;
        let mut result = CreateResult::new(pod, container);
        let turn = InTurn::new(ev, method::CREATE_CONTAINER, Answer::Merged, pod);
        let mut errors = Vec::new();
        // The request cache's key: bumped whenever an applied response
        // changed the container the next plugin sees.
        let mut revision = 0u64;
        // What the last response that changed the container appended to it,
        // when that is all it did (the next request is then the previous
        // one plus this).
        let mut delta: Option<Container> = None;
        let mut answered: Vec<&PluginId> = Vec::new();
        let mut turns = Turns::new(&plugins, ev);
        while let Some(next) = turns.next_turn() {
            let p = match next {
                Turn::Call(p) => p,
                Turn::Pass(p) => {
                    // Every plugin is noted in call order.
                    result.note_plugin(&p.id);
                    continue;
                }
            };
            let req = payload.request(revision, result.container(), delta.as_ref());
            let resp: CreateContainerResponse =
                match self.call_in_turn(p, &turn, req, &mut errors).await? {
                    Some(resp) => resp,
                    None => continue,
                };
            let (nu, ne) = (resp.update.len(), resp.evict.len());
            let adjusted = resp.adjust.is_some();
            let appended = if turns.is_last_call() {
                // No request after this one.
                None
            } else {
                (resp.adjust.as_ref())
                    .and_then(|a| crate::encode::append_delta(result.container(), a))
            };
            let applied = result.apply_response(&p.id, resp);
            if applied.is_ok() && adjusted {
                revision += 1;
                delta = appended;
            }
            match applied {
                Ok(()) => {
                    sh.merge_succeeded(p, op, nu, ne);
                    answered.push(&p.id);
                }
                Err(e) => {
                    let f = sh.merge_failure(p, op, e);
                    sh.on_failure(p, ev, f, pod, &mut errors)?;
                }
            }
        }
        // Plugins that started synchronizing during the fan-out get the
        // creation now, and their changes count (see docs/runtime/sync.md).
        for slot in guard.close_late() {
            let p = &slot.plugin.clone();
            let req = payload.request(revision, result.container(), None);
            if answered.contains(&&p.id) {
                // A new instance of a plugin whose previous instance has
                // answered for this container: it learns of the container,
                // the answer already given stands.
                if let Ok(resp) = sh.call_late(slot, req, self.budget).await {
                    // Answered, not merged: counted as answered.
                    sh.metrics.plugin_invocation(&p.name, op, Ok(()));
                    if resp.adjust.is_some() {
                        tracing::info!(plugin = %p.id, container = %container.id, "a plugin that re-registered during CreateContainer: its earlier instance's answer stands");
                    }
                }
                continue;
            }
            let resp = match sh.call_late(slot, req, self.budget).await {
                Ok(resp) => resp,
                Err(f) => {
                    sh.on_failure(p, ev, f, pod, &mut errors)?;
                    continue;
                }
            };
            let (nu, ne) = (resp.update.len(), resp.evict.len());
            let adjusted = resp.adjust.is_some();
            match result.apply_response(&p.id, resp) {
                Ok(()) => {
                    revision += u64::from(adjusted);
                    sh.merge_succeeded(p, op, nu, ne);
                }
                Err(e) => {
                    let f = sh.merge_failure(p, op, e);
                    sh.on_failure(p, ev, f, pod, &mut errors)?;
                }
            }
        }
        sh.validate(&plugins, pod, &result, &mut errors, self.budget)
            .await?;
        let owners = result.owners().to_wire();
        for (plugin, n) in audit_owners(op, &owners) {
            sh.metrics.plugin_adjustments(&plugin, op, n, 0, 0);
        }
        let resp = result.into_response();
        guard.set_outcome(true);
        sh.peers.known.created(&container.id);
        Ok(CreateContainerOutcome {
            adjustment: resp.adjust.unwrap_or_default(),
            updates: resp.update,
            evictions: resp.evict,
            owners,
            errors,
            guard,
        })
    }
}
