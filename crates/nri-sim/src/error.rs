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
    /// The plugin directory (`--plugin-dir`) is not a directory or holds
    /// no plugin executables.
    #[error("plugin directory {}: {reason}", dir.display())]
    PluginDir {
        /// The directory.
        dir: std::path::PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A bundled plugin could not run.
    #[error("bundled plugin {name:?}: {reason}")]
    Bundled {
        /// Which plugin kind.
        name: String,
        /// Why.
        reason: String,
    },
}

impl Error {
    /// Whether this is a problem of the scenario (usage error) rather than
    /// of the environment.
    pub fn is_scenario_error(&self) -> bool {
        matches!(self, Error::Parse { .. } | Error::Invalid { .. })
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}
