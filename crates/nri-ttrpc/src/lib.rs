//! A small, generic, unary [ttRPC] implementation, wire-compatible with
//! containerd's Go `ttrpc` (v1.2.x) for unary calls.
//!
//! * [`codec`]: sans-io framing (10-byte header, 4 MiB cap), a resumable
//!   [`Decoder`](codec::Decoder) and contiguous encoders.
//! * [`proto`]: the envelopes ([`Request`], [`Response`], [`Status`]) and
//!   [`Code`].
//! * [`Client`]: concurrent calls with a mandatory timeout per call.
//! * [`Server`]: a registry of [`Service`]s serving any
//!   `AsyncRead + AsyncWrite` connection, within [`ServerLimits`] per
//!   connection (request size, requests in flight, metadata entries).
//!
//! Streaming (message type 3) is not supported: a data message is answered
//! with `UNIMPLEMENTED` and the connection continues.
//!
//! Each message is written with one `write_all` of one contiguous buffer
//! (header and payload) followed by a flush, and writes never interleave. A
//! transport that frames each write (such as the NRI multiplexer) can rely
//! on that.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use bytes::Bytes;
//! use nri_ttrpc::{CallOptions, Client, Code, Error, Methods, Server};
//! use tokio_util::sync::CancellationToken;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Error> {
//! let (client_io, server_io) = tokio::io::duplex(64 * 1024);
//!
//! let mut server = Server::new();
//! server.register(
//!     "example.Echo",
//!     Methods::new().add("Echo", |_ctx, payload: Bytes| async move { Ok(payload) }),
//! )?;
//! let shutdown = CancellationToken::new();
//! let serving = tokio::spawn({
//!     let shutdown = shutdown.clone();
//!     async move { server.serve(server_io, shutdown).await }
//! });
//!
//! let client = Client::new(client_io);
//! let opts = CallOptions::new(Duration::from_secs(2));
//! let answer = client
//!     .call("example.Echo", "Echo", Bytes::from_static(b"hi"), opts.clone())
//!     .await?;
//! assert_eq!(answer, Bytes::from_static(b"hi"));
//!
//! let err = client
//!     .call("example.Echo", "Nope", Bytes::new(), opts)
//!     .await
//!     .unwrap_err();
//! assert_eq!(err.code(), Code::Unimplemented);
//!
//! shutdown.cancel();
//! serving.await.expect("server task")?;
//! # Ok(())
//! # }
//! ```
//!
//! [ttRPC]: https://github.com/containerd/ttrpc

// docs.rs (which sets `docsrs`) marks each item that needs a cargo
// feature with that feature.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod codec;
pub mod proto;

mod client;
mod driven;
mod error;
mod io;
mod limits;
#[cfg(feature = "mux")]
mod mux;
mod server;

pub use client::{CallOptions, Client, ClientFeed};
pub use driven::InputDriver;
pub use error::Error;
pub use limits::{
    DEFAULT_MAX_IN_FLIGHT, DEFAULT_MAX_METADATA, Refusal, RefusalObserver, RequestLenLimit,
    ServerLimits,
};
pub use proto::{Any, Code, KeyValue, Request, Response, Status};
pub use server::{
    BoxFuture, HandlerResult, HandlerSlot, Methods, RequestContext, Server, ServerFeed, Service,
    service_fn,
};

/// How long after a request's deadline the server answers
/// `DEADLINE_EXCEEDED` for a handler that is still running (100 ms).
///
/// The client gave up at the deadline already, and its own timeout is the
/// error it should report (a Go runtime names the plugin and applies the
/// plugin's timeout policy only for its own timeout). Answering at the
/// deadline raced that timer: on a loaded node the server's answer could
/// reach the client first and turn a timeout into a plugin error. The
/// late answer only frees the stream. Go's ttRPC server has no such
/// answer: it waits for the handler whatever the deadline.
pub const DEADLINE_GRACE: std::time::Duration = std::time::Duration::from_millis(100);

// The README's example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
