//! NRI simulator: replay pod and container lifecycles against real NRI
//! plugins without a cluster.
//!
//! A [`Scenario`] (YAML, see `docs/sim/format.md`) lists plugins, pods and
//! containers, steps (lifecycle events, updates, parallel creations,
//! plugins started, killed or restarted mid-run) and expectations.
//! [`run`] starts an embedded [`nri_runtime::Adaptation`] on a private
//! socket in a temporary directory, starts the plugins as separate
//! processes (each gets its connection on fd 3, the way pre-launched
//! plugins do, so any NRI plugin binary works), replays the steps, applies
//! each merged adjustment to the container's OCI spec with `nri-oci`, and
//! reports every step, event, plugin call, failure, conflict and the final
//! spec diffs as [`Record`]s to a [`Reporter`]. Expectations are checked at
//! the end; [`Summary::passed`] tells whether they held.
//!
//! The [`bundled`] plugins (env/annotation adjuster, rlimits, devices and
//! mounts, logger, and misbehaving ones) run from the same executable as
//! the simulator (`nri __bundled-plugin KIND`).
//!
//! ```no_run
//! # async fn demo() -> Result<(), nri_sim::Error> {
//! let scenario = nri_sim::Scenario::parse(
//!     "<demo>",
//!     std::path::Path::new("."),
//!     nri_sim::DEFAULT_SCENARIO,
//! )?;
//! let opts = nri_sim::Options {
//!     self_exe: std::env::current_exe().ok(),
//!     ..Default::default()
//! };
//! let mut records = nri_sim::Collect::default();
//! let summary = nri_sim::run(&scenario, &opts, &mut records).await?;
//! assert!(summary.passed());
//! # Ok(()) }
//! ```

pub mod bundled;
mod engine;
mod error;
mod expect;
mod jsonpath;
mod launch;
pub mod outcome;
mod plugin_log;
pub mod report;
pub mod scenario;
pub mod spec;

pub use engine::{ExtraPlugin, Options, run};
pub use error::{Error, Position, Unknown};
pub use outcome::{Golden, Outcome};
pub use plugin_log::{MAX_LINES, PLUGIN_LOG_TARGET, PluginLog, PluginLogLayer, subscriber};
pub use report::{Collect, Record, Reporter, Summary};
pub use scenario::Scenario;

/// The built-in demo scenario (`nri sim` with no arguments).
pub const DEFAULT_SCENARIO: &str = include_str!("scenarios/demo.yaml");

/// A plain lifecycle with no plugins of its own, used when plugins are
/// given on the command line without a scenario.
pub const LIFECYCLE_SCENARIO: &str = include_str!("scenarios/lifecycle.yaml");

/// Built-in scenarios by name.
pub const BUILTIN_SCENARIOS: [(&str, &str); 2] = [
    ("demo", DEFAULT_SCENARIO),
    ("lifecycle", LIFECYCLE_SCENARIO),
];

// The README's example, compiled as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
