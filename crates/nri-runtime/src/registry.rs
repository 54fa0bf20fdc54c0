//! The plugin registry and the synchronization barrier.
//!
//! Design (user-facing text in `docs/runtime/sync.md`): there is no lock
//! held across any fan-out and no lifecycle event ever waits for a
//! registration. One short `std` mutex guards:
//!
//! * `active`: the sorted plugin list (copy-on-write; each event takes a
//!   snapshot of the `Arc`);
//! * `syncing`: plugins between "snapshot requested" and "active", each with
//!   a queue of *deferred* deliveries;
//! * `inflight`: creation events (RunPodSandbox, CreateContainer) from their
//!   start until the runtime releases the creation guard (object stored);
//! * `events`: every other event the plugins take, from its start until its
//!   fan-out returns.
//!
//! An event in flight when P starts syncing is queued for P (the runtime
//! applies its change once it returns, so P's listing may not have it),
//! like one that starts while P is syncing.
//! A creation event that starts while plugin P is syncing is queued for P;
//! so is every creation still in flight when P starts syncing, except a
//! CreateContainer whose fan-out is past calling plugins: P's listing
//! waits for its guard instead. A queued CreateContainer takes P as a
//! *late plugin*: its fan-out hands P's backlog the request once the other
//! plugins answered and merges P's answer ([`LateOffer`]). Objects in P's
//! queue are removed from P's Synchronize snapshot and delivered to P as
//! events after the snapshot (a queued creation is delivered only if its
//! fan-out succeeded). Every other creation finished (guard released) before
//! P started syncing, so the runtime lists it in the snapshot. Once the
//! snapshot is sent, P becomes active and its queue (the backlog) is closed
//! in one step under the mutex; events that start later see P as active and
//! wait for P's ready gate, which opens when the backlog has been delivered.
//! The backlog is bounded by what happened during the sync, so activation
//! never waits for a quiet moment.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use nri_api::api::{
    Container, ContainerUpdate, CreateContainerRequest, CreateContainerResponse, Event, PodSandbox,
};
use prost::Message as _;
use tokio::sync::{oneshot, watch};

use crate::error::RegistrationFailure;
use crate::failure::PluginFailure;
use crate::known::KnownContainers;
use crate::lock;
use crate::metrics::Metrics;
use crate::plugin::{Plugin, PluginList};

/// One creation event between its start and the release of its guard.
#[derive(Debug)]
pub(crate) struct Inflight {
    pub(crate) event: Event,
    /// Id of the object created: the pod, or the container.
    id: String,
    is_container: bool,
    /// The event's request as the first plugin got it (`{pod = 1,
    /// container = 2}`): shared with the fan-out, no copy of the pod and
    /// container per event; decoded only for a deferred delivery.
    request: Bytes,
    /// `None` while the fan-out runs, then whether it succeeded.
    outcome: watch::Sender<Option<bool>>,
    /// `true` once the guard is released (the runtime stored the object or
    /// gave up on it).
    released: watch::Sender<bool>,
    /// CreateContainer: the plugins that started synchronizing while the
    /// fan-out ran (`Some` until the fan-out closes the list, see
    /// [`CreationGuard::close_late`]).
    late: Mutex<Option<Vec<LateSlot>>>,
}

/// What a creation sends a plugin that started synchronizing during its
/// fan-out: the CreateContainer request (the container as adjusted by the
/// other plugins), and where the answer goes.
pub(crate) struct LateOffer {
    pub(crate) request: Bytes,
    pub(crate) reply: oneshot::Sender<Result<CreateContainerResponse, PluginFailure>>,
}

/// A creation's end of a late plugin's delivery.
pub(crate) struct LateSlot {
    pub(crate) plugin: Arc<Plugin>,
    pub(crate) offer: oneshot::Sender<LateOffer>,
}

impl std::fmt::Debug for LateSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LateSlot")
            .field("plugin", &self.plugin.name)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for LateOffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LateOffer").finish_non_exhaustive()
    }
}

impl Inflight {
    /// Waits for the fan-out's outcome; `false` if it failed or was dropped.
    pub(crate) async fn succeeded(&self) -> bool {
        let mut rx = self.outcome.subscribe();
        match rx.wait_for(Option::is_some).await {
            Ok(v) => v.unwrap_or(false),
            Err(_) => false,
        }
    }

    /// Whether the fan-out has finished and succeeded (without waiting).
    pub(crate) fn has_succeeded(&self) -> bool {
        *self.outcome.borrow() == Some(true)
    }

