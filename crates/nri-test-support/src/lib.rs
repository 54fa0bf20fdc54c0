//! Test helpers shared by the workspace's integration tests (a dev-only
//! crate, never published).
//!
//! - [`fixtures`]: pods and containers with predictable fields.
//! - [`fake_runtime`]: the runtime's end of a plugin connection (a socket
//!   a plugin dials, RegisterPlugin answered as a test chooses, calls to the
//!   plugin service), for tests of plugins and of the plugin SDK.
//! - [`plugin_end`]: the plugin's end of a runtime connection (serve a
//!   plugin service, register), for tests of runtimes.
//! - [`schema`]: messages with every field of the schema set, driven by
//!   the descriptor set, for property tests of hand-written protobuf code.
//! - `callbacks` (feature `runtime`): runtime callbacks that keep pods and
//!   containers and record what plugins asked for.
//! - [`wait`]: poll a condition until it holds or a deadline passes
//!   ([`eventually`]).
//! - [`interop`]: find the Go interop peers ([`go_peer`]).
//!
//! Helpers panic on set-up failures (a socket that cannot be bound, a
//! channel that closed): in a test that is the clearest failure there is.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[cfg(feature = "runtime")]
pub mod callbacks;
pub mod fake_runtime;
pub mod fixtures;
pub mod interop;
pub mod plugin_end;
pub mod schema;
pub mod wait;

pub use interop::go_peer;
pub use wait::{eventually, eventually_some};

use std::time::Duration;

/// Deadline of the calls the helpers make (a test that needs more makes
/// its own call).
pub const TIMEOUT: Duration = Duration::from_secs(5);
