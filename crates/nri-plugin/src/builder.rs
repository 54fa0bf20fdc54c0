//! [`Builder`]: identity, connection mode, timeouts, subscription and
//! reconnect policy of a plugin.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use nri_api::api::FailurePolicy;
use nri_api::{
    DEFAULT_REGISTRATION_TIMEOUT, DEFAULT_REQUEST_TIMEOUT, DEFAULT_SOCKET_PATH, ENV_PLUGIN_IDX,
    ENV_PLUGIN_NAME, ENV_PLUGIN_SOCKET, EventMask, Requirement,
};

use crate::handle::Shared;
use crate::{Error, Plugin, Stub, SyncLimits, SyncMode};

/// How the plugin reaches the runtime.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ConnectMode {
    /// Pre-launched if `NRI_PLUGIN_SOCKET` is set in the environment (the
    /// runtime started this process), else external. What the Go stub does.
    #[default]
    Auto,
    /// Dial the socket path ([`Builder::socket_path`]).
    External,
    /// Use the socket the runtime passed (`NRI_PLUGIN_SOCKET`, normally fd 3).
    PreLaunched,
}

/// Reconnect with exponential backoff after the runtime went away
/// (external plugins only: a pre-launched plugin's socket cannot be
/// re-established, the runtime launches it again).
///
/// The delay before attempt `n` (1-based, counted since the last successful
/// synchronization) is `initial * 2^(n-1)`, capped at `max`. With
/// `max_attempts = Some(k)`, [`Stub::run`] gives up after `k` failed
/// attempts in a row with [`Error::ReconnectGaveUp`].
///
/// ```
/// use std::time::Duration;
/// use nri_plugin::ReconnectPolicy;
///
/// let p = ReconnectPolicy::new(Duration::from_millis(100), Duration::from_secs(1));
/// assert_eq!(p.delay(1), Duration::from_millis(100));
/// assert_eq!(p.delay(3), Duration::from_millis(400));
/// assert_eq!(p.delay(10), Duration::from_secs(1));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReconnectPolicy {
    /// Delay before the first attempt.
    pub initial: Duration,
    /// Largest delay.
    pub max: Duration,
    /// Give up after this many failed attempts in a row (`None`: never).
    pub max_attempts: Option<u32>,
}

impl ReconnectPolicy {
    /// Backoff from `initial` doubling up to `max`, retrying forever.
    pub fn new(initial: Duration, max: Duration) -> Self {
        ReconnectPolicy {
            initial,
            max: max.max(initial),
            max_attempts: None,
        }
    }

    /// Gives up after `attempts` failed attempts in a row.
    #[must_use]
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = Some(attempts);
        self
    }

    /// The delay before attempt `attempt` (1-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        let shift = attempt.saturating_sub(1).min(31);
        self.initial
            .checked_mul(1u32 << shift)
            .map_or(self.max, |d| d.min(self.max))
    }
}

impl Default for ReconnectPolicy {
    /// 500 ms doubling up to 30 s, forever.
    fn default() -> Self {
        ReconnectPolicy::new(Duration::from_millis(500), Duration::from_secs(30))
    }
}

/// What a plugin does when its runtime's support for something it
/// [requires](Builder::requires) cannot be told: a runtime that declares
/// no capabilities and is not one whose versions are known (not
/// containerd, not CRI-O, not built on `nri-runtime`), a version newer
/// than the facts the SDK has, or a declaration older than the capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum UnknownCapabilities {
    /// Run, with a warning naming what cannot be told (default).
    #[default]
    Warn,
    /// Fail the registration with [`Error::Unsupported`], as for a runtime
    /// known to lack it.
    Fail,
}

