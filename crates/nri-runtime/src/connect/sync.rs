//! The last phase of a connection's set-up: Synchronize behind the
//! barrier (in parts when the snapshot is large), the deferred
//! deliveries, then activation. See `registry.rs` and
//! `docs/runtime/sync.md`.

use std::sync::Arc;

use nri_api::api::SynchronizeResponse;
use nri_api::method;

use crate::adaptation::Shared;
use crate::config::Snapshot;
use crate::encode::{SyncEncoder, SyncLimits, SyncObjects, SyncParts};
use crate::error::RegistrationFailure;
use crate::grants::Changes;
use crate::plugin::{Answer, Plugin};
use crate::registry::{Activated, Handover, Inflight, SyncStart};

/// Largest Synchronize message we send: ttRPC's 4 MiB cap minus room for
/// the ttRPC request envelope.
const SYNC_MESSAGE_LIMIT: usize = 4 * 1024 * 1024 - 64 * 1024;
/// Size of each message when a snapshot does not fit in one: small enough
/// that the plugin starts decoding a few milliseconds into the sync and
/// the next message is encoded while it decodes (measured in
/// docs/benchmarks/nri.md).
const SYNC_PART_SIZE: usize = 1024 * 1024;
const SYNC_LIMITS: SyncLimits = SyncLimits {
    message: SYNC_MESSAGE_LIMIT,
    part: SYNC_PART_SIZE,
};
/// A WebAssembly plugin gets its snapshot in one message whatever its
/// size, as upstream's WebAssembly host gives it (no socket, so no message
/// cap and no split): guests are written for that, and one that cannot
/// answer a split Synchronize would otherwise be refused on a dense node.
/// The guest's memory bounds what it can take.
const WASM_SYNC_LIMITS: SyncLimits = SyncLimits {
    message: usize::MAX,
    part: SYNC_PART_SIZE,
};

impl Shared {
    /// Synchronize behind the barrier, then the deferred deliveries, then
    /// activation. See `registry.rs` and `docs/runtime/sync.md`. A newer
    /// instance of an active plugin takes over from it here (see
    /// `registry/handover.rs`); if it fails before it is active, the older
    /// instance is taken back.
    pub(crate) async fn synchronize(
        self: &Arc<Self>,
        plugin: &Arc<Plugin>,
    ) -> Result<(), RegistrationFailure> {
        // Until the backlog is delivered (or this fails): see `SyncWindow`.
        let SyncStart {
            finished,
            handover,
            window,
        } = self
            .registry
            .begin_sync(plugin)
            .ok_or(RegistrationFailure::Stopping)?;
        let res = self.sync_and_activate(plugin, finished, handover).await;
        // A plugin closed because its backlog overflowed fails whatever
        // step it was in: say why.
        let res = res.map_err(|e| self.registry.backlog_overflow(plugin).unwrap_or(e));
        if res.is_err() {
            // While the sync window is open: an instance taken back gets
            // the updates of the window checked as this one would have.
            self.forget(plugin);
        }
        drop(window);
        res
    }

    async fn sync_and_activate(
        self: &Arc<Self>,
        plugin: &Arc<Plugin>,
        finished: Vec<Arc<Inflight>>,
        handover: Option<Handover>,
    ) -> Result<(), RegistrationFailure> {
        let mut unlisted = self.await_finished_creations(plugin, finished).await;
        if let Some(h) = &handover {
            unlisted.extend(self.await_predecessor(plugin, h).await);
        }
        self.list_and_send(plugin, &unlisted).await?;
        // Strikes a re-instantiated WebAssembly plugin carries over count
        // from here: its Synchronize's answer is not the end of its run
        // of timeouts.
        plugin.apply_carried_strikes();
        let Activated {
            backlog,
            predecessor,
            evicted,
        } = match self.registry.activate(plugin) {
            Ok(a) => a,
            Err(e) => {
                plugin.mark_ready();
                return Err(e);
            }
        };
        for old in evicted {
            old.close("a newer instance took over from the instance that replaced it");
        }
        if let Some(o) = predecessor {
            self.retire(plugin, &o);
        }
        for d in backlog {
            if plugin.is_closed() {
                break;
            }
            self.deliver_deferred(plugin, d).await;
        }
        self.deliver_gated(plugin).await;
        if plugin.is_closed() {
            return Err(RegistrationFailure::LostDuringSync);
        }
        Ok(())
    }

    /// The older instance `o` of `plugin`, taken over from, now that
    /// `plugin` is active.
    fn retire(&self, plugin: &Plugin, o: &Plugin) {
        tracing::info!(plugin = %o.id, instance = o.instance, successor = plugin.instance, "NRI plugin instance retired: the newer instance is active; the older one gets no more events and is dropped when it disconnects");
    }

