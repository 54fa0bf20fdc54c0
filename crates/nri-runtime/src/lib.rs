//! NRI (Node Resource Interface) runtime library, the Rust counterpart of
//! containerd/nri's `pkg/adaptation`.
//!
//! This crate is built up in layers. The pure-logic core lives here:
//!
//! - [`merge`]: collecting the results of several plugins for one
//!   CreateContainer, UpdateContainer or StopContainer event, with field
//!   ownership and conflict detection ([`merge::CreateResult`],
//!   [`merge::UpdateResult`], [`merge::StopResult`]).
//! - [`validate`]: building the `ValidateContainerAdjustmentRequest` and the
//!   built-in [`validate::DefaultValidator`].
//!
//! Nothing in these modules does I/O; the plugin connection management and
//! event fan-out call into them.

pub mod error;
pub mod merge;
pub mod validate;

pub use error::Error;
pub use merge::PluginId;
