//! Plugin failures, their classification, and the failure policy.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use nri_api::api::Event;

/// What went wrong when the runtime called one plugin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PluginFailure {
    /// The plugin did not answer within its request timeout.
    #[error("no answer within {timeout:?}")]
    Timeout {
        /// The timeout that expired.
        timeout: Duration,
    },
    /// The connection to the plugin is gone (crash, exit, closed by the
    /// runtime).
    #[error("connection lost: {reason}")]
    Disconnected {
        /// Details.
        reason: String,
    },
    /// The plugin's handler answered with an error status.
    #[error("plugin returned error (code {code}): {message}")]
    Status {
        /// ttRPC / gRPC status code.
        code: i32,
        /// The plugin's message.
        message: String,
    },
    /// The answer could not be used (undecodable, a merge conflict, an
    /// invalid update, a bad split-sync answer...).
    #[error("{message}")]
    InvalidResponse {
        /// Details.
        message: String,
    },
    /// The answer conflicts with another plugin's changes.
    #[error("{message}")]
    Conflict {
        /// The conflict (names both plugins, the field and the key).
        message: String,
    },
    /// A validator rejected the merged adjustment.
    #[error("rejected: {reason}")]
    Rejected {
        /// The validator's reason.
        reason: String,
    },
}

impl PluginFailure {
    /// The class of this failure, as used in metrics labels.
    pub fn class(&self) -> ErrorClass {
        match self {
            PluginFailure::Timeout { .. } => ErrorClass::Timeout,
            PluginFailure::Disconnected { .. } => ErrorClass::Disconnected,
            PluginFailure::Status { .. } => ErrorClass::PluginError,
            PluginFailure::InvalidResponse { .. } => ErrorClass::InvalidResponse,
            PluginFailure::Conflict { .. } => ErrorClass::Conflict,
            PluginFailure::Rejected { .. } => ErrorClass::Rejected,
        }
    }

    /// Classifies a ttRPC client error of a call made with `timeout`.
    pub(crate) fn from_ttrpc(err: &nri_ttrpc::Error, timeout: Duration) -> Self {
        match err {
            nri_ttrpc::Error::DeadlineExceeded { timeout, .. } => {
                PluginFailure::Timeout { timeout: *timeout }
            }
            nri_ttrpc::Error::ConnectionClosed { .. }
            | nri_ttrpc::Error::Io { .. }
            | nri_ttrpc::Error::Truncated { .. } => {
                PluginFailure::Disconnected { reason: chain(err) }
            }
            // A plugin that enforces the deadline we sent (timeout_nano), as
            // our SDK and Go's ttrpc server do, can answer DEADLINE_EXCEEDED
            // a moment before our own timer fires: that is the same timeout,
            // not a handler error, and must count as a strike.
            nri_ttrpc::Error::Status {
                code: nri_ttrpc::Code::DeadlineExceeded,
                ..
            } => PluginFailure::Timeout { timeout },
            nri_ttrpc::Error::Status { code, message } => PluginFailure::Status {
                code: i32::from(*code),
                message: message.clone(),
            },
            other => PluginFailure::InvalidResponse {
                message: chain(other),
            },
        }
    }
}

fn chain(err: &dyn std::error::Error) -> String {
    let mut s = err.to_string();
    let mut src = err.source();
    while let Some(e) = src {
        s.push_str(": ");
        s.push_str(&e.to_string());
        src = e.source();
    }
    s
}

/// Coarse class of an error, for metrics and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ErrorClass {
    /// Request timeout.
    Timeout,
    /// Connection lost.
    Disconnected,
    /// The plugin returned an error status.
    PluginError,
    /// The plugin's answer could not be used.
    InvalidResponse,
    /// Two plugins changed the same field.
    Conflict,
    /// A validator rejected the adjustment.
    Rejected,
    /// A required plugin was absent.
    RequiredMissing,
}

impl ErrorClass {
    /// Stable snake-case name (metrics label value).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Timeout => "timeout",
            ErrorClass::Disconnected => "disconnected",
            ErrorClass::PluginError => "plugin_error",
            ErrorClass::InvalidResponse => "invalid_response",
            ErrorClass::Conflict => "conflict",
            ErrorClass::Rejected => "rejected",
            ErrorClass::RequiredMissing => "required_missing",
        }
    }
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One plugin's failure of one event that did **not** fail the request
/// (teardown events, or policy `ignore`); the caller may inspect it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("plugin {plugin} failed {event}: {failure}")]
#[non_exhaustive]
pub struct PluginError {
    /// The plugin (`NN-name`).
    pub plugin: String,
    /// The event.
    pub event: Event,
    /// What went wrong.
    #[source]
    pub failure: PluginFailure,
}

