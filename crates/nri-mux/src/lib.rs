//! NRI connection multiplexer, wire-compatible with containerd/nri's
//! `pkg/net/multiplex`.
//!
//! An NRI runtime and a plugin talk over one unix stream socket, the
//! *trunk*, that carries several logical connections: [`PLUGIN_SERVICE_CONN`]
//! (1, the runtime calls the plugin) and [`RUNTIME_SERVICE_CONN`] (2, the
//! plugin calls the runtime). Each frame is an 8-byte header (connection id
//! and payload length, both `u32` big-endian) and the payload. Nothing else
//! is on the wire: no open or close messages. This crate knows nothing about
//! what the connections carry.
//!
//! * [`codec`]: sans-io [`Decoder`] and [`encode_message`].
//! * [`Mux`] / [`MuxConn`]: tokio driver; a `MuxConn` is an
//!   `AsyncRead + AsyncWrite` where each write is one message (see its docs
//!   for the write contract the Go peer needs).
//! * [`socketpair`], [`pass_to_child`], [`from_env`], [`adopt_inherited_fd`],
//!   [`peer_credentials`]: socket plumbing for launched and external plugins.
//!
//! # Behaviour worth knowing
//!
//! * **Writes** are messages: one `poll_write` = one message, framed as one
//!   frame (≤ 4096 bytes) or a 4096-byte frame plus one frame with the rest,
//!   because the Go reader hands out one frame per read into a 4096-byte
//!   buffer and queues at most 256 frames per connection. Messages from
//!   different connections never interleave on the trunk.
//! * **Reads** are a byte stream per connection, reassembled from frames of
//!   any size up to [`MAX_PAYLOAD`]. A frame longer than one read of the
//!   trunk (64 KiB) is passed on in pieces as its bytes arrive, so the mux
//!   never holds a large frame whole: what a connection's owner does not
//!   want (a request over its size limit) can be skipped as it comes, and
//!   a frame for a connection that is not open costs nothing but reading.
//! * **Backpressure:** a connection buffers at most about
//!   [`READ_BUFFER_LIMIT`] unread bytes; beyond that the trunk reader stops
//!   reading the socket (all connections wait, head-of-line) until the owner
//!   reads. Data of an open connection is never dropped. Writers see
//!   backpressure through [`WRITE_BACKLOG_LIMIT`].
//! * **Unknown connection ids:** frames for ids that are not open (when
//!   their first byte arrives) are dropped, as Go does, and reported: a `tracing` warning and the counters
//!   and [`Error::UnknownConn`] value in [`MuxStats`]. The trunk goes on.
//! * **Fatal trunk errors** (an announced length over [`MAX_PAYLOAD`], end
//!   of file inside a frame, socket errors) end the trunk: the socket is shut
//!   down, reads give buffered data and then the error, writes fail, and
//!   [`Mux::closed`] returns the typed reason.
//! * Differences from Go's mux: opening an id that is already open is an
//!   error ([`Error::AlreadyOpen`]) instead of returning the same connection;
//!   an empty write sends nothing instead of a zero-length frame (zero-length
//!   frames are accepted on receive).
//!
//! # Example
//!
//! ```
//! use nri_mux::{Mux, PLUGIN_SERVICE_CONN};
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (a, b) = nri_mux::socketpair()?;
//! let runtime = Mux::new(nri_mux::into_tokio(a)?);
//! let plugin = Mux::new(nri_mux::into_tokio(b)?);
//!
//! let mut to_plugin = runtime.open(PLUGIN_SERVICE_CONN)?;
//! let mut from_runtime = plugin.open(PLUGIN_SERVICE_CONN)?;
//!
//! to_plugin.write_all(b"hello").await?; // one write = one message
//! let mut buf = [0u8; 5];
//! from_runtime.read_exact(&mut buf).await?;
//! assert_eq!(&buf, b"hello");
//!
//! runtime.close();
//! assert!(matches!(runtime.closed().await, Err(nri_mux::Error::Closed)));
//! assert!(plugin.closed().await.is_ok()); // the peer saw a clean end of file
//! # Ok(())
//! # }
//! ```

pub mod codec;
mod conn;
mod error;
pub mod latency;
mod mux;
mod reader;
mod socket;
mod stats;
#[doc(hidden)]
pub mod sync;
mod writer;

pub use codec::{
    ConnId, Decoder, EXTENSION_CONN, Extension, FIRST_FRAME_MAX, HEADER_LEN, MAX_PAYLOAD,
    PLUGIN_SERVICE_CONN, Piece, RESERVED_CONN, RUNTIME_SERVICE_CONN, encode_message,
};
pub use conn::{ConnSink, MuxConn, MuxReadHalf, MuxWriteHalf, READ_BUFFER_LIMIT};
pub use error::Error;
pub use latency::{LatencyStats, ReadStrategy, ReaderDriver};
pub use mux::Mux;
pub use stats::MuxStats;
pub use writer::WRITE_BACKLOG_LIMIT;

pub use socket::{
    PLUGIN_SOCKET_ENV, PLUGIN_SOCKET_FD, PeerCredentials, adopt_inherited_fd, from_env, into_tokio,
    pass_to_child, peer_credentials, socketpair,
};

// The README's example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
