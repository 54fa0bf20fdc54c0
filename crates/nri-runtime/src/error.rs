//! The error type of this crate.

use nri_api::api::Field;

/// Errors reported by the runtime library.
///
/// The merge and validation errors of `nri-merge` arrive as the variants of
/// the same name (`From<nri_merge::Error>`), so a caller matches on one
/// enum.
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
    /// A configuration value is invalid.
    #[error("invalid configuration: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
    /// A configuration file cannot be read or is invalid.
    #[error("{file}{}: {message}", position(*line, *column))]
    ConfigFile {
        /// The file, as given.
        file: String,
        /// 1-based line of the problem, when known.
        line: Option<usize>,
        /// 1-based column of the problem, when known.
        column: Option<usize>,
        /// What is wrong (the bad key or value, and the valid ones).
        message: String,
    },

    // ---- I/O half: connections, fan-out, failure policy ----
    /// A plugin failed an event and its failure policy makes the request
    /// fail (`fail` or `required`).
    #[error("plugin {plugin} failed {event}: {cause}")]
    PluginFailed {
        /// The plugin (`NN-name`).
        plugin: String,
        /// The event (pretty name, e.g. `CreateContainer`).
        event: String,
        /// What went wrong.
        #[source]
        cause: crate::failure::PluginFailure,
    },
    /// A plugin whose failure policy is `required` is not connected (absent,
    /// disconnected, or dropped after timeouts) when the request needs it.
    #[error("required plugin {plugin} is not connected ({event} refused)")]
    RequiredPluginMissing {
        /// The configured plugin name (`name` or `NN-name`).
        plugin: String,
        /// The event that was refused.
        event: String,
    },
    /// A plugin's registration was refused or failed (registration,
    /// Configure or Synchronize).
    #[error("registration of plugin {plugin} failed: {reason}")]
    Registration {
        /// The plugin as far as known (`NN-name`, or a description of the
        /// connection when it never said its name).
        plugin: String,
        /// Why.
        reason: RegistrationFailure,
    },
    /// A plugin's message was refused before it was used: over a limit
    /// of [`PeerLimits`](crate::PeerLimits), malformed, or not allowed
    /// before registration. The plugin is told the reason.
    #[error("{reason}")]
    PeerRefused {
        /// The kind of refusal (also the metric label).
        kind: RefusalKind,
        /// What was refused and why.
        reason: String,
    },
    /// A plugin sent `RegisterPlugin` again on a connection that has
    /// registered (or is registering).
    #[error("plugin already registered")]
    AlreadyRegistered,
    /// The set-up of the connection stopped while the plugin's
    /// `RegisterPlugin` waited for its answer.
    #[error("registration aborted")]
    RegistrationAborted,
    /// The plugin's connection closed while it was being set up.
    #[error("connection closed")]
    ConnectionClosed,
    /// The runtime is stopping; the plugin's request was not handled.
    #[error("runtime stopping")]
    Stopping,
    /// A runtime callback (update, evict) did not return within its
    /// deadline (the request timeout of the plugin on whose behalf it was
    /// called).
    #[error("runtime callback {callback} gave no answer within {timeout:?}")]
    CallbackTimeout {
        /// Which callback.
        callback: &'static str,
        /// Its deadline.
        timeout: std::time::Duration,
    },
    /// A request (`UpdateContainers`) from a plugin instance that a newer
    /// instance of the same plugin took over from: only the instance that
    /// gets the plugin's events may change containers.
    #[error(
        "plugin {plugin} instance {instance} is {}",
        nri_api::SUPERSEDED_REFUSAL
    )]
    Superseded {
        /// The plugin (`NN-name`).
        plugin: String,
        /// The superseded instance.
        instance: u64,
    },
    /// A runtime callback (list, update, evict) failed.
    #[error("runtime callback {callback} failed: {message}")]
    Callback {
        /// Which callback.
        callback: &'static str,
        /// The callback's error, as text.
        message: String,
    },
    /// An error of the merge core that has no variant of its own here (a
    /// kind `nri-merge` added after this enum was written).
    #[error(transparent)]
    Merge {
        /// The merge core's error.
        source: nri_merge::Error,
    },
    /// An operating-system operation failed (socket, directory, spawn).
    #[error("{context}: {message}")]
    Io {
        /// What was being done, with the path involved.
        context: String,
        /// The OS error kind.
        kind: std::io::ErrorKind,
        /// The OS error, as text.
        message: String,
    },
    /// The directory of the socket for external plugins could let someone
    /// else replace the socket (it is writable by its group or by others,
    /// or owned by another user than the runtime's effective user or
    /// root, or not a directory); the socket was not created.
    #[error("refusing to create the NRI socket in {path}: {reason}")]
    InsecureSocketDirectory {
        /// The directory.
        path: String,
        /// Its owner (uid).
        owner: u32,
        /// Its mode (permission bits, with setuid/setgid/sticky).
        mode: u32,
        /// What is wrong with it, and what to do.
        reason: String,
    },
    /// A WebAssembly plugin could not be loaded (or this build has no
    /// WebAssembly engine).
    #[error("WebAssembly plugin {plugin} ({path}): {source}")]
    WasmLoad {
        /// The plugin (`NN-name`).
        plugin: String,
        /// The module file.
        path: String,
        /// What went wrong.
        #[source]
        source: crate::wasm::WasmError,
    },
    /// `start` was called twice, or an event was sent before `start` or
    /// after `stop`.
    #[error("adaptation is {state}")]
    InvalidState {
        /// `"already started"`, `"not started"` or `"stopped"`.
        state: &'static str,
    },
}