/// Builds a [`Stub`] around a [`Plugin`].
///
/// ```
/// use nri_plugin::{Builder, Plugin, EventMask, api::Event};
///
/// struct Nop;
/// #[nri_plugin::plugin]
/// impl Plugin for Nop {
///     const EVENTS: EventMask = EventMask::from_events(&[Event::StartContainer]);
/// }
///
/// let stub = Builder::new(Nop).name("nop").index("10").build()?;
/// assert_eq!(stub.plugin_name(), "10-nop");
/// # Ok::<(), nri_plugin::Error>(())
/// ```
#[derive(Debug)]
#[must_use]
pub struct Builder<P> {
    plugin: P,
    name: Option<String>,
    index: Option<String>,
    socket_path: PathBuf,
    mode: ConnectMode,
    events: Option<EventMask>,
    strict_events: bool,
    send_teardown_errors: bool,
    failure_policy: Option<FailurePolicy>,
    registration_timeout: Duration,
    request_timeout: Duration,
    reconnect: Option<ReconnectPolicy>,
    sync_mode: SyncMode,
    sync_limits: SyncLimits,
    spin_budget: Duration,
    requires: Vec<Requirement>,
    unknown_capabilities: UnknownCapabilities,
}

/// Default [`Builder::spin_budget`]: more than `nri-runtime` takes,
/// between our answer and its next request, during a burst of events:
/// with several plugins that is the turn of every other plugin (about
/// 100-150 µs at four), and behind `nri-proxy` under the Go runtime it is
/// that runtime's turn-around plus the proxy's (about 200-250 µs, which
/// has to fall in the first half of the budget for spinning to stay on),
/// so the burst costs no wake-up per event. Events that come a node's pace
/// apart (the usual case) turn spinning off after the first few; see
/// docs/runtime/spinning.md.
pub(crate) const DEFAULT_SPIN_BUDGET: Duration = Duration::from_micros(500);

impl<P: Plugin> Builder<P> {
    /// A builder with the defaults: auto-detected connection mode, socket
    /// `/var/run/nri/nri.sock`, subscription [`Plugin::EVENTS`] (the events
    /// of the implemented methods unless the plugin sets it), unsupported
    /// events dropped with a warning, teardown errors answered with success,
    /// no failure policy declared, registration timeout 5 s, request
    /// timeout 2 s, no reconnect, spin budget 500 µs.
    pub fn new(plugin: P) -> Self {
        Builder {
            plugin,
            name: None,
            index: None,
            socket_path: PathBuf::from(DEFAULT_SOCKET_PATH),
            mode: ConnectMode::Auto,
            events: None,
            strict_events: false,
            send_teardown_errors: false,
            failure_policy: None,
            registration_timeout: DEFAULT_REGISTRATION_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            reconnect: None,
            sync_mode: SyncMode::Collect,
            sync_limits: SyncLimits::default(),
            spin_budget: DEFAULT_SPIN_BUDGET,
            requires: Vec::new(),
            unknown_capabilities: UnknownCapabilities::Warn,
        }
    }

    /// The plugin's base name. Default: `NRI_PLUGIN_NAME`, else the name
    /// part of the executable's file name (`NN-name`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The plugin's two-digit index (its place in the call order). Default:
    /// `NRI_PLUGIN_IDX`, else the index part of the executable's file name.
    pub fn index(mut self, index: impl Into<String>) -> Self {
        self.index = Some(index.into());
        self
    }

