//! Delivery of what happened while a plugin synchronized (its backlog, see
//! `registry.rs` and `docs/runtime/sync.md`).

use std::sync::Arc;

use nri_api::api::{
    CreateContainerResponse, Event, StopContainerRequest, StopContainerResponse,
    UpdateContainerResponse, UpdateContainersRequest, UpdatePodSandboxResponse,
};
use nri_api::method;
use prost::Message as _;

use crate::adaptation::Shared;
use crate::failure::{ErrorClass, PluginFailure};
use crate::plugin::{Answer, Plugin};
use crate::registry::{
    Deferred, DeferredEvent, HandBack, Handover, Inflight, LateAnswer, LateOffer, LateSlot,
};

impl Shared {
    /// Before a plugin's listing: waits (within the plugin's request
    /// timeout) until the creations that are not queued for it (see
    /// [`Registry::begin_sync`](crate::registry::Registry::begin_sync))
    /// are stored, so that the listing has them. One still not released
    /// then is delivered after the fact if the plugin takes its event;
    /// otherwise, if its fan-out succeeded, it is returned, for the
    /// Synchronize to have it as its request did (and if the fan-out has
    /// not finished either, it is left out, with a warning).
    pub(crate) async fn await_finished_creations(
        &self,
        plugin: &Arc<Plugin>,
        finished: Vec<Arc<Inflight>>,
    ) -> Vec<Arc<Inflight>> {
        let deadline = tokio::time::Instant::now() + plugin.timeout;
        let mut unlisted = Vec::new();
        for i in finished {
            if released_by(deadline, &i).await {
                continue;
            }
            if i.is_for(plugin) {
                tracing::warn!(plugin = %plugin.id, container = i.id(), "a container created just before the plugin registered was not stored in time for its Synchronize; it gets it after the fact");
                self.registry.defer_finished(plugin, i);
            } else if i.has_succeeded() {
                tracing::warn!(plugin = %plugin.id, object = i.id(), "an object created just before the plugin registered was not stored in time for its Synchronize; it is synchronized as its creation request had it");
                unlisted.push(i);
            } else {
                tracing::warn!(plugin = %plugin.id, object = i.id(), "an object whose creation was still running when the plugin registered is not in its Synchronize (its creation did not finish within the plugin's request timeout)");
            }
        }
        unlisted
    }

    /// Before the listing of a newer instance taking over from an older
    /// one: waits (within the newer one's request timeout) until every
    /// event that had the older one in its snapshot has ended and its
    /// creations are stored, so that the listing has their outcome (they
    /// are the older instance's; the newer one never gets them as events).
    /// A creation not stored in time whose fan-out succeeded is returned,
    /// for the Synchronize to have it as its request had it.
    pub(crate) async fn await_predecessor(
        &self,
        plugin: &Arc<Plugin>,
        h: &Handover,
    ) -> Vec<Arc<Inflight>> {
        let deadline = tokio::time::Instant::now() + plugin.timeout;
        let mut unlisted = Vec::new();
        for i in &h.creations {
            if released_by(deadline, i).await {
                continue;
            }
            if i.has_succeeded() {
                tracing::warn!(plugin = %plugin.id, instance = plugin.instance, object = i.id(), "an object created by the older instance was not stored in time for the newer instance's Synchronize; it is synchronized as its creation request had it");
                unlisted.push(i.clone());
            } else {
                tracing::warn!(plugin = %plugin.id, instance = plugin.instance, object = i.id(), "an object whose creation the older instance was still handling is not in the newer instance's Synchronize (its creation did not finish within the request timeout)");
            }
        }
        if tokio::time::timeout_at(deadline, h.retired.cancelled())
            .await
            .is_err()
        {
            tracing::warn!(plugin = %plugin.id, instance = plugin.instance, predecessor = h.predecessor.instance, "events sent to the older instance did not end within the request timeout; the newer instance's Synchronize shows the state the runtime has now");
        }
        unlisted
    }

    /// Delivers one deferred event to a plugin that has just synchronized.
    pub(crate) async fn deliver_deferred(&self, plugin: &Arc<Plugin>, d: Deferred) {
        let res = match d {
            Deferred::Late(i, offer) => {
                self.deliver_late(plugin, &i, offer).await;
                Ok(())
            }
            Deferred::Creation(i) => {
                crate::plugin::committed(self.deliver_after_the_fact(plugin, &i)).await
            }
            Deferred::Event(d) => self.deliver_event(plugin, &d).await,
        };
        if let Err(e) = res {
            tracing::warn!(plugin = %plugin.id, error = %e, "delivering an event deferred by synchronization failed");
        }
    }

