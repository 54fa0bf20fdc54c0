//! NRI (Node Resource Interface) runtime library, the Rust counterpart of
//! containerd/nri's `pkg/adaptation`.
//!
//! The pure-logic core, merging the results of several plugins with field
//! ownership and validating the merged result, is its own crate,
//! `nri-merge`; this crate connects plugins and fans events out to them,
//! calling into it. What an embedder needs of it is re-exported here:
//! [`PluginId`] and, in [`validate`], the [`Validator`](validate::Validator)
//! trait and the built-in [`DefaultValidator`](validate::DefaultValidator).
//!
//! - [`Adaptation`] (built with [`Adaptation::builder`]): launches plugins
//!   from the plugin directory, listens for external plugins, registers,
//!   configures and synchronizes them, and fans every lifecycle event out
//!   to them in a deterministic order (index, then name), with a
//!   per-plugin, per-event [`FailurePolicy`] (or the policy a plugin
//!   declares), validation that fails closed, timeout strikes, teardown
//!   events that never fail, and no lost events around Synchronize.
//! - [`Config`]: every setting, also loaded from a YAML or TOML file
//!   ([`Builder::config_file`], [`Config::apply_file`]; format in
//!   `docs/runtime/config.md`).
//! - [`RuntimeCallbacks`]: what the runtime provides (list, update, evict).
//! - [`Metrics`] (no-op by default; `PrometheusMetrics` with the
//!   `prometheus` feature) and the audit trail on target `nri::audit`.
//!
//! The promises and the tests that show them are documented in
//! `docs/runtime/` of the repository.

// docs.rs (which sets `docsrs`) marks each item that needs a cargo
// feature with that feature.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod error;

pub use error::{Error, RefusalKind, RegistrationFailure};
pub use nri_merge::{Participant, Participants, PluginId, PluginIdentity, PodIdentity};

/// Validation of merged container adjustments, as far as an embedder needs
/// it: in-process validators ([`Validator`](validate::Validator)) and the
/// built-in [`DefaultValidator`](validate::DefaultValidator). The rest of
/// the validation core (building the request, presence checks) is
/// `nri_merge::validate`.
pub mod validate {
    pub use nri_merge::validate::{
        DefaultValidator, DefaultValidatorConfig, DefaultValidatorRole,
        EXAMPLE_TOLERATE_MISSING_PLUGINS_ANNOTATION, REQUIRED_PLUGINS_ANNOTATION, Rejection,
        UpdateValidation, Validator,
    };
}

mod adaptation;
mod config;
mod config_file;
mod connect;
mod deferred;
mod encode;
pub mod failure;
mod grants;
mod identity;
mod known;
mod latency;
pub mod launch;
mod listener;
pub mod metrics;
mod output;
mod peer;
mod plugin;
mod registry;
mod vet;
pub mod wasm;

pub use adaptation::{
    Adaptation, CreateContainerOutcome, EventReport, RunPodSandboxOutcome, StopContainerOutcome,
    UpdateContainerOutcome,
};
pub use config::{
    BoxFuture, Builder, CallbackError, Config, DEFAULT_EXEMPT_NAMESPACES, DEFAULT_STOP_GRACE,
    DEFAULT_STRIKE_LIMIT, DEFAULT_VALIDATOR_NAME, LAUNCHED_PLUGIN_PATH, RuntimeCallbacks, Snapshot,
};
pub use config_file::{ConfigDuration, ConfigFormat, ConfigSection};
pub use failure::{
    ErrorClass, FailurePolicy, PluginError, PluginFailure, PluginPolicy, ValidationMode,
};
pub use grants::{Grant, GrantIdentity, PodSelector, adjustment_kind_name, parse_adjustment_kinds};
#[cfg(feature = "prometheus")]
pub use metrics::PrometheusMetrics;
pub use metrics::{AUDIT_TARGET, Metrics, NoopMetrics};
pub use output::{
    DEFAULT_MAX_OUTPUT_LINE, DEFAULT_OUTPUT_LINES_PER_SECOND, OutputLimits, TRUNCATED_MARKER,
};
pub use peer::{
    DECODED_SIZE_FLOOR, DEFAULT_DECODED_RATIO, DEFAULT_EXTRA_UPDATES, DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_MAX_PENDING_CONNECTIONS, DEFAULT_MAX_REGISTER_LEN, DEFAULT_MAX_SYNC_BACKLOG,
    PeerLimits,
};
pub use plugin::{InstanceState, PluginInfo, PluginOrigin};
pub use registry::CreationGuard;

pub(crate) use nri_mux::sync::lock;
pub use wasm::{WasmError, WasmLimits};

// The README's example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
