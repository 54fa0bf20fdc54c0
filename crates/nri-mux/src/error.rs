//! The crate's error type.

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;

use crate::ConnId;

/// Everything that can go wrong in the multiplexer and its socket helpers.
///
/// `Error` is `Clone` (I/O causes are kept behind an [`Arc`]) so that the
/// reason a trunk ended can be handed to every connection and every caller
/// of [`Mux::closed`](crate::Mux::closed).
///
/// Errors surfacing through [`MuxConn`](crate::MuxConn)'s `AsyncRead` /
/// `AsyncWrite` are wrapped in an [`io::Error`]; get the typed value back with
/// `err.get_ref().and_then(|e| e.downcast_ref::<nri_mux::Error>())`.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Connection id 0 (reserved by the NRI mux) and
    /// [`EXTENSION_CONN`](crate::EXTENSION_CONN) (our extension frames)
    /// cannot be opened.
    #[error("connection ids 0 and 4294967295 are reserved")]
    ReservedConnId,

    /// The connection id is already open on this trunk.
    #[error("connection {conn} is already open")]
    AlreadyOpen {
        /// The id asked for.
        conn: ConnId,
    },

    /// A message handed to the writer is longer than the maximum.
    #[error("message of {len} bytes exceeds the maximum of {max} bytes")]
    MessageTooLarge {
        /// Length of the rejected message.
        len: usize,
        /// Largest message that can be sent.
        max: usize,
    },

    /// The peer announced a frame longer than the maximum payload. Framing
    /// is lost, so the trunk is closed.
    #[error("frame for connection {conn} announces {len} bytes, over the maximum of {max}")]
    OversizedFrame {
        /// Connection id in the offending header.
        conn: ConnId,
        /// Announced payload length.
        len: u32,
        /// Largest accepted payload.
        max: usize,
    },

    /// The trunk reached end of file in the middle of a frame.
    #[error("trunk ended inside a frame ({buffered} bytes of an incomplete frame)")]
    TruncatedFrame {
        /// Bytes of the incomplete frame that were received.
        buffered: usize,
    },

    /// A frame arrived for a connection id that is not open here; its payload
    /// was dropped (the trunk goes on). Reported through
    /// [`MuxStats`](crate::MuxStats), never returned from an operation.
    #[error("dropped {len}-byte frame for connection {conn}, which is not open")]
    UnknownConn {
        /// Connection id of the dropped frame.
        conn: ConnId,
        /// Payload length of the dropped frame.
        len: usize,
    },

    /// The trunk was closed locally (by [`Mux::close`](crate::Mux::close) or
    /// by dropping the mux and all its connections).
    #[error("multiplexer closed")]
    Closed,

    /// The peer closed the trunk (clean end of file at a frame boundary).
    #[error("trunk closed by peer")]
    PeerClosed,

    /// The write half of this logical connection was shut down.
    #[error("connection {conn} was shut down for writing")]
    WriteShutdown {
        /// The connection.
        conn: ConnId,
    },

    /// An I/O error on the trunk socket or in a socket helper.
    #[error("{op} failed")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The OS error.
        #[source]
        source: Arc<io::Error>,
    },

    /// The environment variable naming the inherited socket is not set.
    #[error("environment variable {var} is not set")]
    EnvNotSet {
        /// Variable name.
        var: &'static str,
    },

    /// The environment variable naming the inherited socket is not a file
    /// descriptor number.
    #[error("environment variable {var}={value:?} is not a file descriptor number")]
    EnvNotFd {
        /// Variable name.
        var: &'static str,
        /// Its value (lossily decoded).
        value: String,
    },

    /// The file descriptor is not open (or cannot be inspected).
    #[error("file descriptor {fd} is not usable")]
    BadFd {
        /// The descriptor.
        fd: RawFd,
        /// Why.
        #[source]
        source: Arc<io::Error>,
    },

    /// The file descriptor is open but is not a unix stream socket.
    #[error("file descriptor {fd} is not a unix stream socket ({what})")]
    NotUnixStream {
        /// The descriptor.
        fd: RawFd,
        /// What it is instead.
        what: &'static str,
    },

    /// The file descriptor was already adopted by this process.
    #[error("file descriptor {fd} was already adopted")]
    AlreadyAdopted {
        /// The descriptor.
        fd: RawFd,
    },
}

impl Error {
    pub(crate) fn io(op: &'static str, source: io::Error) -> Self {
        Error::Io {
            op,
            source: Arc::new(source),
        }
    }

    /// The [`io::ErrorKind`] used when this error travels as an `io::Error`.
    pub fn io_kind(&self) -> io::ErrorKind {
        match self {
            Error::MessageTooLarge { .. } | Error::ReservedConnId => io::ErrorKind::InvalidInput,
            Error::OversizedFrame { .. } | Error::TruncatedFrame { .. } => {
                io::ErrorKind::InvalidData
            }
            Error::Closed => io::ErrorKind::NotConnected,
            Error::PeerClosed | Error::WriteShutdown { .. } => io::ErrorKind::BrokenPipe,
            Error::Io { source, .. } | Error::BadFd { source, .. } => source.kind(),
            _ => io::ErrorKind::Other,
        }
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> Self {
        io::Error::new(e.io_kind(), e)
    }
}