    /// The runtime's socket for external plugins.
    pub fn socket_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.socket_path = path.into();
        self
    }

    /// Overrides the connection mode detection.
    pub fn mode(mut self, mode: ConnectMode) -> Self {
        self.mode = mode;
        self
    }

    /// Subscribes to these events instead of [`Plugin::EVENTS`] (by
    /// default the events of the implemented methods). Events without a
    /// method are answered with an empty success; implemented methods of
    /// events left out are not called. Must be a non-empty set of known
    /// events (checked by [`Builder::build`]).
    pub fn events(mut self, events: EventMask) -> Self {
        self.events = Some(events);
        self
    }

    /// Fail registration with [`Error::UnsupportedEvents`] instead of
    /// dropping events the runtime's NRI version cannot deliver.
    pub fn strict_events(mut self, strict: bool) -> Self {
        self.strict_events = strict;
        self
    }

    /// Sends the errors of teardown event methods (StopPodSandbox,
    /// RemovePodSandbox, StopContainer, RemoveContainer and the Post*
    /// notifications) to the runtime, instead of answering them with success
    /// (the default; see [Teardown errors](crate#teardown-errors)). Beware:
    /// containerd stops delivering some teardown events at the first plugin
    /// error, so an error sent here can keep the event from the plugins
    /// after this one.
    pub fn send_teardown_errors(mut self, send: bool) -> Self {
        self.send_teardown_errors = send;
        self
    }

    /// Declares how the runtime should treat this plugin's failures to
    /// answer: a request timeout, a lost connection or a protocol error
    /// (never an error the plugin returns on purpose). Sent in the answer
    /// to `Configure` (`ConfigureResponse.failure_policy`); the Go stub's
    /// `WithFailurePolicy`. Each field defaults to the behaviour of NRI
    /// before failure policies existed:
    ///
    /// - `fail_request`: the request fails (default: it goes on without
    ///   this plugin).
    /// - `keep_connected`: a plugin that missed the request timeout stays
    ///   registered (default: the runtime disconnects it). A lost
    ///   connection always disconnects.
    ///
    /// Runtimes before NRI v0.12.4 ignore it (the SDK says so in its log);
    /// an operator's configuration for the plugin may take precedence. Not
    /// calling this sends no policy at all, which is not the same as a
    /// policy with both fields false: with none, the runtime applies its
    /// own rules.
    ///
    /// ```
    /// use nri_plugin::api::FailurePolicy;
    /// # use nri_plugin::{Builder, Plugin};
    /// # struct Guard;
    /// # #[nri_plugin::plugin]
    /// # impl Plugin for Guard {
    /// #     async fn create_container(&self, _p: nri_plugin::api::PodSandbox, _c: nri_plugin::api::Container)
    /// #         -> nri_plugin::HandlerResult<nri_plugin::api::CreateContainerResponse> { Ok(Default::default()) }
    /// # }
    /// // A security plugin: no container is created without it, and a slow
    /// // answer does not cost its registration.
    /// let stub = Builder::new(Guard)
    ///     .name("guard")
    ///     .index("05")
    ///     .failure_policy(FailurePolicy { fail_request: true, keep_connected: true })
    ///     .build()?;
    /// # Ok::<(), nri_plugin::Error>(())
    /// ```
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.failure_policy = Some(policy);
        self
    }

    /// How long to wait for the runtime to accept the registration and
    /// send `Configure` (upstream hard-codes 5 s).
    pub fn registration_timeout(mut self, timeout: Duration) -> Self {
        self.registration_timeout = timeout;
        self
    }

    /// Deadline of the plugin's own calls to the runtime (`UpdateContainers`).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Reconnects after the connection ends (external mode only).
    pub fn reconnect(mut self, policy: ReconnectPolicy) -> Self {
        self.reconnect = Some(policy);
        self
    }

    /// Limits on one synchronization with the runtime, counted across its
    /// messages before they are decoded (default [`SyncLimits::default`]:
    /// 64 MiB, 20,000 containers, 20,000 pods); a synchronization over
    /// them ends the connection with [`Error::SyncTooLarge`].
    pub fn sync_limits(mut self, limits: SyncLimits) -> Self {
        self.sync_limits = limits;
        self
    }

    /// How the synchronization reaches the plugin: all at once
    /// ([`SyncMode::Collect`], default, [`Plugin::synchronize`]) or one
    /// message at a time ([`SyncMode::Streaming`],
    /// [`Plugin::synchronize_chunk`]), which bounds the memory a
    /// synchronization takes to about one message.
    pub fn sync_mode(mut self, mode: SyncMode) -> Self {
        self.sync_mode = mode;
        self
    }

    /// How long the connection's reader may poll for the runtime's next
    /// request after the plugin answered one, instead of sleeping at once,
    /// while requests keep coming that quickly (a burst of events). Only
    /// under a runtime built on `nri-runtime`, which says so in
    /// `Configure`: under others the plugin never polls. Zero turns it
    /// off; default 500 µs. Costs up to this much CPU per answered
    /// event during a burst, saves a wake-up per event; see
    /// docs/runtime/spinning.md.
    pub fn spin_budget(mut self, budget: Duration) -> Self {
        self.spin_budget = budget;
        self
    }

    /// Declares what the plugin needs from its runtime: capabilities
    /// ([`Capability`](nri_api::Capability): adjustments it makes,
    /// container fields it reads, updates, evictions) and events it must
    /// get. Calls add up. At `Configure` the SDK checks them against what
    /// the runtime can do ([`RuntimeInfo::capabilities`](crate::RuntimeInfo::capabilities):
    /// declared by the runtime, or inferred from its name and version), and
    /// if something is missing it answers `Configure` with an error naming
    /// it (the runtime logs it and drops the plugin) and
    /// [`Stub::run`](crate::Stub::run) returns [`Error::Unsupported`],
    /// which is not retried. What cannot be told is a warning, or the same
    /// error under [`Builder::unknown_capabilities`].
    ///
    /// ```
    /// use nri_plugin::{Builder, Capability, Plugin, api::Event};
    /// # struct Tuner;
    /// # #[nri_plugin::plugin]
    /// # impl Plugin for Tuner {
    /// #     async fn create_container(&self, _p: nri_plugin::api::PodSandbox, _c: nri_plugin::api::Container)
    /// #         -> nri_plugin::HandlerResult<nri_plugin::api::CreateContainerResponse> { Ok(Default::default()) }
    /// # }
    /// // Sets sysctls and the scheduler, and follows pod resizes: on
    /// // containerd 2.1 it fails at start-up instead of doing nothing.
    /// let stub = Builder::new(Tuner)
    ///     .name("tuner")
    ///     .index("40")
    ///     .requires([Capability::AdjustLinuxSysctl, Capability::AdjustLinuxSchedulingPolicy])
    ///     .requires([Event::UpdatePodSandbox])
    ///     .build()?;
    /// # Ok::<(), nri_plugin::Error>(())
    /// ```
    pub fn requires<I, R>(mut self, requirements: I) -> Self
    where
        I: IntoIterator<Item = R>,
        R: Into<Requirement>,
    {
        for r in requirements {
            let r = r.into();
            if !self.requires.contains(&r) {
                self.requires.push(r);
            }
        }
        self
    }

    /// What to do when the runtime's support for a requirement cannot be
    /// told (default: [`UnknownCapabilities::Warn`]).
    pub fn unknown_capabilities(mut self, policy: UnknownCapabilities) -> Self {
        self.unknown_capabilities = policy;
        self
    }

    /// Checks the configuration and builds the stub.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`], [`Error::MissingIndex`] (none given or
    /// found: the message says where it comes from), [`Error::InvalidIndex`],
    /// [`Error::InvalidEvents`] (empty subscription or unknown bits).
    pub fn build(self) -> Result<Stub<P>, Error> {
        let events = self.events.unwrap_or(P::EVENTS);
        if events.is_empty() {
            return Err(Error::InvalidEvents {
                events,
                reason: "empty subscription: the plugin implements no event method and sets no \
                         events (Plugin::EVENTS or Builder::events); an empty mask would \
                         subscribe to every event",
            });
        }
        if events.unknown_bits() != 0 {
            return Err(Error::InvalidEvents {
                events,
                reason: "the subscription has bits of no known event",
            });
        }
        // What `Plugin::configure` may choose from: the default subscription
        // and the events with a method.
        let handled = events.union(P::EVENTS).union(P::IMPLEMENTED.events());

        let mode = match self.mode {
            ConnectMode::Auto
                if std::env::var_os(ENV_PLUGIN_SOCKET).is_some_and(|v| !v.is_empty()) =>
            {
                ConnectMode::PreLaunched
            }
            ConnectMode::Auto => ConnectMode::External,
            m => m,
        };
        let (index, name) = resolve_identity(self.index, self.name)?;

        let reconnect = match (mode.clone(), self.reconnect) {
            (ConnectMode::PreLaunched, Some(_)) => {
                tracing::warn!(
                    "nri-plugin: reconnect policy ignored: a pre-launched plugin cannot reconnect"
                );
                None
            }
            (_, r) => r,
        };

        Ok(Stub {
            plugin: Arc::new(self.plugin),
            shared: Arc::new(Shared::new(self.request_timeout)),
            config: Arc::new(Config {
                name,
                index,
                socket_path: self.socket_path,
                mode,
                events,
                handled,
                strict_events: self.strict_events,
                send_teardown_errors: self.send_teardown_errors,
                failure_policy: self.failure_policy,
                registration_timeout: self.registration_timeout,
                reconnect,
                sync_mode: self.sync_mode,
                sync_limits: self.sync_limits,
                spin_budget: self.spin_budget,
                requires: self.requires,
                unknown_capabilities: self.unknown_capabilities,
            }),
        })
    }
}

