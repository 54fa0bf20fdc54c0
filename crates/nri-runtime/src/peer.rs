//! What one peer may cost the runtime: [`PeerLimits`], and the checks made
//! on a plugin's messages before they are decoded.
//!
//! A plugin's bytes become memory when they are decoded: an empty
//! `ContainerUpdate` is 2 bytes on the wire and a 400-byte struct once
//! decoded. So every message a peer sends is looked at first
//! ([`nri_api::scan`]), without decoding it:
//!
//! * before registration, a connection may send `RegisterPlugin` (at most
//!   [`PeerLimits::max_register_len`] bytes) and nothing else: any larger
//!   request is skipped unread, any other is refused undecoded;
//! * `update` and `evict` entries of a request or an answer (unsolicited
//!   `UpdateContainers`, answers to `CreateContainer`, `UpdateContainer`,
//!   `StopContainer`, `Synchronize`) may number at most the containers the
//!   runtime knows plus [`PeerLimits::extra_updates`];
//! * beyond those entries, a message may decode to at most
//!   [`PeerLimits::decoded_ratio`] times its wire size (plus
//!   [`DECODED_SIZE_FLOOR`], for small messages whose structs alone are
//!   larger than that);
//! * a connection may have [`PeerLimits::max_in_flight`] requests
//!   unanswered, and [`PeerLimits::max_pending_connections`] connections
//!   may be waiting to register at once;
//! * a launched plugin's output is logged within [`PeerLimits::output`].
//!
//! Every refusal is logged with the peer's pid and uid and counted
//! ([`Metrics::peer_refused`]); it costs the peer that request (or, for
//! an answer, that event), never the runtime.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::RefusalKind;
use crate::known::KnownContainers;
use crate::metrics::Metrics;
use crate::output::OutputLimits;
use crate::plugin::PluginOrigin;

/// Default of [`PeerLimits::max_register_len`]: 4 KiB.
pub const DEFAULT_MAX_REGISTER_LEN: usize = 4 * 1024;
/// Default of [`PeerLimits::extra_updates`].
pub const DEFAULT_EXTRA_UPDATES: usize = 16;
/// Default of [`PeerLimits::decoded_ratio`].
pub const DEFAULT_DECODED_RATIO: usize = 16;
/// Default of [`PeerLimits::max_in_flight`].
pub const DEFAULT_MAX_IN_FLIGHT: usize = 4;
/// Default of [`PeerLimits::max_pending_connections`].
pub const DEFAULT_MAX_PENDING_CONNECTIONS: usize = 16;
/// Default of [`PeerLimits::max_sync_backlog`].
pub const DEFAULT_MAX_SYNC_BACKLOG: usize = 1024;
/// Decoded size every message may have whatever its wire size: the
/// structs of a small answer are larger than 16 times its few bytes (an
/// empty `CreateContainerResponse` is a 1.2 KB struct).
pub const DECODED_SIZE_FLOOR: usize = 64 * 1024;
/// Room for the ttRPC envelope (service and method names, framing) around
/// a `RegisterPlugin` request, in the size limit of an unregistered
/// connection.
const ENVELOPE_ROOM: usize = 256;

/// Limits on what one peer may make the runtime hold (see the module
/// documentation of `peer` in the crate source, and
/// `docs/runtime/security.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PeerLimits {
    /// Largest `RegisterPlugin` request, the one request a connection may
    /// send before it has registered (default 4 KiB).
    pub max_register_len: usize,
    /// Updates and evictions in one request or answer beyond the number of
    /// containers the runtime knows (default 16).
    pub extra_updates: usize,
    /// Most a message may grow when decoded, beyond its counted update and
    /// eviction entries, as a multiple of its wire size (default 16).
    pub decoded_ratio: usize,
    /// Requests of one plugin connection (`RegisterPlugin`,
    /// `UpdateContainers`) handled at once (default 4); more are refused.
    pub max_in_flight: usize,
    /// Connections accepted on the socket that have not registered yet
    /// (default 16); more are closed at once.
    pub max_pending_connections: usize,
    /// Events queued for one plugin while it synchronizes, its backlog
    /// (default 1024): the event that would be one more closes the plugin
    /// instead (it may reconnect and synchronize again).
    pub max_sync_backlog: usize,
    /// Limits on what a launched plugin's stdout and stderr may put in the
    /// runtime's log (line length, lines per second).
    pub output: OutputLimits,
}

