//! One connected plugin: its ttRPC client, subscription, dialect and
//! timeout strikes.

mod active_list;
mod budget;
mod gate;
mod instance;

pub(crate) use active_list::ActiveList;
pub(crate) use budget::Budget;
pub(crate) use gate::{Replay, Within};
pub use instance::InstanceState;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use std::time::Duration;

use bytes::Bytes;
use nri_api::api::{Container, Empty, Event, PodSandbox};
use nri_api::{EventMask, PLUGIN_SERVICE, method};
use nri_ttrpc::{CallOptions, Client};
use prost::Message;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::failure::{ErrorClass, PluginFailure};
use crate::grants::Admission;
use crate::latency::PluginInput;
use crate::lock;
use crate::metrics::Metrics;
use crate::peer::{Peer, PeerGuard};
use nri_merge::PluginId;

/// How a plugin came to be connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PluginOrigin {
    /// Launched by the runtime from the plugin directory.
    Launched {
        /// Process id of the plugin.
        pid: Option<u32>,
    },
    /// A WebAssembly module from the plugin directory, run inside the
    /// runtime process.
    Wasm,
    /// Connected to the runtime's socket.
    External {
        /// Peer uid.
        uid: u32,
        /// Peer gid.
        gid: u32,
        /// Peer pid, when known.
        pid: Option<i32>,
    },
}

/// A snapshot of one plugin instance, for introspection.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PluginInfo {
    /// Identity (`NN-name`).
    pub id: PluginId,
    /// The instance: the number of its connection, counted from 1 since
    /// the runtime was built (logs, metrics and the audit trail give it as
    /// `instance`). Two instances of one plugin are there during an
    /// upgrade.
    pub instance: u64,
    /// Whether the instance gets the plugin's events.
    pub state: InstanceState,
    /// Events the plugin subscribed to.
    pub events: EventMask,
    /// Launched or external.
    pub origin: PluginOrigin,
    /// Whether the plugin answered UNIMPLEMENTED to a dedicated event RPC
    /// and now gets those events through `StateChange`.
    pub legacy_dialect: bool,
    /// Current run of consecutive request timeouts.
    pub strikes: u32,
    /// The failure policy the plugin declared in its `ConfigureResponse`
    /// (`None`: it declared none), whether or not the configuration
    /// overrides it.
    pub declared_policy: Option<nri_api::api::FailurePolicy>,
    /// Consecutive timeouts after which the plugin is disconnected (0:
    /// never), as resolved from the configuration and its declared policy.
    pub strike_limit: u32,
    /// Who the plugin is: for a socket plugin its peer credentials, its
    /// executable and the pod of this runtime it runs in; for a launched
    /// or WebAssembly plugin its file (and a launched plugin's process).
    pub identity: nri_merge::PluginIdentity,
    /// The grant the plugin was admitted under (`None`: no grants are
    /// configured).
    pub grant: Option<crate::Grant>,
}

/// What the accounting of a plugin call does with an answer (a failure is
/// always accounted when it happens: the metrics and the strikes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Counted as a successful invocation when it arrives.
    Counted,
    /// Not yet counted: the caller merges it next and counts the call once
    /// the merge has decided (a success, or the class of the merge's
    /// refusal), so that one call is one invocation.
    Merged,
}

