//! Plugin identity: two-digit index plus base name.

use std::fmt;

use nri_api::api::PluginInstance;

use crate::error::Error;

/// Identity of a plugin: its two-digit index and its base name.
///
/// Displayed (and recorded as field owner) as `NN-name`, like upstream.
/// Ordering is by index, then by name: this is the deterministic plugin call
/// order (upstream sorts by index only, unstably).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PluginId {
    // Field order matters: the derived Ord compares index first, then name
    // (`full` follows from the two).
    index: String,
    name: String,
    /// `NN-name`, kept because merging records it for every field a
    /// plugin changes.
    full: String,
}

impl PluginId {
    /// Creates an identity from an index (exactly two ASCII digits) and a
    /// base name (non-empty; no `,`, `/`, whitespace or control characters,
    /// since owner lists are comma-joined and names become file names).
    pub fn new(index: impl Into<String>, name: impl Into<String>) -> Result<Self, Error> {
        let index = index.into();
        let name = name.into();
        if index.len() != 2 || !index.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::InvalidPluginId {
                value: format!("{index}-{name}"),
                reason: "index must be exactly two ASCII digits",
            });
        }
        if name.is_empty() {
            return Err(Error::InvalidPluginId {
                value: format!("{index}-{name}"),
                reason: "name must not be empty",
            });
        }
        if name
            .chars()
            .any(|c| c == ',' || c == '/' || c.is_whitespace() || c.is_control())
        {
            return Err(Error::InvalidPluginId {
                value: format!("{index}-{name}"),
                reason: "name must not contain ',', '/', whitespace or control characters",
            });
        }
        let full = format!("{index}-{name}");
        Ok(Self { index, name, full })
    }

    /// Parses the `NN-name` form.
    pub fn parse(full: &str) -> Result<Self, Error> {
        match full.split_once('-') {
            Some((index, name)) => Self::new(index, name),
            None => Err(Error::InvalidPluginId {
                value: full.to_owned(),
                reason: "expected NN-name",
            }),
        }
    }

    /// The two-digit index.
    pub fn index(&self) -> &str {
        &self.index
    }

    /// The base name (without index).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The `NN-name` form, as displayed and recorded as a field's owner.
    pub fn as_str(&self) -> &str {
        &self.full
    }

    /// The wire `PluginInstance` (base name and index) used in validation
    /// requests.
    pub fn to_instance(&self) -> PluginInstance {
        PluginInstance {
            name: self.name.clone(),
            index: self.index.clone(),
        }
    }
}

impl fmt::Display for PluginId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.full)
    }
}

impl std::str::FromStr for PluginId {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}
