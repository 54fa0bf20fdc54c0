//! The [`Plugin`] trait and the values its methods receive and return.

use std::fmt;
use std::future::{Future, Ready, ready};
use std::time::Duration;

use nri_api::api::{
    Container, ContainerUpdate, CreateContainerRequest, CreateContainerResponse, Event,
    LinuxResources, PodSandbox, StopContainerResponse, UpdateContainerResponse,
    ValidateContainerAdjustmentRequest,
};
use nri_api::{CapabilityBasis, EventMask, Requirement, RuntimeCapabilities, RuntimeNriVersion};
use nri_ttrpc::{Code, Status};

use crate::{Encoded, Error, PluginHandle, SyncChunk};

/// What a handler returns.
pub type HandlerResult<T> = Result<T, HandlerError>;

/// An error returned by a [`Plugin`] method; it becomes the ttRPC status of
/// the answer (code `UNKNOWN` unless chosen with [`HandlerError::with_code`],
/// message = the error's text with its causes).
///
/// Any `std::error::Error` converts with `?` (the SDK's
/// [`Error::MalformedRequest`] and [`Error::RequestTooLarge`] with codes
/// `INVALID_ARGUMENT` and `RESOURCE_EXHAUSTED`); use [`HandlerError::msg`]
/// for plain text. [`HandlerError::unimplemented`] answers `UNIMPLEMENTED`
/// (rarely what a plugin wants: a v0.12 runtime takes it as "use
/// `StateChange` instead" for the events that have a `StateChange` form,
/// and fails the request for the others).
pub struct HandlerError {
    code: Code,
    message: String,
}

impl HandlerError {
    /// An error with this message (code `UNKNOWN`, as the Go stub sends).
    pub fn msg(message: impl fmt::Display) -> Self {
        HandlerError {
            code: Code::Unknown,
            message: message.to_string(),
        }
    }

    /// "This plugin does not handle this request": answered as
    /// `UNIMPLEMENTED` (code 12). Not needed for events without a method:
    /// the SDK answers those with an empty success itself.
    pub fn unimplemented() -> Self {
        HandlerError {
            code: Code::Unimplemented,
            message: String::new(),
        }
    }

    /// The same error with another status code.
    #[must_use]
    pub fn with_code(mut self, code: Code) -> Self {
        self.code = code;
        self
    }

    /// The status code sent to the runtime.
    pub fn code(&self) -> Code {
        self.code
    }

    /// The message sent to the runtime.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// True for [`HandlerError::unimplemented`].
    pub fn is_unimplemented(&self) -> bool {
        self.code == Code::Unimplemented
    }

    pub(crate) fn into_status(self, method: &str) -> Status {
        if self.code == Code::Unimplemented && self.message.is_empty() {
            return Status::unknown_method(method);
        }
        let code = if self.code == Code::Ok {
            Code::Unknown
        } else {
            self.code
        };
        Status::new(code, self.message)
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerError")
            .field("code", &self.code)
            .field("message", &self.message)
            .finish()
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}", self.code)
        } else {
            f.write_str(&self.message)
        }
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for HandlerError {
    fn from(err: E) -> Self {
        let mut message = err.to_string();
        let mut source = err.source();
        while let Some(s) = source {
            message.push_str(": ");
            message.push_str(&s.to_string());
            source = s.source();
        }
        // The SDK's own request errors keep the code the SDK answers them
        // with when it decodes a request itself.
        let code = (&err as &dyn std::any::Any)
            .downcast_ref::<Error>()
            .map_or(Code::Unknown, Error::handler_code);
        HandlerError::msg(message).with_code(code)
    }
}

