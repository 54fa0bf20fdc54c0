//! The error type of this crate.

use nri_api::api::Field;

/// Errors of merging plugin results and of validation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Two plugins (or one plugin twice) tried to change the same field, or
    /// the same key of a compound field, of one container.
    #[error(
        "plugins {second_plugin:?} and {first_plugin:?} both tried to set {}{} of container {container:?}",
        field.as_str_name(),
        key_suffix(key)
    )]
    Conflict {
        /// The contested field.
        field: Field,
        /// The contested key for compound fields (annotation name, mount
        /// destination, env var, ...); `None` for simple fields.
        key: Option<String>,
        /// The container whose field is contested.
        container: String,
        /// The plugin that owned the field first (`NN-name`, without the
        /// removal marker even if it owned the field by removing it).
        first_plugin: String,
        /// The plugin whose change was refused (`NN-name`).
        second_plugin: String,
    },
    /// A plugin returned an adjustment that cannot be applied as a whole.
    #[error("invalid container adjustment from plugin {plugin:?}: {reason}")]
    InvalidAdjustment {
        /// The plugin (`NN-name`).
        plugin: String,
        /// What is wrong with the adjustment.
        reason: String,
    },
    /// A plugin asked for a container update or eviction that is not allowed
    /// (for instance an update of the container being created).
    #[error("invalid update of container {container:?} from plugin {plugin:?}: {reason}")]
    InvalidUpdate {
        /// The plugin (`NN-name`).
        plugin: String,
        /// The container the update or eviction names.
        container: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A validator rejected the merged container adjustment.
    #[error("validator {plugin:?} rejected container adjustment, reason: {reason}")]
    ValidationRejected {
        /// The validator (`NN-name`).
        plugin: String,
        /// The reason the validator gave.
        reason: String,
    },
    /// A plugin identity (`NN-name`) is malformed.
    #[error("invalid plugin identity {value:?}: {reason}")]
    InvalidPluginId {
        /// The offending value.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A validator configuration value is invalid.
    #[error("invalid configuration: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
}

fn key_suffix(key: &Option<String>) -> String {
    match key {
        Some(k) => format!(" {k:?}"),
        None => String::new(),
    }
}
