//! What a simulation reports, record by record (`nri sim --json` prints one
//! JSON object per line, tagged by `type`; the first, `start`, carries the
//! format's [`SCHEMA_VERSION`]).

use serde::Serialize;

use crate::spec::DiffLine;

/// Version of the record format (`nri sim --json`), in the `schema` field
/// of the `start` record. Raised when a record or field changes meaning or
/// goes away (new records and fields do not raise it), so saved outputs
/// can tell which format they are in.
///
/// Version 2: the `value`, `old` and `new` of `spec` diff lines are JSON
/// values (a number, an object), no longer JSON text in a string; the
/// `summary` has `unexpected_plugin_problems`.
pub const SCHEMA_VERSION: u32 = 2;

/// One call of a plugin, as the embedded runtime saw it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Call {
    /// `NN-name`.
    pub plugin: String,
    /// Event pretty name, `Synchronize` or `Shutdown`.
    pub operation: String,
    /// Round-trip time in milliseconds (absent for results decided by the
    /// runtime after the call, such as a conflict).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ms: Option<f64>,
    /// `ok`, or the error class (`timeout`, `disconnected`, `plugin_error`,
    /// `invalid_response`, `conflict`, `rejected`, `required_missing`).
    pub result: String,
}

/// A plugin failure that did not fail the request (policy `ignore`,
/// unavailable plugins under `fail`, teardown events).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PluginFailure {
    /// `NN-name`.
    pub plugin: String,
    /// Event.
    pub event: String,
    /// Error class.
    pub class: String,
    /// Message.
    pub message: String,
}

/// One field a plugin set or removed (from the merge's owner records).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// `NN-name`.
    pub plugin: String,
    /// Field (`env`, `annotations`, `mounts`, `devices`, `rlimits`, ...).
    pub field: String,
    /// Key within the field (env name, mount destination, ...), if any.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub key: String,
    /// The plugin removed it.
    pub removed: bool,
}

/// An update of a container's resources requested by plugins.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Update {
    /// `pod/container`, or the container id if unknown.
    pub container: String,
    /// The resources, as JSON.
    pub resources: serde_json::Value,
}

/// An eviction requested by plugins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Eviction {
    /// `pod/container`, or the container id if unknown.
    pub container: String,
    /// Reason given.
    pub reason: String,
}

/// One lifecycle event delivered through the embedded runtime.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventResult {
    /// Event name.
    pub event: String,
    /// `pod` or `pod/container`.
    pub target: String,
    /// Whether the runtime let the request proceed.
    pub ok: bool,
    /// Why the request failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Wall time of the event in milliseconds.
    pub ms: f64,
    /// Plugin calls made for this event.
    pub calls: Vec<Call>,
    /// Plugin failures that did not fail the request.
    pub plugin_failures: Vec<PluginFailure>,
    /// Fields changed (CreateContainer).
    pub changes: Vec<Change>,
    /// Resource updates.
    pub updates: Vec<Update>,
    /// Evictions.
    pub evictions: Vec<Eviction>,
}