/// The runtime a plugin is connected to, from its `Configure` request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RuntimeInfo {
    /// Runtime name, e.g. `containerd`.
    pub name: String,
    /// Runtime version, e.g. `v2.1.4`.
    pub version: String,
    /// The runtime's NRI version, reported in `ConfigureRequest.NRI_version`
    /// or inferred from name and version (see [`nri_api::runtime_nri_version`]).
    pub nri_version: RuntimeNriVersion,
    /// The runtime's registration timeout.
    pub registration_timeout: Duration,
    /// The runtime's per-request timeout: every handler must answer within it.
    /// Zero when the runtime did not tell (NRI before v0.7.0 has no such
    /// field; those runtimes use NRI's default, 2 s).
    pub request_timeout: Duration,
    /// Whether the runtime is built on nri-rs's runtime library (its
    /// `NRI_version` carries the nri-rs build tag, see
    /// [`nri_api::is_nri_rs_runtime`]). Such a runtime carries out the
    /// evictions of an unsolicited `UpdateContainers`; containerd/nri's
    /// Go runtime ignores them (every release through v0.12.5).
    pub nri_rs: bool,
    /// What the runtime can do: the adjustments it applies, the fields it
    /// fills in, the events it delivers; declared by the runtime, or
    /// inferred from its name and version
    /// ([`RuntimeCapabilities::of_runtime`]).
    pub capabilities: RuntimeCapabilities,
}

impl RuntimeInfo {
    /// The events this runtime accepts in a subscription: those of its NRI
    /// version, less those it declares it does not deliver (`nri-proxy`
    /// on a runtime older than its own NRI version).
    pub fn valid_events(&self) -> EventMask {
        let valid = self.nri_version.version.valid_events();
        match self.capabilities.basis {
            CapabilityBasis::Declared => valid.intersection(self.capabilities.events),
            _ => valid,
        }
    }

    /// Whether the runtime meets a requirement: `Some(true)`,
    /// `Some(false)`, or `None` when that cannot be told.
    ///
    /// ```
    /// # fn f(info: &nri_plugin::ConfigureInfo) {
    /// use nri_plugin::Capability;
    /// if info.runtime.supports(Capability::AdjustLinuxSysctl) != Some(true) {
    ///     // fall back to something the runtime applies
    /// }
    /// # }
    /// ```
    pub fn supports(&self, requirement: impl Into<Requirement>) -> Option<bool> {
        self.capabilities.supports(requirement.into())
    }
}

/// What [`Plugin::configure`] receives.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ConfigureInfo {
    /// The configuration text. Pre-launched plugins get the runtime's
    /// `NN-name.conf` / `name.conf`; external plugins get an empty string.
    pub config: String,
    /// The runtime.
    pub runtime: RuntimeInfo,
    /// The subscription the plugin will send if `configure` returns `None`
    /// (the builder's events, or [`Plugin::EVENTS`], which defaults to the
    /// events of the implemented methods).
    pub subscription: EventMask,
    /// Events of [`ConfigureInfo::subscription`] the runtime cannot deliver;
    /// they are dropped from the subscription (or fail it, in strict mode).
    pub unsupported: EventMask,
    /// A handle to the running plugin (unsolicited updates, stop).
    pub handle: PluginHandle,
}

/// Why [`Plugin::synchronize`] is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SyncKind {
    /// The first synchronization of this [`Stub::run`](crate::Stub::run).
    Initial,
    /// After a reconnect: the pods and containers given **replace** all
    /// state the plugin kept from the previous connection (events may have
    /// been missed while disconnected).
    Resync {
        /// Number of this connection (1 for the first reconnect).
        reconnect: u32,
    },
}

/// How the pods and containers of the runtime's synchronization reach the
/// plugin. Chosen with [`Builder::sync_mode`](crate::Builder::sync_mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum SyncMode {
    /// All messages of a split synchronization are collected and handed to
    /// [`Plugin::synchronize`] in one call (what the Go stub does). Memory:
    /// the whole decoded state, about four times its wire size (a sync of
    /// 1000 pods / 5000 containers, 15 MB on the wire, peaks near 60 MB).
    #[default]
    Collect,
    /// Each message is handed to [`Plugin::synchronize_chunk`] as it arrives,
    /// undecoded, as a [`SyncChunk`] that decodes one pod or container at a
    /// time, and dropped before the next message is read: at most one
    /// message's bytes (≤ 4 MiB) plus the items the plugin keeps are in
    /// memory (a plugin that decodes and drops every item of a sync of 1000
    /// pods / 5000 containers peaks at 12-16 MB of RSS, against about 72 MB
    /// for the Go stub). For plugins that keep little or nothing of the
    /// synchronized state.
    Streaming,
}

