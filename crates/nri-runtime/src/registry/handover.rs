//! Upgrades without a gap: a newer instance of an active plugin takes over
//! from the older one (make-before-break). User-facing text in
//! `docs/runtime/upgrades.md`.
//!
//! A second connection that registers with the `NN-name` of an active
//! plugin (both external, and the plugin's entry does not turn it off) is
//! accepted as its *successor*: its name is reserved a second time
//! ([`Registry::reserve_instance`]). It is configured like any plugin;
//! then, in one step under the registry's mutex when its synchronization
//! begins ([`Registry::begin_sync`]), it *takes over*: the older instance
//! (the *predecessor*) leaves the active list, and from then on every event
//! that starts is the successor's, queued for it while it synchronizes
//! (the fan-out of a CreateContainer waits for its answer, as for any
//! plugin that registers during a creation) and delivered after its
//! Synchronize. Every event that started earlier had the predecessor in
//! its snapshot and stays the predecessor's, answer included; the
//! successor's listing waits (within its request timeout) until those
//! events have ended ([`Handover`]), so their outcome is in its
//! Synchronize. So every event goes to exactly one instance.
//!
//! When the successor is active, the predecessor is *retired*: it keeps
//! its connection and gets nothing more, not even `Shutdown` (upstream's
//! runtime sends none, and a plugin that exits on it or on a closed
//! connection would be restarted by its supervisor and, now the newest,
//! take the events back), and is forgotten when it
//! disconnects. If the successor fails before it is active, the
//! predecessor is taken back: active again, and what was queued for the
//! successor is its backlog ([`HandBack`]).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio_util::sync::CancellationToken;

use super::{Deferred, Inflight, Registry, State, SyncWindow, Syncing, set_active, without};
use crate::error::RegistrationFailure;
use crate::plugin::{Plugin, PluginInfo, PluginOrigin};

/// How a connection holds its plugin's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reservation {
    /// No other instance holds it.
    Sole,
    /// An active instance holds it; this one may take over from it.
    Successor,
}

/// A synchronization that takes over from an active instance.
pub(crate) struct Handover {
    /// The instance taken over from.
    pub(crate) predecessor: Arc<Plugin>,
    /// Creations in flight that have the predecessor in their snapshot and
    /// take its event: the predecessor's; the listing waits for them.
    pub(crate) creations: Vec<Arc<Inflight>>,
    /// Cancelled once every event that had the predecessor in its
    /// snapshot has ended.
    pub(crate) retired: CancellationToken,
}

/// What a successor that failed before it was active hands back to the
/// instance it was taking over from, now active again.
pub(crate) struct HandBack {
    /// The instance taken back.
    pub(crate) plugin: Arc<Plugin>,
    /// What was queued for the successor (and the predecessor takes),
    /// delivered in order before the gate of direct calls opens again.
    pub(crate) backlog: VecDeque<Deferred>,
    /// A sync window for that delivery (see [`SyncWindow`]).
    pub(crate) window: SyncWindow,
}

/// Whether an event whose snapshot is of `generation` reaches `p` (an
/// active plugin): `p` was in that snapshot and takes the event.
pub(super) fn reaches(p: &Plugin, event: nri_api::api::Event, generation: u64) -> bool {
    generation >= p.active_since.load(Ordering::Acquire) && p.subscribed(event)
}

fn external(p: &Plugin) -> bool {
    matches!(p.origin, PluginOrigin::External { .. })
}

/// Moves `o` to the retired instances (it no longer holds its name); the
/// retired instances of the same plugin it replaces are returned, to
/// close (at most one superseded instance of a plugin is kept).
pub(super) fn retire(st: &mut State, o: &Arc<Plugin>) -> Vec<Arc<Plugin>> {
    if o.holds_name.swap(false, Ordering::AcqRel) {
        super::release_name(st, &o.name);
    }
    let (evicted, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut st.retired)
        .into_iter()
        .partition(|p| p.id == o.id);
    st.retired = kept;
    st.retired.push(o.clone());
    evicted
}

impl Registry {
    /// Reserves plugin identity `full_name` for a new connection:
    /// [`Reservation::Sole`] if no instance holds it;
    /// [`Reservation::Successor`] if `may_succeed` (the connection is
    /// external and its plugin's entry allows it) and it is held by one
    /// active external instance only; refused otherwise.
    pub(crate) fn reserve_instance(
        &self,
        full_name: &str,
        may_succeed: bool,
    ) -> Result<Reservation, RegistrationFailure> {
        let mut st = self.lock();
        if st.closed {
            return Err(RegistrationFailure::Stopping);
        }
        let held = st.names.get(full_name).copied().unwrap_or(0);
        let plugin = full_name.to_owned();
        match held {
            0 => {
                st.names.insert(plugin, 1);
                Ok(Reservation::Sole)
            }
            1 if may_succeed
                && st
                    .active
                    .iter()
                    .any(|p| p.name == full_name && external(p) && !p.is_closed()) =>
            {
                st.names.insert(plugin, 2);
                Ok(Reservation::Successor)
            }
            1 => Err(RegistrationFailure::NameInUse { plugin }),
            _ => Err(RegistrationFailure::HandoverInProgress { plugin }),
        }
    }

