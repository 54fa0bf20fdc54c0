//! What the runtime's messages may cost a plugin: [`SyncLimits`] on a
//! whole synchronization, and a size check of every request before it is
//! decoded.
//!
//! A runtime can split its `Synchronize` into as many messages as it likes
//! (each with `more: true`), and an empty `Container` is 2 bytes on the
//! wire and 1.4 KB once decoded. So the SDK counts each message's pods,
//! containers and bytes before decoding it ([`nri_api::scan`]) and refuses
//! a synchronization that goes over [`SyncLimits`] with
//! [`Error::SyncTooLarge`]; the synchronization must also be over within
//! the registration timeout after `Configure`
//! ([`Error::RegistrationTimeout`] in phase
//! [`Phase::Synchronizing`](crate::Phase::Synchronizing)). Every other
//! request may decode to at most [`DECODED_RATIO`] times its wire size
//! (plus [`DECODED_SIZE_FLOOR`]); larger ones are refused with
//! `RESOURCE_EXHAUSTED` and never decoded. A `CreateContainer` handed over
//! undecoded ([`Encoded`](crate::Encoded)) is checked the same way, part by
//! part, when the plugin decodes it.

use crate::Error;

/// Default of [`SyncLimits::max_bytes`]: 64 MiB.
pub const DEFAULT_MAX_SYNC_BYTES: usize = 64 << 20;
/// Default of [`SyncLimits::max_containers`].
pub const DEFAULT_MAX_SYNC_CONTAINERS: usize = 20_000;
/// Default of [`SyncLimits::max_pods`].
pub const DEFAULT_MAX_SYNC_PODS: usize = 20_000;
/// Default of [`SyncLimits::max_decoded_bytes`]: 256 MiB, four times
/// [`DEFAULT_MAX_SYNC_BYTES`] (real synchronizations decode to about three
/// times their wire size).
pub const DEFAULT_MAX_SYNC_DECODED_BYTES: usize = 256 << 20;
/// How much larger than its wire size a request may decode, beyond the
/// pods and containers of a `Synchronize` (which are counted instead).
pub const DECODED_RATIO: usize = 16;
/// Decoded size every request may have whatever its wire size (the structs
/// of a small request are larger than 16 times its few bytes).
pub const DECODED_SIZE_FLOOR: usize = 64 * 1024;

/// Limits on one synchronization with the runtime, across all its
/// messages.
///
/// In [`SyncMode::Collect`](crate::SyncMode::Collect) the whole decoded
/// state is held at once: each message is sized before it is decoded
/// (`nri_api::scan`), and the sum may not exceed
/// [`max_decoded_bytes`](Self::max_decoded_bytes). Without that sum, the
/// bound would be what the per-message check allows: 16 times the bytes
/// ([`DECODED_RATIO`]), about 1 GiB for a 64 MiB synchronization of
/// entries that decode large (one-letter environment variables, empty
/// mounts). In [`SyncMode::Streaming`](crate::SyncMode::Streaming) the
/// SDK decodes nothing and holds one message at a time.
///
/// ```
/// use nri_plugin::SyncLimits;
///
/// let mut limits = SyncLimits::default();
/// limits.max_containers = 50_000;
/// assert_eq!(limits.max_bytes, 64 << 20);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SyncLimits {
    /// Encoded bytes of all messages (default 64 MiB).
    pub max_bytes: usize,
    /// Containers (default 20,000).
    pub max_containers: usize,
    /// Pods (default 20,000).
    pub max_pods: usize,
    /// Estimated decoded size of all messages, in
    /// [`SyncMode::Collect`](crate::SyncMode::Collect) (default
    /// [`DEFAULT_MAX_SYNC_DECODED_BYTES`]).
    pub max_decoded_bytes: usize,
}

impl Default for SyncLimits {
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_MAX_SYNC_BYTES,
            max_containers: DEFAULT_MAX_SYNC_CONTAINERS,
            max_pods: DEFAULT_MAX_SYNC_PODS,
            max_decoded_bytes: DEFAULT_MAX_SYNC_DECODED_BYTES,
        }
    }
}

/// What a synchronization has received so far.
#[derive(Debug, Default)]
pub(crate) struct SyncBudget {
    bytes: usize,
    pods: usize,
    containers: usize,
    decoded: usize,
}

/// One message of a synchronization, as counted by [`SyncBudget`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SyncMessage {
    pub(crate) bytes: usize,
    pub(crate) pods: usize,
    pub(crate) containers: usize,
    /// Estimated decoded size (0 when the SDK does not decode it).
    pub(crate) decoded: usize,
}

