//! Plugin connections: multiplexer and ttRPC setup, registration,
//! configuration, chunked Synchronize, activation.
//!
//! A connection is set up in phases, one function each, each handing the
//! next what it needs: [`open_connection`](Shared::open_connection) (the
//! multiplexer and the `Runtime` service, `service.rs`),
//! [`register`](Shared::register), [`configure`](Shared::configure),
//! [`admit`](Shared::admit) (the plugin exists from here on) and
//! synchronize (`sync.rs`). A phase before admission that fails says what
//! to undo in an [`Abandon`], and [`Setup::abandon`] undoes it.

mod service;
mod sync;

use std::sync::{Arc, Mutex, OnceLock, Weak};

use nri_api::api::{ConfigureRequest, ConfigureResponse, RegisterPluginRequest};
use nri_api::{EventMask, method};
use nri_mux::{PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use nri_ttrpc::{Client, RequestLenLimit};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::adaptation::Shared;
use crate::error::{Error, RefusalKind, RegistrationFailure};
use crate::grants::Admission;
use crate::latency::PluginInput;
use crate::plugin::{Conn, Plugin, PluginOrigin, PluginParts};
use crate::registry::Reservation;
use nri_merge::PluginId;
use service::RuntimeServicePeer;

/// How long a refused plugin gets to read the refusal before the runtime
/// closes the connection.
const REFUSAL_LINGER: std::time::Duration = std::time::Duration::from_secs(1);

/// A `RegisterPlugin` request, and where the set-up answers it.
type Registration = (RegisterPluginRequest, oneshot::Sender<Result<(), Error>>);

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

/// How the connection was made, and for launched plugins who it is.
pub(crate) struct Pending {
    pub(crate) origin: PluginOrigin,
    /// Who the peer is, as far as known when it connected.
    pub(crate) captured: crate::identity::Captured,
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

/// A connection being set up, until its plugin is admitted.
struct Setup {
    /// Description of the peer for logs before the plugin named itself.
    peer: String,
    origin: PluginOrigin,
    mux: nri_mux::Mux,
    /// Ends the `Runtime` service of the connection.
    closed: CancellationToken,
    /// The plugin once it is admitted (for refusal reports).
    identity: Arc<Mutex<Option<PluginId>>>,
    /// The plugin once it is admitted (the `Runtime` service refuses the
    /// requests of an instance that was superseded).
    admitted: Arc<OnceLock<Weak<Plugin>>>,
    /// The number of the connection (the plugin's instance).
    instance: u64,
    /// The `Runtime` service's request size limit.
    request_len: RequestLenLimit,
    child: Option<tokio::process::Child>,
    /// Who the peer is, as far as known when it connected.
    captured: crate::identity::Captured,
    /// How the plugin was admitted, once it is (for its unsolicited
    /// requests).
    admission: Arc<OnceLock<Arc<Admission>>>,
}

/// A plugin that registered: its identity (reserved in the registry) and
/// the client of its plugin service.
struct Registered {
    id: PluginId,
    client: Client,
    input: Arc<PluginInput>,
    /// Who it is, and the grant it was admitted under.
    admission: Arc<Admission>,
}

/// What `Configure` told about a registered plugin.
struct Configured {
    mask: EventMask,
    declared: Option<nri_api::api::FailurePolicy>,
    timeout: std::time::Duration,
}

/// Why a set-up stopped before admission, and what to undo beyond closing
/// the connection and killing a launched plugin's process.
struct Abandon {
    error: Error,
    /// An answer was sent to the plugin: give it a bounded moment to read
    /// it and hang up before closing (closing the trunk discards unsent
    /// data).
    linger: bool,
    /// The name reserved in the registry, to release.
    reserved: Option<String>,
    /// The plugin service client, to close.
    client: Option<Client>,
}

impl Abandon {
    fn new(error: Error) -> Self {
        Self {
            error,
            linger: false,
            reserved: None,
            client: None,
        }
    }

    fn lingering(self) -> Self {
        Self {
            linger: true,
            ..self
        }
    }

    fn releasing(self, id: &PluginId) -> Self {
        Self {
            reserved: Some(id.to_string()),
            ..self
        }
    }
}

impl Setup {
    /// A registration error naming the connection.
    fn failure(&self, reason: RegistrationFailure) -> Error {
        Error::Registration {
            plugin: self.peer.clone(),
            reason,
        }
    }

    /// Undoes what `how` says, closes the connection, kills a launched
    /// plugin's process, and returns the error.
    async fn abandon(mut self, shared: &Shared, how: Abandon) -> Error {
        if let Some(name) = &how.reserved {
            // Reserved after its admission was recorded.
            shared.registry.release(name);
            shared.gone_if_last(name);
        }
        if how.linger {
            let linger = shared.config.registration_timeout.min(REFUSAL_LINGER);
            let _ = tokio::time::timeout(linger, self.mux.closed()).await;
        }
        if let Some(client) = &how.client {
            client.close();
        }
        self.closed.cancel();
        self.mux.close();
        kill_child(&mut self.child).await;
        how.error
    }
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
                let superseded = plugin.is_superseded();
                self.forget(&plugin);
                self.gone_if_last(plugin.id.as_str());
                plugin.close("connection closed");
                if superseded {
                    tracing::info!(plugin = %plugin.id, instance = plugin.instance, "superseded NRI plugin instance disconnected");
                } else if !stopping {
                    tracing::warn!(plugin = %plugin.id, instance = plugin.instance, "NRI plugin disconnected");
                }
                reap(&plugin).await;
            }
            Err(e) if self.stopping.is_cancelled() => {
                tracing::debug!(peer = %peer, error = %e, "NRI plugin connection ended: the runtime is stopping");
            }
            Err(e) => {
                tracing::warn!(peer = %peer, error = %e, "NRI plugin connection failed");
            }
        }
    }

    /// Registration, configuration, synchronization and activation.
    pub(crate) async fn establish(
        self: Arc<Self>,
        stream: UnixStream,
        mut pending: Pending,
    ) -> Result<Arc<Plugin>, Error> {
        // Kept until the end: a second RegisterPlugin waits for the
        // set-up, then is told the registration was aborted.
        let (setup, mut registrations) = self.open_connection(stream, &mut pending)?;
        let launched = pending.launched_id.take();
        let registered = match self.register(&setup, &mut registrations, launched).await {
            Ok(r) => r,
            Err(how) => return Err(setup.abandon(&self, how).await),
        };
        drop(pending.pending_slot.take());
        let config = std::mem::take(&mut pending.config);
        let configured = match self.configure(&registered, config).await {
            Ok(c) => c,
            Err(reason) => {
                // The RegisterPlugin answer may still be on its way (its
                // handler runs in its own task): linger before closing,
                // unless the runtime is stopping.
                let linger = reason != RegistrationFailure::Stopping;
                let how = Abandon {
                    client: Some(registered.client),
                    linger,
                    ..Abandon::new(Error::Registration {
                        plugin: registered.id.to_string(),
                        reason,
                    })
                    .releasing(&registered.id)
                };
                return Err(setup.abandon(&self, how).await);
            }
        };
        let plugin = self.admit(setup, registered, configured);
        if let Err(reason) = self.synchronize(&plugin).await {
            self.forget(&plugin);
            self.gone_if_last(plugin.id.as_str());
            plugin.close("synchronization failed");
            reap(&plugin).await;
            return Err(Error::Registration {
                plugin: plugin.id.to_string(),
                reason,
            });
        }
        tracing::info!(plugin = %plugin.id, instance = plugin.instance, "NRI plugin synchronized and active");
        Ok(plugin)
    }

    /// Phase 1: the multiplexer on the stream and the `Runtime` service on
    /// it, serving; returns the connection and where its `RegisterPlugin`
    /// requests arrive.
    fn open_connection(
        self: &Arc<Self>,
        stream: UnixStream,
        pending: &mut Pending,
    ) -> Result<(Setup, mpsc::Receiver<Registration>), Error> {
        let peer = pending.peer.clone();
        let mux = nri_mux::Mux::paused_with_strategy(stream, self.config.read_strategy());
        let conn2 = mux
            .open(RUNTIME_SERVICE_CONN)
            .map_err(|e| Error::Registration {
                plugin: peer.clone(),
                reason: RegistrationFailure::Transport {
                    message: e.to_string(),
                },
            })?;
        let closed = CancellationToken::new();
        let identity: Arc<Mutex<Option<PluginId>>> = Arc::new(Mutex::new(None));
        let admission = Arc::new(OnceLock::new());
        let admitted: Arc<OnceLock<Weak<Plugin>>> = Arc::new(OnceLock::new());
        let instance = self.next_instance();
        let who = RuntimeServicePeer {
            origin: pending.origin,
            description: peer.clone(),
            admission: admission.clone(),
        };
        service::report_dropped_frames(&mux, self.peers.clone(), identity.clone(), who.clone());
        let (reg_tx, reg_rx) = mpsc::channel::<Registration>(1);
        let (server, request_len) =
            self.runtime_service(reg_tx, identity.clone(), admitted.clone(), who)?;
        let (requests, answers) = conn2.into_split();
        let (feed, serving) = server.serve_fed(answers, closed.clone());
        requests.into_sink(feed);
        let described = peer.clone();
        self.spawn(async move {
            if let Err(e) = serving.await {
                tracing::debug!(peer = %described, error = %e, "NRI runtime service connection ended");
            }
        });
        mux.start();
        let setup = Setup {
            peer,
            origin: pending.origin,
            mux,
            closed,
            identity,
            admitted,
            instance,
            request_len,
            child: pending.child.take(),
            captured: std::mem::take(&mut pending.captured),
            admission,
        };
        Ok((setup, reg_rx))
    }

    /// Phase 2: waits for the plugin's `RegisterPlugin` (within the
    /// registration timeout), checks and reserves its identity, opens its
    /// plugin service and answers it.
    async fn register(
        &self,
        setup: &Setup,
        registrations: &mut mpsc::Receiver<Registration>,
        launched: Option<PluginId>,
    ) -> Result<Registered, Abandon> {
        let (req, reply) = self.await_registration(setup, registrations).await?;
        let refuse = |reason: RegistrationFailure| {
            let refused = format!(
                "registration as index {:?}, name {:?}: {reason}",
                req.plugin_idx, req.plugin_name
            );
            self.peers.refuse_unregistered(
                &setup.peer,
                setup.origin,
                method::REGISTER_PLUGIN,
                RefusalKind::Registration,
                refused,
            );
            setup.failure(reason)
        };
        let id = match check_identity(&req, launched) {
            Ok(id) => id,
            Err(reason) => {
                let error = refuse(reason);
                let _ = reply.send(Err(error.clone()));
                return Err(Abandon::new(error).lingering());
            }
        };
        // The grants first: a process that takes the name of a connected
        // plugin is refused for who it is, not told the name is in use
        // (and, audited as refused by the grants, is seen for what it is).
        let admission = match self.admit_identity(setup, &id).await {
            Ok(a) => a,
            Err(reason) => {
                let error = setup.failure(reason);
                let _ = reply.send(Err(error.clone()));
                return Err(Abandon::new(error).lingering());
            }
        };
        let external = matches!(setup.origin, PluginOrigin::External { .. });
        if let Err(reason) = self.reserve_registration(&id, external) {
            let error = refuse(reason);
            let _ = reply.send(Err(error.clone()));
            return Err(Abandon::new(error).lingering());
        }
        self.record_admission(&id, &admission);
        // Until the plugin has registered, what it sends on the plugin
        // service connection is dropped by the mux as it arrives, unread.
        let (client, input) = match plugin_service(&setup.mux) {
            Ok(c) => c,
            Err(e) => {
                let _ = reply.send(Err(Error::ConnectionClosed));
                let error = setup.failure(RegistrationFailure::Transport {
                    message: e.to_string(),
                });
                return Err(Abandon::new(error).releasing(&id));
            }
        };
        let _ = reply.send(Ok(()));
        tracing::info!(plugin = %id, instance = setup.instance, peer = %setup.peer, identity = %admission.identity(), nri_version = %req.nri_version, "NRI plugin registered");
        Ok(Registered {
            id,
            client,
            input,
            admission: Arc::new(admission),
        })
    }

    /// Who the registering plugin `id` is (its pod looked up now), and the
    /// grant it is admitted under (recorded once its name is reserved); a
    /// plugin no grant admits is refused (reported like any refused
    /// registration).
    async fn admit_identity(
        &self,
        setup: &Setup,
        id: &PluginId,
    ) -> Result<Admission, RegistrationFailure> {
        let identity = self.locate(&setup.captured, &setup.peer).await;
        self.grants.admit(id, identity).map_err(|reason| {
            let refused = format!("registration as {id}: {reason}");
            self.peers.refuse_unregistered(
                &setup.peer,
                setup.origin,
                method::REGISTER_PLUGIN,
                RefusalKind::NotGranted,
                refused,
            );
            RegistrationFailure::NotGranted { reason }
        })
    }

    /// The first `RegisterPlugin`, unless the registration timeout runs
    /// out or the connection closes first.
    async fn await_registration(
        &self,
        setup: &Setup,
        registrations: &mut mpsc::Receiver<Registration>,
    ) -> Result<Registration, Abandon> {
        let timeout = self.config.registration_timeout;
        let registration = tokio::select! {
            r = registrations.recv() => r,
            () = tokio::time::sleep(timeout) => {
                let reason = RegistrationFailure::Timeout { timeout };
                self.peers.refuse_unregistered(&setup.peer, setup.origin, "connection", RefusalKind::RegistrationTimeout, reason.to_string());
                return Err(Abandon::new(setup.failure(reason)));
            }
            _ = setup.mux.closed() => None,
            () = self.stopping.cancelled() => {
                return Err(Abandon::new(setup.failure(RegistrationFailure::Stopping)));
            }
        };
        registration.ok_or_else(|| {
            Abandon::new(setup.failure(RegistrationFailure::ClosedBeforeRegistration))
        })
    }

    /// Reserves the identity plugin `id` registers with: a connection
    /// from outside (`external`) may take over from an active instance of
    /// its plugin unless its entry says `supersede: false` (see
    /// `registry/handover.rs`).
    fn reserve_registration(
        &self,
        id: &PluginId,
        external: bool,
    ) -> Result<(), RegistrationFailure> {
        let may_succeed = external && self.config.supersede_for(id);
        let reservation = self
            .registry
            .reserve_instance(&id.to_string(), may_succeed)?;
        if reservation == Reservation::Successor {
            tracing::info!(plugin = %id, "a new instance of an active NRI plugin registers; it takes over once synchronized");
        }
        Ok(())
    }

    /// Phase 3: `Configure`, within the plugin's request timeout; the
    /// events it subscribes to and the failure policy it declares.
    async fn configure(
        &self,
        registered: &Registered,
        config: String,
    ) -> Result<Configured, RegistrationFailure> {
        let timeout = self.config.request_timeout_for(&registered.id);
        let creq = ConfigureRequest {
            config,
            runtime_name: self.config.runtime_name.clone(),
            runtime_version: self.config.runtime_version.clone(),
            registration_timeout: millis(self.config.registration_timeout),
            request_timeout: millis(self.config.request_timeout),
            nri_version: nri_api::declared_nri_version(true, &crate::lock(&self.declared)),
        };
        let call = registered.client.call_message::<_, ConfigureResponse>(
            nri_api::PLUGIN_SERVICE,
            method::CONFIGURE,
            &creq,
            nri_ttrpc::CallOptions::new(timeout),
        );
        let resp = tokio::select! {
            r = call => r.map_err(|e| RegistrationFailure::Configure {
                message: e.to_string(),
            })?,
            () = self.stopping.cancelled() => return Err(RegistrationFailure::Stopping),
        };
        Ok(Configured {
            mask: check_mask(resp.events)?,
            declared: resp.failure_policy,
            timeout,
        })
    }

    /// Phase 4: the plugin, registered and configured, exists: its
    /// requests may be as large as the protocol allows, refusals name it.
    fn admit(&self, setup: Setup, registered: Registered, configured: Configured) -> Arc<Plugin> {
        let Registered {
            id,
            client,
            input,
            admission,
        } = registered;
        let Configured {
            mask,
            declared,
            timeout,
        } = configured;
        let plugin = Arc::new(Plugin::new(PluginParts {
            id: id.clone(),
            instance: setup.instance,
            origin: setup.origin,
            mask,
            timeout,
            conn: Conn::Ttrpc {
                client,
                input,
                mux: setup.mux,
            },
            strike_limit: self.strike_limit_for(&id, declared.as_ref()),
            declared,
            admission: admission.clone(),
            wake_hints: !self.config.spin_budget.is_zero(),
            closed: setup.closed,
            child: setup.child,
            peers: self.peers.clone(),
        }));
        // The admission first: a request seen with the identity set finds it.
        let _ = setup.admission.set(admission);
        *crate::lock(&setup.identity) = Some(id.clone());
        let _ = setup.admitted.set(Arc::downgrade(&plugin));
        // A new connection: its consecutive strikes start at 0 (the gauge
        // may still show an earlier connection's, which struck out).
        self.metrics.plugin_strikes(&plugin.name, "Configure", 0);
        // Registered and configured: its requests may be as large as the
        // protocol allows (and are checked before decoding).
        setup.request_len.set(nri_ttrpc::codec::MAX_MESSAGE_LEN);
        tracing::info!(plugin = %id, instance = plugin.instance, events = %mask, "NRI plugin configured");
        if let Some(d) = &declared {
            let overridden = self
                .config
                .plugin_entry(&id)
                .is_some_and(|e| e.failure.is_some());
            tracing::info!(plugin = %id, fail_request = d.fail_request, keep_connected = d.keep_connected, overridden_by_configuration = overridden, "NRI plugin declared a failure policy");
        }
        plugin
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

/// The `NN-name` a registration asks for (a launched plugin's is the one
/// it was launched as), checked for syntax.
fn check_identity(
    req: &RegisterPluginRequest,
    launched: Option<PluginId>,
) -> Result<PluginId, RegistrationFailure> {
    fn invalid(e: impl std::fmt::Display) -> RegistrationFailure {
        RegistrationFailure::InvalidIdentity {
            reason: e.to_string(),
        }
    }
    match launched {
        Some(id) => Ok(id),
        None => {
            nri_api::check_plugin_index(&req.plugin_idx).map_err(invalid)?;
            nri_api::check_plugin_name(&req.plugin_name).map_err(invalid)?;
            PluginId::new(req.plugin_idx.clone(), req.plugin_name.clone()).map_err(invalid)
        }
    }
}