/// The events whose methods an `impl Plugin` block defines: the value of
/// [`Plugin::IMPLEMENTED`], written by the [`plugin`](crate::plugin)
/// attribute. Not meant to be written by hand (a hand-kept list is what the
/// attribute replaces: a method left out of it would never be called).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Implemented(EventMask);

impl Implemented {
    /// Used by the [`plugin`](crate::plugin) attribute; not a public API.
    #[doc(hidden)]
    pub const fn __from_methods(events: &[Event]) -> Self {
        Implemented(EventMask::from_events(events))
    }

    /// The events whose methods are implemented.
    pub const fn events(self) -> EventMask {
        self.0
    }
}

/// An NRI plugin: one method per request of the protocol, each optional.
///
/// Put [`#[nri_plugin::plugin]`](crate::plugin) on the `impl Plugin` block
/// and implement the methods of the events the plugin handles (with `async
/// fn`): the plugin subscribes to exactly those events. Methods that are
/// not implemented do nothing (`configure`, `synchronize`, `shutdown`);
/// an event the plugin is subscribed to without implementing its method
/// (see [`Plugin::EVENTS`]) is answered with an empty success, as the Go
/// stub does. The SDK answers the dedicated per-event RPCs of NRI v0.12 and
/// the `StateChange` RPC of older runtimes with the same methods.
///
/// Every handler must answer within the runtime's request timeout (2 s by
/// default; see [`RuntimeInfo::request_timeout`]). Handlers run concurrently
/// (one task per request), hence `Send + Sync`.
///
/// Owned request parts are handed over (no copy: they were decoded for this
/// call); a missing pod or container in a request is passed as the default
/// (empty) value.
///
/// A type given to [`Builder::new`](crate::Builder::new) that does not
/// implement the trait is pointed at the attribute:
///
/// ```compile_fail,E0277
/// struct NotYet;
/// // error[E0277]: `NotYet` is not an NRI plugin ... implement
/// // `nri_plugin::Plugin` for it in a block marked `#[nri_plugin::plugin]`
/// let _ = nri_plugin::Builder::new(NotYet);
/// ```
///
/// An `impl Plugin` block without the attribute fails with "not all trait
/// items implemented, missing: `IMPLEMENTED`": add the attribute.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an NRI plugin: it does not implement `nri_plugin::Plugin`",
    label = "not an NRI plugin",
    note = "implement `nri_plugin::Plugin` for it in a block marked `#[nri_plugin::plugin]`: \
            `#[nri_plugin::plugin] impl nri_plugin::Plugin for {Self} {{ ... }}`"
)]
pub trait Plugin: Send + Sync + 'static {
    /// The events whose methods this impl defines. Written by the
    /// [`#[nri_plugin::plugin]`](crate::plugin) attribute on the `impl
    /// Plugin` block: a plugin that does not compile because this item is
    /// missing lacks that attribute.
    const IMPLEMENTED: Implemented;

    /// The plugin's default subscription: by default the events of the
    /// implemented methods ([`Plugin::IMPLEMENTED`]). Set it to subscribe
    /// to other events: events without a method are answered with an empty
    /// success, events with a method left out are not delivered.
    /// [`Builder::events`](crate::Builder::events) overrides it at run
    /// time, and [`Plugin::configure`] may narrow it per connection.
    const EVENTS: EventMask = Self::IMPLEMENTED.events();

    /// The runtime configures the plugin. Return `Some(mask)` to change the
    /// subscription for this connection (a non-empty subset of the default
    /// subscription and the events with a method), `None` to keep
    /// [`ConfigureInfo::subscription`]. An error fails the
    /// registration; [`Stub::run`](crate::Stub::run) returns
    /// [`Error::ConfigureFailed`].
    fn configure(
        &self,
        info: &ConfigureInfo,
    ) -> impl Future<Output = HandlerResult<Option<EventMask>>> + Send {
        let _ = info;
        ready(Ok(None))
    }

    /// The runtime's current pods and containers (all chunks of a split
    /// synchronization reassembled). Return updates for existing containers.
    ///
    /// Not called under [`SyncMode::Streaming`](crate::SyncMode::Streaming)
    /// (see [`Plugin::synchronize_chunk`]).
    fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
        kind: SyncKind,
    ) -> impl Future<Output = HandlerResult<Vec<ContainerUpdate>>> + Send {
        let _ = (pods, containers, kind);
        ready(Ok(Vec::new()))
    }

    /// One message of the runtime's synchronization, handed over as it
    /// arrives: called instead of [`Plugin::synchronize`] when the stub was
    /// built with [`SyncMode::Streaming`](crate::SyncMode::Streaming), once
    /// per message, in order. [`SyncChunk::more`] is true for every message
    /// but the last (a synchronization that fits one message is a single
    /// call with `more() == false`); every call of one synchronization has
    /// the same `kind`, and the first call of a [`SyncKind::Resync`] starts
    /// a new state that replaces the old one.
    ///
    /// The chunk holds the message's wire bytes (≤ 4 MiB) and decodes its
    /// pods and containers one at a time as [`SyncChunk::pods`] and
    /// [`SyncChunk::containers`] yield them: look at each item and keep
    /// only what the plugin needs, so that no more than one message's bytes
    /// and the item at hand are in memory. [`SyncChunk::into_vecs`] decodes
    /// everything at once. The message's framing was checked before this
    /// call (a malformed message is answered with an error without calling
    /// the plugin); an item that cannot be decoded is an
    /// [`Error::MalformedSync`](crate::Error::MalformedSync) from the
    /// iterator, which converts into a [`HandlerError`] with `?`.
    ///
    /// Updates returned by all calls are sent together in the answer to the
    /// last message (the protocol allows updates only there). An error fails
    /// the synchronization as in [`Plugin::synchronize`].
    ///
    /// The default does nothing and returns no updates.
    fn synchronize_chunk(
        &self,
        chunk: SyncChunk,
        kind: SyncKind,
    ) -> impl Future<Output = HandlerResult<Vec<ContainerUpdate>>> + Send {
        let _ = (chunk, kind);
        ready(Ok(Vec::new()))
    }

    /// The runtime is shutting down.
    fn shutdown(&self) -> impl Future<Output = ()> + Send {
        ready(())
    }

    /// The connection to the runtime ended with `cause`. Called before a
    /// reconnect attempt and before [`Stub::run`](crate::Stub::run) returns
    /// an error. Not called when the plugin stopped itself.
    fn disconnected(&self, cause: &Error) {
        let _ = cause;
    }

    /// A teardown event's method (StopPodSandbox, RemovePodSandbox,
    /// StopContainer, RemoveContainer or a Post* notification) returned
    /// `error`, and the SDK answered the runtime with success instead (see
    /// [Teardown errors](crate#teardown-errors)). Called after the SDK logged
    /// the error (warning) and counted it
    /// ([`PluginHandle::teardown_errors`](crate::PluginHandle::teardown_errors)).
    /// Not called under
    /// [`Builder::send_teardown_errors`](crate::Builder::send_teardown_errors),
    /// which sends the error to the runtime instead.
    fn teardown_failed(&self, event: Event, error: &HandlerError) {
        let _ = (event, error);
    }

    /// A pod sandbox is being started.
    fn run_pod_sandbox(&self, pod: PodSandbox) -> impl Future<Output = HandlerResult<()>> + Send {
        unhandled(pod)
    }

    /// A pod sandbox's resources are being updated (NRI v0.10+).
    fn update_pod_sandbox(
        &self,
        pod: PodSandbox,
        overhead: Option<LinuxResources>,
        resources: Option<LinuxResources>,
    ) -> impl Future<Output = HandlerResult<()>> + Send {
        unhandled((pod, overhead, resources))
    }

    /// A pod sandbox's resources were updated (NRI v0.10+).
    fn post_update_pod_sandbox(
        &self,
        pod: PodSandbox,
    ) -> impl Future<Output = HandlerResult<()>> + Send {
        unhandled(pod)
    }

    /// A pod sandbox is being stopped.
    fn stop_pod_sandbox(&self, pod: PodSandbox) -> impl Future<Output = HandlerResult<()>> + Send {
        unhandled(pod)
    }

    /// A pod sandbox was removed.
    fn remove_pod_sandbox(
        &self,
        pod: PodSandbox,
    ) -> impl Future<Output = HandlerResult<()>> + Send {
        unhandled(pod)
    }

    /// A container is being created: return the adjustment for it, updates
    /// for other containers and evictions.
    fn create_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> impl Future<Output = HandlerResult<CreateContainerResponse>> + Send {
        unhandled((pod, container))
    }

    /// A container is being created, with the request still encoded: the
    /// plugin decodes what it needs of it ([`Encoded::pod`],
    /// [`Encoded::container`], or [`Encoded::decode`] for all of it) or
    /// nothing at all. Implement this instead of
    /// [`create_container`](Plugin::create_container) when the plugin
    /// often answers without looking at the whole request (for instance
    /// when it acts on some containers only and can tell them from the
    /// container alone): decoding is most of what an event costs a plugin.
    /// The SDK calls this method for every `CreateContainer`; the default
    /// decodes the whole request and calls `create_container` (a request
    /// that is malformed or too large is answered `INVALID_ARGUMENT` or
    /// `RESOURCE_EXHAUSTED` without calling it). Either method subscribes
    /// the plugin to `CreateContainer`; with both, the SDK calls only this
    /// one.
    ///
    /// ```
    /// use nri_plugin::api::{ContainerAdjustment, CreateContainerRequest, CreateContainerResponse};
    /// use nri_plugin::{Encoded, HandlerResult, Plugin};
    ///
    /// struct DebugEnv;
    ///
    /// #[nri_plugin::plugin]
    /// impl Plugin for DebugEnv {
    ///     async fn create_container_encoded(
    ///         &self,
    ///         request: Encoded<CreateContainerRequest>,
    ///     ) -> HandlerResult<CreateContainerResponse> {
    ///         // The pod is never decoded.
    ///         let container = request.container()?;
    ///         if container.annotation("debug.example.com/env").is_none() {
    ///             return Ok(CreateContainerResponse::default());
    ///         }
    ///         let mut adjust = ContainerAdjustment::default();
    ///         adjust.add_env("DEBUG", "1");
    ///         Ok(CreateContainerResponse { adjust: Some(adjust), ..Default::default() })
    ///     }
    /// }
    /// ```
    fn create_container_encoded(
        &self,
        request: Encoded<CreateContainerRequest>,
    ) -> impl Future<Output = HandlerResult<CreateContainerResponse>> + Send {
        async move {
            let r = request.decode()?;
            let (pod, container) = (r.pod.unwrap_or_default(), r.container.unwrap_or_default());
            self.create_container(pod, container).await
        }
    }

    /// A container was created.
    fn post_create_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> impl Future<Output = HandlerResult<()>> + Send {
        unhandled((pod, container))
    }

    /// A container is being started.
    fn start_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> impl Future<Output = HandlerResult<()>> + Send {
        unhandled((pod, container))
    }

    /// A container was started.
    fn post_start_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> impl Future<Output = HandlerResult<()>> + Send {
        unhandled((pod, container))
    }

    /// A container's resources are being updated: return updates (the
    /// target container's own last) and evictions.
    fn update_container(
        &self,
        pod: PodSandbox,
        container: Container,
        resources: Option<LinuxResources>,
    ) -> impl Future<Output = HandlerResult<UpdateContainerResponse>> + Send {
        unhandled((pod, container, resources))
    }

    /// A container's resources were updated.
    fn post_update_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> impl Future<Output = HandlerResult<()>> + Send {
        unhandled((pod, container))
    }

    /// A container is being stopped: return updates for other containers.
    fn stop_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> impl Future<Output = HandlerResult<StopContainerResponse>> + Send {
        unhandled((pod, container))
    }

    /// A container was removed.
    fn remove_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> impl Future<Output = HandlerResult<()>> + Send {
        unhandled((pod, container))
    }

    /// Validator plugins (NRI v0.10+): accept (`Ok`) or reject (`Err`, its
    /// message is the reason) the merged adjustment of a container.
    fn validate_container_adjustment(
        &self,
        request: ValidateContainerAdjustmentRequest,
    ) -> impl Future<Output = HandlerResult<()>> + Send {
        unhandled(request)
    }
}

/// The body of an event method the plugin does not implement: an empty
/// success. (The SDK does not even call it: it answers such events itself.)
fn unhandled<T: Default, A>(args: A) -> Ready<HandlerResult<T>> {
    drop(args);
    ready(Ok(T::default()))
}