impl SyncBudget {
    /// Counts one more message; fails if the synchronization is then over
    /// `limits`.
    pub(crate) fn admit(&mut self, limits: &SyncLimits, m: SyncMessage) -> Result<(), Error> {
        self.bytes = self.bytes.saturating_add(m.bytes);
        self.pods = self.pods.saturating_add(m.pods);
        self.containers = self.containers.saturating_add(m.containers);
        self.decoded = self.decoded.saturating_add(m.decoded);
        let over = [
            ("bytes", self.bytes, limits.max_bytes),
            ("pods", self.pods, limits.max_pods),
            ("containers", self.containers, limits.max_containers),
            ("decoded bytes", self.decoded, limits.max_decoded_bytes),
        ]
        .into_iter()
        .find(|(_, n, max)| n > max);
        match over {
            Some((what, count, limit)) => Err(Error::SyncTooLarge { what, count, limit }),
            None => Ok(()),
        }
    }

    /// The synchronization is over: start counting afresh.
    pub(crate) fn reset(&mut self) {
        *self = SyncBudget::default();
    }
}

/// Checks an encoded request of type `M` before it is decoded: it must be
/// well-formed and decode to at most [`DECODED_RATIO`] times its size plus
/// [`DECODED_SIZE_FLOOR`], not counting the entries of the top-level
/// `counted` fields (capped by number elsewhere). Returns the scan.
pub(crate) fn check_request<M: prost::Name>(
    bytes: &[u8],
    counted: &[&str],
) -> Result<nri_api::scan::Scan, RequestRefused> {
    let scan = nri_api::scan::scan::<M>(bytes).map_err(|e| RequestRefused {
        malformed: true,
        reason: e.to_string(),
    })?;
    let size = scan.decoded_size_beyond(counted);
    let allowed = scan
        .wire_len()
        .saturating_mul(DECODED_RATIO)
        .saturating_add(DECODED_SIZE_FLOOR);
    if size > allowed {
        return Err(RequestRefused {
            malformed: false,
            reason: format!(
                "{} of {} bytes would decode to about {size} bytes, more than {DECODED_RATIO} times its size",
                scan.message(),
                scan.wire_len()
            ),
        });
    }
    Ok(scan)
}

/// Why [`check_request`] refused a request.
#[derive(Debug)]
pub(crate) struct RequestRefused {
    /// It would not decode at all.
    pub(crate) malformed: bool,
    pub(crate) reason: String,
}

impl RequestRefused {
    /// A request that would not decode, for `reason`.
    pub(crate) fn malformed(reason: String) -> Self {
        RequestRefused {
            malformed: true,
            reason,
        }
    }

    /// The status answered to the runtime.
    pub(crate) fn status(&self) -> nri_ttrpc::Status {
        let code = if self.malformed {
            nri_ttrpc::Code::InvalidArgument
        } else {
            nri_ttrpc::Code::ResourceExhausted
        };
        nri_ttrpc::Status::new(code, self.reason.clone())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use nri_api::api::{Container, CreateContainerRequest, Mount};
    use prost::Message;

    use super::*;

    #[test]
    fn the_budget_counts_across_messages() {
        let limits = SyncLimits {
            max_bytes: 100,
            max_containers: 3,
            max_pods: 2,
            max_decoded_bytes: 1000,
        };
        let m = |bytes, pods, containers, decoded| SyncMessage {
            bytes,
            pods,
            containers,
            decoded,
        };
        let mut b = SyncBudget::default();
        b.admit(&limits, m(40, 1, 2, 0)).unwrap();
        let err = b.admit(&limits, m(40, 1, 2, 0)).unwrap_err();
        assert!(matches!(
            err,
            Error::SyncTooLarge {
                what: "containers",
                count: 4,
                limit: 3
            }
        ));
        b.reset();
        let err = b.admit(&limits, m(101, 0, 0, 0)).unwrap_err();
        assert!(err.to_string().contains("101 bytes"), "{err}");
        b.reset();
        b.admit(&limits, m(10, 0, 0, 600)).unwrap();
        let err = b.admit(&limits, m(10, 0, 0, 600)).unwrap_err();
        assert!(
            matches!(
                err,
                Error::SyncTooLarge {
                    what: "decoded bytes",
                    count: 1200,
                    limit: 1000
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn a_request_of_empty_entries_is_refused_before_decoding() {
        let req = CreateContainerRequest {
            container: Some(Container {
                mounts: vec![Mount::default(); 100_000],
                ..Default::default()
            }),
            ..Default::default()
        };
        let r = check_request::<CreateContainerRequest>(&req.encode_to_vec(), &[]).unwrap_err();
        assert!(!r.malformed);
        assert_eq!(r.status().code(), nri_ttrpc::Code::ResourceExhausted);
        let ok = CreateContainerRequest::default().encode_to_vec();
        check_request::<CreateContainerRequest>(&ok, &[]).unwrap();
    }
}
