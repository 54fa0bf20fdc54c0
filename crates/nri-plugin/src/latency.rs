//! Whether the connection's reader spins: the plugin's one decision about
//! the latency machinery of `nri-mux` (see docs/runtime/spinning.md).
//!
//! Spinning after an answer pays when the runtime's next request comes
//! within the budget, as it does from our runtime during a burst of
//! events; the Go runtime's turn-around between events is longer, so there
//! the spins would only burn CPU. So a connection starts plain, and once
//! `Configure` has told who the runtime is, its reader spins (and the
//! plugin asks for wake hints) only if the runtime is built on our runtime
//! library ([`nri_api::is_nri_rs_runtime`]) and the plugin's budget
//! ([`Builder::spin_budget`](crate::Builder::spin_budget)) is not zero.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;

use nri_mux::{Mux, ReadStrategy};

const UNDECIDED: u8 = 0;
const PLAIN: u8 = 1;
const SPIN: u8 = 2;

/// The choice for the current connection.
#[derive(Debug, Default)]
pub(crate) struct Choice {
    /// The runtime of the current connection said in `Configure` that it
    /// is ours.
    ours: AtomicBool,
    /// [`UNDECIDED`] until the connection is configured, then [`PLAIN`] or
    /// [`SPIN`].
    state: AtomicU8,
}

impl Choice {
    /// A new connection: nothing is known of its runtime yet.
    pub(crate) fn connecting(&self) {
        self.ours.store(false, Ordering::Relaxed);
        self.state.store(UNDECIDED, Ordering::Relaxed);
    }

    /// The runtime's `Configure` request came, with this `NRI_version`.
    pub(crate) fn runtime_configured(&self, nri_version: &str) {
        self.ours
            .store(nri_api::is_nri_rs_runtime(nri_version), Ordering::Relaxed);
    }

    /// Once configured: lets `mux`'s reader spin for up to `budget` and
    /// asks the runtime for wake hints, if the runtime is ours.
    pub(crate) fn apply(&self, mux: &Mux, budget: Duration) {
        let spin = self.ours.load(Ordering::Relaxed) && !budget.is_zero();
        if spin {
            mux.set_read_strategy(ReadStrategy::Spin { budget });
            mux.accept_wake_hints();
        }
        tracing::debug!(
            spin,
            budget_us = budget.as_micros() as u64,
            "nri-plugin: read strategy chosen for this runtime"
        );
        let state = if spin { SPIN } else { PLAIN };
        self.state.store(state, Ordering::Relaxed);
    }

    /// Whether the current connection's reader spins; `None` until it is
    /// configured.
    pub(crate) fn spinning(&self) -> Option<bool> {
        match self.state.load(Ordering::Relaxed) {
            PLAIN => Some(false),
            SPIN => Some(true),
            _ => None,
        }
    }
}
