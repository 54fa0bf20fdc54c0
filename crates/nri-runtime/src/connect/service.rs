//! The `Runtime` service the runtime serves to one plugin on mux
//! connection 2: `RegisterPlugin` and `UpdateContainers`. Every refusal
//! is an [`Error`], answered with its status ([`Error::to_status`]).

use std::sync::{Arc, Mutex, OnceLock, Weak};

use bytes::Bytes;
use nri_api::api::{
    Empty, RegisterPluginRequest, UpdateContainersRequest, UpdateContainersResponse,
};
use nri_api::{RUNTIME_SERVICE, method};
use nri_ttrpc::{Methods, RequestLenLimit, Server, ServerLimits};
use prost::Message as _;
use tokio::sync::{mpsc, oneshot};

use super::Registration;
use crate::adaptation::Shared;
use crate::error::{Error, RefusalKind, RegistrationFailure};
use crate::grants::{Admission, Changes};
use crate::peer::{Peer, Refused};
use crate::plugin::{Plugin, PluginOrigin};
use nri_merge::PluginId;

/// Who is on the other end of a connection, before it registers.
#[derive(Clone)]
pub(super) struct RuntimeServicePeer {
    pub(super) origin: PluginOrigin,
    pub(super) description: String,
    /// How the plugin was admitted, once it is.
    pub(super) admission: Arc<OnceLock<Arc<Admission>>>,
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
pub(super) fn report_dropped_frames(
    mux: &nri_mux::Mux,
    guard: Arc<crate::peer::PeerGuard>,
    identity: Arc<Mutex<Option<PluginId>>>,
    who: RuntimeServicePeer,
) {
    mux.on_dropped_frame(move |conn, len| {
        let refused = Refused {
            kind: RefusalKind::UnknownConnection,
            reason: format!(
                "{len}-byte frame for multiplexer connection {conn}, which is not open"
            ),
        };
        guard.report(&who.peer(&identity), "frame", &refused);
    });
}

impl Shared {
    /// The `Runtime` service served to one plugin on mux connection 2, and
    /// the handle of its request size limit (raised once the plugin is
    /// configured). Until the plugin has registered, only a small
    /// `RegisterPlugin` is accepted; every other request is refused before
    /// it is decoded (see [`crate::peer`]).
    pub(super) fn runtime_service(
        self: &Arc<Self>,
        reg_tx: mpsc::Sender<Registration>,
        identity: Arc<Mutex<Option<PluginId>>>,
        admitted: Arc<OnceLock<Weak<Plugin>>>,
        who: RuntimeServicePeer,
    ) -> Result<(Server, RequestLenLimit), Error> {
        let weak: Weak<Shared> = Arc::downgrade(self);
        let limits = &self.config.peer_limits;
        let request_len = RequestLenLimit::new(limits.unregistered_request_len());
        let admission_of = who.admission.clone();
        let peer_of = {
            let identity = identity.clone();
            Arc::new(move || -> Peer { who.peer(&identity) })
        };
        let register = {
            let guard = self.peers.clone();
            let peer_of = peer_of.clone();
            let max = limits.max_register_len;
            move |_ctx, payload: Bytes| {
                let reg_tx = reg_tx.clone();
                let payload = register_len_checked(payload, max);
                if let Err(r) = &payload {
                    guard.report(&peer_of(), method::REGISTER_PLUGIN, r);
                }
                async move {
                    register_plugin(payload, reg_tx)
                        .await
                        .map_err(|e| e.to_status())
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
                        kind: RefusalKind::Unregistered,
                        reason: "UpdateContainers from a plugin that has not registered".into(),
                    }),
                };
                if let Err(r) = &checked {
                    guard.report(&peer_of(), method::UPDATE_CONTAINERS, r);
                }
                let (weak, peer) = (weak.clone(), peer_of());
                let admission = admission_of.get().cloned();
                let superseded = admitted
                    .get()
                    .and_then(Weak::upgrade)
                    .filter(|p| p.is_superseded())
                    .map(|p| Error::Superseded {
                        plugin: p.name.clone(),
                        instance: p.instance,
                    });
                async move {
                    if let Some(e) = superseded {
                        tracing::warn!(error = %e, "refusing UpdateContainers of a superseded NRI plugin instance");
                        return Err(e.to_status());
                    }
                    let answer = update_containers(weak, id, peer, admission, checked).await;
                    answer.map_err(|e| e.to_status())
                }
            }
        };
        let methods = Methods::new()
            .add(method::REGISTER_PLUGIN, register)
            .add(method::UPDATE_CONTAINERS, update);
        let guard = self.peers.clone();
        let server = runtime_server(methods, &request_len, limits.max_in_flight, move |r| {
            guard.report(&peer_of(), "request", r);
        })?;
        Ok((server, request_len))
    }

    /// Applies a plugin's unsolicited `UpdateContainers` (`unsolicited`;
    /// else the changes it answered to an event deferred by its
    /// synchronization): refused if it goes beyond the plugin's grant;
    /// its updates after [`vet_updates`](Self::vet_updates), its
    /// evictions through the runtime's callback.
    pub(crate) async fn unsolicited_update(
        &self,
        id: &PluginId,
        peer: &Peer,
        admission: &Admission,
        unsolicited: bool,
        req: UpdateContainersRequest,
    ) -> Result<UpdateContainersResponse, Error> {
        let plugin = id.to_string();
        let operation = "UpdateContainers";
        // The callbacks run on the plugin's behalf: within its timeout.
        let timeout = self.config.request_timeout_for(id);
        let mut changes = Changes::answer(operation, None, None);
        changes.updates = &req.update;
        changes.evictions = &req.evict;
        changes.unsolicited = unsolicited;
        if let Err(v) = self.granted(&plugin, admission, &changes, timeout).await {
            let refused = Refused {
                kind: RefusalKind::NotGranted,
                reason: v.reason.clone(),
            };
            self.peers.report(peer, operation, &refused);
            return Err(Error::PeerRefused {
                kind: RefusalKind::NotGranted,
                reason: v.reason,
            });
        }
        let updates = self
            .vet_updates(id, peer, &admission.participant, operation, req.update)
            .inspect_err(|e| {
                tracing::warn!(plugin = %plugin, error = %e, "refusing unsolicited container updates");
            })?;
        if !req.evict.is_empty() {
            self.metrics
                .plugin_adjustments(&plugin, operation, 0, 0, req.evict.len());
            for e in &req.evict {
                tracing::info!(target: crate::metrics::AUDIT_TARGET, operation, plugin = %plugin, container = %e.container_id, reason = %e.reason, "plugin requested eviction");
            }
            if let Err(e) = self.evict_within(timeout, req.evict).await {
                tracing::warn!(plugin = %plugin, error = %e, "evicting containers failed");
                return Err(e);
            }
        }
        if updates.is_empty() {
            return Ok(UpdateContainersResponse { failed: Vec::new() });
        }
        match self.update_within(timeout, updates).await {
            Ok(failed) => Ok(UpdateContainersResponse { failed }),
            Err(e) => {
                tracing::warn!(plugin = %plugin, error = %e, "unsolicited container update failed");
                Err(e)
            }
        }
    }
}