    /// The listing (with the objects of `unlisted`), the Synchronize, and
    /// the container updates of its answer.
    async fn list_and_send(
        &self,
        plugin: &Arc<Plugin>,
        unlisted: &[Arc<Inflight>],
    ) -> Result<(), RegistrationFailure> {
        let listing = self.peers.known.begin_listing();
        let snapshot = self.list_for(plugin).await?;
        let snapshot = with_unlisted(snapshot, unlisted);
        self.peers.known.listed(listing, &snapshot.containers);
        let objects = {
            let (queued_pods, queued_containers) = self.registry.queued_ids(plugin);
            SyncObjects::new(
                snapshot,
                |p| !queued_pods.contains(p.id.as_str()),
                |c| !queued_containers.contains(c.id.as_str()),
            )
        };
        let updates = self.send_sync(plugin, objects).await?;
        let updates = self.vet_sync_updates(plugin, updates).await;
        if !updates.is_empty() {
            match self.update_within(plugin.timeout, updates).await {
                Ok(failed) if !failed.is_empty() => {
                    tracing::warn!(plugin = %plugin.id, failed = failed.len(), "some container updates from Synchronize failed");
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(plugin = %plugin.id, error = %e, "container updates from Synchronize failed");
                }
            }
        }
        Ok(())
    }

    /// Sends the snapshot: one message when it fits under the size cap,
    /// otherwise parts of [`SYNC_PART_SIZE`], encoded on a thread of their
    /// own ahead of the part being sent ([`SyncParts`]).
    async fn send_sync(
        &self,
        plugin: &Arc<Plugin>,
        objects: SyncObjects,
    ) -> Result<Vec<nri_api::api::ContainerUpdate>, RegistrationFailure> {
        let limits = match plugin.origin {
            crate::plugin::PluginOrigin::Wasm => WASM_SYNC_LIMITS,
            _ => SYNC_LIMITS,
        };
        let mut encoder = SyncEncoder::new(objects, limits);
        if encoder.is_single() {
            let payload = encoder.next_message().await.unwrap_or_default();
            drop(encoder);
            return Ok(self.sync_call(plugin, payload).await?.update);
        }
        let mut parts = SyncParts::spawn(encoder);
        while let Some((payload, last)) = parts.next().await {
            let resp = self.sync_call(plugin, payload).await?;
            if last {
                return Ok(resp.update);
            }
            if !resp.more || !resp.update.is_empty() {
                return Err(RegistrationFailure::SplitSyncUnsupported);
            }
        }
        Err(RegistrationFailure::Synchronize {
            message: "the encoder stopped before the last message".into(),
        })
    }

    /// The container updates of a Synchronize answer, after the plugin's
    /// grant and the same checks, validation and audit as unsolicited
    /// updates; refused ones are dropped (logged), the plugin stays.
    async fn vet_sync_updates(
        &self,
        plugin: &Plugin,
        updates: Vec<nri_api::api::ContainerUpdate>,
    ) -> Vec<nri_api::api::ContainerUpdate> {
        const OPERATION: &str = "Synchronize";
        let mut changes = Changes::answer(OPERATION, None, None);
        changes.updates = &updates;
        if let Err(v) = self
            .granted(&plugin.name, &plugin.admission, &changes, plugin.timeout)
            .await
        {
            tracing::warn!(plugin = %plugin.id, error = %v.reason, "refusing the container updates of the Synchronize answer");
            return Vec::new();
        }
        let who = &plugin.admission.participant;
        match self.vet_updates(&plugin.id, &plugin.peer(), who, OPERATION, updates) {
            Ok(u) => u,
            Err(e) => {
                tracing::warn!(plugin = %plugin.id, error = %e, "refusing the container updates of the Synchronize answer");
                Vec::new()
            }
        }
    }

    async fn sync_call(
        &self,
        plugin: &Plugin,
        payload: bytes::Bytes,
    ) -> Result<SynchronizeResponse, RegistrationFailure> {
        plugin
            .call_decoded(
                &*self.metrics,
                "Synchronize",
                method::SYNCHRONIZE,
                payload,
                plugin.timeout,
                Answer::Counted,
            )
            .await
            .map_err(|e| RegistrationFailure::Synchronize {
                message: e.to_string(),
            })
    }
}

/// The snapshot with the objects of `unlisted` (creations the runtime did
/// not store in time for the listing, see `await_finished_creations`)
/// that it does not have, as their creation requests had them. Copies the
/// lists only when something is added.
fn with_unlisted(snapshot: Snapshot, unlisted: &[Arc<Inflight>]) -> Snapshot {
    let mut pods = Vec::new();
    let mut containers = Vec::new();
    for i in unlisted {
        let Ok((pod, container)) = i.decode() else {
            // Our own encoding: cannot fail to decode.
            continue;
        };
        match container {
            Some(c) if !snapshot.containers.iter().any(|x| x.id == c.id) => containers.push(c),
            Some(_) => {}
            None if !snapshot.pods.iter().any(|x| x.id == pod.id) => pods.push(pod),
            None => {}
        }
    }
    if pods.is_empty() && containers.is_empty() {
        return snapshot;
    }
    let mut all_pods = snapshot.pods.to_vec();
    all_pods.append(&mut pods);
    let mut all_containers = snapshot.containers.to_vec();
    all_containers.append(&mut containers);
    Snapshot::new(all_pods, all_containers)
}