impl From<nri_merge::Error> for Error {
    fn from(e: nri_merge::Error) -> Self {
        use nri_merge::Error as M;
        match e {
            M::Conflict {
                field,
                key,
                container,
                first_plugin,
                second_plugin,
            } => Error::Conflict {
                field,
                key,
                container,
                first_plugin,
                second_plugin,
            },
            M::InvalidAdjustment { plugin, reason } => Error::InvalidAdjustment { plugin, reason },
            M::InvalidUpdate {
                plugin,
                container,
                reason,
            } => Error::InvalidUpdate {
                plugin,
                container,
                reason,
            },
            M::ValidationRejected { plugin, reason } => {
                Error::ValidationRejected { plugin, reason }
            }
            M::InvalidPluginId { value, reason } => Error::InvalidPluginId { value, reason },
            M::InvalidConfig { reason } => Error::InvalidConfig { reason },
            other => Error::Merge { source: other },
        }
    }
}

impl Error {
    /// An [`Error::Io`] from an `std::io::Error` and a context.
    pub(crate) fn io(context: impl Into<String>, err: &std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            kind: err.kind(),
            message: err.to_string(),
        }
    }
}

impl Error {
    /// The ttRPC status a plugin is answered with when the Runtime service
    /// (`RegisterPlugin`, `UpdateContainers`) refuses its request for
    /// this error: the one mapping of errors to status codes.
    pub(crate) fn to_status(&self) -> nri_ttrpc::Status {
        use nri_ttrpc::Code;
        let code = match self {
            Error::PeerRefused { kind, .. } => kind.code(),
            Error::AlreadyRegistered | Error::Superseded { .. } => Code::FailedPrecondition,
            Error::RegistrationAborted | Error::ConnectionClosed | Error::Stopping => {
                Code::Unavailable
            }
            // The plugin knows its own name: it is told the reason only.
            Error::Registration { reason, .. } => {
                let code = match reason {
                    RegistrationFailure::NotGranted { .. } => Code::PermissionDenied,
                    _ => Code::InvalidArgument,
                };
                return nri_ttrpc::Status::new(code, reason.to_string());
            }
            Error::ValidationRejected { .. } => Code::PermissionDenied,
            Error::CallbackTimeout { .. } => Code::DeadlineExceeded,
            Error::Conflict { .. }
            | Error::InvalidAdjustment { .. }
            | Error::InvalidUpdate { .. }
            | Error::InvalidPluginId { .. }
            | Error::InvalidConfig { .. }
            | Error::Merge { .. } => Code::InvalidArgument,
            _ => Code::Unknown,
        };
        nri_ttrpc::Status::new(code, self.to_string())
    }
}

/// The kind of a refused peer message ([`Error::PeerRefused`]); its
/// [`as_str`](Self::as_str) is the `kind` label of
/// [`Metrics::peer_refused`](crate::Metrics::peer_refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RefusalKind {
    /// A request other than `RegisterPlugin` before registration.
    Unregistered,
    /// A request over the connection's size limit.
    TooLarge,
    /// More `update` or `evict` entries than allowed.
    TooManyUpdates,
    /// A message that would decode to too much memory.
    DecodedSize,
    /// A message that does not decode.
    Malformed,
    /// Too many requests of one connection in flight.
    InFlight,
    /// Too many metadata entries in a request.
    Metadata,
    /// Too many connections waiting to register.
    PendingConnections,
    /// A frame for a multiplexer connection that is not open.
    UnknownConnection,
    /// A connection from a peer not in the allowed list.
    PeerNotAllowed,
    /// A registration with an invalid or taken identity.
    Registration,
    /// No registration within the registration timeout.
    RegistrationTimeout,
    /// A malformed container update or eviction.
    InvalidUpdate,
    /// Container updates a validator rejected.
    RejectedUpdate,
    /// More events while a plugin synchronized than its backlog may hold
    /// ([`PeerLimits::max_sync_backlog`](crate::PeerLimits::max_sync_backlog)):
    /// the plugin is closed.
    SyncBacklog,
    /// A registration no grant admits, or an unsolicited request beyond
    /// the plugin's grant.
    NotGranted,
}

