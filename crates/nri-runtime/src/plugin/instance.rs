//! Where one instance (one connection) of a plugin stands.

/// Where one instance (one connection) of a plugin stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum InstanceState {
    /// Gets the plugin's events.
    Active,
    /// A newer instance of the plugin (same `NN-name`) took over: this one
    /// gets no more events and is dropped when it disconnects (see
    /// `docs/runtime/upgrades.md`).
    Superseded,
}

impl InstanceState {
    /// The state's name as metrics and logs show it: `active`,
    /// `superseded`.
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceState::Active => "active",
            InstanceState::Superseded => "superseded",
        }
    }
}

impl std::fmt::Display for InstanceState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
