//! Events whose wait at a plugin's ready gate ran out: appended to the
//! backlog still being delivered, so that the plugin still gets them, in
//! order, each with its own timeout; the gate opens once none is left (see
//! `docs/runtime/sync.md`).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::failure::PluginFailure;
use crate::lock;
use crate::metrics::Metrics;
use crate::registry::{Deferred, DeferredEvent, Inflight};

use super::{Budget, Plugin};

/// What an event that waits at a plugin's ready gate leaves for the
/// plugin if its wait runs out.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Replay<'a> {
    /// Nothing (a validation: it has no meaning after the fact).
    Nothing,
    /// A non-creation event, delivered as a deferred one.
    Event(&'a Arc<DeferredEvent>),
    /// A creation, delivered after the fact if it succeeded.
    Creation(&'a Arc<Inflight>),
}

impl Replay<'_> {
    fn deferred(self) -> Option<Deferred> {
        match self {
            Replay::Nothing => None,
            Replay::Event(d) => Some(Deferred::Event(d.clone())),
            Replay::Creation(i) => Some(Deferred::Creation(i.clone())),
        }
    }
}

/// A direct call's budget (its event's) and what its event leaves if the
/// wait at the gate runs out.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Within<'a> {
    pub(crate) budget: Budget,
    pub(crate) replay: Replay<'a>,
}

/// Whether an event that waited at the gate past its timeout was queued.
enum Missed {
    /// Appended to the backlog: the plugin gets it once the earlier
    /// deliveries are done.
    Queued,
    /// The gate opened as the wait ran out: the caller calls the plugin.
    Open,
    /// Not delivered: nothing to replay, or the bound was reached (the
    /// plugin is closed then, and synchronizes again if it reconnects).
    Dropped,
}

impl Plugin {
    /// Waits for the ready gate (the backlog after its Synchronize) within
    /// `budget`; returns the call's time. The wait is not the plugin's (at
    /// most its request timeout, never past the deadline), the call has its
    /// own timeout then (never past the deadline), as upstream.
    pub(super) async fn ready_within(
        &self,
        metrics: &dyn Metrics,
        operation: &str,
        budget: Budget,
        replay: Replay<'_>,
    ) -> Result<Duration, PluginFailure> {
        let timeout = self.time_or_owed(metrics, operation, budget, replay)?;
        if self.is_ready() {
            return Ok(timeout);
        }
        self.wait_ready(metrics, operation, timeout, replay).await?;
        self.time_or_owed(metrics, operation, budget, replay)
    }

    /// The call's time within `budget`. When the event's deadline has
    /// passed before this plugin's turn ([`PluginFailure::NotCalled`]),
    /// the plugin still gets the event after the fact: it is queued behind
    /// the gate (see [`Plugin::owe`]).
    fn time_or_owed(
        &self,
        metrics: &dyn Metrics,
        operation: &str,
        budget: Budget,
        replay: Replay<'_>,
    ) -> Result<Duration, PluginFailure> {
        let time = budget.time_for(self, metrics, operation);
        if let Err(PluginFailure::NotCalled) = time {
            self.owe(replay, metrics);
        }
        time
    }

    /// An event this plugin was not called for (its deadline passed
    /// before the plugin's turn) is queued behind the gate, so that the
    /// plugin gets it after the fact, in order, before any later event (a
    /// creation only if it succeeded). If the gate was open it closes, and
    /// [`Plugin::take_drain`] tells the caller to start the delivery; a
    /// closed gate is opened by whoever delivers the backlog now.
    fn owe(&self, replay: Replay<'_>, metrics: &dyn Metrics) {
        let Some(d) = replay.deferred() else {
            return;
        };
        let mut q = lock(&self.gated);
        if !self.push_bounded(&mut q, d, metrics) {
            return;
        }
        if self.is_ready() {
            self.ready.send_replace(false);
            self.owing.store(true, Ordering::Release);
            self.drain.store(true, Ordering::Release);
        }
    }

    /// Whether the plugin is synchronized: its gate is open, or closed
    /// only for events it was not called for in time.
    pub(crate) fn is_synchronized(&self) -> bool {
        self.is_ready() || self.owing.load(Ordering::Acquire)
    }

    /// Whether events were just queued behind a gate that was open: the
    /// caller (which owns the runtime's tasks) then starts the delivery
    /// (`Shared::deliver_gated`). True once per closing.
    pub(crate) fn take_drain(&self) -> bool {
        self.drain.swap(false, Ordering::AcqRel)
    }