    /// At the start of `plugin`'s sync: if an active instance of the same
    /// plugin is there, `plugin` takes over from it (it leaves the active
    /// list; `plugin` joins the list's successors).
    pub(super) fn take_over(&self, st: &mut State, plugin: &Arc<Plugin>) -> Option<Handover> {
        let o = st
            .active
            .iter()
            .find(|p| p.id == plugin.id && !Arc::ptr_eq(p, plugin) && !p.is_closed())?
            .clone();
        o.set_superseded(true);
        let retired = st.active.retirement();
        let list = without(&st.active, &o);
        let mut successors = st.active.successors.clone();
        successors.push(plugin.clone());
        set_active(st, list, successors);
        Some(Handover {
            predecessor: o,
            creations: Vec::new(),
            retired,
        })
    }

    /// Logs and counts an instance that stopped getting events.
    pub(super) fn report_superseded(&self, o: &Plugin) {
        let n = self.lock().active.len();
        self.metrics.active_plugins(n);
        self.metrics
            .plugin_instance(&o.name, o.instance, "superseded");
        tracing::info!(plugin = %o.id, instance = o.instance, "NRI plugin instance superseded: a newer instance takes over its events");
    }

    /// `plugin` (a successor, its sync entry `s` taken) failed before it
    /// was active: its predecessor, if still connected, is active again
    /// and gets what was queued for `plugin`.
    pub(super) fn hand_back(
        self: &Arc<Self>,
        st: &mut State,
        plugin: &Arc<Plugin>,
        s: Syncing,
    ) -> Option<HandBack> {
        let mut successors = without(&st.active.successors, plugin);
        let o = match s.predecessor {
            Some(o) if !o.is_closed() && !st.closed => o,
            _ => {
                if st.active.successors.iter().any(|p| Arc::ptr_eq(p, plugin)) {
                    let list = st.active.to_vec();
                    set_active(st, list, successors);
                }
                return None;
            }
        };
        o.set_superseded(false);
        o.mark_unready();
        let mut list = st.active.to_vec();
        list.push(o.clone());
        list.sort_by(|a, b| a.id.cmp(&b.id));
        successors.retain(|p| !Arc::ptr_eq(p, &o));
        let generation = set_active(st, list, successors);
        o.active_since.store(generation, Ordering::Release);
        // What `o` takes of the queue; a late creation it does not take
        // sees its offer refused (the plugin is gone for it).
        let backlog = s
            .queue
            .into_iter()
            .filter(|d| o.subscribed(d.event()))
            .collect();
        st.updates.windows += 1;
        tracing::warn!(plugin = %o.id, instance = o.instance, failed = plugin.instance, "NRI plugin instance taken back: the instance taking over failed before it was active");
        Some(HandBack {
            plugin: o,
            backlog,
            window: SyncWindow(self.clone()),
        })
    }

    /// Every instance to show in `Adaptation::plugins`: the active ones
    /// whose backlog is delivered, the ones taken over from (superseded),
    /// in order (index, name, instance).
    pub(crate) fn instances(&self) -> Vec<PluginInfo> {
        let st = self.lock();
        let mut v: Vec<PluginInfo> = (st.active.iter())
            .filter(|p| p.is_synchronized() && !p.is_closed())
            .chain(st.syncing.iter().filter_map(|s| s.predecessor.as_ref()))
            .chain(st.retired.iter())
            .filter(|p| !p.is_closed())
            .map(|p| p.info())
            .collect();
        drop(st);
        v.sort_by(|a, b| a.id.cmp(&b.id).then(a.instance.cmp(&b.instance)));
        v
    }

    /// The active instance of the plugin `p` is an instance of, if another
    /// one is active now (a successor that failed: its predecessor, taken
    /// back).
    pub(crate) fn current_instance(&self, p: &Arc<Plugin>) -> Option<Arc<Plugin>> {
        let st = self.lock();
        st.active
            .iter()
            .find(|q| q.id == p.id && !Arc::ptr_eq(q, p) && !q.is_closed())
            .cloned()
    }
}

impl Deferred {
    /// The event delivered.
    pub(crate) fn event(&self) -> nri_api::api::Event {
        match self {
            Deferred::Creation(i) | Deferred::Late(i, _) => i.event,
            Deferred::Event(d) => d.event,
        }
    }
}