impl Default for PeerLimits {
    fn default() -> Self {
        Self {
            max_register_len: DEFAULT_MAX_REGISTER_LEN,
            extra_updates: DEFAULT_EXTRA_UPDATES,
            decoded_ratio: DEFAULT_DECODED_RATIO,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            max_pending_connections: DEFAULT_MAX_PENDING_CONNECTIONS,
            max_sync_backlog: DEFAULT_MAX_SYNC_BACKLOG,
            output: OutputLimits::default(),
        }
    }
}

impl PeerLimits {
    /// The request size limit of a connection that has not registered.
    pub(crate) fn unregistered_request_len(&self) -> usize {
        self.max_register_len.saturating_add(ENVELOPE_ROOM)
    }
}

/// Who sent a message, for logs and metrics.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    /// `NN-name` once registered, else a description of the connection.
    pub(crate) name: String,
    pub(crate) registered: bool,
    pub(crate) origin: PluginOrigin,
}

impl Peer {
    /// The metrics label: the plugin, or `unregistered` (not one label per
    /// connection).
    fn label(&self) -> &str {
        if self.registered {
            &self.name
        } else {
            "unregistered"
        }
    }

    fn ids(&self) -> (Option<i64>, Option<u32>) {
        match self.origin {
            PluginOrigin::External { uid, pid, .. } => (pid.map(i64::from), Some(uid)),
            PluginOrigin::Launched { pid } => (pid.map(i64::from), None),
            PluginOrigin::Wasm => (None, None),
        }
    }
}

/// Why a peer's message was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused {
    /// The kind (its metric label).
    pub(crate) kind: RefusalKind,
    pub(crate) reason: String,
}

