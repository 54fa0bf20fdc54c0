//! The crate's error type.

use std::sync::Arc;
use std::time::Duration;

use crate::proto::{Code, Status};

/// Everything that can go wrong in this crate.
///
/// [`Error::code`] is the one place that maps an error to a ttRPC status code.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading from or writing to the transport failed.
    #[error("ttrpc: i/o error")]
    Io {
        /// The underlying error.
        #[from]
        source: std::io::Error,
    },

    /// The connection is closed (by the peer, by [`Client::close`](crate::Client::close),
    /// or after a fatal error). `cause` is set when it closed because of an error.
    #[error("ttrpc: connection closed")]
    ConnectionClosed {
        /// Why the connection closed, if it was not a clean end of stream.
        #[source]
        cause: Option<Arc<Error>>,
    },

    /// The call did not complete within its timeout.
    #[error("ttrpc: {service}/{method}: deadline exceeded after {timeout:?}")]
    DeadlineExceeded {
        /// Service that was called.
        service: String,
        /// Method that was called.
        method: String,
        /// The call's timeout.
        timeout: Duration,
    },

    /// The peer answered with a non-OK status.
    #[error("ttrpc: remote error: {code}: {message}")]
    Status {
        /// Status code sent by the peer.
        code: Code,
        /// Status message sent by the peer.
        message: String,
    },

    /// A message to send is larger than the maximum message length.
    #[error("ttrpc: message length {len} exceeds maximum message size of {max}")]
    MessageTooLarge {
        /// Encoded length of the message.
        len: usize,
        /// The maximum message length.
        max: usize,
    },

    /// A received frame announced a payload longer than the maximum message
    /// length. The decoder skips that payload and stays usable.
    #[error(
        "ttrpc: stream {stream_id}: received message length {len} exceeds maximum message size of {max}"
    )]
    FrameTooLarge {
        /// Stream id of the frame.
        stream_id: u32,
        /// Raw message type of the frame.
        message_type: u8,
        /// Announced payload length.
        len: u32,
        /// The maximum message length.
        max: usize,
    },

    /// A received frame has a message type that ttRPC defines but this crate
    /// does not handle (3 = streaming data), or one arriving in the wrong
    /// direction. The decoder skips its payload and stays usable.
    #[error("ttrpc: stream {stream_id}: unsupported message type {message_type}")]
    UnsupportedMessageType {
        /// Stream id of the frame.
        stream_id: u32,
        /// Raw message type of the frame.
        message_type: u8,
    },

    /// A received frame has a message type unknown to the ttRPC protocol
    /// (0 or above 3): the byte stream is corrupt and cannot be resynchronised.
    #[error("ttrpc: stream {stream_id}: invalid message type {message_type} (corrupt stream)")]
    InvalidMessageType {
        /// Stream id read from the corrupt header.
        stream_id: u32,
        /// Raw message type read from the corrupt header.
        message_type: u8,
    },

    /// A request used a stream id that is even or not increasing.
    #[error("ttrpc: stream {stream_id}: {reason}")]
    InvalidStreamId {
        /// The offending stream id.
        stream_id: u32,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// The connection ended in the middle of a message.
    #[error("ttrpc: connection ended inside a message ({buffered} bytes of it buffered)")]
    Truncated {
        /// Bytes of the incomplete message that had been received.
        buffered: usize,
    },

    /// A protobuf message could not be decoded.
    #[error("ttrpc: cannot decode {what}")]
    Decode {
        /// What was being decoded (e.g. `"request envelope"`).
        what: &'static str,
        /// The decoder's error.
        #[source]
        source: prost::DecodeError,
    },

    /// The client used up all odd 32-bit stream ids on this connection.
    #[error("ttrpc: stream ids exhausted on this connection")]
    StreamIdsExhausted,

    /// A peer kept sending requests while twice the connection's limit of
    /// requests in flight were unanswered (it does not read its answers);
    /// the server closed the connection.
    #[error("ttrpc: more than twice {max} requests in flight; closing the connection")]
    TooManyInFlight {
        /// The connection's limit ([`ServerLimits::max_in_flight`](crate::ServerLimits::max_in_flight)).
        max: usize,
    },

    /// A response was refused before it was decoded: it would have cost
    /// more memory than the client allows (e.g. thousands of status
    /// details).
    #[error("ttrpc: response refused: {reason}")]
    ResponseRefused {
        /// Why.
        reason: String,
    },

    /// A service name was registered twice on a [`Server`](crate::Server).
    #[error("ttrpc: service {name} registered twice")]
    DuplicateService {
        /// The service name.
        name: String,
    },
}

impl Error {
    /// The ttRPC status code that represents this error.
    pub fn code(&self) -> Code {
        match self {
            Error::Io { .. } | Error::ConnectionClosed { .. } | Error::Truncated { .. } => {
                Code::Unavailable
            }
            Error::DeadlineExceeded { .. } => Code::DeadlineExceeded,
            Error::Status { code, .. } => *code,
            Error::MessageTooLarge { .. }
            | Error::FrameTooLarge { .. }
            | Error::TooManyInFlight { .. }
            | Error::ResponseRefused { .. }
            | Error::StreamIdsExhausted => Code::ResourceExhausted,
            Error::UnsupportedMessageType { .. } => Code::Unimplemented,
            Error::InvalidMessageType { .. }
            | Error::InvalidStreamId { .. }
            | Error::Decode { .. } => Code::InvalidArgument,
            Error::DuplicateService { .. } => Code::AlreadyExists,
        }
    }

    /// Whether this error means the connection is gone.
    pub fn is_connection_closed(&self) -> bool {
        matches!(self, Error::ConnectionClosed { .. })
    }

    pub(crate) fn decode(what: &'static str, source: prost::DecodeError) -> Self {
        Error::Decode { what, source }
    }
}

impl From<Error> for Status {
    /// A status carrying [`Error::code`] and the error's message chain.
    fn from(err: Error) -> Self {
        if let Error::Status { code, message } = err {
            return Status::new(code, message);
        }
        let mut message = err.to_string();
        let mut source = std::error::Error::source(&err);
        while let Some(s) = source {
            message.push_str(": ");
            message.push_str(&s.to_string());
            source = s.source();
        }
        Status::new(err.code(), message)
    }
}

impl From<Status> for Error {
    /// A remote status as an error (the caller should have checked it is not OK).
    fn from(status: Status) -> Self {
        Error::Status {
            code: status.code(),
            message: status.message,
        }
    }
}
