//! The crate's error type.

use std::time::Duration;

/// Why a conformance run could not be carried out (breaches of the contract
/// are not errors: they are in the [`Report`](crate::Report)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The recording plugin could not be built.
    #[error("cannot set up the recording plugin")]
    Plugin {
        /// The SDK's error.
        #[source]
        source: nri_plugin::Error,
    },
    /// The recording plugin did not register and synchronize in time.
    #[error("plugin {instance} did not register with the runtime within {timeout:?}{}", cause.as_deref().map(|c| format!(": {c}")).unwrap_or_default())]
    Register {
        /// Which instance.
        instance: String,
        /// How long we waited.
        timeout: Duration,
        /// The SDK's error, when the plugin stopped.
        cause: Option<String>,
    },
    /// A CRI step that must work was refused by the runtime.
    #[error("{step} failed: {message}")]
    Cri {
        /// What was done (e.g. `create c1 in nc-1-lc-a`).
        step: String,
        /// The runtime's error.
        message: String,
    },
    /// A crictl call did not finish in time.
    #[error("crictl {args} did not finish within {timeout:?}")]
    CrictlTimeout {
        /// Its arguments.
        args: String,
        /// The deadline.
        timeout: Duration,
    },
    /// A local I/O step failed (running crictl, writing a JSON file).
    #[error("{what}")]
    Io {
        /// What was done.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The options are unusable.
    #[error("invalid options: {0}")]
    Options(String),
}
