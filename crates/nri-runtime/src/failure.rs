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
    /// The plugin answered UNIMPLEMENTED to a request it subscribed to
    /// (it has no handler for the event's RPC). Counted as an error the
    /// plugin returned.
    #[error("plugin does not implement {method} (UNIMPLEMENTED: {message})")]
    Unimplemented {
        /// The RPC.
        method: String,
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
    /// The plugin was not called for the event in time: the event's
    /// deadline (see
    /// [`Adaptation::with_deadline`](crate::Adaptation::with_deadline))
    /// passed before its turn came, or the plugin was still synchronizing
    /// (or delivering the backlog of its synchronization) when its request
    /// timeout ran out. Not a strike: the calls that kept it busy count
    /// for themselves; the policy treats it as an unavailable plugin. It
    /// still gets the event afterwards (a creation only if it succeeded;
    /// not a validation).
    #[error(
        "not called in time: the event's deadline passed before the plugin's turn, or the plugin was still synchronizing"
    )]
    NotCalled,
    /// The answer changes what the plugin's grant does not allow (see
    /// [`Grant`](crate::Grant)); the answer is refused as a whole.
    #[error("{reason}")]
    NotGranted {
        /// The field (`linux.sysctl`, `update`, `evict`, `pod`,
        /// `UpdateContainers`).
        field: String,
        /// What the answer changes, and the grant.
        reason: String,
    },
}

impl PluginFailure {
    /// The class of this failure, as used in metrics labels.
    pub fn class(&self) -> ErrorClass {
        match self {
            PluginFailure::Timeout { .. } => ErrorClass::Timeout,
            PluginFailure::Disconnected { .. } => ErrorClass::Disconnected,
            PluginFailure::Status { .. } | PluginFailure::Unimplemented { .. } => {
                ErrorClass::PluginError
            }
            PluginFailure::InvalidResponse { .. } => ErrorClass::InvalidResponse,
            PluginFailure::Conflict { .. } => ErrorClass::Conflict,
            PluginFailure::Rejected { .. } => ErrorClass::Rejected,
            PluginFailure::NotCalled => ErrorClass::NotCalled,
            PluginFailure::NotGranted { .. } => ErrorClass::NotGranted,
        }
    }

    /// Classifies a ttRPC client error of a call made with `timeout`.
    pub(crate) fn from_ttrpc(err: &nri_ttrpc::Error, method: &str, timeout: Duration) -> Self {
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
            nri_ttrpc::Error::Status {
                code: nri_ttrpc::Code::Unimplemented,
                message,
            } => PluginFailure::Unimplemented {
                method: method.to_owned(),
                message: message.clone(),
            },
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
    /// The plugin was not called in time: the event's deadline had
    /// passed, or the plugin was still synchronizing.
    NotCalled,
    /// The plugin's answer went beyond its grant.
    NotGranted,
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
            ErrorClass::NotCalled => "not_called",
            ErrorClass::NotGranted => "not_granted",
        }
    }
}

impl ErrorClass {
    /// Whether the class means the plugin was unavailable (timed out, gone,
    /// or not called in time) rather than that it answered badly.
    pub fn is_unavailable(self) -> bool {
        matches!(
            self,
            ErrorClass::Timeout | ErrorClass::Disconnected | ErrorClass::NotCalled
        )
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

    /// The policy's name as written in configuration (`ignore`, `fail`,
    /// `required`).
    pub fn as_str(self) -> &'static str {
        match self {
            FailurePolicy::Ignore => "ignore",
            FailurePolicy::Fail => "fail",
            FailurePolicy::Required => "required",
        }
    }
}

impl fmt::Display for FailurePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What happens to a container creation when a validator plugin (one
/// subscribed to ValidateContainerAdjustment) fails while validating it:
/// times out, crashes, loses its connection, answers with an error or
/// with something that cannot be decoded. An explicit rejection always
/// fails the creation.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum ValidationMode {
    /// The creation fails, whatever the plugin's failure policy (the
    /// default, as upstream).
    #[default]
    FailClosed,
    /// The failure is logged and reported, and the creation goes on as if
    /// the validator had accepted it.
    FailOpen,
}

