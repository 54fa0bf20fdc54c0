//! The error type of this crate.

/// Errors reported by the helpers of this crate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An event name in an event list is not known.
    #[error("unknown event {name:?}")]
    UnknownEvent {
        /// The name as given (lower-cased).
        name: String,
    },
    /// A capability (or requirement) name is not known.
    #[error("unknown capability {name:?}")]
    UnknownCapability {
        /// The name as given.
        name: String,
    },
    /// A plugin name is empty or contains a character outside `[A-Za-z0-9_.+-]`.
    #[error("invalid plugin name {name:?}: {reason}")]
    InvalidPluginName {
        /// The offending name.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A plugin index is not exactly two ASCII digits.
    #[error("invalid plugin index {index:?}: must be exactly two ASCII digits")]
    InvalidPluginIndex {
        /// The offending index.
        index: String,
    },
    /// A plugin file name does not have the form `NN-name`.
    #[error("invalid plugin file name {file_name:?}: expected NN-name")]
    InvalidPluginFileName {
        /// The offending file name.
        file_name: String,
        /// Why the index or name part was refused.
        #[source]
        source: Box<Error>,
    },
    /// A version string could not be parsed.
    #[error("invalid version {version:?}")]
    InvalidVersion {
        /// The offending version string.
        version: String,
    },
    /// An encoded message is malformed: decoding it would fail (found by
    /// [`scan`](crate::scan::scan) before decoding).
    #[error("malformed {message} message at byte {offset}: {reason}")]
    MalformedMessage {
        /// Protobuf name of the message scanned.
        message: &'static str,
        /// Where in the encoded message the problem was found.
        offset: usize,
        /// What is wrong.
        reason: String,
    },
    /// [`scan`](crate::scan::scan) was asked about a type that is not a
    /// message of the NRI schema.
    #[error("{message} is not a message of the NRI schema")]
    NotInSchema {
        /// The type's protobuf name.
        message: &'static str,
    },
}