    /// A CreateContainer whose fan-out waits for this plugin: its request
    /// (the container as the other plugins adjusted it) is sent, and the
    /// answer goes back to the fan-out, which merges it like any other.
    /// The call has the plugin's own request timeout from when it is sent.
    /// If the fan-out stopped waiting before the backlog got here (its wait
    /// ran out behind the plugin's Synchronize or earlier deliveries), the
    /// plugin learns of the container after the fact, as from a queued
    /// creation: only if the creation succeeded, its changes not applied.
    async fn deliver_late(
        &self,
        plugin: &Arc<Plugin>,
        i: &Arc<Inflight>,
        offer: tokio::sync::oneshot::Receiver<LateOffer>,
    ) {
        let Ok(LateOffer {
            request,
            reply,
            sent,
        }) = offer.await
        else {
            // The creation failed (or was dropped) before it got to this
            // plugin: nothing to deliver.
            return;
        };
        let after_the_fact = reply.is_closed();
        if after_the_fact && !i.succeeded().await {
            return;
        }
        let _ = sent.send(());
        let call = plugin.call_unaccounted::<CreateContainerResponse>(
            &*self.metrics,
            "CreateContainer",
            method::CREATE_CONTAINER,
            request,
            plugin.timeout,
        );
        // After the fact, the plugin cannot refuse the container: the call
        // says so (`METADATA_COMMITTED`).
        let answer = if after_the_fact {
            crate::plugin::committed(call).await
        } else {
            call.await
        };
        // One call, accounted once: by the fan-out, which merges the
        // answer; or, when it no longer waits, here (the plugin's own
        // timeout is a strike, an answer in time resets the count).
        let sent = reply.send(LateAnswer {
            plugin: plugin.clone(),
            answer,
        });
        let Err(LateAnswer { answer, .. }) = sent else {
            return;
        };
        plugin.account(&*self.metrics, "CreateContainer", &answer);
        match answer {
            Ok(resp) if has_changes(&resp) => {
                tracing::warn!(plugin = %plugin.id, container = i.id(), "CreateContainer no longer waited for this plugin (reported as its timeout); its changes are not applied");
            }
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(plugin = %plugin.id, container = i.id(), error = %e, "late CreateContainer failed after the creation stopped waiting");
            }
        }
    }

    /// A creation the plugin learns about after the fact: the request as
    /// the other plugins got it, marked committed (the caller runs it in
    /// [`crate::plugin::committed`]); changes in the answer cannot be
    /// applied, nor can a refusal undo it.
    async fn deliver_after_the_fact(
        &self,
        plugin: &Arc<Plugin>,
        i: &Arc<Inflight>,
    ) -> Result<(), PluginFailure> {
        if !i.succeeded().await {
            return Ok(());
        }
        let metrics = &*self.metrics;
        if i.event == Event::CreateContainer {
            let resp = plugin
                .call_decoded::<CreateContainerResponse>(
                    metrics,
                    "CreateContainer",
                    method::CREATE_CONTAINER,
                    i.request().clone(),
                    plugin.timeout,
                    Answer::Counted,
                )
                .await?;
            if has_changes(&resp) {
                tracing::warn!(plugin = %plugin.id, container = i.id(), "ignoring changes to a container created before the plugin synchronized");
            }
            return Ok(());
        }
        match i.decode() {
            Ok((pod, container)) => {
                plugin
                    .notify(metrics, i.event, &pod, container.as_ref())
                    .await
            }
            Err(e) => {
                // Our own encoding: cannot fail to decode.
                tracing::error!(plugin = %plugin.id, error = %e, "nri-runtime: decoding a deferred creation failed");
                Ok(())
            }
        }
    }

    /// Any other event that was in flight when the sync started or
    /// started during it. The container updates and evictions a plugin
    /// answers to a deferred UpdateContainer or StopContainer cannot join
    /// that event's (long returned) result: they go through the checks of
    /// unsolicited updates and are applied the same way.
    async fn deliver_event(
        &self,
        plugin: &Arc<Plugin>,
        d: &DeferredEvent,
    ) -> Result<(), PluginFailure> {
        let metrics = &*self.metrics;
        let timeout = plugin.timeout;
        let (event, seq, request) = (d.event, d.seq, d.request.clone());
        let op = event.pretty_name();
        let (update, evict) = match event {
            Event::StopContainer => {
                let r: StopContainerResponse = plugin
                    .call_decoded(
                        metrics,
                        op,
                        method::STOP_CONTAINER,
                        request,
                        timeout,
                        Answer::Counted,
                    )
                    .await?;
                (r.update, Vec::new())
            }
            Event::UpdateContainer => {
                let r: UpdateContainerResponse = plugin
                    .call_decoded(
                        metrics,
                        op,
                        method::UPDATE_CONTAINER,
                        request,
                        timeout,
                        Answer::Counted,
                    )
                    .await?;
                (r.update, r.evict)
            }
            Event::UpdatePodSandbox => {
                let _: UpdatePodSandboxResponse = plugin
                    .call_decoded(
                        metrics,
                        op,
                        method::UPDATE_POD_SANDBOX,
                        request,
                        timeout,
                        Answer::Counted,
                    )
                    .await?;
                return Ok(());
            }
            _ => {
                // `{pod = 1, container = 2}`, as StopContainerRequest.
                let Ok(r) = StopContainerRequest::decode(request) else {
                    // Our own encoding: cannot fail to decode.
                    tracing::error!(plugin = %plugin.id, event = op, "nri-runtime: decoding a deferred event failed");
                    return Ok(());
                };
                let pod = r.pod.unwrap_or_default();
                return plugin
                    .notify(metrics, event, &pod, r.container.as_ref())
                    .await;
            }
        };
        let (update, superseded) = self.registry.drop_superseded(seq, update);
        if !superseded.is_empty() {
            tracing::warn!(plugin = %plugin.id, event = op, containers = ?superseded, "not applying the plugin's updates of containers updated again since this deferred event (the newer update stands; the plugin gets it too)");
        }
        if update.is_empty() && evict.is_empty() {
            return Ok(());
        }
        let req = UpdateContainersRequest { update, evict };
        if let Err(st) = self
            .unsolicited_update(&plugin.id, &plugin.peer(), &plugin.admission, false, req)
            .await
        {
            tracing::warn!(plugin = %plugin.id, event = op, error = %st, "changes answered to an event deferred by synchronization were refused");
        }
        Ok(())
    }
}

