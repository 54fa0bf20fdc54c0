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
//!
//! A second instance of an active plugin (same `NN-name`: an upgrade) takes
//! over at the start of its sync; see `registry/handover.rs`.

mod handover;
mod inflight;

pub(crate) use handover::{HandBack, Handover, Reservation};
pub(crate) use inflight::{Inflight, LateAnswer, LateOffer, LateSlot};

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use nri_api::api::{Container, ContainerUpdate, Event, PodSandbox};
use tokio::sync::{oneshot, watch};

use crate::error::RegistrationFailure;
use crate::known::KnownContainers;
use crate::lock;
use crate::metrics::Metrics;
use crate::plugin::{ActiveList, Plugin, PluginList};

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
    event: Option<Arc<DeferredEvent>>,
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
    /// The active instance of the same plugin this one takes over from
    /// (removed from the active list when this sync began): retired when
    /// this one is active, taken back if this one fails first.
    predecessor: Option<Arc<Plugin>>,
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
    /// Bumped whenever `active` changes.
    generation: u64,
    syncing: Vec<Syncing>,
    /// `NN-name` → how many instances hold it: one registering, syncing
    /// or active; two while a newer instance takes over from an active one
    /// (see `handover.rs`). A superseded instance holds none.
    names: HashMap<String, u32>,
    /// Instances superseded by a newer one that took over, still
    /// connected (at most one per plugin).
    retired: Vec<Arc<Plugin>>,
    /// Names (`NN-name` and base name) of every plugin that has been active.
    seen: HashSet<String>,
    /// Creations in flight, with the generation of the list they took.
    inflight: HashMap<u64, (Arc<Inflight>, u64)>,
    /// Non-creation events the plugins take part in, from their start
    /// until their fan-out returns (numbered with the creations), with the
    /// generation of the list they took.
    events: BTreeMap<u64, (Arc<DeferredEvent>, u64)>,
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

    /// Reserves a plugin identity for an instance that takes over from
    /// no other (a launched or WebAssembly plugin); `false` if a plugin
    /// with that `NN-name` is registering, syncing or active.
    pub(crate) fn reserve(&self, full_name: &str) -> bool {
        let mut st = self.lock();
        if st.closed || st.names.contains_key(full_name) {
            return false;
        }
        st.names.insert(full_name.to_owned(), 1);
        true
    }

    /// Releases a reservation (of a plugin that was never admitted).
    pub(crate) fn release(&self, full_name: &str) {
        release_name(&mut self.lock(), full_name);
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
                event: None,
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
        let generation = st.generation;
        st.events.insert(n, (d.clone(), generation));
        let guard = EventGuard {
            registry: Some(self.clone()),
            seq: n,
            event: Some(d),
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
        let generation = st.generation;
        st.inflight.insert(seq, (inflight.clone(), generation));
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
    /// When the plugin is a newer instance of an active one, it takes over
    /// here (see `handover.rs`): the creations in flight to the older
    /// instance are the older one's, and are returned in the
    /// [`Handover`] instead, for the listing to wait for.
    ///
    /// The plugin's sync window lasts until the returned [`SyncWindow`] is
    /// dropped. `None` once the runtime is stopping.
    pub(crate) fn begin_sync(self: &Arc<Self>, plugin: &Arc<Plugin>) -> Option<SyncStart> {
        let mut st = self.lock();
        if st.closed {
            return None;
        }
        st.updates.windows += 1;
        let window = SyncWindow(self.clone());
        let handover = self.take_over(&mut st, plugin);
        // Creations and other events in flight, in the order they started.
        let mut pending: Vec<_> = (st.inflight.iter())
            .map(|(k, (i, g))| (*k, Pending::Creation(i.clone()), *g))
            .chain((st.events.iter()).map(|(k, (d, g))| (*k, Pending::Event(d.clone()), *g)))
            .collect();
        pending.sort_by_key(|(k, _, _)| *k);
        let mut queue = VecDeque::new();
        let mut finished = Vec::new();
        let mut theirs = Vec::new();
        let predecessor = handover.as_ref().map(|h| h.predecessor.clone());
        for (_, p, generation) in pending {
            let i = match p {
                Pending::Event(d) => {
                    // An event that reaches the instance taken over from
                    // is its own (the listing waits for it to end).
                    let theirs = (predecessor.as_ref())
                        .is_some_and(|o| handover::reaches(o, d.event, generation));
                    if !theirs && plugin.subscribed(d.event) {
                        queue.push_back(Deferred::Event(d));
                    }
                    continue;
                }
                Pending::Creation(i) => i,
            };
            if !QUEUE_FOR_SYNCING {
                continue;
            }
            if (predecessor.as_ref()).is_some_and(|o| handover::reaches(o, i.event, generation)) {
                theirs.push(i);
            } else if !plugin.subscribed(i.event) {
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
            predecessor: handover.as_ref().map(|h| h.predecessor.clone()),
        });
        drop(st);
        let handover = handover.map(|mut h| {
            h.creations = theirs;
            h
        });
        if let Some(h) = &handover {
            self.report_superseded(&h.predecessor);
        }
        Some(SyncStart {
            finished,
            handover,
            window,
        })
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
    /// deliveries, the backlog, and the instance it took over from (now
    /// retired); or why not: the plugin is closed (it stays syncing, for
    /// [`remove`](Self::remove) to hand its backlog back to the instance
    /// it was taking over from), or the runtime is stopping.
    ///
    /// From here on nothing more is queued for the plugin: later events see
    /// it in the active list and wait for its ready gate (opened with
    /// [`Plugin::mark_ready`] once the backlog is delivered), so the backlog
    /// always reaches the plugin first and activation cannot be starved by a
    /// steady stream of events.
    pub(crate) fn activate(&self, plugin: &Arc<Plugin>) -> Result<Activated, RegistrationFailure> {
        let mut st = self.lock();
        if st.closed {
            return Err(RegistrationFailure::Stopping);
        }
        let pos = (st.syncing.iter())
            .position(|s| Arc::ptr_eq(&s.plugin, plugin))
            .ok_or(RegistrationFailure::LostDuringSync)?;
        // Waiters for a synchronizing plugin look again, whatever the
        // outcome.
        self.activations.send_modify(|n| *n += 1);
        // On failure the entry stays, for `forget` to hand back to the
        // instance taken over from, if any.
        if st.syncing[pos].overflowed {
            return Err(RegistrationFailure::BacklogFull {
                limit: self.max_backlog,
            });
        }
        if plugin.is_closed() {
            return Err(RegistrationFailure::LostDuringSync);
        }
        let Syncing {
            queue: backlog,
            predecessor,
            ..
        } = st.syncing.remove(pos);
        let mut list: Vec<_> = st.active.iter().cloned().collect();
        list.push(plugin.clone());
        list.sort_by(|a, b| a.id.cmp(&b.id));
        let successors = without(&st.active.successors, plugin);
        let generation = set_active(&mut st, list, successors);
        plugin
            .active_since
            .store(generation, std::sync::atomic::Ordering::Release);
        st.seen.insert(plugin.id.to_string());
        st.seen.insert(plugin.id.name().to_owned());
        let (predecessor, evicted) = match predecessor {
            Some(o) if !o.is_closed() => {
                let evicted = handover::retire(&mut st, &o);
                (Some(o), evicted)
            }
            _ => (None, Vec::new()),
        };
        let n = st.active.len();
        drop(st);
        self.metrics.active_plugins(n);
        self.metrics
            .plugin_instance(&plugin.name, plugin.instance, "active");
        self.activations.send_modify(|n| *n += 1);
        Ok(Activated {
            backlog,
            predecessor,
            evicted,
        })
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

    /// Forgets a plugin (closed or failed); releases its name. A newer
    /// instance that fails before it is active hands what it was given
    /// meanwhile back to the instance it was taking over from: returned
    /// for delivery (see `handover.rs`).
    pub(crate) fn remove(self: &Arc<Self>, plugin: &Arc<Plugin>) -> Option<HandBack> {
        let mut st = self.lock();
        let syncing = (st.syncing.iter())
            .position(|s| Arc::ptr_eq(&s.plugin, plugin))
            .map(|pos| st.syncing.remove(pos));
        if syncing.is_some() {
            // Waiters for a synchronizing plugin look again.
            self.activations.send_modify(|n| *n += 1);
        }
        let before = st.active.len();
        let back = syncing.and_then(|s| self.hand_back(&mut st, plugin, s));
        if st.active.iter().any(|p| Arc::ptr_eq(p, plugin)) {
            let list: Vec<_> = st
                .active
                .iter()
                .filter(|p| !Arc::ptr_eq(p, plugin))
                .cloned()
                .collect();
            let successors = st.active.successors.clone();
            set_active(&mut st, list, successors);
        }
        st.retired.retain(|p| !Arc::ptr_eq(p, plugin));
        if plugin
            .holds_name
            .swap(false, std::sync::atomic::Ordering::AcqRel)
        {
            release_name(&mut st, &plugin.name);
        }
        let n = st.active.len();
        drop(st);
        if n != before {
            self.metrics.active_plugins(n);
        }
        if let Some(b) = &back {
            self.metrics
                .plugin_instance(&b.plugin.name, b.plugin.instance, "active");
        }
        if plugin
            .active_since
            .load(std::sync::atomic::Ordering::Acquire)
            != u64::MAX
        {
            self.metrics
                .plugin_instance(&plugin.name, plugin.instance, "gone");
        }
        back
    }

    /// Removes every plugin (active or synchronizing) and returns them;
    /// from now on no plugin registers, synchronizes or becomes active
    /// (the runtime is stopping).
    pub(crate) fn clear(&self) -> Vec<Arc<Plugin>> {
        let mut st = self.lock();
        st.closed = true;
        let mut v: Vec<_> = st.active.iter().cloned().collect();
        for s in std::mem::take(&mut st.syncing) {
            v.push(s.plugin);
            v.extend(s.predecessor.filter(|o| !o.is_closed()));
        }
        v.append(&mut st.retired);
        set_active(&mut st, Vec::new(), Vec::new());
        st.names.clear();
        drop(st);
        self.metrics.active_plugins(0);
        for p in &v {
            self.metrics.plugin_gone(p.id.as_str());
        }
        v
    }
}

/// What [`Registry::begin_sync`] hands the synchronization.
pub(crate) struct SyncStart {
    /// Creations in flight that the plugin's listing waits for.
    pub(crate) finished: Vec<Arc<Inflight>>,
    /// When the plugin takes over from an active instance of itself.
    pub(crate) handover: Option<Handover>,
    /// The plugin's sync window.
    pub(crate) window: SyncWindow,
}

/// What [`Registry::activate`] hands the plugin that became active.
pub(crate) struct Activated {
    /// What happened during its sync, to deliver in order.
    pub(crate) backlog: VecDeque<Deferred>,
    /// The instance it took over from, retired (still connected, and sent
    /// nothing more).
    pub(crate) predecessor: Option<Arc<Plugin>>,
    /// Instances superseded earlier that the retired one replaces in the
    /// registry's bounded list of retired instances: to close.
    pub(crate) evicted: Vec<Arc<Plugin>>,
}

/// Replaces the active list (a new generation) and returns its generation.
fn set_active(st: &mut State, list: Vec<Arc<Plugin>>, successors: Vec<Arc<Plugin>>) -> u64 {
    st.generation += 1;
    st.active = Arc::new(ActiveList::new(list, successors, &st.active));
    st.generation
}

/// `list` without `plugin`.
fn without(list: &[Arc<Plugin>], plugin: &Arc<Plugin>) -> Vec<Arc<Plugin>> {
    list.iter()
        .filter(|p| !Arc::ptr_eq(p, plugin))
        .cloned()
        .collect()
}

/// Releases one reservation of `full_name`.
impl Registry {
    /// Whether an instance of plugin `full_name` is reserved or connected.
    pub(crate) fn name_held(&self, full_name: &str) -> bool {
        self.lock().names.contains_key(full_name)
    }
}

fn release_name(st: &mut State, full_name: &str) {
    if let Some(n) = st.names.get_mut(full_name) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            st.names.remove(full_name);
        }
    }
}