pub(crate) struct Plugin {
    pub(crate) id: PluginId,
    /// `id` as a string, built once (metrics labels, error reports).
    pub(crate) name: String,
    /// The number of the plugin's connection (see [`PluginInfo::instance`]).
    pub(crate) instance: u64,
    /// Set when a newer instance takes over (see `registry/handover.rs`);
    /// cleared if that instance fails before it is active.
    superseded: AtomicBool,
    /// The registry's generation when the plugin last became active: an
    /// event whose snapshot is at least this new has the plugin in it
    /// (while it stays active).
    pub(crate) active_since: AtomicU64,
    /// Whether the plugin holds a reservation of its name in the registry
    /// (cleared once, when it retires or is removed).
    pub(crate) holds_name: AtomicBool,
    pub(crate) origin: PluginOrigin,
    pub(crate) mask: EventMask,
    pub(crate) timeout: Duration,
    /// How the plugin is called.
    pub(crate) conn: Conn,
    legacy: AtomicBool,
    deprecation_warned: Mutex<EventMask>,
    strikes: AtomicU32,
    /// Strikes of the incarnation this one replaces, added to `strikes`
    /// at activation (see [`Plugin::carry_strikes`]).
    carried: AtomicU32,
    strike_limit: u32,
    /// The failure policy the plugin declared in Configure.
    pub(crate) declared: Option<nri_api::api::FailurePolicy>,
    /// Who the plugin is and the grant it was admitted under.
    pub(crate) admission: Arc<Admission>,
    /// Whether to send the plugin wake hints (see `latency.rs`).
    pub(crate) wake_hints: bool,
    /// Cancelled when the runtime closes the plugin.
    pub(crate) closed: CancellationToken,
    pub(crate) child: Mutex<Option<tokio::process::Child>>,
    peers: Arc<PeerGuard>,
    /// `true` once the events deferred by the plugin's synchronization have
    /// been delivered; until then direct lifecycle calls wait (see
    /// [`Plugin::call_encoded`] and `registry.rs`).
    ready: watch::Sender<bool>,
    /// Events whose wait at the closed gate ran out, or that the plugin
    /// was not called for in time (see `plugin/gate.rs`).
    gated: gate::Gated,
    /// Set when an event not called in time closed an open gate: its
    /// delivery is to be started (see `Plugin::take_drain`).
    drain: AtomicBool,
    /// The gate is closed only for events the plugin was not called for
    /// in time (it is synchronized, and listed as such).
    owing: AtomicBool,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("id", &self.name)
            .field("instance", &self.instance)
            .field("mask", &self.mask)
            .finish_non_exhaustive()
    }
}

impl Drop for Plugin {
    /// The trunk ends with the plugin: its runtime service answers from the
    /// trunk reader and so holds the trunk open by itself.
    fn drop(&mut self) {
        self.conn.close();
    }
}

tokio::task_local! {
    /// Set while the calls made are about an object the runtime has
    /// already committed (see [`committed`]).
    static COMMITTED: ();
}

/// Runs `f` with its plugin calls marked as about an object the runtime
/// has already committed (a creation delivered after the fact, see
/// `deferred.rs`): a socket plugin's call carries the metadata
/// [`nri_api::METADATA_COMMITTED`].
pub(crate) async fn committed<F: Future>(f: F) -> F::Output {
    COMMITTED.scope((), f).await
}

/// How the runtime calls a plugin: over its ttRPC connection, or into its
/// WebAssembly instance. Everything above this (ordering, merging, owners,
/// validation, metrics, audit, failure policy) is the same for both.
pub(crate) enum Conn {
    /// A plugin process on the other end of a multiplexed socket.
    Ttrpc {
        client: Client,
        /// The input driver `client` was built with.
        input: Arc<PluginInput>,
        mux: nri_mux::Mux,
    },
    /// A WebAssembly plugin in this process.
    #[cfg(feature = "wasm")]
    Wasm(crate::wasm::conn::WasmConn),
}