impl Shared {
    /// CreateContainer's call of a plugin that started synchronizing during
    /// its fan-out: hands the request to the plugin's backlog, waits until
    /// the backlog sends it (behind the plugin's Synchronize and earlier
    /// deliveries), then waits for the answer within the plugin's request
    /// timeout from then, as for any call (and as upstream, where a
    /// creation waits for a plugin's synchronization, then calls it). The
    /// wait for the send is not the plugin's time: it ends at the event's
    /// deadline, else after the plugin's request timeout, and then the
    /// creation goes on without the plugin, which gets the container
    /// afterwards (see `deliver_late`). Neither wait running out is a
    /// strike: the call, sent with the plugin's own timeout, is accounted
    /// when it ends: a timeout fails one call, and counts once.
    /// Returns the instance that answered with the answer (the plugin, or
    /// the instance it was taking over from and handed its backlog back
    /// to, see `registry/handover.rs`).
    pub(crate) async fn call_late(
        &self,
        slot: LateSlot,
        request: bytes::Bytes,
        budget: crate::plugin::Budget,
    ) -> (Arc<Plugin>, Result<CreateContainerResponse, PluginFailure>) {
        let LateSlot { plugin, offer } = slot;
        let gone = || PluginFailure::Disconnected {
            reason: "closed while synchronizing".into(),
        };
        // A closed plugin still gets the offer: while it is being
        // forgotten, its backlog may go to the instance it was taking over
        // from; once the backlog is dropped, the offer is refused.
        let metrics = &*self.metrics;
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        let (sent, is_sent) = tokio::sync::oneshot::channel();
        let late = LateOffer {
            request,
            reply: tx,
            sent,
        };
        let wait = match budget.time_for(&plugin, metrics, LATE_OP) {
            Ok(t) => t,
            Err(f) => {
                // The deadline passed before the plugin's turn: nobody
                // waits for its answer, and it gets the container after
                // the fact.
                rx.close();
                let _ = offer.send(late);
                return (plugin, Err(f));
            }
        };
        if offer.send(late).is_err() {
            return (plugin, Err(gone()));
        }
        // Until the backlog sends it (behind the plugin's Synchronize and
        // earlier deliveries): not the plugin's time.
        let timeout = match tokio::time::timeout(wait, is_sent).await {
            Ok(Ok(())) => budget.time_for(&plugin, metrics, LATE_OP),
            Ok(Err(_)) => return (plugin, Err(gone())),
            Err(_) => Err(late_not_sent(&plugin, metrics, budget, wait)),
        };
        let timeout = match timeout {
            Ok(t) => t,
            Err(f) => {
                // The backlog sends it (or has) and accounts the call.
                rx.close();
                return (plugin, Err(f));
            }
        };
        let answer = match tokio::time::timeout(timeout, &mut rx).await {
            Ok(Ok(answer)) => Some(answer),
            Ok(Err(_)) => return (plugin, Err(gone())),
            Err(_) => {
                // No answer after this: the backlog accounts the call. One
                // that came as the wait ran out is taken.
                rx.close();
                rx.try_recv().ok()
            }
        };
        match answer {
            Some(LateAnswer { plugin, answer }) => {
                // The call's one accounting (see `deliver_late`); an answer
                // is counted as an invocation once merged.
                plugin.account_unsettled(&*self.metrics, LATE_OP, &answer);
                (plugin, answer)
            }
            None => {
                tracing::warn!(plugin = %plugin.id, ?timeout, "NRI plugin's late CreateContainer timed out (the call is counted when it ends)");
                (plugin, Err(PluginFailure::Timeout { timeout }))
            }
        }
    }