/// The checked configuration of a [`Stub`].
#[derive(Debug)]
pub(crate) struct Config {
    pub(crate) name: String,
    pub(crate) index: String,
    pub(crate) socket_path: PathBuf,
    pub(crate) mode: ConnectMode,
    /// The default subscription.
    pub(crate) events: EventMask,
    /// The events `Plugin::configure` may subscribe to.
    pub(crate) handled: EventMask,
    pub(crate) strict_events: bool,
    pub(crate) send_teardown_errors: bool,
    pub(crate) failure_policy: Option<FailurePolicy>,
    pub(crate) registration_timeout: Duration,
    pub(crate) reconnect: Option<ReconnectPolicy>,
    pub(crate) sync_mode: SyncMode,
    pub(crate) sync_limits: SyncLimits,
    pub(crate) spin_budget: Duration,
    /// What the plugin needs from the runtime.
    pub(crate) requires: Vec<Requirement>,
    pub(crate) unknown_capabilities: UnknownCapabilities,
}

/// Index and name: builder, else environment, else the executable's name.
fn resolve_identity(
    index: Option<String>,
    name: Option<String>,
) -> Result<(String, String), Error> {
    let env = |var: &str| std::env::var(var).ok().filter(|v| !v.is_empty());
    let mut index = index.or_else(|| env(ENV_PLUGIN_IDX));
    let mut name = name.or_else(|| env(ENV_PLUGIN_NAME));
    let exe = std::env::args_os()
        .next()
        .map(PathBuf::from)
        .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
        .unwrap_or_default();
    if index.is_none() || name.is_none() {
        match (&index, nri_api::parse_plugin_file_name(&exe)) {
            (None, Ok((i, n))) => {
                index = Some(i.to_owned());
                if name.is_none() {
                    name = Some(n.to_owned());
                }
            }
            (Some(_), _) => {
                if name.is_none() {
                    name = Some(exe.clone());
                }
            }
            (None, Err(_)) => {}
        }
    }
    let Some(index) = index else {
        return Err(Error::MissingIndex { executable: exe });
    };
    let name = name.unwrap_or_default();
    nri_api::check_plugin_index(&index).map_err(|source| Error::InvalidIndex {
        index: index.clone(),
        source,
    })?;
    nri_api::check_plugin_name(&name).map_err(|source| Error::InvalidName {
        name: name.clone(),
        source,
    })?;
    Ok((index, name))
}