    /// Whether the creation event is one `plugin` takes.
    pub(crate) fn is_for(&self, plugin: &Plugin) -> bool {
        plugin.subscribed(self.event)
    }

    /// Waits until the creation's guard is released.
    pub(crate) async fn released(&self) {
        let mut rx = self.released.subscribe();
        let _ = rx.wait_for(|r| *r).await;
    }

    /// Adds a late plugin if the fan-out has not closed its list; returns
    /// the plugin's end, or `None` when the fan-out is past that point.
    fn add_late(&self, plugin: &Arc<Plugin>) -> Option<oneshot::Receiver<LateOffer>> {
        let mut late = lock(&self.late);
        let list = late.as_mut()?;
        let (tx, rx) = oneshot::channel();
        list.push(LateSlot {
            plugin: plugin.clone(),
            offer: tx,
        });
        Some(rx)
    }

    fn object_id(&self) -> (&str, bool) {
        (self.id.as_str(), self.is_container)
    }

    /// Id of the object created: the pod, or the container.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// The request as the first plugin got it, encoded.
    pub(crate) fn request(&self) -> &Bytes {
        &self.request
    }

    /// The pod and, for a container event, the container of the request.
    pub(crate) fn decode(&self) -> Result<(PodSandbox, Option<Container>), prost::DecodeError> {
        let r = CreateContainerRequest::decode(self.request.clone())?;
        Ok((r.pod.unwrap_or_default(), r.container))
    }
}

/// Something a syncing plugin gets after its snapshot.
#[derive(Debug)]
pub(crate) enum Deferred {
    /// A creation event that was in flight or started during the sync,
    /// delivered after the fact (RunPodSandbox; a CreateContainer whose
    /// fan-out had finished and whose guard was not released in time).
    Creation(Arc<Inflight>),
    /// A CreateContainer whose fan-out waits for this plugin's answer: the
    /// request comes through the receiver once the other plugins answered.
    Late(Arc<Inflight>, oneshot::Receiver<LateOffer>),
    /// Any other event that was in flight when the sync started, or
    /// started during it.
    Event(Arc<DeferredEvent>),
}

/// A non-creation event from its start until its fan-out returns: what a
/// plugin that starts synchronizing meanwhile, or whose sync the event
/// starts in, gets after its snapshot. The runtime applies the event's
/// change (a container running, a container or pod gone) once the event
/// returns, so a listing taken while it is in flight may not have it.
#[derive(Debug)]
pub(crate) struct DeferredEvent {
    pub(crate) event: Event,
    /// The event's request, encoded, shared with the fan-out (no copy of
    /// the pod and container per event): `{pod = 1, container = 2}`, plus
    /// `linux_resources = 3` for UpdateContainer; UpdatePodSandbox's is
    /// `{pod = 1, overhead = 2, resources = 3}`.
    pub(crate) request: Bytes,
    /// Where the event stands among the UpdateContainer events (see
    /// [`Registry::drop_superseded`]).
    pub(crate) seq: u64,
}

/// Keeps a non-creation event in flight (see [`DeferredEvent`]) until
/// dropped, when its fan-out has returned.
#[derive(Debug)]
pub(crate) struct EventGuard {
    registry: Option<Arc<Registry>>,
    seq: u64,
}

impl Drop for EventGuard {
    fn drop(&mut self) {
        if let Some(r) = self.registry.take() {
            r.lock().events.remove(&self.seq);
        }
    }
}

/// While plugins synchronize or deliver their backlog: the last
/// UpdateContainer of each container, so that what a plugin answers to a
/// deferred event is not applied over a newer update of a container (see
/// [`Registry::drop_superseded`]). Empty when no plugin is in its sync
/// window.
#[derive(Debug, Default)]
struct LastUpdates {
    /// Plugins in their sync window (from `begin_sync` until their backlog
    /// is delivered or they are gone).
    windows: usize,
    /// Number of the last UpdateContainer recorded.
    seq: u64,
    /// Container id → number of its last UpdateContainer.
    last: HashMap<String, u64>,
}

impl LastUpdates {
    /// Records an event about to be queued and returns its number: an
    /// UpdateContainer gets a new one (and is its container's last), any
    /// other event the current one.
    fn record(&mut self, event: Event, container: Option<&str>) -> u64 {
        if let (Event::UpdateContainer, Some(c), true) = (event, container, self.windows > 0) {
            self.seq += 1;
            self.last.insert(c.to_owned(), self.seq);
        }
        self.seq
    }
}

