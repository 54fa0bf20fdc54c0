//! The crate's one error type.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use nri_api::{CapabilityBasis, CapabilityCheck, EventMask, NriVersion, Requirement};

/// Where in the connection lifecycle something happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Phase {
    /// Dialling the socket or adopting the inherited one.
    Connecting,
    /// `RegisterPlugin` sent, waiting for the answer.
    Registering,
    /// Registered, waiting for (or handling) `Configure`.
    Configuring,
    /// Configured, waiting for the (possibly chunked) `Synchronize`.
    Synchronizing,
    /// Synchronized; events flow.
    Running,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Connecting => "connecting",
            Phase::Registering => "registering",
            Phase::Configuring => "configuring",
            Phase::Synchronizing => "synchronizing",
            Phase::Running => "running",
        })
    }
}

/// A boxed error cause.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can end or fail a plugin, and what
/// [`PluginHandle`](crate::PluginHandle) calls return.
///
/// [`Stub::run`](crate::Stub::run) returns it; match on the variant to decide
/// what to do. OS causes are kept as `#[source]`, so for example
/// [`Error::Connect`] tells a missing socket from a refused connection from
/// a permission problem ([`Error::io_kind`], [`Error::is_socket_missing`],
/// [`Error::is_connection_refused`], [`Error::is_permission_denied`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The plugin name is missing or invalid (non-empty, `[A-Za-z0-9_.+-]`).
    #[error("invalid plugin name {name:?}")]
    InvalidName {
        /// The name (empty when none was given or found).
        name: String,
        /// Why it was refused.
        #[source]
        source: nri_api::Error,
    },

    /// The plugin index is missing or not exactly two ASCII digits.
    #[error("invalid plugin index {index:?}")]
    InvalidIndex {
        /// The index (empty when none was given or found).
        index: String,
        /// Why it was refused.
        #[source]
        source: nri_api::Error,
    },

    /// No index was given or found. A plugin's index comes, first to
    /// last, from [`Builder::index`](crate::Builder::index) (or the Go
    /// flag `-idx`, see [`GoFlags`](crate::GoFlags)), from the
    /// `NRI_PLUGIN_IDX` environment variable a runtime sets for a plugin it
    /// launches, and from an executable named `NN-name` (the Go stub's
    /// convention, as in `10-my-plugin`).
    #[error(
        "no plugin index for executable {executable:?}: name the executable NN-name (e.g. 10-{executable}), give -idx NN (Builder::index in code), or set NRI_PLUGIN_IDX"
    )]
    MissingIndex {
        /// The file name of the running executable (empty when unknown).
        executable: String,
    },

    /// The event subscription is unusable: empty (an empty mask on the wire
    /// would mean "all events") or with bits of no known event.
    #[error("invalid event subscription {events}: {reason}")]
    InvalidEvents {
        /// The offending mask.
        events: EventMask,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// Dialling the runtime's socket failed. The OS error is the source:
    /// `NotFound` (no socket: runtime down or NRI disabled),
    /// `ConnectionRefused` (stale socket, nobody listening),
    /// `PermissionDenied` (socket not accessible to this user).
    #[error("cannot connect to the NRI socket {}", path.display())]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// A pre-launched plugin could not take over the socket the runtime
    /// passed (`NRI_PLUGIN_SOCKET`), or the multiplexer could not be set up.
    #[error("cannot use the runtime connection")]
    Transport {
        /// The cause.
        #[source]
        source: nri_mux::Error,
    },

    /// The runtime answered `RegisterPlugin` with an error.
    #[error("the runtime refused the registration: {reason}")]
    RegistrationRefused {
        /// The runtime's message.
        reason: String,
    },

    /// The runtime did not accept and configure the plugin within the
    /// registration timeout ([`Builder::registration_timeout`](crate::Builder::registration_timeout)).
    #[error("registration timed out after {timeout:?} ({phase})")]
    RegistrationTimeout {
        /// The timeout.
        timeout: Duration,
        /// What was still missing: the `RegisterPlugin` answer
        /// ([`Phase::Registering`]), the runtime's `Configure`
        /// ([`Phase::Configuring`]), or the end of its `Synchronize`
        /// ([`Phase::Synchronizing`]: the synchronization must be over
        /// within the registration timeout after `Configure`).
        phase: Phase,
    },

    /// The runtime's synchronization went over the plugin's
    /// [`SyncLimits`](crate::SyncLimits) (counted across its messages,
    /// before they are decoded); the plugin ends the connection.
    #[error("synchronization too large: {count} {what}, over the limit of {limit}")]
    SyncTooLarge {
        /// What went over: `bytes`, `pods`, `containers` or `decoded bytes`
        /// (the estimated decoded size, in
        /// [`SyncMode::Collect`](crate::SyncMode::Collect)).
        what: &'static str,
        /// How many were received, with the message that went over.
        count: usize,
        /// The limit.
        limit: usize,
    },

    /// The runtime's NRI version cannot deliver some subscribed events, and
    /// the plugin asked for strictness
    /// ([`Builder::strict_events`](crate::Builder::strict_events)), or none
    /// of the subscribed events is supported at all.
    #[error("runtime (NRI {runtime_version}) cannot deliver events {dropped} of {requested}")]
    UnsupportedEvents {
        /// The subscription the plugin asked for.
        requested: EventMask,
        /// The events the runtime cannot take.
        dropped: EventMask,
        /// The runtime's NRI version (reported or inferred).
        runtime_version: NriVersion,
    },

    /// The runtime cannot serve what the plugin
    /// [requires](crate::Builder::requires): it lacks some of it
    /// (`missing`), or, under
    /// [`UnknownCapabilities::Fail`](crate::UnknownCapabilities::Fail), its
    /// support cannot be told (`unknown`). The SDK answered `Configure`
    /// with this error (the runtime logs it and drops the plugin). Not
    /// retried by a reconnect policy: the same runtime would be refused
    /// again; every new connection checks its runtime anew.
    #[error(
        "runtime {runtime} {version} cannot serve this plugin: {} (capabilities {basis})",
        CapabilityCheck::new(missing.to_vec(), unknown.to_vec())
    )]
    Unsupported {
        /// The runtime's name, e.g. `containerd`.
        runtime: String,
        /// The runtime's version, e.g. `v2.1.9`.
        version: String,
        /// Requirements the runtime does not meet. Boxed, as `unknown`,
        /// so that the error stays small enough to wrap in the plugin's
        /// own error (clippy's `result_large_err`).
        missing: Box<[Requirement]>,
        /// Requirements whose support cannot be told (empty unless
        /// `UnknownCapabilities::Fail`).
        unknown: Box<[Requirement]>,
        /// Where the runtime's capabilities came from.
        basis: CapabilityBasis,
    },

    /// The plugin's [`configure`](crate::Plugin::configure) failed or chose
    /// events it does not handle; the runtime was told and drops the plugin.
    #[error("configuration failed: {reason}")]
    ConfigureFailed {
        /// What went wrong.
        reason: String,
    },

    /// The plugin's [`synchronize`](crate::Plugin::synchronize) failed; the
    /// runtime drops a plugin whose initial synchronization fails.
    #[error("synchronization failed: {reason}")]
    SynchronizeFailed {
        /// What went wrong.
        reason: String,
    },

    /// A `Synchronize` message from the runtime cannot be decoded: its
    /// framing is broken (checked before
    /// [`Plugin::synchronize_chunk`](crate::Plugin::synchronize_chunk) is
    /// called; the runtime gets an `INVALID_ARGUMENT` answer), or one pod or
    /// container in it is undecodable (reported by
    /// [`SyncChunk::pods`](crate::SyncChunk::pods) /
    /// [`SyncChunk::containers`](crate::SyncChunk::containers) when reached).
    #[error("malformed Synchronize message at byte {offset}: {reason}")]
    MalformedSync {
        /// Byte offset in the message of the field that failed.
        offset: usize,
        /// What is wrong.
        reason: String,
        /// protobuf's decoding error, when it found the problem.
        #[source]
        source: Option<prost::DecodeError>,
    },

    /// A request from the runtime cannot be decoded: found by
    /// [`Encoded`](crate::Encoded) when the plugin decodes it. As a
    /// [`HandlerError`](crate::HandlerError) (with `?`) it answers
    /// `INVALID_ARGUMENT`.
    #[error("malformed {message}: {reason}")]
    MalformedRequest {
        /// The protobuf message that failed (the request, or the part of
        /// it being decoded, e.g. `Container`).
        message: &'static str,
        /// What is wrong.
        reason: String,
        /// protobuf's decoding error, when it found the problem.
        #[source]
        source: Option<prost::DecodeError>,
    },

    /// A request from the runtime would decode to more memory than the SDK
    /// allows (see [`DECODED_RATIO`](crate::DECODED_RATIO)) and was not
    /// decoded: found by [`Encoded`](crate::Encoded) when the plugin
    /// decodes it. As a [`HandlerError`](crate::HandlerError) (with `?`) it
    /// answers `RESOURCE_EXHAUSTED`.
    #[error("refused to decode {message}: {reason}")]
    RequestTooLarge {
        /// The protobuf message refused (the request, or the part of it
        /// being decoded, e.g. `Container`).
        message: &'static str,
        /// Its size and what it would decode to.
        reason: String,
    },

    /// The connection to the runtime ended (runtime restarted or stopped,
    /// or a transport error).
    #[error("connection to the runtime lost while {phase}")]
    ConnectionLost {
        /// What the plugin was doing.
        phase: Phase,
        /// The transport error, if the connection did not just close.
        #[source]
        source: Option<BoxError>,
    },

    /// The runtime sent `Shutdown`.
    #[error("shut down by the runtime")]
    ShutDownByRuntime,

    /// A newer instance of this plugin (same index and name) took over
    /// its events (an upgrade): the runtime refused this instance's
    /// `UpdateContainers` because of that
    /// ([`SUPERSEDED_REFUSAL`](nri_api::SUPERSEDED_REFUSAL) in the
    /// refusal). The wire has no message for it: a superseded instance's
    /// connection stays open, it gets no more events (nor `Shutdown`), and
    /// [`Stub::run`](crate::Stub::run) keeps running until the plugin is
    /// stopped (a rolling update deletes the old pod; see
    /// [`Runner`](crate::Runner)); it does not reconnect, so it never takes
    /// the events back. Not retryable.
    #[error("superseded: another instance of this plugin took over its events")]
    Superseded,

    /// [`Stub::run`](crate::Stub::run) was called while it was already
    /// running.
    #[error("the plugin is already running")]
    AlreadyStarted,

    /// A [`PluginHandle`](crate::PluginHandle) call needs a connection and
    /// there is none (not yet registered, or between reconnects).
    #[error("not connected to a runtime")]
    NotConnected,

    /// A call to the runtime failed.
    #[error("{method} call to the runtime failed")]
    Rpc {
        /// The method (`RegisterPlugin`, `UpdateContainers`).
        method: &'static str,
        /// The ttRPC error (deadline, status, closed connection).
        #[source]
        source: nri_ttrpc::Error,
    },

    /// `-h` or `-help` on the command line ([`GoFlags::parse`](crate::GoFlags::parse)):
    /// print the usage and exit successfully ([`GoFlags::usage_exit`](crate::GoFlags::usage_exit)).
    #[error("help requested")]
    HelpRequested,

    /// A bad command line ([`GoFlags::parse`](crate::GoFlags::parse)): an
    /// unknown flag, a missing or bad value.
    #[error("{message}")]
    Usage {
        /// What is wrong, as Go's `flag` package words it.
        message: String,
    },

    /// Reconnecting gave up after the policy's maximum number of attempts.
    #[error("gave up reconnecting after {attempts} attempts")]
    ReconnectGaveUp {
        /// Attempts made since the last successful synchronization.
        attempts: u32,
        /// The error of the last attempt.
        #[source]
        last: Box<Error>,
    },
}