impl RefusalKind {
    /// The metric label: `unregistered`, `too_large`, `too_many_updates`,
    /// `decoded_size`, `malformed`, `in_flight`, `metadata`,
    /// `pending_connections`, `unknown_connection`, `peer_not_allowed`,
    /// `registration`, `registration_timeout`, `invalid_update`,
    /// `rejected_update`, `sync_backlog`, `not_granted`.
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalKind::Unregistered => "unregistered",
            RefusalKind::TooLarge => "too_large",
            RefusalKind::TooManyUpdates => "too_many_updates",
            RefusalKind::DecodedSize => "decoded_size",
            RefusalKind::Malformed => "malformed",
            RefusalKind::InFlight => "in_flight",
            RefusalKind::Metadata => "metadata",
            RefusalKind::PendingConnections => "pending_connections",
            RefusalKind::UnknownConnection => "unknown_connection",
            RefusalKind::PeerNotAllowed => "peer_not_allowed",
            RefusalKind::Registration => "registration",
            RefusalKind::RegistrationTimeout => "registration_timeout",
            RefusalKind::InvalidUpdate => "invalid_update",
            RefusalKind::RejectedUpdate => "rejected_update",
            RefusalKind::SyncBacklog => "sync_backlog",
            RefusalKind::NotGranted => "not_granted",
        }
    }

    /// The status code of a request refused for this kind.
    fn code(self) -> nri_ttrpc::Code {
        use nri_ttrpc::Code;
        match self {
            RefusalKind::Unregistered => Code::FailedPrecondition,
            RefusalKind::Malformed => Code::InvalidArgument,
            RefusalKind::NotGranted => Code::PermissionDenied,
            _ => Code::ResourceExhausted,
        }
    }

    /// The kind of a request the ttRPC server refused by itself.
    pub(crate) fn of_ttrpc(r: &nri_ttrpc::Refusal) -> Self {
        use nri_ttrpc::Refusal as R;
        match r {
            R::TooManyInFlight { .. } => RefusalKind::InFlight,
            R::TooMuchMetadata { .. } => RefusalKind::Metadata,
            R::Malformed { .. } => RefusalKind::Malformed,
            // `TooLarge`, and any kind the server learns later.
            _ => RefusalKind::TooLarge,
        }
    }
}

impl std::fmt::Display for RefusalKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

fn position(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(":{l}:{c}"),
        (Some(l), None) => format!(":{l}"),
        _ => String::new(),
    }
}

fn key_suffix(key: &Option<String>) -> String {
    match key {
        Some(k) => format!(" {k:?}"),
        None => String::new(),
    }
}