/// A record of the simulation.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Record {
    /// The run begins.
    Start {
        /// Version of this record format ([`SCHEMA_VERSION`]).
        schema: u32,
        /// Scenario name.
        scenario: String,
        /// Its description.
        description: String,
        /// Its file.
        file: String,
    },
    /// A plugin process was started.
    PluginStarted {
        /// `NN-name`.
        plugin: String,
        /// `bundled:KIND` or the executable.
        source: String,
        /// Process id.
        #[serde(skip_serializing_if = "Option::is_none")]
        pid: Option<u32>,
    },
    /// A plugin registered, was configured and synchronized.
    PluginRegistered {
        /// `NN-name`.
        plugin: String,
        /// Subscribed events.
        events: Vec<String>,
        /// Time from start to active, in milliseconds.
        ms: f64,
        /// Calls made meanwhile (Synchronize).
        calls: Vec<Call>,
        /// Pods and containers the runtime listed for its Synchronize.
        #[serde(skip_serializing_if = "Option::is_none")]
        synced: Option<(usize, usize)>,
    },
    /// A plugin could not be started or did not register.
    PluginFailed {
        /// `NN-name`.
        plugin: String,
        /// Why.
        reason: String,
        /// Its last lines of output.
        output: Vec<String>,
    },
    /// A plugin process ended.
    PluginExited {
        /// `NN-name`.
        plugin: String,
        /// Exit status.
        status: String,
        /// Ended by the scenario (kill/restart) or at the end of the run.
        expected: bool,
        /// Its last lines of output.
        output: Vec<String>,
    },
    /// A plugin's line of output (with `plugin_output`).
    PluginOutput {
        /// `NN-name`.
        plugin: String,
        /// The line.
        line: String,
    },
    /// The runtime listed pods and containers for a plugin's Synchronize.
    Sync {
        /// Pods listed.
        pods: usize,
        /// Containers listed.
        containers: usize,
    },
    /// Plugin calls not tied to a step (Synchronize of a plugin that
    /// registered in the background, Shutdown).
    Calls {
        /// The calls.
        calls: Vec<Call>,
    },
    /// Updates or evictions a plugin asked for outside an event.
    Unsolicited {
        /// Updates.
        updates: Vec<Update>,
        /// Evictions.
        evictions: Vec<Eviction>,
    },
    /// A step begins.
    Step {
        /// 1-based step number (`3.2` inside a parallel group).
        index: String,
        /// Label.
        #[serde(skip_serializing_if = "Option::is_none")]
        label: Option<String>,
        /// Action key.
        action: String,
        /// Its argument.
        target: String,
    },
    /// An event of the current step.
    Event(EventResult),
    /// A step ended.
    StepEnd {
        /// Step number.
        index: String,
        /// All its events succeeded.
        ok: bool,
        /// The step's own expectation (`ok`/`fail`), if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        expected: Option<String>,
        /// Calls of a parallel group (not attributed to single events).
        #[serde(skip_serializing_if = "Vec::is_empty")]
        calls: Vec<Call>,
    },
    /// The final OCI spec of a container against its unadjusted spec.
    Spec {
        /// `pod/container`.
        container: String,
        /// The differences.
        diff: Vec<DiffLine>,
        /// The final spec (JSON).
        spec: serde_json::Value,
    },
    /// An expectation was checked.
    Expectation {
        /// `file:line:col` of the expectation.
        at: String,
        /// For a step's own `expect: ok|fail`, the step number.
        #[serde(skip_serializing_if = "Option::is_none")]
        step: Option<String>,
        /// What was expected.
        what: String,
        /// Whether it held.
        held: bool,
        /// What was found instead.
        #[serde(skip_serializing_if = "String::is_empty")]
        detail: String,
    },
    /// The end.
    Summary(Summary),
}

/// Totals of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Steps run.
    pub steps: usize,
    /// Events delivered.
    pub events: usize,
    /// Events the runtime refused.
    pub failed_events: usize,
    /// Plugin failures that did not fail requests.
    pub plugin_failures: usize,
    /// Conflicts reported.
    pub conflicts: usize,
    /// Plugins that could not start, did not register (a failed
    /// Configure included) or crashed.
    pub plugin_problems: usize,
    /// Of those, the ones the scenario did not expect: a problem is
    /// expected when the scenario expects the plugin `registered: false`,
    /// or when it happened in a step expected to fail.
    pub unexpected_plugin_problems: usize,
    /// Expectations that held.
    pub expectations_held: usize,
    /// Expectations that failed.
    pub expectations_failed: usize,
    /// Wall time in milliseconds.
    pub ms: f64,
}

impl Summary {
    /// Whether every expectation held and no plugin had a problem the
    /// scenario did not expect.
    pub fn passed(&self) -> bool {
        self.expectations_failed == 0 && self.unexpected_plugin_problems == 0
    }
}

/// Receives the records of a run, in order.
pub trait Reporter: Send {
    /// One record.
    fn report(&mut self, record: &Record);

    /// A short note on what the engine is waiting for (empty: done). For
    /// progress displays; the default ignores it.
    fn progress(&mut self, message: &str) {
        let _ = message;
    }
}

/// A [`Reporter`] that keeps every record (for tests and embedding).
#[derive(Debug, Default)]
pub struct Collect(pub Vec<Record>);

impl Reporter for Collect {
    fn report(&mut self, record: &Record) {
        self.0.push(record.clone());
    }
}