impl Conn {
    /// One call of `method` within `timeout`: the encoded answer, or the
    /// failure classified.
    async fn call(
        &self,
        method: &str,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, PluginFailure> {
        match self {
            Conn::Ttrpc { client, .. } => {
                let mut opts = CallOptions::new(timeout);
                if COMMITTED.try_with(|()| ()).is_ok() {
                    opts = opts.with_metadata(nri_api::METADATA_COMMITTED, "true");
                }
                client
                    .call(PLUGIN_SERVICE, method, payload, opts)
                    .await
                    .map_err(|e| PluginFailure::from_ttrpc(&e, method, timeout))
            }
            #[cfg(feature = "wasm")]
            Conn::Wasm(w) => w.call(method, payload, timeout).await,
        }
    }

    /// `Shutdown` within `timeout`: a plain call for a socket plugin; a
    /// WebAssembly plugin inside another call is closed instead of waited
    /// for (see `WasmConn::shutdown`).
    async fn shutdown(&self, timeout: Duration) -> Result<Bytes, PluginFailure> {
        match self {
            Conn::Ttrpc { .. } => self.call(method::SHUTDOWN, Bytes::new(), timeout).await,
            #[cfg(feature = "wasm")]
            Conn::Wasm(w) => w.shutdown(timeout).await,
        }
    }

    fn is_closed(&self) -> bool {
        match self {
            Conn::Ttrpc { client, mux, .. } => client.is_closed() || mux.is_closed(),
            #[cfg(feature = "wasm")]
            Conn::Wasm(w) => w.is_closed(),
        }
    }

    fn close(&self) {
        match self {
            Conn::Ttrpc { client, mux, .. } => {
                client.close();
                mux.close();
            }
            #[cfg(feature = "wasm")]
            Conn::Wasm(w) => w.close(),
        }
    }

    async fn closed(&self) {
        match self {
            Conn::Ttrpc { client, mux, .. } => {
                tokio::select! {
                    _ = mux.closed() => {}
                    () = client.closed() => {}
                }
            }
            #[cfg(feature = "wasm")]
            Conn::Wasm(w) => w.closed().await,
        }
    }
}

pub(crate) struct PluginParts {
    pub(crate) id: PluginId,
    /// The number of the connection.
    pub(crate) instance: u64,
    pub(crate) origin: PluginOrigin,
    pub(crate) mask: EventMask,
    pub(crate) timeout: Duration,
    /// How the plugin is called.
    pub(crate) conn: Conn,
    pub(crate) strike_limit: u32,
    /// The failure policy the plugin declared in Configure.
    pub(crate) declared: Option<nri_api::api::FailurePolicy>,
    /// Who the plugin is and the grant it was admitted under.
    pub(crate) admission: Arc<Admission>,
    /// Whether to send the plugin wake hints (see `latency.rs`).
    pub(crate) wake_hints: bool,
    pub(crate) closed: CancellationToken,
    pub(crate) child: Option<tokio::process::Child>,
    /// Checks the plugin's answers before they are decoded.
    pub(crate) peers: Arc<PeerGuard>,
}

impl Plugin {
    pub(crate) fn new(p: PluginParts) -> Self {
        Self {
            name: p.id.to_string(),
            id: p.id,
            instance: p.instance,
            superseded: AtomicBool::new(false),
            active_since: AtomicU64::new(u64::MAX),
            holds_name: AtomicBool::new(true),
            origin: p.origin,
            mask: p.mask,
            timeout: p.timeout,
            conn: p.conn,
            legacy: AtomicBool::new(false),
            deprecation_warned: Mutex::new(EventMask::EMPTY),
            strikes: AtomicU32::new(0),
            carried: AtomicU32::new(0),
            strike_limit: p.strike_limit,
            declared: p.declared,
            admission: p.admission,
            wake_hints: p.wake_hints,
            closed: p.closed,
            child: Mutex::new(p.child),
            peers: p.peers,
            ready: watch::channel(false).0,
            gated: gate::Gated::default(),
            drain: AtomicBool::new(false),
            owing: AtomicBool::new(false),
        }
    }

    /// Closes the gate for direct lifecycle calls again: a superseded
    /// instance taken back because its successor failed, which first gets
    /// what happened meanwhile.
    pub(crate) fn mark_unready(&self) {
        self.ready.send_replace(false);
    }

    /// Marks the instance superseded (or, with `false`, active again).
    pub(crate) fn set_superseded(&self, superseded: bool) {
        self.superseded.store(superseded, Ordering::Release);
    }

    /// Whether a newer instance took over (or is taking over).
    pub(crate) fn is_superseded(&self) -> bool {
        self.superseded.load(Ordering::Acquire)
    }

    /// Whether the gate for direct lifecycle calls is open.
    pub(crate) fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    pub(crate) fn info(&self) -> PluginInfo {
        PluginInfo {
            id: self.id.clone(),
            instance: self.instance,
            state: if self.is_superseded() {
                InstanceState::Superseded
            } else {
                InstanceState::Active
            },
            events: self.mask,
            origin: self.origin,
            legacy_dialect: self.legacy.load(Ordering::Relaxed),
            strikes: self.strikes.load(Ordering::Relaxed),
            declared_policy: self.declared,
            strike_limit: self.strike_limit,
            identity: self.admission.identity().clone(),
            grant: self.admission.grant().cloned(),
        }
    }

    pub(crate) fn subscribed(&self, event: Event) -> bool {
        self.mask.contains(event)
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.is_cancelled() || self.conn.is_closed()
    }

    /// Closes the connection (idempotent).
    pub(crate) fn close(&self, why: &str) {
        if !self.closed.is_cancelled() {
            tracing::info!(plugin = %self.id, reason = why, "closing NRI plugin connection");
        }
        self.closed.cancel();
        self.conn.close();
    }

    /// Waits until the connection is gone (peer closed, error, or closed by us).
    pub(crate) async fn wait_closed(&self) {
        tokio::select! {
            () = self.conn.closed() => {}
            () = self.closed.cancelled() => {}
        }
    }