    /// Delivers to an instance taken back (its successor failed before it
    /// was active) what was queued for the successor, then opens its gate
    /// for direct calls again.
    pub(crate) async fn deliver_handed_back(self: Arc<Self>, back: HandBack) {
        let HandBack {
            plugin,
            backlog,
            window: _window,
        } = back;
        for d in backlog {
            if plugin.is_closed() {
                break;
            }
            self.deliver_deferred(&plugin, d).await;
        }
        self.deliver_gated(&plugin).await;
    }

    /// After a plugin's backlog: the events whose wait at its ready gate
    /// ran out meanwhile, in order; then the gate opens (see
    /// `plugin/gate.rs`).
    pub(crate) async fn deliver_gated(&self, plugin: &Arc<Plugin>) {
        while let Some(d) = plugin.next_gated() {
            self.deliver_deferred(plugin, d).await;
        }
    }
}

const LATE_OP: &str = "CreateContainer";

/// A late plugin's CreateContainer was not sent in time
/// ([`PluginFailure::NotCalled`], no strike): the event's deadline passed
/// (counted in the metrics here), or the plugin's synchronization and
/// backlog took longer than its request timeout (the backlog counts the
/// call when it sends it). Either way the plugin gets the container
/// afterwards.
fn late_not_sent(
    plugin: &Plugin,
    metrics: &dyn crate::metrics::Metrics,
    budget: crate::plugin::Budget,
    wait: std::time::Duration,
) -> PluginFailure {
    if budget.0.is_some_and(|d| tokio::time::Instant::now() >= d) {
        tracing::warn!(plugin = %plugin.id, "NRI plugin not called for CreateContainer: the event's deadline passed while the plugin was synchronizing; it gets the container afterwards");
        metrics.plugin_invocation(&plugin.name, LATE_OP, Err(ErrorClass::NotCalled));
        return PluginFailure::NotCalled;
    }
    tracing::warn!(plugin = %plugin.id, ?wait, "NRI plugin not called for CreateContainer within its request timeout: the plugin was still synchronizing or delivering its backlog; it gets the container afterwards (not a strike)");
    PluginFailure::NotCalled
}

fn has_changes(resp: &CreateContainerResponse) -> bool {
    resp.adjust.is_some() || !resp.update.is_empty() || !resp.evict.is_empty()
}

/// Whether creation `i` is released (stored, or failed) by `deadline`.
async fn released_by(deadline: tokio::time::Instant, i: &Inflight) -> bool {
    tokio::time::timeout_at(deadline, i.released())
        .await
        .is_ok()
}
