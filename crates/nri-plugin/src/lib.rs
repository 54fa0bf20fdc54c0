//! Write NRI (Node Resource Interface) plugins for containerd and CRI-O in
//! Rust. Wire-compatible with containerd/nri v0.12 and with older runtimes
//! (containerd 2.0-2.2, which deliver most events through `StateChange` and
//! accept fewer events); the Rust counterpart of the Go `pkg/stub`.
//!
//! # Writing a plugin
//!
//! Implement [`Plugin`] for your type, with the [`plugin`] attribute on the
//! `impl` block, and implement the methods of the events you handle (all
//! optional). Build a [`Stub`] with [`Builder`] and [`run`](Stub::run) it,
//! or hand the builder to [`Runner`], the one-call `main` of a plugin
//! program (SIGINT/SIGTERM, reconnection when external, the error and its
//! causes logged once, exit status 0 or 1).
//!
//! ```no_run
//! use nri_plugin::api::{Container, ContainerAdjustment, CreateContainerResponse, PodSandbox};
//! use nri_plugin::{Builder, HandlerResult, Plugin, ReconnectPolicy, SyncKind};
//!
//! struct AddEnv;
//!
//! #[nri_plugin::plugin] // subscribes to CreateContainer: the one event method below
//! impl Plugin for AddEnv {
//!     async fn synchronize(
//!         &self,
//!         pods: Vec<PodSandbox>,
//!         containers: Vec<Container>,
//!         kind: SyncKind,
//!     ) -> HandlerResult<Vec<nri_plugin::api::ContainerUpdate>> {
//!         tracing::info!(pods = pods.len(), containers = containers.len(), ?kind, "synchronized");
//!         Ok(Vec::new())
//!     }
//!
//!     async fn create_container(
//!         &self,
//!         pod: PodSandbox,
//!         container: Container,
//!     ) -> HandlerResult<CreateContainerResponse> {
//!         let mut adjust = ContainerAdjustment::default();
//!         adjust
//!             .add_env("HELLO", &pod.name)
//!             .add_annotation("example.com/seen", &container.name);
//!         // At least 256 MiB of memory (one call, not a chain of Options).
//!         if container.memory_limit().is_some_and(|l| l < 256 << 20) {
//!             adjust.set_linux_memory_limit(256 << 20);
//!         }
//!         Ok(CreateContainerResponse { adjust: Some(adjust), ..Default::default() })
//!     }
//! }
//!
//! #[tokio::main(flavor = "current_thread")]
//! async fn main() -> Result<(), nri_plugin::Error> {
//!     let stub = Builder::new(AddEnv)
//!         .name("add-env")
//!         .index("10")
//!         .reconnect(ReconnectPolicy::default())
//!         .build()?;
//!     match stub.run().await {
//!         Ok(()) => Ok(()), // stopped through a PluginHandle
//!         Err(e) if e.is_socket_missing() => {
//!             eprintln!("NRI is not enabled or the runtime is down: {e}");
//!             Err(e)
//!         }
//!         Err(e) => Err(e),
//!     }
//! }
//! ```
//!
//! # Adjustments and getters
//!
//! The protocol types ([`api`]) come with builder methods for what a plugin
//! returns, each returning `&mut Self` so calls chain (see [`adjust`]):
//!
//! * [`ContainerAdjustment`](api::ContainerAdjustment) (the answer to
//!   CreateContainer): `add_env`, `remove_env`, `add_annotation`,
//!   `remove_annotation`, `add_mount`, `remove_mount`, `add_device`,
//!   `remove_device`, `add_cdi_device`, `add_rlimit`, `add_hooks`,
//!   `set_args`, `add_or_replace_namespace`, `set_linux_sysctl`,
//!   `set_linux_memory_limit`, `set_linux_cpu_shares`,
//!   `set_linux_cpu_set_cpus`, `set_linux_oom_score_adj`, ... (the names
//!   of the Go `ContainerAdjustment` methods, in snake case);
//! * [`ContainerUpdate`](api::ContainerUpdate) (resources of a running
//!   container): `ContainerUpdate::new(id)`, `set_linux_memory_limit`,
//!   `set_linux_cpu_shares`, ..., `set_ignore_failure`;
//! * [`ContainerEviction`](api::ContainerEviction).
//!
//! Reading nested optional values takes one call: getters on
//! [`Container`](api::Container) (`memory_limit`, `cpu_shares`,
//! `resources`, `oom_score_adj`, `cgroups_path`, `env_value`,
//! `annotation`, `label`, `mount`), [`PodSandbox`](api::PodSandbox)
//! (`pod_resources`, `pod_overhead`, `resources`, `cgroup_parent`,
//! `namespace_of`, `annotation`, `label`) and
//! [`LinuxResources`](api::LinuxResources) (`memory_limit`,
//! `memory_reservation`, `memory_swap`, `cpu_shares`, `cpu_quota`,
//! `cpu_period`, `cpuset_cpus`, `cpuset_mems`, `pids_limit`,
//! `blockio_class`, `rdt_class`). Each is `None` when anything on the way
//! is absent. [`Mount::new`](api::Mount::new) and
//! [`Mount::fs_type`](api::Mount::fs_type) spare the `r#type` field.
//!
//! ```
//! use nri_plugin::api::{ContainerAdjustment, Mount, PodSandbox};
//!
//! let pod = PodSandbox::default();
//! let mut adjust = ContainerAdjustment::default();
//! let size = pod.annotation("scratch.example.com/size").unwrap_or("64m");
//! adjust.add_mount(Mount::new("/scratch", "tmpfs", "tmpfs", [format!("size={size}")]));
//! adjust.add_rlimit("RLIMIT_NOFILE", 4096, 1024).remove_env("DEBUG");
//! assert_eq!(adjust.mounts[0].options, ["size=64m"]);
//! assert_eq!(adjust.env[0].key, "-DEBUG"); // a removal
//! assert_eq!(pod.pod_resources().and_then(|r| r.memory_limit()), None);
//! ```
//!
//! # Events
//!
//! **The subscription follows the code.** The [`plugin`] attribute reads
//! which event methods the `impl Plugin` block defines and records them in
//! [`Plugin::IMPLEMENTED`]; the plugin subscribes to exactly those events,
//! so a handler cannot be written and then never called because an event
//! list was not updated. Without the attribute the impl does not compile
//! (`IMPLEMENTED` is a required item):
//!
//! ```compile_fail,E0046
//! struct Forgot;
//!
//! impl nri_plugin::Plugin for Forgot {
//!     // error[E0046]: not all trait items implemented, missing: `IMPLEMENTED`
//!     async fn start_container(
//!         &self,
//!         _pod: nri_plugin::api::PodSandbox,
//!         _ctr: nri_plugin::api::Container,
//!     ) -> nri_plugin::HandlerResult<()> {
//!         Ok(())
//!     }
//! }
//! ```
//!
//! **Explicit override.** A plugin that wants another subscription sets
//! [`Plugin::EVENTS`] in the impl, or [`Builder::events`] at run time;
//! [`Plugin::configure`] may narrow the subscription per connection. An
//! event the plugin is subscribed to but has no method for is answered with
//! an empty success (no adjustment, no updates, validation accepted), as
//! the Go stub answers events without a handler, never with
//! `UNIMPLEMENTED` (which a v0.12 runtime would log as use of a deprecated
//! interface, or turn into a failed request):
//!
//! ```
//! use nri_plugin::api::{Container, CreateContainerResponse, Event, PodSandbox};
//! use nri_plugin::{EventMask, HandlerResult, Plugin};
//!
//! struct SeeEverything;
//!
//! #[nri_plugin::plugin]
//! impl Plugin for SeeEverything {
//!     // Subscribed to every event; all but CreateContainer get an empty success.
//!     const EVENTS: EventMask = EventMask::ALL;
//!
//!     async fn create_container(
//!         &self,
//!         _pod: PodSandbox,
//!         _ctr: Container,
//!     ) -> HandlerResult<CreateContainerResponse> {
//!         Ok(CreateContainerResponse::default())
//!     }
//! }
//!
//! assert_eq!(
//!     SeeEverything::IMPLEMENTED.events(),
//!     EventMask::from_events(&[Event::CreateContainer])
//! );
//! assert_eq!(SeeEverything::EVENTS, EventMask::ALL);
//! ```
//!
//! # Lifecycle
//!
//! 1. **Connect.** External plugins dial the runtime's socket (default
//!    `/var/run/nri/nri.sock`). Pre-launched plugins (started by the runtime
//!    from its plugin directory as `NN-name`) use the socket the runtime
//!    passed in `NRI_PLUGIN_SOCKET` (fd 3) and take their name and index
//!    from `NRI_PLUGIN_NAME` / `NRI_PLUGIN_IDX`. [`ConnectMode::Auto`]
//!    (default) picks pre-launched when `NRI_PLUGIN_SOCKET` is set.
//!    The one socket carries two multiplexed connections: the plugin serves
//!    on connection 1, and calls the runtime on connection 2.
//! 2. **Register.** `RegisterPlugin{name, index, NRI version}`. The
//!    registration timeout ([`Builder::registration_timeout`], 5 s by
//!    default) covers this call and the wait for `Configure`.
//! 3. **Configure.** [`Plugin::configure`] gets the configuration text
//!    (pre-launched plugins: the runtime's `NN-name.conf`), the runtime's
//!    name, version and NRI version ([`RuntimeInfo`]), and may narrow the
//!    subscription. Events the runtime's NRI version cannot deliver (NRI
//!    before v0.10, i.e. containerd 2.0/2.1, takes only the first eleven
//!    events, mask `0x7FF`) are dropped from the subscription with a
//!    warning and reported by [`PluginHandle::dropped_events`], or fail the
//!    registration with [`Error::UnsupportedEvents`] under
//!    [`Builder::strict_events`]. The runtime's version is taken from
//!    `ConfigureRequest.NRI_version`, or inferred from the runtime's name and
//!    version when the runtime is too old to send it. What the plugin
//!    [requires](Builder::requires) (adjustments the runtime must apply,
//!    events it must deliver) is checked first, against
//!    [`RuntimeInfo::capabilities`] (declared by the runtime, or inferred
//!    from its name and version): a runtime that cannot serve the plugin
//!    gets an error naming what is missing, and [`Stub::run`] returns
//!    [`Error::Unsupported`], which is not retried.
//! 4. **Synchronize.** [`Plugin::synchronize`] gets all existing pods and
//!    containers in one call, even when the runtime split them into several
//!    messages, and returns updates. With [`Builder::sync_mode`]`(`[`SyncMode::Streaming`]`)`
//!    [`Plugin::synchronize_chunk`] gets each message as it arrives instead,
//!    as a lazily decoded [`SyncChunk`] (see [Footprint](#footprint)).
//! 5. **Events.** The runtime calls the event methods; NRI v0.12 runtimes
//!    use one RPC per event, older ones `StateChange` for nine of them; both
//!    end in the same method. A subscribed event without a method is
//!    answered with an empty success. Unsolicited updates go through
//!    [`PluginHandle::update_containers`] from any task.
//! 6. **End.** [`Stub::run`] returns `Ok(())` after [`PluginHandle::stop`],
//!    [`Error::ShutDownByRuntime`] after the runtime's `Shutdown`, or
//!    [`Error::ConnectionLost`] when the runtime goes away.
//! 7. **Reconnect** (opt-in, [`Builder::reconnect`], external plugins only):
//!    instead of returning, the stub dials again with exponential backoff,
//!    registers and synchronizes again; that synchronization comes with
//!    [`SyncKind::Resync`] and replaces all state the plugin kept.
//!    [`Plugin::disconnected`] is called on every loss. A pre-launched
//!    plugin cannot reconnect (its socket was created by the runtime that
//!    went away); the runtime launches it again instead.
//! 8. **Upgrade.** When a newer instance of the plugin (same index and
//!    name) registers with a runtime that allows it (nri-rs runtimes and
//!    `nri-proxy` do by default), it takes over the plugin's events once
//!    synchronized. The older instance keeps its connection and gets
//!    nothing more, not even `Shutdown` (the v0.12 wire has no way to say
//!    why), so it neither ends nor reconnects and cannot take the events
//!    back; it ends when it is stopped (SIGTERM to a [`Runner`]: a rolling
//!    update deletes the old pod). [`PluginHandle::update_containers`]
//!    from it fails with [`Error::Superseded`].
//!
//! # Errors
//!
//! [`Stub::run`] returns one [`Error`] enum: build-time mistakes
//! ([`Error::InvalidName`], [`Error::MissingIndex`], [`Error::InvalidIndex`],
//! [`Error::InvalidEvents`]), connection problems with the OS cause
//! ([`Error::Connect`]: [`Error::is_socket_missing`],
//! [`Error::is_connection_refused`], [`Error::is_permission_denied`]),
//! registration outcomes ([`Error::RegistrationRefused`],
//! [`Error::RegistrationTimeout`], [`Error::UnsupportedEvents`],
//! [`Error::Unsupported`],
//! [`Error::ConfigureFailed`], [`Error::SynchronizeFailed`]), and the end of
//! a connection ([`Error::ConnectionLost`], [`Error::ShutDownByRuntime`],
//! [`Error::ReconnectGaveUp`]). The SDK never exits the process and never
//! panics on input.
//!
//! Errors returned by plugin methods ([`HandlerError`]) become the ttRPC
//! status sent to the runtime (code `UNKNOWN` unless chosen, message = the
//! error text), except for teardown events (below).
//!
//! # Teardown errors
//!
//! An error returned by the method of a teardown event (StopPodSandbox,
//! RemovePodSandbox, StopContainer, RemoveContainer, and the notifications
//! PostCreateContainer, PostStartContainer, PostUpdateContainer,
//! PostUpdatePodSandbox) is **not** sent to the runtime by default: the
//! SDK logs it (warning), counts it ([`PluginHandle::teardown_errors`]),
//! hands it to [`Plugin::teardown_failed`], and answers the runtime with an
//! empty success (StopContainer: no updates). The runtime cannot undo a
//! teardown anyway, and containerd stops delivering some teardown events
//! at the first plugin error, so an error there would keep the event from
//! every plugin after this one (which then never learns that a pod or
//! container is gone). A teardown method that panics is answered the same
//! way: the panic is caught and becomes an error (code `INTERNAL`, the
//! panic's message) that is logged, counted and handed to
//! [`Plugin::teardown_failed`]. [`Builder::send_teardown_errors`] sends
//! the errors as a plain handler error instead (a panic then reaches the
//! runtime as `INTERNAL`, as in the other methods). Errors of the other events (RunPodSandbox,
//! CreateContainer, StartContainer, UpdateContainer, UpdatePodSandbox,
//! ValidateContainerAdjustment) are always sent: they fail the request.
//!
//! # Failure policy
//!
//! A plugin may tell the runtime how to treat its failures to answer (a
//! request timeout, a lost connection, a protocol error) with
//! [`Builder::failure_policy`]: `fail_request` fails the request instead of
//! going on without the plugin, `keep_connected` keeps a plugin that missed
//! the request timeout registered. It is sent in the answer to `Configure`
//! (`ConfigureResponse.failure_policy`, the Go stub's `WithFailurePolicy`);
//! runtimes before NRI v0.12.4 ignore it, and an operator's configuration
//! of the plugin may override it (with `nri-runtime`, an explicit per-plugin
//! entry wins). Without the call no policy is sent and the runtime applies
//! its own rules.
//!
//! # Footprint
//!
//! The SDK works on a `current_thread` tokio runtime (it needs only tokio's
//! `rt` feature; a multi-thread runtime only adds worker threads). While
//! connected it runs the multiplexer's two tasks, the ttRPC client's reader
//! task and one short-lived task per request, all owned and ended with the
//! connection; nothing runs in the background between reconnect attempts.
//!
//! **Synchronization memory.** In the default [`SyncMode::Collect`] the
//! whole decoded state is in memory at once (a sync of 1000 pods / 5000
//! containers, 15 MB on the wire, takes about 50 MB of heap); each
//! message's bytes are released as soon as it is decoded. What a runtime
//! can make the plugin hold is capped by [`SyncLimits`]: 64 MiB on the
//! wire, 20,000 pods and containers, and 256 MiB of estimated decoded size
//! over all messages ([`SyncLimits::max_decoded_bytes`]); without the
//! last, 64 MiB of entries that decode large (one-letter environment
//! variables) would have been about 1.2 GiB of heap. A plugin that
//! keeps little of it should use [`SyncMode::Streaming`] and
//! [`Plugin::synchronize_chunk`]: each message (≤ 4 MiB on the wire) is
//! handed over undecoded as a [`SyncChunk`], whose iterators decode one pod
//! or container at a time, and is dropped before the next message is read.
//! Only one message's bytes and the item at hand are then in memory
//! (decoded structs take about three times their wire size, so decoding a
//! whole message up front would triple that). After every completed
//! synchronization the SDK calls glibc's `malloc_trim(0)` once (Linux with
//! glibc only), so the freed memory goes back to the OS instead of staying
//! in the allocator's arenas.
//!
//! **CPU per event.** Decoding a request is most of what an event costs a
//! plugin: for the benchmark's CreateContainer (a 1.4 KB pod and a 2.7 KB
//! container) about 60% of the plugin's CPU time at a node's pace, the rest
//! being the kernel, the wake-up and the answer. A plugin that can decide
//! from part of the request, or answers without looking, implements
//! [`Plugin::create_container_encoded`] instead of
//! [`Plugin::create_container`] and decodes only what it reads from the
//! [`Encoded`] request (the container alone, the pod alone, or nothing).
//! See docs/benchmarks/nri.md for the numbers.
//!
//! **Binary size and idle RSS.** Most of a small plugin's idle RSS is code
//! (its own text and the shared glibc pages), not heap. Build plugins with
//! a size-optimized profile, for example the workspace's `min-size`
//! profile (`opt-level = "s"`, fat LTO, one codegen unit, stripped):
//! `cargo build --profile min-size -p my-plugin`, and link it
//! statically so that no shared library pages are mapped in (as the
//! workspace's plugin images do): `RUSTFLAGS="-C target-feature=+crt-static"
//! cargo build --profile min-size --target x86_64-unknown-linux-gnu -p
//! my-plugin` (glibc) or a musl target. The benchmark plugin built that way
//! idles at about 1.8 MB RSS (3.5 MB as a dynamic release build; the Go stub
//! plugin idles at about 9 MB). Keep the logging setup small as well
//! (`tracing-subscriber`'s `fmt` layer with few features), since every
//! touched code page counts.
//!
//! **Panics.** The SDK's panic containment (a method that panics is
//! answered with `INTERNAL` and the plugin serves on; a teardown method
//! that panics is answered with success, see [Teardown
//! errors](crate#teardown-errors)) needs a build that unwinds. With
//! `panic = "abort"` in the profile, any panic ends the plugin process
//! (an external plugin then reconnects only if something restarts it).
//! `panic = "abort"` saves 140-210 KB (8-13%) of a sample plugin's
//! stripped binary; the workspace's `min-size` profile, which the plugin
//! images build with, unwinds.
//!
//! **Latency.** Under a runtime built on `nri-runtime` (it says so in
//! `Configure`), after answering an event the connection's reader may poll
//! for the next request for up to [`Builder::spin_budget`] (default
//! 500 µs) instead of sleeping at once, which saves a wake-up per event
//! while events come back to back. It adapts: when the next request does
//! not come within the budget it backs off to one try in 64, and when
//! events come a node's pace apart it stops polling until they come
//! quickly again. The plugin also asks that runtime for *wake hints* (our
//! extension of the wire): the runtime then hints the plugin while the
//! plugin before it in the chain works, and the plugin polls for its
//! request instead of being woken when it comes. Under any other runtime
//! (containerd's, CRI-O's), whose turn-around between events is longer
//! than the budget, the plugin never polls. `Duration::ZERO` turns both
//! off. See docs/runtime/spinning.md.

