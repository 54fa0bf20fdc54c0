//! `nri-proxy`: an NRI plugin that runs NRI plugins.
//!
//! The proxy registers with the node's runtime (containerd, CRI-O) as one
//! plugin and serves its own NRI socket and plugin directory with
//! `nri-runtime`: the plugins behind it get that library's contract
//! (per-plugin and per-event failure policies, required plugins, a timeout
//! that fails one call instead of costing the connection, teardown that
//! reaches every plugin, validation, metrics and an audit trail, a peer
//! allow-list) on a runtime that has none of it. Plugins do not change:
//! they connect to the proxy's socket exactly as they would to the
//! runtime's.
//!
//! - Upstream, the proxy subscribes to every event the runtime can deliver
//!   ([`UPSTREAM_EVENTS`]; ValidateContainerAdjustment only when its
//!   configuration puts a validator behind it, and its validators then
//!   judge the runtime's whole adjustment), hands each to its plugins in
//!   order (index, then name) and answers with the merged adjustment,
//!   updates and evictions. It declares the failure policy
//!   `keep_connected` (and `fail_request` if configured).
//! - Each plugin gets the runtime's events in the runtime's order (per
//!   pod; a resynchronization between what came before and after it), each
//!   delivered in a task the proxy owns: a delivery the runtime's
//!   disconnect interrupts still reaches every plugin.
//! - Every upstream request is answered within the runtime's request
//!   timeout (read from `Configure`) minus a safety margin: each plugin
//!   call gets the smaller of its own timeout and what is left
//!   ([`nri_runtime::Adaptation::with_deadline`]).
//! - Unsolicited `UpdateContainers` of its plugins are forwarded upstream,
//!   and the updates the runtime could not apply go back to the plugin
//!   that asked. While upstream is down they fail with an error (they are
//!   not queued).
//! - The proxy keeps the pods and containers it has seen; a plugin that
//!   registers with it is synchronized from that view. It starts its
//!   plugins once the runtime's first Synchronize is in. After a
//!   reconnect (the external form), the difference between the old and
//!   the new view reaches its plugins as events.
//!
//! The configuration is the runtime library's configuration file with a
//! `proxy:` section ([`ProxyConfig`]); see the crate's README.

mod callbacks;
mod capabilities;
pub mod cli;
mod config;
mod delivery;
mod error;
mod event;
mod metrics;
mod order;
mod owners;
mod proxy;
mod resync;
mod upstream;
mod view;

pub use config::{
    DEFAULT_PROXY_CONFIG_DIR, DEFAULT_PROXY_PLUGIN_DIR, DEFAULT_PROXY_SOCKET,
    DEFAULT_SAFETY_MARGIN, PROXY_RUNTIME_NAME, ProxyConfig,
};
pub use error::Error;
pub use proxy::Proxy;
pub use upstream::UPSTREAM_EVENTS;