/// A plugin's sync window, from `begin_sync` until dropped (once its
/// backlog is delivered, or it failed).
pub(crate) struct SyncWindow(Arc<Registry>);

impl Drop for SyncWindow {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        st.updates.windows = st.updates.windows.saturating_sub(1);
        if st.updates.windows == 0 {
            st.updates.last.clear();
        }
    }
}

struct Syncing {
    plugin: Arc<Plugin>,
    queue: VecDeque<Deferred>,
    /// The queue went over its bound: it was dropped and the plugin
    /// closed; nothing more is queued.
    overflowed: bool,
}

impl Syncing {
    /// Whether one more event may be queued (the plugin takes it). At the
    /// bound the queue overflows instead: it is dropped (freeing what it
    /// held) and the plugin closed, and its registration fails.
    fn room_for(&mut self, event: Event, max: usize, metrics: &dyn Metrics) -> bool {
        if self.overflowed || !self.plugin.subscribed(event) {
            return false;
        }
        if self.queue.len() < max {
            return true;
        }
        self.overflowed = true;
        self.queue.clear();
        let kind = crate::error::RefusalKind::SyncBacklog;
        tracing::warn!(plugin = %self.plugin.id, limit = max, kind = kind.as_str(), "more events happened while the NRI plugin synchronized than its backlog may hold; closing it (it may reconnect)");
        metrics.peer_refused(&self.plugin.name, kind.as_str());
        self.plugin
            .close("backlog over its bound while synchronizing");
        false
    }
}

#[derive(Default)]
struct State {
    active: PluginList,
    syncing: Vec<Syncing>,
    names: HashSet<String>,
    /// Names (`NN-name` and base name) of every plugin that has been active.
    seen: HashSet<String>,
    inflight: HashMap<u64, Arc<Inflight>>,
    /// Non-creation events the plugins take part in, from their start
    /// until their fan-out returns (numbered with the creations).
    events: BTreeMap<u64, Arc<DeferredEvent>>,
    next_seq: u64,
    updates: LastUpdates,
    /// Set by [`Registry::clear`] (the runtime is stopping): no plugin
    /// registers, synchronizes or becomes active any more.
    closed: bool,
}

pub(crate) struct Registry {
    state: Mutex<State>,
    metrics: Arc<dyn Metrics>,
    /// Most events queued for one synchronizing plugin.
    max_backlog: usize,
    /// Bumped whenever a plugin becomes active or stops synchronizing.
    activations: watch::Sender<u64>,
}

/// Keeps a creation event in flight until released (dropped).
#[derive(Debug)]
pub struct CreationGuard {
    registry: Option<Arc<Registry>>,
    seq: u64,
    inflight: Option<Arc<Inflight>>,
    /// Where the container becomes known once the guard is released (a
    /// successful CreateContainer).
    known: Option<Arc<KnownContainers>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

impl CreationGuard {
    /// Closes the list of late plugins (no plugin is added after this) and
    /// returns it: the fan-out calls them before it finishes.
    pub(crate) fn close_late(&self) -> Vec<LateSlot> {
        self.inflight
            .as_ref()
            .and_then(|i| lock(&i.late).take())
            .unwrap_or_default()
    }

    /// Records the fan-out's outcome (the guard stays in flight until dropped).
    pub(crate) fn set_outcome(&self, ok: bool) {
        if let Some(i) = &self.inflight {
            i.outcome.send_if_modified(|v| {
                if v.is_none() {
                    *v = Some(ok);
                    true
                } else {
                    false
                }
            });
        }
    }

    /// The container is known (see `known.rs`) once the guard is
    /// released: the runtime has stored it then.
    pub(crate) fn known_once_released(&mut self, known: Arc<KnownContainers>) {
        self.known = Some(known);
    }