    /// One raw call with metrics and strike accounting.
    pub(crate) async fn call_raw(
        &self,
        metrics: &dyn Metrics,
        operation: &str,
        method: &str,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, PluginFailure> {
        let res = self
            .call_timed(metrics, operation, method, payload, timeout)
            .await;
        self.account(metrics, operation, &res);
        res
    }

    /// One call whose answer is decoded ([`Self::decode_answer`]) before
    /// the call is accounted: an answer refused undecoded counts as an
    /// invalid response, not as a success. A failure is always accounted;
    /// an answer as `answer` says.
    pub(crate) async fn call_decoded<Resp: Message + prost::Name + Default>(
        &self,
        metrics: &dyn Metrics,
        operation: &str,
        method: &str,
        payload: Bytes,
        timeout: Duration,
        answer: Answer,
    ) -> Result<Resp, PluginFailure> {
        let res = self
            .call_timed(metrics, operation, method, payload, timeout)
            .await;
        self.settle(metrics, operation, method, res, answer)
    }

    /// One call whose answer is decoded ([`Self::decode_answer`]) but not
    /// accounted (neither metrics nor strikes; its latency is recorded):
    /// for a call whose outcome someone else accounts, once (a late
    /// plugin's CreateContainer, accounted by the creation that waits for
    /// it; see `deferred.rs`).
    pub(crate) async fn call_unaccounted<Resp: Message + prost::Name + Default>(
        &self,
        metrics: &dyn Metrics,
        operation: &str,
        method: &str,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Resp, PluginFailure> {
        self.call_timed(metrics, operation, method, payload, timeout)
            .await
            .and_then(|b| self.decode_answer(method, b))
    }

    /// Decodes a call's answer ([`Self::decode_answer`]) and accounts the
    /// call: a failure always, an answer as `answer` says.
    fn settle<Resp: Message + prost::Name + Default>(
        &self,
        metrics: &dyn Metrics,
        operation: &str,
        method: &str,
        res: Result<Bytes, PluginFailure>,
        answer: Answer,
    ) -> Result<Resp, PluginFailure> {
        let res = res.and_then(|b| self.decode_answer(method, b));
        match answer {
            Answer::Counted => self.account(metrics, operation, &res),
            Answer::Merged => self.account_unsettled(metrics, operation, &res),
        }
        res
    }

    /// One raw call with its latency recorded (not yet accounted).
    async fn call_timed(
        &self,
        metrics: &dyn Metrics,
        operation: &str,
        method: &str,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, PluginFailure> {
        self.timed(metrics, operation, self.conn.call(method, payload, timeout))
            .await
    }

    /// Runs `call` with its latency recorded under `operation`.
    async fn timed(
        &self,
        metrics: &dyn Metrics,
        operation: &str,
        call: impl Future<Output = Result<Bytes, PluginFailure>>,
    ) -> Result<Bytes, PluginFailure> {
        let start = Instant::now();
        let res = call.await;
        metrics.plugin_latency(&self.name, operation, start.elapsed());
        res
    }

    pub(crate) fn account<T>(
        &self,
        metrics: &dyn Metrics,
        operation: &str,
        res: &Result<T, PluginFailure>,
    ) {
        self.account_unsettled(metrics, operation, res);
        if res.is_ok() {
            metrics.plugin_invocation(&self.name, operation, Ok(()));
        }
    }

    /// As [`account`](Self::account), without counting an answer as an
    /// invocation (see [`Answer::Merged`]).
    pub(crate) fn account_unsettled<T>(
        &self,
        metrics: &dyn Metrics,
        operation: &str,
        res: &Result<T, PluginFailure>,
    ) {
        match res {
            Ok(_) => {
                if self.strikes.swap(0, Ordering::Relaxed) > 0 {
                    metrics.plugin_strikes(&self.name, operation, 0);
                }
            }
            Err(f) => {
                metrics.plugin_invocation(&self.name, operation, Err(f.class()));
                match f.class() {
                    ErrorClass::Timeout if self.cut_short(f) => {
                        tracing::info!(plugin = %self.id, operation, "NRI plugin's call cut short by the event's deadline; not a strike");
                    }
                    ErrorClass::Timeout => {
                        let n = self.strikes.fetch_add(1, Ordering::Relaxed) + 1;
                        // The gauge is the plugin's: a superseded instance's
                        // strikes are not the newer instance's.
                        if !self.is_superseded() {
                            metrics.plugin_strikes(&self.name, operation, n);
                        }
                        tracing::warn!(plugin = %self.id, operation, strikes = n, limit = self.strike_limit, "NRI plugin timed out");
                        if self.strike_limit > 0 && n >= self.strike_limit {
                            self.close(&format!("{n} consecutive request timeouts"));
                        }
                    }
                    ErrorClass::Disconnected => self.close("connection lost"),
                    _ => {}
                }
                // A WebAssembly plugin whose instance the call discarded
                // is closed once the call is accounted (its supervisor
                // then sees the strike).
                if self.conn.is_closed() {
                    self.close("connection lost");
                }
            }
        }
    }

    /// Whether `f` is a WebAssembly call's timeout shorter than the
    /// plugin's own (the event's deadline cut it short): the guest goes
    /// on within its own time (see `WasmConn::call`), so it is no strike.
    fn cut_short(&self, f: &PluginFailure) -> bool {
        #[cfg(feature = "wasm")]
        if matches!(self.conn, Conn::Wasm(_)) {
            return matches!(f, PluginFailure::Timeout { timeout } if *timeout < self.timeout);
        }
        let _ = f;
        false
    }

    /// Consecutive timeouts so far.
    pub(crate) fn strikes(&self) -> u32 {
        self.strikes.load(Ordering::Relaxed)
    }

    /// Gives a new incarnation of a plugin (a WebAssembly plugin
    /// re-instantiated, before its Synchronize) the strikes of the one it
    /// replaces: they are added at its activation
    /// ([`Plugin::apply_carried_strikes`]), after its Synchronize's answer
    /// (which would clear them) and before any event reaches it or it is
    /// listed as active, so that the run of timeouts goes on until it
    /// answers an event.
    pub(crate) fn carry_strikes(&self, n: u32) {
        self.carried.store(n, Ordering::Relaxed);
    }

    /// Consecutive timeouts so far, with those given by
    /// [`Plugin::carry_strikes`] if not added yet (an incarnation whose
    /// start failed: what its successor carries over).
    pub(crate) fn strikes_with_carried(&self) -> u32 {
        self.strikes()
            .saturating_add(self.carried.load(Ordering::Relaxed))
    }

    /// Adds the strikes given by [`Plugin::carry_strikes`] (once).
    pub(crate) fn apply_carried_strikes(&self) {
        let n = self.carried.swap(0, Ordering::Relaxed);
        if n > 0 {
            self.strikes.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Sends `Shutdown` (the runtime is stopping) within `timeout`, timed
    /// and accounted as operation `Shutdown` like any call.
    pub(crate) async fn shutdown(
        &self,
        metrics: &dyn Metrics,
        timeout: Duration,
    ) -> Result<(), PluginFailure> {
        const OPERATION: &str = "Shutdown";
        let res = self
            .timed(metrics, OPERATION, self.conn.shutdown(timeout))
            .await;
        self.settle(metrics, OPERATION, method::SHUTDOWN, res, Answer::Counted)
            .map(|Empty {}| ())
    }

    /// Decodes the plugin's answer to `method`, once it is known to be
    /// within the limits on what a peer may cost (see `peer.rs`); a
    /// refused answer is reported with the plugin's pid and uid.
    fn decode_answer<Resp: Message + prost::Name + Default>(
        &self,
        method: &str,
        bytes: Bytes,
    ) -> Result<Resp, PluginFailure> {
        crate::peer::decode_checked::<Resp>(&self.peers, bytes).map_err(|r| {
            self.peers.report(&self.peer(), method, &r);
            PluginFailure::InvalidResponse {
                message: format!("{method} answer refused: {r}"),
            }
        })
    }

    /// Who the plugin is, for refusal reports.
    pub(crate) fn peer(&self) -> Peer {
        Peer {
            name: self.name.clone(),
            registered: true,
            origin: self.origin,
        }
    }

    /// A direct lifecycle call (encoded request, typed response) within
    /// `budget`, once the plugin is ready (see [`Self::ready_within`]); its
    /// answer accounted as `answer` says.
    pub(crate) async fn call_encoded<Resp: Message + prost::Name + Default>(
        &self,
        metrics: &dyn Metrics,
        operation: &str,
        method: &str,
        payload: Bytes,
        within: Within<'_>,
        answer: Answer,
    ) -> Result<Resp, PluginFailure> {
        let Within { budget, replay } = within;
        let timeout = self
            .ready_within(metrics, operation, budget, replay)
            .await?;
        self.call_decoded(metrics, operation, method, payload, timeout, answer)
            .await
    }

    /// Delivers one of the nine events that older plugins receive through
    /// `StateChange`, without waiting for the ready gate (deferred
    /// deliveries of a synchronization).
    pub(crate) async fn notify(
        &self,
        metrics: &dyn Metrics,
        event: Event,
        pod: &PodSandbox,
        container: Option<&Container>,
    ) -> Result<(), PluginFailure> {
        self.notify_now(
            metrics,
            &Notification::new(event, pod, container),
            self.timeout,
        )
        .await
    }

    /// A direct lifecycle notification (the request encoded once per
    /// event), made once the plugin is ready, within `budget`.
    pub(crate) async fn notify_prepared(
        &self,
        metrics: &dyn Metrics,
        n: &Notification<'_>,
        budget: Budget,
        replay: Replay<'_>,
    ) -> Result<(), PluginFailure> {
        let op = n.event.pretty_name();
        let timeout = self.ready_within(metrics, op, budget, replay).await?;
        self.notify_now(metrics, n, timeout).await
    }

    /// The dedicated RPC first; on UNIMPLEMENTED the plugin is switched to
    /// `StateChange` for good.
    async fn notify_now(
        &self,
        metrics: &dyn Metrics,
        n: &Notification<'_>,
        timeout: Duration,
    ) -> Result<(), PluginFailure> {
        let Notification {
            event,
            pod,
            container,
            ref dedicated,
        } = *n;
        let op = event.pretty_name();
        let start = Instant::now();
        if !self.legacy.load(Ordering::Relaxed) {
            let Some(method) = event.method_name() else {
                return Err(PluginFailure::InvalidResponse {
                    message: format!("no RPC for event {op}"),
                });
            };
            let payload = dedicated.clone();
            let res = self.conn.call(method, payload, timeout).await;
            match res {
                Err(PluginFailure::Unimplemented { .. }) => {
                    tracing::info!(plugin = %self.id, event = op, "plugin does not implement dedicated event RPCs; using StateChange from now on");
                    self.legacy.store(true, Ordering::Relaxed);
                }
                other => {
                    metrics.plugin_latency(&self.name, op, start.elapsed());
                    let res = other.map(|_| ());
                    self.account(metrics, op, &res);
                    return res;
                }
            }
        }
        // The fall-back is part of the same call: it gets what is left of
        // the call's time, as upstream (one context for both).
        let left = timeout.saturating_sub(start.elapsed());
        if left.is_zero() {
            let res = Err(PluginFailure::Timeout { timeout });
            metrics.plugin_latency(&self.name, op, start.elapsed());
            self.account(metrics, op, &res);
            return res;
        }
        let res = self
            .call_raw(
                metrics,
                op,
                method::STATE_CHANGE,
                crate::encode::state_change(event, pod, container),
                left,
            )
            .await
            .map(|_| ())
            .map_err(|f| match f {
                // Reported with the call's timeout, not the part left.
                PluginFailure::Timeout { .. } => PluginFailure::Timeout { timeout },
                other => other,
            });
        if res.is_ok() {
            let mut warned = lock(&self.deprecation_warned);
            if !warned.contains(event) {
                warned.set(event);
                tracing::warn!(plugin = %self.id, event = op, "plugin uses the deprecated StateChange dialect");
            }
        }
        res
    }
}

/// One notification event, its dedicated request encoded once for all
/// plugins.
pub(crate) struct Notification<'a> {
    pub(crate) event: Event,
    pub(crate) pod: &'a PodSandbox,
    pub(crate) container: Option<&'a Container>,
    dedicated: Bytes,
}

impl<'a> Notification<'a> {
    /// Encodes the dedicated request of `event` (one of the nine events that
    /// [`Plugin::notify`] delivers; all of them are `{pod, container}`).
    pub(crate) fn new(event: Event, pod: &'a PodSandbox, container: Option<&'a Container>) -> Self {
        Self {
            event,
            pod,
            container,
            dedicated: crate::encode::pod_container_request(pod, container),
        }
    }

    /// The dedicated request, encoded.
    pub(crate) fn request(&self) -> &Bytes {
        &self.dedicated
    }
}

/// Sorted, shared list of plugins.
pub(crate) type PluginList = Arc<ActiveList>;
