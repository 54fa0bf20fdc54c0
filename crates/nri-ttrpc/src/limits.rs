//! What a [`Server`](crate::Server) accepts from one connection, and the
//! refusals it reports.
//!
//! A server holds a request's bytes until its handler answers, decodes its
//! envelope, and runs its handler while the next requests come in. Without
//! limits, one connection could make it hold many 4 MiB messages, a
//! handler per request, or an envelope of millions of empty metadata
//! entries (2 bytes each on the wire, 48 once decoded). [`ServerLimits`]
//! bounds each of these per connection; what goes over a limit is refused
//! before it is decoded and reported to the server's [`RefusalObserver`].

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use prost::encoding::{DecodeContext, WireType, decode_key, decode_varint, skip_field};

use crate::codec::MAX_MESSAGE_LEN;

/// Default of [`ServerLimits::max_in_flight`]: generous, so that a busy
/// but honest peer (a runtime starting hundreds of pods at once) is never
/// refused; a server that expects few requests sets a smaller one.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 1024;

/// Default of [`ServerLimits::max_metadata`] and of the status details a
/// client accepts in a response.
pub const DEFAULT_MAX_METADATA: usize = 64;

/// The largest request a connection accepts, changeable while it is
/// served (a runtime raises it once the peer has registered).
///
/// Clones share the value.
#[derive(Debug, Clone)]
pub struct RequestLenLimit(Arc<AtomicUsize>);

impl RequestLenLimit {
    /// A limit of `len` bytes (at most [`MAX_MESSAGE_LEN`], the protocol's
    /// cap, which applies anyway).
    pub fn new(len: usize) -> Self {
        Self(Arc::new(AtomicUsize::new(len.min(MAX_MESSAGE_LEN))))
    }

    /// The current limit.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    /// Changes the limit, for the requests whose header comes later.
    pub fn set(&self, len: usize) {
        self.0.store(len.min(MAX_MESSAGE_LEN), Ordering::Relaxed);
    }
}

impl Default for RequestLenLimit {
    /// The protocol's cap, [`MAX_MESSAGE_LEN`].
    fn default() -> Self {
        Self::new(MAX_MESSAGE_LEN)
    }
}

/// Limits a [`Server`](crate::Server) applies to each connection it
/// serves. What goes over a limit is refused without being decoded.
///
/// | limit | over it |
/// |---|---|
/// | [`max_request_len`](Self::max_request_len) | `RESOURCE_EXHAUSTED`, the payload skipped unread |
/// | [`max_in_flight`](Self::max_in_flight) | `RESOURCE_EXHAUSTED`; twice as many unanswered requests (a peer that does not read its answers) end the connection with [`Error::TooManyInFlight`](crate::Error::TooManyInFlight) |
/// | [`max_metadata`](Self::max_metadata) | `RESOURCE_EXHAUSTED` |
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerLimits {
    /// Largest request (the ttRPC payload: the envelope with the encoded
    /// request message in it). Default: the protocol's cap.
    pub max_request_len: RequestLenLimit,
    /// Requests of one connection whose answer has not been written yet
    /// (default [`DEFAULT_MAX_IN_FLIGHT`]).
    pub max_in_flight: usize,
    /// Metadata entries of one request (default [`DEFAULT_MAX_METADATA`]).
    pub max_metadata: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            max_request_len: RequestLenLimit::default(),
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            max_metadata: DEFAULT_MAX_METADATA,
        }
    }
}

impl ServerLimits {
    /// Sets [`max_request_len`](Self::max_request_len).
    #[must_use]
    pub fn with_max_request_len(mut self, limit: RequestLenLimit) -> Self {
        self.max_request_len = limit;
        self
    }

    /// Sets [`max_in_flight`](Self::max_in_flight) (at least 1).
    #[must_use]
    pub fn with_max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n.max(1);
        self
    }

    /// Sets [`max_metadata`](Self::max_metadata).
    #[must_use]
    pub fn with_max_metadata(mut self, n: usize) -> Self {
        self.max_metadata = n;
        self
    }
}

/// A request the server refused by itself, before any handler saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The request was larger than the connection's
    /// [`max_request_len`](ServerLimits::max_request_len).
    TooLarge {
        /// Stream id of the request.
        stream_id: u32,
        /// Its announced length.
        len: u32,
        /// The limit.
        max: usize,
    },
    /// The connection had [`max_in_flight`](ServerLimits::max_in_flight)
    /// requests unanswered.
    TooManyInFlight {
        /// Stream id of the request.
        stream_id: u32,
        /// The limit.
        max: usize,
    },
    /// The request carried more than
    /// [`max_metadata`](ServerLimits::max_metadata) metadata entries.
    TooMuchMetadata {
        /// Stream id of the request.
        stream_id: u32,
        /// Entries counted (the count stops just past the limit).
        count: usize,
        /// The limit.
        max: usize,
    },
    /// The request envelope did not decode, or its stream id was even or
    /// not increasing.
    Malformed {
        /// Stream id of the request.
        stream_id: u32,
        /// What was wrong.
        reason: String,
    },
}

