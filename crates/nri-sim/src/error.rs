//! The error type of this crate.

use std::fmt;

/// A position in a scenario file (1-based line and column).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    /// The file (as given by the user, or `<built-in NAME>`).
    pub file: String,
    /// 1-based line, 0 if unknown.
    pub line: u64,
    /// 1-based column, 0 if unknown.
    pub column: u64,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (0, _) => write!(f, "{}", self.file),
            (l, 0) => write!(f, "{}:{l}", self.file),
            (l, c) => write!(f, "{}:{l}:{c}", self.file),
        }
    }
}

/// Errors of the simulator.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The scenario is not valid YAML or does not match the format.
    #[error("{at}: {message}")]
    Parse {
        /// Where.
        at: Position,
        /// What was expected.
        message: String,
    },
    /// The scenario parsed but is inconsistent (unknown pod, plugin, ...).
    #[error("{at}: {message}")]
    Invalid {
        /// Where.
        at: Position,
        /// What is wrong.
        message: String,
    },
    /// A name in the scenario refers to nothing: a plugin, event, pod,
    /// container or owner field that does not exist.
    #[error("{at}: {what}")]
    Unknown {
        /// Where the name is.
        at: Position,
        /// What it should have named, and what there is.
        #[source]
        what: Unknown,
    },
    /// A file could not be read or written.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The embedded runtime could not be set up.
    #[error("embedded NRI runtime: {source}")]
    Runtime {
        /// The runtime library's error.
        #[source]
        source: nri_runtime::Error,
    },
    /// The plugin directory (`--plugin-dir`) is not a directory.
    #[error("plugin directory {}: not a directory", dir.display())]
    PluginDirNotADirectory {
        /// The directory.
        dir: std::path::PathBuf,
    },
    /// The plugin directory (`--plugin-dir`) holds no plugin executables.
    #[error(
        "plugin directory {}: no plugins in it (executables named NN-name, e.g. 10-my-plugin)",
        dir.display()
    )]
    PluginDirEmpty {
        /// The directory.
        dir: std::path::PathBuf,
    },
    /// `nri` was asked to run a bundled plugin of a kind it does not have.
    #[error("bundled plugin {name:?}: unknown kind")]
    UnknownBundledKind {
        /// The kind asked for.
        name: String,
    },
    /// A bundled plugin's settings are not valid for its kind.
    #[error("bundled plugin {name:?}: {reason}")]
    BundledSettings {
        /// Which plugin kind.
        name: String,
        /// What is wrong with the settings.
        #[source]
        reason: Box<Error>,
    },
    /// A value that does not parse as what it should be (a quantity, a
    /// duration, a limit).
    #[error("expected {expected}, got {value:?}")]
    BadValue {
        /// The value as written.
        value: String,
        /// What it should look like.
        expected: &'static str,
    },
    /// A quantity with a unit that is not one of the known ones.
    #[error("unknown unit {unit:?} in {value:?} (expected Ki, Mi, Gi, Ti, k, M, G)")]
    UnknownUnit {
        /// The unit as written.
        unit: String,
        /// The quantity as written.
        value: String,
    },
    /// A quantity whose value in bytes does not fit in 64 bits.
    #[error("quantity {value:?} is too large")]
    QuantityTooLarge {
        /// The quantity as written.
        value: String,
    },
    /// A bundled plugin kind a scenario names that does not exist.
    #[error("unknown bundled plugin {kind:?}")]
    UnknownBundledPlugin {
        /// The kind as written.
        kind: String,
    },
    /// A setting a bundled plugin kind does not have (in a scenario).
    #[error(
        "unknown setting {key:?} for bundled plugin {kind}; expected {}",
        if allowed.is_empty() { "none".to_owned() } else { allowed.join(", ") }
    )]
    UnknownBundledSetting {
        /// The plugin kind.
        kind: String,
        /// The setting as written.
        key: String,
        /// The settings of that kind.
        allowed: &'static [&'static str],
    },
    /// A setting no bundled plugin has (in its configuration).
    #[error("unknown setting {key:?}")]
    UnknownSetting {
        /// The setting as written.
        key: String,
    },
    /// A bundled plugin's setting whose value is not what the setting
    /// takes.
    #[error("`{setting}` {rule}")]
    BadSetting {
        /// The setting (`env`, `env.KEY`, `after`, ...).
        setting: String,
        /// What its value must be (`must be a string`, ...).
        rule: &'static str,
    },
    /// A bundled plugin's setting that names something that does not
    /// exist (an event).
    #[error("{what}")]
    UnknownName {
        /// What it should have named, and what there is.
        #[source]
        what: Unknown,
    },
    /// A device or mount a bundled plugin was asked to inject that is not
    /// written as it should be.
    #[error("{what} {value:?}: {problem}")]
    BadInjection {
        /// `device` or `mount`.
        what: &'static str,
        /// The device or mount as written.
        value: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A plugin argument (`--plugin PATH[:IDX]`) that names no file.
    #[error("{arg:?}: expected PATH[:IDX] naming an executable")]
    PluginArg {
        /// The argument as given.
        arg: String,
    },
    /// Bundled plugins were asked for without the `nri` executable to
    /// run them.
    #[error("bundled plugins need the `nri` executable (Options::self_exe)")]
    NoSelfExe,
    /// A plugin process exited before it registered.
    #[error("exited before registering ({status})")]
    ExitedBeforeRegistering {
        /// Its exit status.
        status: std::process::ExitStatus,
    },
    /// A plugin process did not register in time (and was killed).
    #[error("did not register within {timeout:?} (registration timeout); killed")]
    RegistrationTimeout {
        /// The registration timeout.
        timeout: std::time::Duration,
    },
    /// A step names a pod that is not running.
    #[error("pod {pod} is not running")]
    PodNotRunning {
        /// The pod.
        pod: String,
    },
    /// A step names a container that was not created.
    #[error("container {container} was not created")]
    ContainerNotCreated {
        /// The container (`POD/CONTAINER`).
        container: String,
    },
    /// A bundled plugin's settings variable is not a JSON object.
    #[error("bundled plugin {name:?}: {variable}: {source}")]
    BundledSettingsJson {
        /// Which plugin kind.
        name: String,
        /// The environment variable.
        variable: &'static str,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
    /// A bundled plugin's subscription variable is not a list of events.
    #[error("bundled plugin {name:?}: {variable}: {source}")]
    BundledEvents {
        /// Which plugin kind.
        name: String,
        /// The environment variable.
        variable: &'static str,
        /// The event list's error.
        #[source]
        source: nri_api::Error,
    },
    /// A bundled plugin failed on its socket.
    #[error("bundled plugin {name:?}: {source}")]
    BundledIo {
        /// Which plugin kind.
        name: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A bundled plugin's SDK stub failed to build or to run.
    #[error("bundled plugin {name:?}: {source}")]
    BundledPlugin {
        /// Which plugin kind.
        name: String,
        /// The plugin SDK's error (boxed: it is large, and this enum is
        /// returned on every scenario check).
        #[source]
        source: Box<nri_plugin::Error>,
    },
}

impl Error {
    /// Whether this is a problem of the scenario (usage error) rather than
    /// of the environment.
    pub fn is_scenario_error(&self) -> bool {
        matches!(
            self,
            Error::Parse { .. } | Error::Invalid { .. } | Error::Unknown { .. }
        )
    }

    /// Where in the scenario file the problem is, for errors of the
    /// scenario.
    pub fn position(&self) -> Option<&Position> {
        match self {
            Error::Parse { at, .. } | Error::Invalid { at, .. } | Error::Unknown { at, .. } => {
                Some(at)
            }
            _ => None,
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

/// `items` joined for a message, or `none` when there are none.
fn listed(items: &[String], none: &str) -> String {
    if items.is_empty() {
        none.to_owned()
    } else {
        items.join(", ")
    }
}

/// ` (did you mean X?)` for a suggestion.
fn did_you_mean(suggestion: &Option<String>) -> String {
    suggestion
        .as_ref()
        .map(|s| format!(" (did you mean {s}?)"))
        .unwrap_or_default()
}

/// A name in a scenario that refers to nothing, with what it could have
/// named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unknown {
    /// A plugin name (in an expectation, a policy, an owner) that no plugin
    /// of the scenario or of the command line has.
    #[error(
        "unknown plugin {name:?}{}; the plugins are: {}",
        did_you_mean(suggestion),
        listed(
            known,
            "none (declare it under `plugins`, or give it with --plugin or --plugin-dir)"
        )
    )]
    Plugin {
        /// The name as written.
        name: String,
        /// The plugins there are (`name` and `NN-name` both match).
        known: Vec<String>,
        /// The closest of them, if one is close.
        suggestion: Option<String>,
    },
    /// An event name that is not an NRI event.
    #[error(
        "unknown event {name:?}{}; the events are: {}",
        did_you_mean(suggestion),
        valid.join(", ")
    )]
    Event {
        /// The name as written.
        name: String,
        /// The valid names, in their canonical spelling.
        valid: Vec<String>,
        /// The closest valid name, if one is close.
        suggestion: Option<String>,
    },
    /// A pod name that no pod of the scenario has.
    #[error(
        "unknown pod {pod:?}: it does not exist; the pods are: {}",
        listed(pods, "none (declare it under `pods`)")
    )]
    Pod {
        /// The name as written.
        pod: String,
        /// The scenario's pods.
        pods: Vec<String>,
    },
    /// A container that its pod does not have.
    #[error(
        "container {container:?} does not exist in pod {pod:?}; its containers are: {}",
        listed(containers, "none")
    )]
    Container {
        /// The pod.
        pod: String,
        /// The container name as written.
        container: String,
        /// The pod's containers.
        containers: Vec<String>,
    },
    /// A container reference without the pod: `POD/CONTAINER` expected.
    #[error("{target:?} does not name a container: expected POD/CONTAINER, e.g. {example}")]
    ContainerRef {
        /// The reference as written.
        target: String,
        /// A valid reference of the scenario (or `web/app`).
        example: String,
    },
    /// An owner field (`FIELD/KEY`) whose field is not an NRI field.
    #[error(
        "unknown owner field {field:?}{}; the fields are: {}",
        did_you_mean(suggestion),
        valid.join(", ")
    )]
    OwnerField {
        /// The field as written (before the `/`).
        field: String,
        /// The valid field names (kebab-case).
        valid: Vec<String>,
        /// The closest valid name, if one is close.
        suggestion: Option<String>,
    },
}