impl From<Refused> for crate::Error {
    fn from(r: Refused) -> Self {
        crate::Error::PeerRefused {
            kind: r.kind,
            reason: r.reason,
        }
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

/// The limits, the known containers and the refusal reporting, shared by
/// every connection of an adaptation.
pub(crate) struct PeerGuard {
    pub(crate) limits: PeerLimits,
    pub(crate) known: Arc<KnownContainers>,
    metrics: Arc<dyn Metrics>,
    pending: Arc<AtomicUsize>,
}

impl std::fmt::Debug for PeerGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerGuard")
            .field("limits", &self.limits)
            .field("pending", &self.pending.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// One of the connections waiting to register; frees its place when
/// dropped.
#[derive(Debug)]
pub(crate) struct PendingSlot(Arc<AtomicUsize>);

impl Drop for PendingSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl PeerGuard {
    pub(crate) fn new(limits: PeerLimits, metrics: Arc<dyn Metrics>) -> Self {
        Self {
            limits,
            known: Arc::default(),
            metrics,
            pending: Arc::default(),
        }
    }

    /// Logs and counts a refusal.
    pub(crate) fn report(&self, peer: &Peer, what: &str, refused: &Refused) {
        let (pid, uid) = peer.ids();
        tracing::warn!(
            peer = %peer.name,
            pid = ?pid,
            uid = ?uid,
            what,
            kind = refused.kind.as_str(),
            reason = %refused.reason,
            "refusing a message from an NRI peer"
        );
        self.metrics
            .peer_refused(peer.label(), refused.kind.as_str());
    }

    /// Reports a connection closed at once because
    /// [`PeerLimits::max_pending_connections`] were waiting to register.
    pub(crate) fn refuse_connection(&self, description: &str, origin: PluginOrigin, max: usize) {
        let reason = format!("{max} connections are already waiting to register");
        self.refuse_unregistered(
            description,
            origin,
            "connection",
            RefusalKind::PendingConnections,
            reason,
        );
    }

    /// Reports a refusal of a connection that has not registered (the
    /// peer `description`, for instance `uid=0 pid=Some(42)`): `what` was
    /// refused, `kind` is the metric label.
    pub(crate) fn refuse_unregistered(
        &self,
        description: &str,
        origin: PluginOrigin,
        what: &str,
        kind: RefusalKind,
        reason: String,
    ) {
        let peer = Peer {
            name: description.to_owned(),
            registered: false,
            origin,
        };
        self.report(&peer, what, &Refused { kind, reason });
    }

    /// A place among the connections waiting to register, or `None` when
    /// [`PeerLimits::max_pending_connections`] are waiting already.
    pub(crate) fn pending_slot(&self) -> Option<PendingSlot> {
        let max = self.limits.max_pending_connections;
        let taken = self
            .pending
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            });
        taken.ok().map(|_| PendingSlot(Arc::clone(&self.pending)))
    }

    /// Most `update` (or `evict`) entries one message may carry now.
    pub(crate) fn max_updates(&self) -> usize {
        self.known.count().saturating_add(self.limits.extra_updates)
    }

    /// Checks the encoded message `bytes` of type `M` from a peer before it
    /// is decoded: well-formed, its `update` and `evict` entries within
    /// [`max_updates`](Self::max_updates), the rest within
    /// [`PeerLimits::decoded_ratio`] times its size.
    pub(crate) fn check<M: prost::Name>(&self, bytes: &[u8]) -> Result<(), Refused> {
        let malformed = |e: nri_api::Error| Refused {
            kind: RefusalKind::Malformed,
            reason: e.to_string(),
        };
        let max = self.max_updates();
        // Counted first, stopping just past the cap: a message of millions
        // of entries is refused after looking at a few of them.
        for field in COUNTED {
            let n = nri_api::scan::count_at_most::<M>(bytes, field, max).map_err(malformed)?;
            if n > max {
                return Err(Refused {
                    kind: RefusalKind::TooManyUpdates,
                    reason: format!(
                        "{} with at least {n} {field} entries, more than the {max} allowed \
                         ({} known containers + {})",
                        M::NAME,
                        self.known.count(),
                        self.limits.extra_updates
                    ),
                });
            }
        }
        let scan = nri_api::scan::scan::<M>(bytes).map_err(malformed)?;
        let size = scan.decoded_size_beyond(&COUNTED);
        let allowed = scan
            .wire_len()
            .saturating_mul(self.limits.decoded_ratio)
            .saturating_add(DECODED_SIZE_FLOOR);
        if size > allowed {
            return Err(Refused {
                kind: RefusalKind::DecodedSize,
                reason: format!(
                    "{} of {} bytes would decode to about {size} bytes, more than {} times its size",
                    scan.message(),
                    scan.wire_len(),
                    self.limits.decoded_ratio
                ),
            });
        }
        Ok(())
    }
}

/// The entries counted by number rather than size.
const COUNTED: [&str; 2] = ["update", "evict"];

/// Decodes a peer's message after [`PeerGuard::check`].
pub(crate) fn decode_checked<M: prost::Message + prost::Name + Default>(
    guard: &PeerGuard,
    bytes: bytes::Bytes,
) -> Result<M, Refused> {
    guard.check::<M>(&bytes)?;
    M::decode(bytes).map_err(|e| Refused {
        kind: RefusalKind::Malformed,
        reason: format!("cannot decode {}: {e}", M::NAME),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use nri_api::api::{ContainerUpdate, CreateContainerResponse, UpdateContainersRequest};
    use prost::Message;

    use super::*;
    use crate::metrics::NoopMetrics;

    fn guard() -> PeerGuard {
        PeerGuard::new(PeerLimits::default(), Arc::new(NoopMetrics))
    }

    #[test]
    fn updates_are_capped_by_known_containers() {
        let g = guard();
        let req = |n| UpdateContainersRequest {
            update: vec![ContainerUpdate::default(); n],
            evict: Vec::new(),
        };
        g.check::<UpdateContainersRequest>(&req(16).encode_to_vec())
            .unwrap();
        let r = g
            .check::<UpdateContainersRequest>(&req(17).encode_to_vec())
            .unwrap_err();
        assert_eq!(r.kind, RefusalKind::TooManyUpdates);
        assert!(
            r.reason.contains("17 update entries, more than the 16"),
            "{r}"
        );
        g.known.created("c1");
        g.known.created("c1");
        assert_eq!(g.max_updates(), 17);
        g.check::<UpdateContainersRequest>(&req(17).encode_to_vec())
            .unwrap();
        g.known.removed("c1");
        assert_eq!(g.max_updates(), 16);
    }

    #[test]
    fn nested_amplification_is_capped_by_size() {
        let g = guard();
        let mut update = ContainerUpdate::default();
        update
            .linux
            .get_or_insert_default()
            .resources
            .get_or_insert_default()
            .hugepage_limits = vec![Default::default(); 200_000];
        let resp = CreateContainerResponse {
            update: vec![update],
            ..Default::default()
        };
        let r = g
            .check::<CreateContainerResponse>(&resp.encode_to_vec())
            .unwrap_err();
        assert_eq!(r.kind, RefusalKind::DecodedSize);
    }

    #[test]
    fn pending_slots_are_bounded_and_freed() {
        let g = PeerGuard::new(
            PeerLimits {
                max_pending_connections: 2,
                ..PeerLimits::default()
            },
            Arc::new(NoopMetrics),
        );
        let a = g.pending_slot().unwrap();
        let _b = g.pending_slot().unwrap();
        assert!(g.pending_slot().is_none());
        drop(a);
        assert!(g.pending_slot().is_some());
    }
}