impl Refusal {
    /// Stream id of the refused request.
    pub fn stream_id(&self) -> u32 {
        match self {
            Refusal::TooLarge { stream_id, .. }
            | Refusal::TooManyInFlight { stream_id, .. }
            | Refusal::TooMuchMetadata { stream_id, .. }
            | Refusal::Malformed { stream_id, .. } => *stream_id,
        }
    }

    /// A short name of the kind of refusal, for logs and metric labels:
    /// `too_large`, `in_flight`, `metadata` or `malformed`.
    pub fn kind(&self) -> &'static str {
        match self {
            Refusal::TooLarge { .. } => "too_large",
            Refusal::TooManyInFlight { .. } => "in_flight",
            Refusal::TooMuchMetadata { .. } => "metadata",
            Refusal::Malformed { .. } => "malformed",
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::TooLarge { len, max, .. } => {
                write!(f, "request of {len} bytes over the limit of {max}")
            }
            Refusal::TooManyInFlight { max, .. } => {
                write!(f, "{max} requests of this connection already in flight")
            }
            Refusal::TooMuchMetadata { count, max, .. } => {
                write!(f, "{count} metadata entries, over the limit of {max}")
            }
            Refusal::Malformed { reason, .. } => write!(f, "malformed request: {reason}"),
        }
    }
}

/// Told about every request a server refuses by itself (see
/// [`Server::set_refusal_observer`](crate::Server::set_refusal_observer)).
/// Called on the connection's input path: it must not block.
pub trait RefusalObserver: Send + Sync + 'static {
    /// One refused request.
    fn refused(&self, refusal: &Refusal);
}

impl<F: Fn(&Refusal) + Send + Sync + 'static> RefusalObserver for F {
    fn refused(&self, refusal: &Refusal) {
        self(refusal)
    }
}

/// Counts the entries of the repeated message field `field` at the top
/// level of the encoded message `bytes`, or, with `within`, inside each
/// occurrence of the message field `within` (for a response's status
/// details). Stops counting past `stop`. `None` for a message that is
/// malformed in its top-level framing (its decoding reports how).
pub(crate) fn count_entries(
    bytes: &[u8],
    within: Option<u32>,
    field: u32,
    stop: usize,
) -> Option<usize> {
    let mut buf = bytes;
    let mut n = 0usize;
    while !buf.is_empty() && n <= stop {
        let (tag, wire) = decode_key(&mut buf).ok()?;
        match within {
            None if tag == field && wire == WireType::LengthDelimited => {
                skip_field(wire, tag, &mut buf, DecodeContext::default()).ok()?;
                n += 1;
            }
            Some(outer) if tag == outer && wire == WireType::LengthDelimited => {
                let len = usize::try_from(decode_varint(&mut buf).ok()?).ok()?;
                let (inner, rest) = buf.split_at_checked(len)?;
                buf = rest;
                n += count_entries(inner, None, field, stop - n)?;
            }
            _ => skip_field(wire, tag, &mut buf, DecodeContext::default()).ok()?,
        }
    }
    Some(n)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::proto::{Any, KeyValue, Request, Response, Status};

    #[test]
    fn counts_metadata_and_details() {
        let req = Request {
            service: "s".into(),
            metadata: vec![KeyValue::default(); 7],
            ..Default::default()
        };
        let b = req.encode_to_vec();
        assert_eq!(count_entries(&b, None, 5, 100), Some(7));
        assert_eq!(
            count_entries(&b, None, 5, 3),
            Some(4),
            "stops past the limit"
        );
        let resp = Response {
            status: Some(Status {
                code: 2,
                message: "m".into(),
                details: vec![Any::default(); 5],
            }),
            payload: bytes::Bytes::from_static(b"x"),
        };
        let b = resp.encode_to_vec();
        assert_eq!(count_entries(&b, Some(1), 3, 100), Some(5));
        assert_eq!(count_entries(&b[..b.len() - 4], Some(1), 3, 100), None);
    }

    #[test]
    fn limit_is_shared_and_capped() {
        let l = RequestLenLimit::new(4096);
        let c = l.clone();
        c.set(1 << 30);
        assert_eq!(l.get(), MAX_MESSAGE_LEN);
    }
}