impl PluginError {
    pub(crate) fn new(plugin: impl Into<String>, event: Event, failure: PluginFailure) -> Self {
        Self {
            plugin: plugin.into(),
            event,
            failure,
        }
    }
}

/// What a plugin's failure does to the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Log it, continue with the next plugin, do not fail the request.
    Ignore,
    /// Fail the request when the plugin answers with an error, an unusable
    /// answer or a conflicting change (the default for every event that is
    /// not a teardown event). A plugin that is unavailable (times out, or
    /// its connection is lost) is skipped, as upstream does.
    Fail,
    /// Like `fail`, and the request also fails when the plugin times out or
    /// its connection is lost during the call, and RunPodSandbox and
    /// CreateContainer fail while the plugin is absent (not connected,
    /// disconnected, or dropped after timeouts).
    Required,
}

impl FailurePolicy {
    /// Parses `ignore`, `fail` or `required` (case-insensitive).
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "ignore" => Some(FailurePolicy::Ignore),
            "fail" => Some(FailurePolicy::Fail),
            "required" => Some(FailurePolicy::Required),
            _ => None,
        }
    }
}

/// Whether `event` is a teardown event: delivered to every subscribed
/// plugin whatever earlier plugins returned, never failing the request.
/// Stop*, Remove* and every Post* event.
pub fn is_teardown_event(event: Event) -> bool {
    matches!(
        event,
        Event::StopPodSandbox
            | Event::RemovePodSandbox
            | Event::StopContainer
            | Event::RemoveContainer
            | Event::PostCreateContainer
            | Event::PostStartContainer
            | Event::PostUpdateContainer
            | Event::PostUpdatePodSandbox
    )
}

/// Per-plugin settings, keyed in [`Config`](crate::Config) by plugin name
/// (`name` or `NN-name`; `NN-name` wins when both match).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct PluginPolicy {
    /// Failure policy for every event without an override (`None`: the
    /// runtime default, `fail`).
    pub failure: Option<FailurePolicy>,
    /// Per-event overrides, keyed by event.
    #[serde(skip)]
    pub per_event: BTreeMap<i32, FailurePolicy>,
    /// Request timeout for this plugin (`None`: the runtime's).
    #[serde(with = "opt_millis")]
    pub request_timeout: Option<Duration>,
}

impl PluginPolicy {
    /// A policy with `failure` for every event.
    pub fn new(failure: FailurePolicy) -> Self {
        Self {
            failure: Some(failure),
            ..Self::default()
        }
    }

    /// Overrides the policy for one event.
    #[must_use]
    pub fn with_event(mut self, event: Event, failure: FailurePolicy) -> Self {
        self.per_event.insert(event as i32, failure);
        self
    }

    /// Sets this plugin's request timeout.
    #[must_use]
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = Some(timeout);
        self
    }

    /// The policy for `event` (override, else the plugin's, else `fail`).
    pub fn for_event(&self, event: Event) -> FailurePolicy {
        self.per_event
            .get(&(event as i32))
            .copied()
            .or(self.failure)
            .unwrap_or(FailurePolicy::Fail)
    }

    /// Whether the plugin is required (its policy for every event or the
    /// given one is `required`).
    pub fn is_required_for(&self, event: Event) -> bool {
        self.for_event(event) == FailurePolicy::Required
    }
}

mod opt_millis {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(v: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(d) => s.serialize_some(&(d.as_millis() as u64)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        let v: Option<u64> = serde::Deserialize::deserialize(d)?;
        Ok(v.map(Duration::from_millis))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_status_from_the_plugin_is_a_timeout() {
        let err = nri_ttrpc::Error::Status {
            code: nri_ttrpc::Code::DeadlineExceeded,
            message: "context deadline exceeded".into(),
        };
        let f = PluginFailure::from_ttrpc(&err, Duration::from_secs(2));
        assert!(
            matches!(f, PluginFailure::Timeout { timeout } if timeout == Duration::from_secs(2)),
            "{f:?}"
        );
        assert_eq!(f.class(), ErrorClass::Timeout);
    }

    #[test]
    fn other_status_from_the_plugin_is_a_plugin_error() {
        let err = nri_ttrpc::Error::Status {
            code: nri_ttrpc::Code::Internal,
            message: "boom".into(),
        };
        let f = PluginFailure::from_ttrpc(&err, Duration::from_secs(2));
        assert_eq!(f.class(), ErrorClass::PluginError);
    }
}
