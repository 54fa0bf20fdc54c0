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
mod error;
mod mux;
mod socket;

pub use codec::{
    ConnId, Decoder, FIRST_FRAME_MAX, HEADER_LEN, MAX_PAYLOAD, PLUGIN_SERVICE_CONN, RESERVED_CONN,
    RUNTIME_SERVICE_CONN, encode_message,
};
pub use error::Error;
pub use mux::{
    Mux, MuxConn, MuxReadHalf, MuxStats, MuxWriteHalf, READ_BUFFER_LIMIT, WRITE_BACKLOG_LIMIT,
};
pub use socket::{
    PLUGIN_SOCKET_ENV, PLUGIN_SOCKET_FD, PeerCredentials, adopt_inherited_fd, from_env, into_tokio,
    pass_to_child, peer_credentials, socketpair,
};