    /// Releases the guard: the runtime has stored the object (or given up
    /// on it). Same as dropping it.
    pub fn release(self) {}
}

impl Drop for CreationGuard {
    fn drop(&mut self) {
        self.set_outcome(false);
        // Late plugins not called (the fan-out failed first) are released.
        drop(self.close_late());
        if let Some(r) = self.registry.take() {
            r.lock().inflight.remove(&self.seq);
        }
        if let (Some(known), Some(i)) = (&self.known, &self.inflight) {
            known.created(&i.id);
        }
        if let Some(i) = &self.inflight {
            i.released.send_replace(true);
        }
    }
}

/// Something in flight when a plugin starts synchronizing.
enum Pending {
    Creation(Arc<Inflight>),
    Event(Arc<DeferredEvent>),
}

/// Whether creations are queued for syncing plugins: always, except in the
/// test-only build (feature `test-no-sync-queue`) that shows the race test
/// (`tests/sync_race.rs`) catches the objects lost without it.
const QUEUE_FOR_SYNCING: bool = !cfg!(feature = "test-no-sync-queue");

/// Which deferrable events are queued for syncing plugins.
fn deferrable(event: Event) -> bool {
    event.is_state_change_event()
        || matches!(
            event,
            Event::StopContainer | Event::UpdateContainer | Event::UpdatePodSandbox
        )
}

impl Registry {
    pub(crate) fn new(metrics: Arc<dyn Metrics>, max_backlog: usize) -> Self {
        Self {
            state: Mutex::new(State::default()),
            metrics,
            max_backlog,
            activations: watch::channel(0).0,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// The active plugins, in order (index, then name).
    pub(crate) fn snapshot(&self) -> PluginList {
        self.lock().active.clone()
    }

    /// Reserves a plugin identity; `false` if a plugin with that `NN-name`
    /// is registering, syncing or active.
    pub(crate) fn reserve(&self, full_name: &str) -> bool {
        let mut st = self.lock();
        !st.closed && st.names.insert(full_name.to_owned())
    }

    /// Whether the runtime is stopping (see [`clear`](Self::clear)).
    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Releases a reservation.
    pub(crate) fn release(&self, full_name: &str) {
        self.lock().names.remove(full_name);
    }

    /// Starts a non-creation event whose request (see [`DeferredEvent`])
    /// is `request`: the active plugins, and the event queued for the
    /// syncing plugins subscribed to it. Until the returned guard is
    /// dropped (the fan-out returned), a plugin that starts synchronizing
    /// gets it too, after its snapshot.
    pub(crate) fn begin_event(
        self: &Arc<Self>,
        event: Event,
        request: &Bytes,
        container: Option<&str>,
    ) -> (PluginList, EventGuard) {
        let mut guard = self.lock();
        let st = &mut *guard;
        if !deferrable(event) {
            let none = EventGuard {
                registry: None,
                seq: 0,
            };
            return (st.active.clone(), none);
        }
        let seq = st.updates.record(event, container);
        let d = Arc::new(DeferredEvent {
            event,
            request: request.clone(),
            seq,
        });
        for s in st.syncing.iter_mut() {
            if s.room_for(event, self.max_backlog, &*self.metrics) {
                s.queue.push_back(Deferred::Event(d.clone()));
            }
        }
        let n = st.next_seq;
        st.next_seq += 1;
        st.events.insert(n, d);
        let guard = EventGuard {
            registry: Some(self.clone()),
            seq: n,
        };
        (st.active.clone(), guard)
    }

    /// Starts a creation event.
    pub(crate) fn begin_creation(
        self: &Arc<Self>,
        event: Event,
        pod: &PodSandbox,
        container: Option<&Container>,
        request: Bytes,
    ) -> (PluginList, CreationGuard) {
        let (tx, _) = watch::channel(None);
        let (id, is_container) = match container {
            Some(c) => (c.id.clone(), true),
            None => (pod.id.clone(), false),
        };
        let inflight = Arc::new(Inflight {
            event,
            id,
            is_container,
            request,
            outcome: tx,
            released: watch::channel(false).0,
            late: Mutex::new((event == Event::CreateContainer).then(Vec::new)),
        });
        let mut st = self.lock();
        let seq = st.next_seq;
        st.next_seq += 1;
        for s in st.syncing.iter_mut() {
            if QUEUE_FOR_SYNCING && s.room_for(event, self.max_backlog, &*self.metrics) {
                let d = match inflight.add_late(&s.plugin) {
                    Some(rx) => Deferred::Late(inflight.clone(), rx),
                    None => Deferred::Creation(inflight.clone()),
                };
                s.queue.push_back(d);
            }
        }
        st.inflight.insert(seq, inflight.clone());
        let plugins = st.active.clone();
        drop(st);
        (
            plugins,
            CreationGuard {
                registry: Some(self.clone()),
                seq,
                inflight: Some(inflight),
                known: None,
            },
        )
    }

    /// Enters the syncing state. Every creation in flight that the plugin
    /// takes is queued for it, except a CreateContainer whose fan-out is
    /// past the point where it calls late plugins. Those, and every
    /// creation in flight that the plugin does not take (it cannot get
    /// them as events), are returned: the plugin's listing waits for their
    /// guards, so the objects are listed (as upstream, where a
    /// registration waits for every creation in flight).
    ///
    /// The plugin's sync window lasts until the returned [`SyncWindow`] is
    /// dropped.
    /// `None` once the runtime is stopping.
    pub(crate) fn begin_sync(
        self: &Arc<Self>,
        plugin: &Arc<Plugin>,
    ) -> Option<(Vec<Arc<Inflight>>, SyncWindow)> {
        let mut st = self.lock();
        if st.closed {
            return None;
        }
        st.updates.windows += 1;
        let window = SyncWindow(self.clone());
        // Creations and other events in flight, in the order they started.
        let mut pending: Vec<_> = (st.inflight.iter())
            .map(|(k, v)| (*k, Pending::Creation(v.clone())))
            .chain((st.events.iter()).map(|(k, v)| (*k, Pending::Event(v.clone()))))
            .collect();
        pending.sort_by_key(|(k, _)| *k);
        let mut queue = VecDeque::new();
        let mut finished = Vec::new();
        for (_, p) in pending {
            let i = match p {
                Pending::Event(d) => {
                    if plugin.subscribed(d.event) {
                        queue.push_back(Deferred::Event(d));
                    }
                    continue;
                }
                Pending::Creation(i) => i,
            };
            if !QUEUE_FOR_SYNCING {
                continue;
            }
            if !plugin.subscribed(i.event) {
                finished.push(i);
            } else if i.event != Event::CreateContainer {
                queue.push_back(Deferred::Creation(i));
            } else if let Some(rx) = i.add_late(plugin) {
                queue.push_back(Deferred::Late(i, rx));
            } else {
                finished.push(i);
            }
        }
        st.syncing.push(Syncing {
            plugin: plugin.clone(),
            queue,
            overflowed: false,
        });
        Some((finished, window))
    }

    /// Leaves out of the container updates a plugin answered to a deferred
    /// event numbered `seq` those of containers the runtime updated again
    /// (an UpdateContainer) after that event: applied now, they would undo
    /// the newer update. A plugin that takes UpdateContainer got (or gets)
    /// that newer event too, and its answer to it is what counts; and in
    /// order, the newer update would have replaced them anyway. Returns the updates to
    /// apply and the containers of those left out.
    pub(crate) fn drop_superseded(
        &self,
        seq: u64,
        updates: Vec<ContainerUpdate>,
    ) -> (Vec<ContainerUpdate>, Vec<String>) {
        let st = self.lock();
        let newer = |id: &str| st.updates.last.get(id).is_some_and(|n| *n > seq);
        let (stale, current): (Vec<_>, Vec<_>) =
            updates.into_iter().partition(|u| newer(&u.container_id));
        (current, stale.into_iter().map(|u| u.container_id).collect())
    }

    /// Queues a creation for a syncing plugin after the fact (its guard was
    /// not released in time for the plugin's listing).
    pub(crate) fn defer_finished(&self, plugin: &Arc<Plugin>, inflight: Arc<Inflight>) {
        let mut st = self.lock();
        if let Some(s) = st
            .syncing
            .iter_mut()
            .find(|s| Arc::ptr_eq(&s.plugin, plugin))
        {
            s.queue.push_front(Deferred::Creation(inflight));
        }
    }

    /// The ids of the pods and containers whose creation is queued for the
    /// plugin: left out of its Synchronize (it gets them as events).
    pub(crate) fn queued_ids(&self, plugin: &Arc<Plugin>) -> (HashSet<String>, HashSet<String>) {
        let st = self.lock();
        let mut pod_ids = HashSet::new();
        let mut ctr_ids = HashSet::new();
        let Some(s) = st.syncing.iter().find(|s| Arc::ptr_eq(&s.plugin, plugin)) else {
            return (pod_ids, ctr_ids);
        };
        for d in &s.queue {
            if let Deferred::Creation(i) | Deferred::Late(i, _) = d {
                match i.object_id() {
                    (id, true) => ctr_ids.insert(id.to_owned()),
                    (id, false) => pod_ids.insert(id.to_owned()),
                };
            }
        }
        (pod_ids, ctr_ids)
    }

    /// Makes the plugin active (atomically) and returns its queued
    /// deliveries, the backlog; or why not: the plugin is no longer
    /// syncing (it is closed), or the runtime is stopping.
    ///
    /// From here on nothing more is queued for the plugin: later events see
    /// it in the active list and wait for its ready gate (opened with
    /// [`Plugin::mark_ready`] once the backlog is delivered), so the backlog
    /// always reaches the plugin first and activation cannot be starved by a
    /// steady stream of events.
    pub(crate) fn activate(
        &self,
        plugin: &Arc<Plugin>,
    ) -> Result<VecDeque<Deferred>, RegistrationFailure> {
        let mut st = self.lock();
        if st.closed {
            return Err(RegistrationFailure::Stopping);
        }
        let pos = (st.syncing.iter())
            .position(|s| Arc::ptr_eq(&s.plugin, plugin))
            .ok_or(RegistrationFailure::LostDuringSync)?;
        let Syncing {
            queue: backlog,
            overflowed,
            ..
        } = st.syncing.remove(pos);
        // Waiters for a synchronizing plugin look again, whatever the
        // outcome.
        self.activations.send_modify(|n| *n += 1);
        if overflowed {
            return Err(RegistrationFailure::BacklogFull {
                limit: self.max_backlog,
            });
        }
        if plugin.is_closed() {
            return Err(RegistrationFailure::LostDuringSync);
        }
        let mut list: Vec<_> = st.active.iter().cloned().collect();
        list.push(plugin.clone());
        list.sort_by(|a, b| a.id.cmp(&b.id));
        st.active = Arc::new(list);
        st.seen.insert(plugin.id.to_string());
        st.seen.insert(plugin.id.name().to_owned());
        let n = st.active.len();
        drop(st);
        self.metrics.active_plugins(n);
        self.activations.send_modify(|n| *n += 1);
        Ok(backlog)
    }

    /// [`RegistrationFailure::BacklogFull`] if the plugin's backlog
    /// overflowed while it synchronized.
    pub(crate) fn backlog_overflow(&self, plugin: &Arc<Plugin>) -> Option<RegistrationFailure> {
        let st = self.lock();
        let s = st.syncing.iter().find(|s| Arc::ptr_eq(&s.plugin, plugin))?;
        s.overflowed.then_some(RegistrationFailure::BacklogFull {
            limit: self.max_backlog,
        })
    }

    /// Whether a plugin known as `name` (`NN-name` or base name) has been
    /// active since the runtime started.
    pub(crate) fn has_seen(&self, name: &str) -> bool {
        self.lock().seen.contains(name)
    }

    /// A receiver that changes whenever a plugin becomes active or stops
    /// synchronizing.
    pub(crate) fn watch_activations(&self) -> watch::Receiver<u64> {
        self.activations.subscribe()
    }

    /// The request timeout of a plugin known as `name` (`NN-name` or base
    /// name) that is synchronizing, not closed, if there is one.
    pub(crate) fn syncing_timeout(&self, name: &str) -> Option<std::time::Duration> {
        let st = self.lock();
        (st.syncing.iter())
            .map(|s| &s.plugin)
            .find(|p| !p.is_closed() && (p.id.to_string() == name || p.id.name() == name))
            .map(|p| p.timeout)
    }

    /// Forgets a plugin (closed or failed); releases its name.
    pub(crate) fn remove(&self, plugin: &Arc<Plugin>) {
        let mut st = self.lock();
        let syncing = st.syncing.len();
        st.syncing.retain(|s| !Arc::ptr_eq(&s.plugin, plugin));
        if st.syncing.len() != syncing {
            self.activations.send_modify(|n| *n += 1);
        }
        let before = st.active.len();
        if st.active.iter().any(|p| Arc::ptr_eq(p, plugin)) {
            let list: Vec<_> = st
                .active
                .iter()
                .filter(|p| !Arc::ptr_eq(p, plugin))
                .cloned()
                .collect();
            st.active = Arc::new(list);
        }
        st.names.remove(&plugin.id.to_string());
        let n = st.active.len();
        drop(st);
        if n != before {
            self.metrics.active_plugins(n);
        }
    }

    /// Removes every plugin (active or synchronizing) and returns them;
    /// from now on no plugin registers, synchronizes or becomes active
    /// (the runtime is stopping).
    pub(crate) fn clear(&self) -> Vec<Arc<Plugin>> {
        let mut st = self.lock();
        st.closed = true;
        let mut v: Vec<_> = st.active.iter().cloned().collect();
        v.extend(st.syncing.drain(..).map(|s| s.plugin));
        st.active = Arc::new(Vec::new());
        st.names.clear();
        drop(st);
        self.metrics.active_plugins(0);
        v
    }
}