// The `plugin` attribute names this crate `::nri_plugin` in the code it
// writes; this makes that path work inside the crate as well.
extern crate self as nri_plugin;

mod builder;
mod contain;
mod encoded;
mod error;
mod flags;
mod handle;
mod latency;
mod limits;
mod main_loop;
mod mem;
mod plugin;
mod service;
mod stub;
mod sync_chunk;

pub use builder::{Builder, ConnectMode, ReconnectPolicy, UnknownCapabilities};
pub use encoded::Encoded;
pub use error::{BoxError, Error, Phase};
pub use flags::{FlagValue, GoFlags};
pub use handle::PluginHandle;
pub use limits::{
    DECODED_RATIO, DECODED_SIZE_FLOOR, DEFAULT_MAX_SYNC_BYTES, DEFAULT_MAX_SYNC_CONTAINERS,
    DEFAULT_MAX_SYNC_DECODED_BYTES, DEFAULT_MAX_SYNC_PODS, SyncLimits,
};
pub use main_loop::{Runner, error_chain};
pub use plugin::{
    ConfigureInfo, HandlerError, HandlerResult, Implemented, Plugin, RuntimeInfo, SyncKind,
    SyncMode,
};

/// Derives a plugin's events from the methods it implements: put it on the
/// `impl Plugin for T` block. It adds [`Plugin::IMPLEMENTED`], the events
/// of the event methods (`run_pod_sandbox` ... `validate_container_adjustment`)
/// that the block defines; [`Plugin::EVENTS`], the default subscription,
/// follows it unless the block sets `EVENTS` itself. Takes no arguments.
///
/// It reads the method names of the block as written, so event methods
/// generated by a macro invoked inside the block are not seen (set
/// [`Plugin::EVENTS`] for those). The generated code names this crate
/// `::nri_plugin`: depend on it under that name.
///
/// See [Events](crate#events) for the whole picture.
pub use nri_plugin_macros::plugin;
pub use service::event_committed;
pub use stub::Stub;
pub use sync_chunk::{SyncChunk, SyncItems};

/// The protocol types (re-exported from `nri_api::api`).
pub use nri_api::api;

/// Builders for the changes a plugin returns (re-exported from
/// `nri_api::adjust`): the builder methods are on the [`api`] types
/// themselves; this module has the `-key` removal markers and the
/// overview.
pub use nri_api::adjust;
pub use nri_api::{
    Capability, CapabilityBasis, CapabilitySet, EventMask, NriVersion, Requirement,
    RuntimeCapabilities, RuntimeNriVersion, VersionOrigin,
};
/// ttRPC status codes, for [`HandlerError::with_code`].
pub use nri_ttrpc::Code;

// The README's example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

// The README of nri-plugin-macros: its example needs this crate, so it is
// compiled here. Doc tests only: the file is outside this package, which
// `cfg(doctest)` keeps out of every build of the packaged crate.
#[cfg(doctest)]
#[doc = include_str!("../../nri-plugin-macros/README.md")]
struct MacrosReadmeDoctests;