impl ValidationMode {
    /// Parses `fail-closed` or `fail-open` (case-insensitive; `_` for `-`).
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().replace('_', "-").as_str() {
            "fail-closed" => Some(ValidationMode::FailClosed),
            "fail-open" => Some(ValidationMode::FailOpen),
            _ => None,
        }
    }
}

/// Per-plugin settings, keyed in [`Config`](crate::Config) by plugin name
/// (`name` or `NN-name`; `NN-name` wins when both match).
///
/// Every setting is optional: a setting left unset is taken from the
/// plugin's own declaration (`ConfigureResponse.failure_policy`, see
/// `docs/runtime/failure-policy.md`) where there is one, else from the
/// runtime's defaults ([`Config::default_policy`](crate::Config::default_policy),
/// [`Config::request_timeout`](crate::Config::request_timeout),
/// [`Config::strike_limit`](crate::Config::strike_limit)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PluginPolicy {
    /// Failure policy for every event without an override (`None`: the
    /// plugin's declared policy, else the runtime's default policy).
    pub failure: Option<FailurePolicy>,
    /// Per-event overrides, keyed by event.
    pub per_event: BTreeMap<i32, FailurePolicy>,
    /// Request timeout for this plugin (`None`: the runtime's).
    pub request_timeout: Option<Duration>,
    /// Consecutive timeouts after which this plugin is disconnected
    /// (`None`: the runtime's, or never if the plugin declared
    /// `keep_connected`; 0 = never).
    pub strike_limit: Option<u32>,
    /// What a failure of this plugin as a validator does (`None`:
    /// [`ValidationMode::FailClosed`]).
    pub validation: Option<ValidationMode>,
    /// Whether a second connection registering with this plugin's
    /// `NN-name` while it is connected takes over from it (an upgrade
    /// without a gap, see `docs/runtime/upgrades.md`); `false`: it is
    /// refused while the plugin is connected. `None`: the default
    /// policy's, else `true`.
    pub supersede: Option<bool>,
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

    /// Sets this plugin's strike limit (0 = never disconnected for
    /// timeouts).
    #[must_use]
    pub fn with_strike_limit(mut self, limit: u32) -> Self {
        self.strike_limit = Some(limit);
        self
    }

    /// Sets what a failure of this plugin as a validator does.
    #[must_use]
    pub fn with_validation(mut self, mode: ValidationMode) -> Self {
        self.validation = Some(mode);
        self
    }

    /// Sets whether a newer instance of this plugin takes over from a
    /// connected one (`false`: a second connection with its name is
    /// refused while one is connected).
    #[must_use]
    pub fn with_supersede(mut self, supersede: bool) -> Self {
        self.supersede = Some(supersede);
        self
    }

    /// The policy this entry sets for `event` (its override, else its
    /// policy for every event), `None` if it sets none.
    pub fn configured_for(&self, event: Event) -> Option<FailurePolicy> {
        self.per_event
            .get(&(event as i32))
            .copied()
            .or(self.failure)
    }

    /// The policy for `event` of this entry alone: its override, else its
    /// policy for every event, else `fail`. A plugin's effective policy
    /// also depends on the runtime's default: see
    /// [`Config::failure_policy`](crate::Config::failure_policy).
    pub fn for_event(&self, event: Event) -> FailurePolicy {
        self.configured_for(event).unwrap_or(FailurePolicy::Fail)
    }

    /// Whether this entry makes the plugin required for `event`.
    pub fn is_required_for(&self, event: Event) -> bool {
        self.configured_for(event) == Some(FailurePolicy::Required)
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
        let f = PluginFailure::from_ttrpc(&err, "CreateContainer", Duration::from_secs(2));
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
        let f = PluginFailure::from_ttrpc(&err, "CreateContainer", Duration::from_secs(2));
        assert_eq!(f.class(), ErrorClass::PluginError);
    }
}