impl Error {
    /// An [`Error::Usage`] with this message (for a plugin's own flags in
    /// the hook of [`GoFlags::parse`](crate::GoFlags::parse)).
    pub fn usage(message: impl Into<String>) -> Self {
        Error::Usage {
            message: message.into(),
        }
    }

    /// The status code a handler's answer carries for this error (see
    /// [`HandlerError`](crate::HandlerError)'s conversion).
    pub(crate) fn handler_code(&self) -> nri_ttrpc::Code {
        match self {
            Error::MalformedRequest { .. } => nri_ttrpc::Code::InvalidArgument,
            Error::RequestTooLarge { .. } => nri_ttrpc::Code::ResourceExhausted,
            _ => nri_ttrpc::Code::Unknown,
        }
    }

    /// The OS error kind behind a [`Error::Connect`] (also looking through
    /// [`Error::ReconnectGaveUp`]); `None` for other errors.
    pub fn io_kind(&self) -> Option<io::ErrorKind> {
        match self {
            Error::Connect { source, .. } => Some(source.kind()),
            Error::ReconnectGaveUp { last, .. } => last.io_kind(),
            _ => None,
        }
    }

    /// The socket does not exist (runtime not running, or NRI disabled).
    pub fn is_socket_missing(&self) -> bool {
        self.io_kind() == Some(io::ErrorKind::NotFound)
    }

    /// The socket exists but nobody accepts connections on it.
    pub fn is_connection_refused(&self) -> bool {
        self.io_kind() == Some(io::ErrorKind::ConnectionRefused)
    }

    /// The socket is not accessible to this user.
    pub fn is_permission_denied(&self) -> bool {
        self.io_kind() == Some(io::ErrorKind::PermissionDenied)
    }

    /// Whether a reconnect policy retries after this error: transport
    /// problems, refusals and timeouts yes; configuration mistakes
    /// (names, events, a failing `configure`) and an explicit stop no.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Connect { .. }
                | Error::Transport { .. }
                | Error::RegistrationRefused { .. }
                | Error::RegistrationTimeout { .. }
                | Error::SynchronizeFailed { .. }
                | Error::ConnectionLost { .. }
                | Error::ShutDownByRuntime
                | Error::Rpc { .. }
        )
    }
}
