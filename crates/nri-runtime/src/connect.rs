//! Plugin connections: multiplexer and ttRPC setup, registration,
//! configuration, chunked Synchronize, activation.

use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use nri_api::api::{
    ConfigureRequest, ConfigureResponse, Empty, RegisterPluginRequest, SynchronizeResponse,
    UpdateContainersRequest, UpdateContainersResponse,
};
use nri_api::{EventMask, RUNTIME_SERVICE, method};
use nri_mux::{PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use nri_ttrpc::{Client, Code, Methods, RequestLenLimit, Server, ServerLimits, Status};
use prost::Message as _;
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::adaptation::Shared;
use crate::encode::{SyncEncoder, SyncLimits, SyncObjects, SyncParts};
use crate::error::{Error, RegistrationFailure};
use crate::latency::PluginInput;
use crate::peer::{Peer, Refused};
use crate::plugin::{Answer, Conn, Plugin, PluginOrigin, PluginParts};
use nri_merge::PluginId;

/// How long a refused plugin gets to read the refusal before the runtime
/// closes the connection.
const REFUSAL_LINGER: std::time::Duration = std::time::Duration::from_secs(1);
/// Largest Synchronize message we send: ttRPC's 4 MiB cap minus room for
/// the ttRPC request envelope.
const SYNC_MESSAGE_LIMIT: usize = 4 * 1024 * 1024 - 64 * 1024;
/// Size of each message when a snapshot does not fit in one: small enough
/// that the plugin starts decoding a few milliseconds into the sync and
/// the next message is encoded while it decodes (measured in
/// docs/benchmarks/nri.md).
const SYNC_PART_SIZE: usize = 1024 * 1024;
const SYNC_LIMITS: SyncLimits = SyncLimits {
    message: SYNC_MESSAGE_LIMIT,
    part: SYNC_PART_SIZE,
};

type RegisterReply = oneshot::Sender<Result<(), Status>>;

/// Opens the plugin service connection (the runtime's calls to the plugin)
/// and its client. It takes its data straight from the trunk reader: the
/// plugin's answers go to the waiting call with no reader task in between;
/// a call waiting for its answer runs the trunk reader itself, so the
/// answer is read in the calling task.
fn plugin_service(mux: &nri_mux::Mux) -> Result<(Client, Arc<PluginInput>), nri_mux::Error> {
    let (answers, requests) = mux.open(PLUGIN_SERVICE_CONN)?.into_split();
    let input = Arc::new(PluginInput::new(requests.reader_driver()));
    let (client, feed) = Client::with_feed_driven(requests, input.clone());
    answers.into_sink(feed);
    Ok((client, input))
}

/// Who is on the other end of a connection, before it registers.
#[derive(Clone)]
struct RuntimeServicePeer {
    origin: PluginOrigin,
    description: String,
}

impl RuntimeServicePeer {
    /// The peer for refusal reports: the plugin once it has registered
    /// (`identity` set), else the connection's description.
    fn peer(&self, identity: &Mutex<Option<PluginId>>) -> Peer {
        let id = crate::lock(identity).clone();
        Peer {
            registered: id.is_some(),
            name: id.map_or_else(|| self.description.clone(), |id| id.to_string()),
            origin: self.origin,
        }
    }
}

/// Reports every frame the multiplexer drops because its connection is
/// not open (for instance answers written on the plugin service
/// connection before registering), as a refusal of kind
/// `unknown_connection`.
fn report_dropped_frames(
    mux: &nri_mux::Mux,
    guard: Arc<crate::peer::PeerGuard>,
    identity: Arc<Mutex<Option<PluginId>>>,
    who: RuntimeServicePeer,
) {
    mux.on_dropped_frame(move |conn, len| {
        let refused = Refused {
            kind: "unknown_connection",
            reason: format!(
                "{len}-byte frame for multiplexer connection {conn}, which is not open"
            ),
        };
        guard.report(&who.peer(&identity), "frame", &refused);
    });
}

/// How the connection was made, and for launched plugins who it is.
pub(crate) struct Pending {
    pub(crate) origin: PluginOrigin,
    /// Identity from the file name (launched plugins).
    pub(crate) launched_id: Option<PluginId>,
    /// Configuration text (launched plugins).
    pub(crate) config: String,
    pub(crate) child: Option<tokio::process::Child>,
    /// Description for logs before the plugin named itself.
    pub(crate) peer: String,
    /// For a connection accepted on the socket: its place among those
    /// waiting to register, freed once it has registered.
    pub(crate) pending_slot: Option<crate::peer::PendingSlot>,
}

impl Shared {
    /// Runs the whole life of one connection: registration, configure,
    /// sync, then waits until it closes and forgets it.
    pub(crate) async fn run_connection(self: Arc<Self>, stream: UnixStream, pending: Pending) {
        let peer = pending.peer.clone();
        match self.clone().establish(stream, pending).await {
            Ok(plugin) => {
                plugin.wait_closed().await;
                let stopping = self.stopping.is_cancelled();
                self.registry.remove(&plugin);
                plugin.close("connection closed");
                if !stopping {
                    tracing::warn!(plugin = %plugin.id, "NRI plugin disconnected");
                }
                reap(&plugin).await;
            }
            Err(e) => {
                tracing::warn!(peer = %peer, error = %e, "NRI plugin connection failed");
            }
        }
    }

    /// Registration, configuration, synchronization and activation.
    #[allow(clippy::too_many_lines)]
    pub(crate) async fn establish(
        self: Arc<Self>,
        stream: UnixStream,
        mut pending: Pending,
    ) -> Result<Arc<Plugin>, Error> {
        let peer = pending.peer.clone();
        let reg_err = |reason: RegistrationFailure| Error::Registration {
            plugin: peer.clone(),
            reason,
        };
        let mux = nri_mux::Mux::paused_with_strategy(stream, self.config.read_strategy());
        let conn2 = mux.open(RUNTIME_SERVICE_CONN).map_err(|e| {
            reg_err(RegistrationFailure::Transport {
                message: e.to_string(),
            })
        })?;
        let closed = CancellationToken::new();
        let identity: Arc<Mutex<Option<PluginId>>> = Arc::new(Mutex::new(None));
        let who = RuntimeServicePeer {
            origin: pending.origin,
            description: peer.clone(),
        };
        report_dropped_frames(&mux, self.peers.clone(), identity.clone(), who.clone());
        let (reg_tx, mut reg_rx) = mpsc::channel::<(RegisterPluginRequest, RegisterReply)>(1);
        let (server, request_len) = self.runtime_service(reg_tx, identity.clone(), who)?;
        {
            let (requests, answers) = conn2.into_split();
            let (feed, serving) = server.serve_fed(answers, closed.clone());
            requests.into_sink(feed);
            let peer = peer.clone();
            self.spawn(async move {
                if let Err(e) = serving.await {
                    tracing::debug!(peer = %peer, error = %e, "NRI runtime service connection ended");
                }
            });
        }
        mux.start();

        let cleanup = |mux: &nri_mux::Mux, closed: &CancellationToken| {
            closed.cancel();
            mux.close();
        };

        // 1. Registration.
        let reg = tokio::select! {
            r = reg_rx.recv() => r,
            () = tokio::time::sleep(self.config.registration_timeout) => {
                let reason = RegistrationFailure::Timeout { timeout: self.config.registration_timeout };
                self.peers.refuse_unregistered(&peer, pending.origin, "connection", "registration_timeout", reason.to_string());
                cleanup(&mux, &closed);
                kill_child(&mut pending.child).await;
                return Err(reg_err(reason));
            }
            _ = mux.closed() => None,
        };
        let Some((req, reply)) = reg else {
            cleanup(&mux, &closed);
            kill_child(&mut pending.child).await;
            return Err(reg_err(RegistrationFailure::ClosedBeforeRegistration));
        };
        let id = match self.check_registration(&req, pending.launched_id.take()) {
            Ok(id) => id,
            Err(reason) => {
                let refused = format!(
                    "registration as index {:?}, name {:?}: {reason}",
                    req.plugin_idx, req.plugin_name
                );
                self.peers.refuse_unregistered(
                    &peer,
                    pending.origin,
                    method::REGISTER_PLUGIN,
                    "registration",
                    refused,
                );
                let _ = reply.send(Err(Status::new(Code::InvalidArgument, reason.to_string())));
                // Let the answer reach the plugin before closing: closing the
                // trunk discards unsent data, so give the plugin a bounded
                // moment to read the refusal and hang up itself.
                let linger = self.config.registration_timeout.min(REFUSAL_LINGER);
                let _ = tokio::time::timeout(linger, mux.closed()).await;
                cleanup(&mux, &closed);
                kill_child(&mut pending.child).await;
                return Err(reg_err(reason));
            }
        };
        // Until the plugin has registered, what it sends on the plugin
        // service connection is dropped by the mux as it arrives, unread.
        let (client, input) = match plugin_service(&mux) {
            Ok(c) => c,
            Err(e) => {
                self.registry.release(&id.to_string());
                let _ = reply.send(Err(Status::new(Code::Unavailable, "connection closed")));
                cleanup(&mux, &closed);
                kill_child(&mut pending.child).await;
                return Err(reg_err(RegistrationFailure::Transport {
                    message: e.to_string(),
                }));
            }
        };
        let cleanup = |mux: &nri_mux::Mux, client: &Client, closed: &CancellationToken| {
            client.close();
            cleanup(mux, closed);
        };
        let _ = reply.send(Ok(()));
        drop(pending.pending_slot.take());
        tracing::info!(plugin = %id, peer = %peer, nri_version = %req.nri_version, "NRI plugin registered");
        let full = id.to_string();
        let fail = |reason: RegistrationFailure| Error::Registration {
            plugin: full.clone(),
            reason,
        };

        // 2. Configure.
        let timeout = self.config.request_timeout_for(&id);
        let creq = ConfigureRequest {
            config: std::mem::take(&mut pending.config),
            runtime_name: self.config.runtime_name.clone(),
            runtime_version: self.config.runtime_version.clone(),
            registration_timeout: millis(self.config.registration_timeout),
            request_timeout: millis(self.config.request_timeout),
            nri_version: nri_api::nri_rs_runtime_version(),
        };
        let configured = client
            .call_message::<_, ConfigureResponse>(
                nri_api::PLUGIN_SERVICE,
                method::CONFIGURE,
                &creq,
                nri_ttrpc::CallOptions::new(timeout),
            )
            .await;
        let mut declared = None;
        let mask = match configured {
            Ok(resp) => {
                declared = resp.failure_policy;
                check_mask(resp.events)
            }
            Err(e) => Err(RegistrationFailure::Configure {
                message: e.to_string(),
            }),
        };
        let mask = match mask {
            Ok(m) => m,
            Err(reason) => {
                self.registry.release(&full);
                // The RegisterPlugin answer may still be on its way (its
                // handler runs in its own task); closing the trunk would
                // discard it, so let the plugin hang up first (bounded).
                let linger = self.config.registration_timeout.min(REFUSAL_LINGER);
                let _ = tokio::time::timeout(linger, mux.closed()).await;
                cleanup(&mux, &client, &closed);
                kill_child(&mut pending.child).await;
                return Err(fail(reason));
            }
        };
        let plugin = Arc::new(Plugin::new(PluginParts {
            id: id.clone(),
            origin: pending.origin,
            mask,
            timeout,
            conn: Conn::Ttrpc { client, input, mux },
            strike_limit: self.strike_limit_for(&id, declared.as_ref()),
            declared,
            wake_hints: !self.config.spin_budget.is_zero(),
            closed,
            child: pending.child.take(),
            peers: self.peers.clone(),
        }));
        *crate::lock(&identity) = Some(id.clone());
        // Registered and configured: its requests may be as large as the
        // protocol allows (and are checked before decoding).
        request_len.set(nri_ttrpc::codec::MAX_MESSAGE_LEN);
        tracing::info!(plugin = %id, events = %mask, "NRI plugin configured");
        if let Some(d) = &declared {
            let overridden = self
                .config
                .plugin_entry(&id)
                .is_some_and(|e| e.failure.is_some());
            tracing::info!(plugin = %id, fail_request = d.fail_request, keep_connected = d.keep_connected, overridden_by_configuration = overridden, "NRI plugin declared a failure policy");
        }

        // 3. Synchronize (behind the barrier), deferred deliveries, activation.
        if let Err(e) = self.synchronize(&plugin).await {
            self.registry.remove(&plugin);
            plugin.close("synchronization failed");
            reap(&plugin).await;
            return Err(fail(e));
        }
        tracing::info!(plugin = %id, "NRI plugin synchronized and active");
        Ok(plugin)
    }

    fn check_registration(
        &self,
        req: &RegisterPluginRequest,
        launched: Option<PluginId>,
    ) -> Result<PluginId, RegistrationFailure> {
        fn invalid(e: impl std::fmt::Display) -> RegistrationFailure {
            RegistrationFailure::InvalidIdentity {
                reason: e.to_string(),
            }
        }
        let id = match launched {
            Some(id) => id,
            None => {
                nri_api::check_plugin_index(&req.plugin_idx).map_err(invalid)?;
                nri_api::check_plugin_name(&req.plugin_name).map_err(invalid)?;
                PluginId::new(req.plugin_idx.clone(), req.plugin_name.clone()).map_err(invalid)?
            }
        };
        if !self.registry.reserve(&id.to_string()) {
            return Err(RegistrationFailure::NameInUse {
                plugin: id.to_string(),
            });
        }
        Ok(id)
    }

    /// The `Runtime` service served to one plugin on mux connection 2, and
    /// the handle of its request size limit (raised once the plugin is
    /// configured). Until the plugin has registered, only a small
    /// `RegisterPlugin` is accepted; every other request is refused before
    /// it is decoded (see [`crate::peer`]).
    #[allow(clippy::too_many_lines)]
    fn runtime_service(
        self: &Arc<Self>,
        reg_tx: mpsc::Sender<(RegisterPluginRequest, RegisterReply)>,
        identity: Arc<Mutex<Option<PluginId>>>,
        who: RuntimeServicePeer,
    ) -> Result<(Server, RequestLenLimit), Error> {
        let weak: Weak<Shared> = Arc::downgrade(self);
        let limits = &self.config.peer_limits;
        let request_len = RequestLenLimit::new(limits.unregistered_request_len());
        let peer_of = {
            let identity = identity.clone();
            move || -> Peer { who.peer(&identity) }
        };
        let peer_of = Arc::new(peer_of);
        let register = {
            let guard = self.peers.clone();
            let peer_of = peer_of.clone();
            let max = limits.max_register_len;
            move |_ctx, payload: Bytes| {
                let reg_tx = reg_tx.clone();
                let refused = (payload.len() > max).then(|| Refused {
                    kind: "too_large",
                    reason: format!(
                        "RegisterPlugin of {} bytes, over the limit of {max}",
                        payload.len()
                    ),
                });
                if let Some(r) = &refused {
                    guard.report(&peer_of(), method::REGISTER_PLUGIN, r);
                }
                async move {
                    if let Some(r) = refused {
                        return Err(Status::new(Code::ResourceExhausted, r.reason));
                    }
                    let req = RegisterPluginRequest::decode(payload).map_err(|e| {
                        Status::new(
                            Code::InvalidArgument,
                            format!("cannot decode RegisterPlugin: {e}"),
                        )
                    })?;
                    let (tx, rx) = oneshot::channel();
                    reg_tx.try_send((req, tx)).map_err(|_| {
                        Status::new(Code::FailedPrecondition, "plugin already registered")
                    })?;
                    match rx.await {
                        Ok(Ok(())) => Ok(Bytes::from(Empty {}.encode_to_vec())),
                        Ok(Err(st)) => Err(st),
                        Err(_) => Err(Status::new(Code::Unavailable, "registration aborted")),
                    }
                }
            }
        };
        let update = {
            let guard = self.peers.clone();
            let peer_of = peer_of.clone();
            move |_ctx, payload: Bytes| {
                let id = crate::lock(&identity).clone();
                // Refused before the payload is decoded.
                let checked = match (&id, weak.upgrade()) {
                    (Some(_), Some(_)) => {
                        crate::peer::decode_checked::<UpdateContainersRequest>(&guard, payload)
                    }
                    _ => Err(Refused {
                        kind: "unregistered",
                        reason: "UpdateContainers from a plugin that has not registered".into(),
                    }),
                };
                if let Err(r) = &checked {
                    guard.report(&peer_of(), method::UPDATE_CONTAINERS, r);
                }
                let weak = weak.clone();
                let peer = peer_of();
                async move {
                    let req = checked.map_err(|r| {
                        let code = match r.kind {
                            "unregistered" => Code::FailedPrecondition,
                            "malformed" => Code::InvalidArgument,
                            _ => Code::ResourceExhausted,
                        };
                        Status::new(code, r.reason)
                    })?;
                    let (Some(shared), Some(id)) = (weak.upgrade(), id) else {
                        return Err(Status::new(Code::Unavailable, "runtime stopping"));
                    };
                    let resp = shared.unsolicited_update(&id, &peer, req).await?;
                    Ok(Bytes::from(resp.encode_to_vec()))
                }
            }
        };
        let methods = Methods::new()
            .add(method::REGISTER_PLUGIN, register)
            .add(method::UPDATE_CONTAINERS, update);
        let mut server = Server::new();
        server
            .register(RUNTIME_SERVICE, methods)
            .map_err(|e| Error::Registration {
                plugin: "?".into(),
                reason: RegistrationFailure::Transport {
                    message: e.to_string(),
                },
            })?;
        server.set_limits(
            ServerLimits::default()
                .with_max_request_len(request_len.clone())
                .with_max_in_flight(limits.max_in_flight),
        );
        let guard = self.peers.clone();
        server.set_refusal_observer(move |r: &nri_ttrpc::Refusal| {
            let refused = Refused {
                kind: r.kind(),
                reason: r.to_string(),
            };
            guard.report(&peer_of(), "request", &refused);
        });
        Ok((server, request_len))
    }

    pub(crate) async fn unsolicited_update(
        &self,
        id: &PluginId,
        peer: &Peer,
        req: UpdateContainersRequest,
    ) -> Result<UpdateContainersResponse, Status> {
        let plugin = id.to_string();
        let operation = "UpdateContainers";
        let updates = self
            .vet_updates(id, peer, operation, req.update)
            .map_err(|e| {
                tracing::warn!(plugin = %plugin, error = %e, "refusing unsolicited container updates");
                let code = match e {
                    Error::ValidationRejected { .. } => Code::PermissionDenied,
                    _ => Code::InvalidArgument,
                };
                Status::new(code, e.to_string())
            })?;
        if !req.evict.is_empty() {
            self.metrics
                .plugin_adjustments(&plugin, operation, 0, 0, req.evict.len());
            for e in &req.evict {
                tracing::info!(target: crate::metrics::AUDIT_TARGET, operation, plugin = %plugin, container = %e.container_id, reason = %e.reason, "plugin requested eviction");
            }
            if let Err(e) = self.callbacks.evict_containers(req.evict).await {
                tracing::warn!(plugin = %plugin, error = %e, "evicting containers failed");
                return Err(Status::new(Code::Unknown, format!("eviction failed: {e}")));
            }
        }
        if updates.is_empty() {
            return Ok(UpdateContainersResponse { failed: Vec::new() });
        }
        match self.callbacks.update_containers(updates).await {
            Ok(failed) => Ok(UpdateContainersResponse { failed }),
            Err(e) => {
                tracing::warn!(plugin = %plugin, error = %e, "unsolicited container update failed");
                Err(Status::new(Code::Unknown, format!("update failed: {e}")))
            }
        }
    }

    /// Synchronize behind the barrier, then the deferred deliveries, then
    /// activation. See `registry.rs` and `docs/runtime/sync.md`.
    pub(crate) async fn synchronize(
        &self,
        plugin: &Arc<Plugin>,
    ) -> Result<(), RegistrationFailure> {
        let finished = self.registry.begin_sync(plugin);
        self.await_finished_creations(plugin, finished).await;
        let snapshot = self
            .callbacks
            .list_pods_and_containers()
            .await
            .map_err(|e| RegistrationFailure::ListFailed {
                message: e.to_string(),
            })?;
        self.peers.known.listed(&snapshot.containers);
        let objects = {
            let (queued_pods, queued_containers) = self.registry.queued_ids(plugin);
            SyncObjects::new(
                snapshot,
                |p| !queued_pods.contains(p.id.as_str()),
                |c| !queued_containers.contains(c.id.as_str()),
            )
        };
        let updates = self.send_sync(plugin, objects).await?;
        // The same checks, validation and audit as unsolicited updates.
        let updates = match self.vet_updates(&plugin.id, &plugin.peer(), "Synchronize", updates) {
            Ok(u) => u,
            Err(e) => {
                tracing::warn!(plugin = %plugin.id, error = %e, "refusing the container updates of the Synchronize answer");
                Vec::new()
            }
        };
        if !updates.is_empty() {
            match self.callbacks.update_containers(updates).await {
                Ok(failed) if !failed.is_empty() => {
                    tracing::warn!(plugin = %plugin.id, failed = failed.len(), "some container updates from Synchronize failed");
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(plugin = %plugin.id, error = %e, "container updates from Synchronize failed");
                }
            }
        }
        let backlog = self.registry.activate(plugin).unwrap_or_default();
        for d in backlog {
            if plugin.is_closed() {
                break;
            }
            self.deliver_deferred(plugin, d).await;
        }
        plugin.mark_ready();
        if plugin.is_closed() {
            return Err(RegistrationFailure::LostDuringSync);
        }
        Ok(())
    }

    /// Sends the snapshot: one message when it fits under the size cap,
    /// otherwise parts of [`SYNC_PART_SIZE`], encoded on a thread of their
    /// own ahead of the part being sent ([`SyncParts`]).
    async fn send_sync(
        &self,
        plugin: &Arc<Plugin>,
        objects: SyncObjects,
    ) -> Result<Vec<nri_api::api::ContainerUpdate>, RegistrationFailure> {
        let mut encoder = SyncEncoder::new(objects, SYNC_LIMITS);
        if encoder.is_single() {
            let payload = encoder.next_message().await.unwrap_or_default();
            drop(encoder);
            return Ok(self.sync_call(plugin, payload).await?.update);
        }
        let mut parts = SyncParts::spawn(encoder);
        while let Some((payload, last)) = parts.next().await {
            let resp = self.sync_call(plugin, payload).await?;
            if last {
                return Ok(resp.update);
            }
            if !resp.more || !resp.update.is_empty() {
                return Err(RegistrationFailure::SplitSyncUnsupported);
            }
        }
        Err(RegistrationFailure::Synchronize {
            message: "the encoder stopped before the last message".into(),
        })
    }

    async fn sync_call(
        &self,
        plugin: &Plugin,
        payload: bytes::Bytes,
    ) -> Result<SynchronizeResponse, RegistrationFailure> {
        plugin
            .call_decoded(
                &*self.metrics,
                "Synchronize",
                method::SYNCHRONIZE,
                payload,
                plugin.timeout,
                Answer::Counted,
            )
            .await
            .map_err(|e| RegistrationFailure::Synchronize {
                message: e.to_string(),
            })
    }
}

pub(crate) fn check_mask(events: i32) -> Result<EventMask, RegistrationFailure> {
    let mask = EventMask::from_i32(events);
    if mask.is_empty() {
        return Ok(EventMask::ALL);
    }
    if mask.unknown_bits() != 0 {
        return Err(RegistrationFailure::UnknownEvents {
            unknown: mask.unknown_bits(),
            known: EventMask::ALL.as_i32(),
            known_names: EventMask::ALL.to_string(),
        });
    }
    Ok(mask)
}

pub(crate) fn millis(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

async fn kill_child(child: &mut Option<tokio::process::Child>) {
    if let Some(c) = child.as_mut() {
        let _ = c.start_kill();
        let _ = c.wait().await;
    }
}

/// Reaps a launched plugin's process after its connection closed: it
/// usually exits by itself; if not within a second, it is killed.
pub(crate) async fn reap(plugin: &Plugin) {
    let child = crate::lock(&plugin.child).take();
    if let Some(mut c) = child {
        if tokio::time::timeout(std::time::Duration::from_secs(1), c.wait())
            .await
            .is_err()
        {
            let _ = c.start_kill();
            let _ = c.wait().await;
        }
    }
}