/// The ttRPC server of the `Runtime` service: its methods, its limits,
/// and `report` told of every request the server refuses by itself.
fn runtime_server(
    methods: Methods,
    request_len: &RequestLenLimit,
    max_in_flight: usize,
    report: impl Fn(&Refused) + Send + Sync + 'static,
) -> Result<Server, Error> {
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
            .with_max_in_flight(max_in_flight),
    );
    server.set_refusal_observer(move |r: &nri_ttrpc::Refusal| {
        report(&Refused {
            kind: RefusalKind::of_ttrpc(r),
            reason: r.to_string(),
        });
    });
    Ok(server)
}

/// A `RegisterPlugin` payload, unless it is over `max` bytes.
fn register_len_checked(payload: Bytes, max: usize) -> Result<Bytes, Refused> {
    if payload.len() <= max {
        return Ok(payload);
    }
    Err(Refused {
        kind: RefusalKind::TooLarge,
        reason: format!(
            "RegisterPlugin of {} bytes, over the limit of {max}",
            payload.len()
        ),
    })
}

/// Answers `RegisterPlugin` (its payload, or why it was refused before
/// decoding): hands the request to the connection's set-up and waits for
/// its verdict.
async fn register_plugin(
    payload: Result<Bytes, Refused>,
    reg_tx: mpsc::Sender<Registration>,
) -> Result<Bytes, Error> {
    let req = RegisterPluginRequest::decode(payload?).map_err(|e| Error::PeerRefused {
        kind: RefusalKind::Malformed,
        reason: format!("cannot decode RegisterPlugin: {e}"),
    })?;
    let (tx, rx) = oneshot::channel();
    reg_tx
        .try_send((req, tx))
        .map_err(|_| Error::AlreadyRegistered)?;
    match rx.await {
        Ok(Ok(())) => Ok(Bytes::from(Empty {}.encode_to_vec())),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Error::RegistrationAborted),
    }
}

/// Answers `UpdateContainers` (the request, or why it was refused before
/// decoding) from the plugin `id`.
async fn update_containers(
    weak: Weak<Shared>,
    id: Option<PluginId>,
    peer: Peer,
    admission: Option<Arc<Admission>>,
    checked: Result<UpdateContainersRequest, Refused>,
) -> Result<Bytes, Error> {
    let req = checked?;
    let (Some(shared), Some(id), Some(admission)) = (weak.upgrade(), id, admission) else {
        return Err(Error::Stopping);
    };
    let resp = shared
        .unsolicited_update(&id, &peer, &admission, true, req)
        .await?;
    Ok(Bytes::from(resp.encode_to_vec()))
}