    /// Waits (within `timeout`) until the plugin is ready for direct
    /// calls. A wait that runs out means the plugin is not called for
    /// `operation` in time ([`PluginFailure::NotCalled`], counted in the
    /// metrics, reported by the caller, under the failure policy; no
    /// strike): what kept the gate closed is a call of its backlog, which
    /// counts for itself. The event (`replay`) is then appended to that
    /// backlog: the plugin still gets it, in order, with its own timeout.
    pub(super) async fn wait_ready(
        &self,
        metrics: &dyn Metrics,
        operation: &str,
        timeout: Duration,
        replay: Replay<'_>,
    ) -> Result<(), PluginFailure> {
        let mut rx = self.ready.subscribe();
        let res = tokio::select! {
            r = tokio::time::timeout(timeout, rx.wait_for(|ready| *ready)) => match r {
                Ok(_) => Ok(()),
                Err(_) => Err(PluginFailure::NotCalled),
            },
            () = self.closed.cancelled() => Err(PluginFailure::Disconnected {
                reason: "closed while synchronizing".into(),
            }),
        };
        match &res {
            Ok(_) => {}
            Err(f @ PluginFailure::NotCalled) => {
                let queued = match self.missed_at_gate(replay, metrics) {
                    // The gate opened as the wait ran out: the call goes
                    // out with the plugin's own timeout.
                    Missed::Open => return Ok(()),
                    Missed::Queued => true,
                    Missed::Dropped => false,
                };
                metrics.plugin_invocation(&self.name, operation, Err(f.class()));
                tracing::warn!(plugin = %self.id, operation, ?timeout, queued, "NRI plugin not called in time: its backlog of events deferred by its synchronization was still being delivered (not a strike; when queued, it gets the event after that backlog)");
            }
            Err(_) => self.account(metrics, operation, &res),
        }
        res
    }

    /// An event's wait at the closed gate ran out: appends what it leaves
    /// to the backlog being delivered. At the backlog's bound
    /// (`max_sync_backlog`) the plugin is closed instead, as a backlog that
    /// overflows during the sync closes it: its next synchronization gives
    /// it the state it missed.
    fn missed_at_gate(&self, replay: Replay<'_>, metrics: &dyn Metrics) -> Missed {
        let mut q = lock(&self.gated);
        if self.is_ready() {
            return Missed::Open;
        }
        let Some(d) = replay.deferred() else {
            return Missed::Dropped;
        };
        if self.push_bounded(&mut q, d, metrics) {
            Missed::Queued
        } else {
            Missed::Dropped
        }
    }

    /// Appends `d` to the queue behind the gate; at the backlog's bound
    /// (`max_sync_backlog`) the queue is dropped and the plugin closed
    /// instead (false).
    fn push_bounded(&self, q: &mut VecDeque<Deferred>, d: Deferred, metrics: &dyn Metrics) -> bool {
        let max = self.peers.limits.max_sync_backlog;
        if q.len() >= max {
            q.clear();
            let kind = crate::error::RefusalKind::SyncBacklog;
            tracing::warn!(plugin = %self.id, limit = max, kind = kind.as_str(), "more events ran out of time at the NRI plugin's ready gate than its backlog may hold; closing it (it may reconnect)");
            metrics.peer_refused(&self.name, kind.as_str());
            self.close("backlog over its bound at the ready gate");
            return false;
        }
        q.push_back(d);
        true
    }

    /// The next event that ran out of time at the gate, to deliver; when
    /// there is none, the gate opens (atomically with the check, so no
    /// event is appended after the last look).
    pub(crate) fn next_gated(&self) -> Option<Deferred> {
        let mut q = lock(&self.gated);
        if self.is_closed() {
            q.clear();
        }
        let d = q.pop_front();
        if d.is_none() {
            self.owing.store(false, Ordering::Release);
            self.ready.send_replace(true);
        }
        d
    }

    /// Opens the gate for direct lifecycle calls whatever is queued (the
    /// plugin is gone or failed): what was queued is dropped.
    pub(crate) fn mark_ready(&self) {
        let mut q = lock(&self.gated);
        q.clear();
        self.owing.store(false, Ordering::Release);
        self.ready.send_replace(true);
    }
}

/// The queue behind the gate.
pub(crate) type Gated = std::sync::Mutex<VecDeque<Deferred>>;