/// Why a plugin did not get from its connection to active
/// ([`Error::Registration`]): the steps are registration, Configure and
/// Synchronize.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistrationFailure {
    /// The connection closed before the plugin sent `RegisterPlugin`.
    #[error("connection closed before registration")]
    ClosedBeforeRegistration,
    /// No `RegisterPlugin` within the registration timeout.
    #[error("no registration within {timeout:?}")]
    Timeout {
        /// The registration timeout.
        timeout: std::time::Duration,
    },
    /// The index or name the plugin registered with is not valid.
    #[error("{reason}")]
    InvalidIdentity {
        /// What is wrong with it.
        reason: String,
    },
    /// A plugin of the same name is connected already (and this
    /// connection may not take over from it: see `docs/runtime/upgrades.md`).
    #[error("a plugin named {plugin} is already connected")]
    NameInUse {
        /// The name (`NN-name`).
        plugin: String,
    },
    /// A newer instance of the plugin is already taking over from the
    /// active one (one upgrade at a time).
    #[error("another instance of {plugin} is already taking over from the connected one")]
    HandoverInProgress {
        /// The name (`NN-name`).
        plugin: String,
    },
    /// The connection's multiplexer failed while it was set up.
    #[error("mux: {message}")]
    Transport {
        /// The multiplexer's error.
        message: String,
    },
    /// The `Configure` call failed (error, timeout or lost connection).
    #[error("Configure failed: {message}")]
    Configure {
        /// The call's error.
        message: String,
    },
    /// The `Configure` answer could not be taken (too large or not
    /// decodable).
    #[error("Configure answer refused: {reason}")]
    ConfigureAnswer {
        /// Why.
        reason: String,
    },
    /// The plugin subscribed to events this runtime does not know.
    #[error(
        "plugin subscribed to unknown events {unknown:#x} (this runtime knows {known:#x}: {known_names})"
    )]
    UnknownEvents {
        /// The unknown bits of the plugin's event mask.
        unknown: i32,
        /// The events this runtime knows, as a mask.
        known: i32,
        /// Their names.
        known_names: String,
    },
    /// Listing the pods and containers for the plugin's `Synchronize` did
    /// not return within the plugin's request timeout.
    #[error("listing pods and containers gave no answer within {timeout:?}")]
    ListTimeout {
        /// The plugin's request timeout.
        timeout: std::time::Duration,
    },
    /// More events happened while the plugin synchronized than its backlog
    /// may hold ([`PeerLimits::max_sync_backlog`](crate::PeerLimits::max_sync_backlog)).
    #[error("more than {limit} events happened while the plugin synchronized")]
    BacklogFull {
        /// The bound.
        limit: usize,
    },
    /// Listing the pods and containers for the plugin's `Synchronize`
    /// failed (a runtime callback error).
    #[error("listing pods and containers failed: {message}")]
    ListFailed {
        /// The callback's error.
        message: String,
    },
    /// The `Synchronize` call (or one of its parts) failed.
    #[error("Synchronize failed: {message}")]
    Synchronize {
        /// The call's error.
        message: String,
    },
    /// The snapshot was split in parts and the plugin answered a part
    /// other than the last as if it were the last (it does not handle
    /// split requests).
    #[error("plugin does not handle split Synchronize requests")]
    SplitSyncUnsupported,
    /// The connection was lost during synchronization.
    #[error("connection lost during synchronization")]
    LostDuringSync,
    /// The runtime is stopping: the plugin does not become active.
    #[error("runtime stopping")]
    Stopping,
    /// Grants are configured and none admits the plugin: none names it,
    /// or its identity meets the requirements of none that does.
    #[error("refused by the grants: {reason}")]
    NotGranted {
        /// Which grants name the plugin and what each requires that it
        /// is not, or that none names it.
        reason: String,
    },
}

#[cfg(test)]
mod tests {
    use nri_ttrpc::Code;

    use super::*;

    fn status(e: &Error) -> (Code, String) {
        let st = e.to_status();
        (st.code(), st.message)
    }

    #[test]
    fn runtime_service_refusals_map_to_their_status() {
        let refused = |kind| Error::PeerRefused {
            kind,
            reason: "why".into(),
        };
        assert_eq!(
            status(&refused(RefusalKind::Unregistered)),
            (Code::FailedPrecondition, "why".into())
        );
        assert_eq!(
            status(&refused(RefusalKind::Malformed)).0,
            Code::InvalidArgument
        );
        assert_eq!(
            status(&refused(RefusalKind::TooManyUpdates)).0,
            Code::ResourceExhausted
        );
        assert_eq!(
            status(&Error::AlreadyRegistered),
            (Code::FailedPrecondition, "plugin already registered".into())
        );
        assert_eq!(status(&Error::Stopping).0, Code::Unavailable);
        assert_eq!(status(&Error::RegistrationAborted).0, Code::Unavailable);
        let taken = Error::Registration {
            plugin: "uid=0".into(),
            reason: RegistrationFailure::NameInUse {
                plugin: "10-a".into(),
            },
        };
        assert_eq!(
            status(&taken),
            (
                Code::InvalidArgument,
                "a plugin named 10-a is already connected".into()
            )
        );
        let not_granted = Error::Registration {
            plugin: "uid=0".into(),
            reason: RegistrationFailure::NotGranted {
                reason: "no grant names plugin 10-a".into(),
            },
        };
        assert_eq!(
            status(&not_granted),
            (
                Code::PermissionDenied,
                "refused by the grants: no grant names plugin 10-a".into()
            )
        );
        let rejected = Error::ValidationRejected {
            plugin: "90-v".into(),
            reason: "no".into(),
        };
        assert_eq!(status(&rejected).0, Code::PermissionDenied);
        let failed = Error::Callback {
            callback: "update_containers",
            message: "boom".into(),
        };
        assert_eq!(status(&failed).0, Code::Unknown);
    }

    #[test]
    fn refusal_kinds_keep_their_metric_labels() {
        assert_eq!(RefusalKind::TooManyUpdates.as_str(), "too_many_updates");
        assert_eq!(RefusalKind::PeerNotAllowed.to_string(), "peer_not_allowed");
        let r = nri_ttrpc::Refusal::Malformed {
            stream_id: 1,
            reason: "x".into(),
        };
        assert_eq!(RefusalKind::of_ttrpc(&r).as_str(), r.kind());
    }
}
