//! The `Plugin` ttRPC service: decodes each request, calls the [`Plugin`]
//! method and encodes the answer. Both event dialects end in the same
//! methods.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use nri_api::api::{
    ConfigureRequest, ConfigureResponse, Container, ContainerUpdate, CreateContainerRequest, Event,
    PodSandbox, PostCreateContainerRequest, PostStartContainerRequest, PostUpdateContainerRequest,
    PostUpdatePodSandboxRequest, RemoveContainerRequest, RemovePodSandboxRequest,
    RunPodSandboxRequest, StartContainerRequest, StateChangeEvent, StopContainerRequest,
    StopPodSandboxRequest, SynchronizeRequest, SynchronizeResponse, UpdateContainerRequest,
    UpdatePodSandboxRequest, ValidateContainerAdjustmentRequest,
    ValidateContainerAdjustmentResponse,
};
use nri_api::{method, runtime_nri_version};
use nri_ttrpc::{BoxFuture, Code, HandlerSlot, RequestContext, Service, Status};
use prost::Message;
use tokio::sync::Notify;

use crate::builder::Config;
use crate::handle::{Shared, lock};
use crate::limits::{SyncBudget, check_request};
use crate::{
    ConfigureInfo, Error, HandlerError, HandlerResult, Phase, Plugin, PluginHandle, RuntimeInfo,
    SyncChunk, SyncKind, SyncMode,
};

/// Per-connection state shared by the service and the connection driver.
#[derive(Debug)]
pub(crate) struct ConnState {
    pub(crate) phase: Mutex<Phase>,
    pub(crate) configured: Notify,
    pub(crate) synced: Notify,
    pub(crate) shutdown: Notify,
    pub(crate) fatal_notify: Notify,
    pub(crate) fatal: Mutex<Option<Error>>,
    sync_acc: Mutex<Option<(Vec<PodSandbox>, Vec<Container>)>>,
    /// [`SyncMode::Streaming`]: updates returned for the chunks so far.
    sync_updates: Mutex<Vec<ContainerUpdate>>,
    /// What the synchronization under way has received.
    sync_budget: Mutex<SyncBudget>,
    sync_kind: SyncKind,
}

impl ConnState {
    pub(crate) fn new(sync_kind: SyncKind) -> Self {
        ConnState {
            phase: Mutex::new(Phase::Connecting),
            configured: Notify::new(),
            synced: Notify::new(),
            shutdown: Notify::new(),
            fatal_notify: Notify::new(),
            fatal: Mutex::new(None),
            sync_acc: Mutex::new(None),
            sync_updates: Mutex::new(Vec::new()),
            sync_budget: Mutex::new(SyncBudget::default()),
            sync_kind,
        }
    }

    pub(crate) fn phase(&self) -> Phase {
        *lock(&self.phase)
    }

    pub(crate) fn set_phase(&self, p: Phase) {
        *lock(&self.phase) = p;
    }

    pub(crate) fn take_fatal(&self) -> Option<Error> {
        lock(&self.fatal).take()
    }

    /// Records an error that ends this connection and turns it into the
    /// status sent to the runtime.
    fn fail(&self, err: Error) -> Status {
        tracing::error!(error = %err, "nri-plugin: {err}");
        let status = Status::new(Code::Unknown, err.to_string());
        *lock(&self.fatal) = Some(err);
        self.fatal_notify.notify_one();
        status
    }
}

/// The `nri.pkg.api.v1alpha1.Plugin` service of one connection.
pub(crate) struct PluginService<P> {
    pub(crate) plugin: Arc<P>,
    pub(crate) conn: Arc<ConnState>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) config: Arc<Config>,
}

impl<P> Clone for PluginService<P> {
    fn clone(&self) -> Self {
        PluginService {
            plugin: Arc::clone(&self.plugin),
            conn: Arc::clone(&self.conn),
            shared: Arc::clone(&self.shared),
            config: Arc::clone(&self.config),
        }
    }
}

/// Decodes a request, once it is known not to cost more than
/// [`DECODED_RATIO`](crate::DECODED_RATIO) times its size (see
/// `limits.rs`).
fn decode<M: Message + prost::Name + Default>(payload: Bytes) -> Result<M, Status> {
    if let Err(r) = check_request::<M>(&payload, &[]) {
        tracing::warn!(request = M::NAME, reason = %r.reason, "nri-plugin: refusing a request before decoding it");
        return Err(r.status());
    }
    decode_unchecked(payload)
}

/// Decodes a request already checked.
fn decode_unchecked<M: Message + Default>(payload: Bytes) -> Result<M, Status> {
    M::decode(payload).map_err(|e| {
        Status::new(
            Code::InvalidArgument,
            format!("cannot decode {}: {e}", std::any::type_name::<M>()),
        )
    })
}

fn encode<M: Message>(m: &M) -> Bytes {
    Bytes::from(m.encode_to_vec())
}

impl<P: Plugin> PluginService<P> {
    /// Answers a handler result; `T` is encoded with `enc`. A teardown
    /// event's error is answered with an empty success (`T::default()`)
    /// unless the plugin sends teardown errors.
    fn answer<T: Default>(
        &self,
        event: Event,
        method: &'static str,
        res: HandlerResult<T>,
        enc: impl FnOnce(T) -> Bytes,
    ) -> nri_ttrpc::HandlerResult {
        match res {
            Ok(v) => Ok(enc(v)),
            Err(e) if self.acknowledges(event) => {
                self.teardown_failed(event, &e);
                Ok(enc(T::default()))
            }
            Err(e) => Err(self.handler_error(event, method, e)),
        }
    }

    /// Whether an error of `event`'s method is answered with success.
    fn acknowledges(&self, event: Event) -> bool {
        is_teardown(event) && !self.config.send_teardown_errors
    }

    /// A teardown method failed and the runtime gets a success: logged,
    /// counted, and shown to the plugin.
    fn teardown_failed(&self, event: Event, e: &HandlerError) {
        self.shared.teardown_errors.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            %event,
            error = %e,
            "nri-plugin: {event} failed; answering the runtime with success so that later plugins \
             still get the event"
        );
        self.plugin.teardown_failed(event, e);
    }

    fn handler_error(&self, event: Event, method: &str, e: HandlerError) -> Status {
        tracing::debug!(method, %event, error = %e, "nri-plugin: handler failed");
        e.into_status(method)
    }

    #[allow(clippy::too_many_lines)]
    async fn configure(self, payload: Bytes) -> nri_ttrpc::HandlerResult {
        let req: ConfigureRequest = decode(payload)?;
        self.shared.latency.runtime_configured(&req.nri_version);
        self.conn.set_phase(Phase::Configuring);
        let nri_version =
            runtime_nri_version(&req.nri_version, &req.runtime_name, &req.runtime_version);
        let ms = |v: i64| Duration::from_millis(u64::try_from(v).unwrap_or(0));
        let runtime = RuntimeInfo {
            name: req.runtime_name,
            version: req.runtime_version,
            nri_version,
            registration_timeout: ms(req.registration_timeout),
            request_timeout: ms(req.request_timeout),
        };
        let valid = runtime.valid_events();
        let default_events = self.config.events;
        let info = ConfigureInfo {
            config: req.config,
            runtime: runtime.clone(),
            subscription: default_events,
            unsupported: default_events.difference(valid),
            handle: PluginHandle {
                shared: Arc::clone(&self.shared),
            },
        };
        tracing::info!(
            plugin = %self.config.plugin_name(),
            runtime = %runtime.name,
            runtime_version = %runtime.version,
            nri_version = %nri_version.version,
            nri_version_origin = ?nri_version.origin,
            "nri-plugin: configuring"
        );
        *lock(&self.shared.runtime) = Some(runtime);

        let requested = match self.plugin.configure(&info).await {
            Ok(Some(m)) => m,
            Ok(None) => default_events,
            Err(e) => {
                return Err(self.conn.fail(Error::ConfigureFailed {
                    reason: e.to_string(),
                }));
            }
        };
        let handled = self.config.handled;
        if requested.is_empty() || !handled.contains_all(requested) {
            return Err(self.conn.fail(Error::ConfigureFailed {
                reason: format!(
                    "configure chose events {requested}, not a non-empty subset of the plugin's \
                     events {handled} (the default subscription and the implemented methods)"
                ),
            }));
        }
        let dropped = requested.difference(valid);
        let sent = requested.intersection(valid);
        self.shared
            .dropped
            .store(dropped.as_i32(), Ordering::Relaxed);
        if !dropped.is_empty() {
            if self.config.strict_events || sent.is_empty() {
                return Err(self.conn.fail(Error::UnsupportedEvents {
                    requested,
                    dropped,
                    runtime_version: nri_version.version,
                }));
            }
            tracing::warn!(
                requested = %requested,
                dropped = %dropped,
                dropped_mask = format_args!("{:#x}", dropped.as_i32()),
                runtime_nri_version = %nri_version.version,
                nri_version_origin = ?nri_version.origin,
                "nri-plugin: the runtime cannot deliver some events; they are left out of the subscription"
            );
        }
        self.shared
            .subscribed
            .store(sent.as_i32(), Ordering::Relaxed);
        let acknowledged = sent.difference(P::IMPLEMENTED.events());
        if !acknowledged.is_empty() {
            tracing::info!(
                events = %acknowledged,
                "nri-plugin: subscribed to events without a method; they are answered with an empty success"
            );
        }
        self.conn.set_phase(Phase::Synchronizing);
        self.conn.configured.notify_one();
        if let Some(policy) = self.config.failure_policy {
            if !nri_version.version.honours_plugin_failure_policy() {
                tracing::info!(
                    runtime_nri_version = %nri_version.version,
                    "nri-plugin: the runtime's NRI version predates plugin-declared failure \
                     policies (v0.12.4); it ignores the plugin's policy"
                );
            } else {
                tracing::debug!(
                    fail_request = policy.fail_request,
                    keep_connected = policy.keep_connected,
                    "nri-plugin: declaring a failure policy"
                );
            }
        }
        Ok(encode(&ConfigureResponse {
            events: sent.as_i32(),
            failure_policy: self.config.failure_policy,
        }))
    }

    /// Counts one `Synchronize` message of `bytes` bytes with its pods and
    /// containers against the limits; going over them ends the connection.
    fn admit_sync(&self, bytes: usize, pods: usize, containers: usize) -> Result<(), Status> {
        lock(&self.conn.sync_budget)
            .admit(&self.config.sync_limits, bytes, pods, containers)
            .map_err(|e| self.conn.fail(e))
    }

    async fn synchronize(self, payload: Bytes) -> nri_ttrpc::HandlerResult {
        if self.config.sync_mode == SyncMode::Streaming {
            return self.synchronize_chunk(payload).await;
        }
        // Counted (a quick pass over the top level), then sized (a pass
        // over everything), before anything is decoded.
        let framed = SyncChunk::new(payload.clone()).ok();
        if let Some(c) = &framed {
            self.admit_sync(c.wire_len(), c.pod_count(), c.container_count())?;
        }
        let scan = check_request::<SynchronizeRequest>(&payload, &["pods", "containers"]).map_err(
            |r| {
                tracing::warn!(reason = %r.reason, "nri-plugin: refusing a Synchronize message");
                r.status()
            },
        )?;
        if framed.is_none() {
            self.admit_sync(
                scan.wire_len(),
                scan.count("pods"),
                scan.count("containers"),
            )?;
        }
        // Decoding consumes the payload: the message's bytes are released
        // as soon as it is decoded, before the plugin sees the structs.
        let SynchronizeRequest {
            pods,
            containers,
            more,
        } = decode_unchecked(payload)?;
        let kind = self.conn.sync_kind;
        if more {
            tracing::debug!(
                pods = pods.len(),
                containers = containers.len(),
                "nri-plugin: collecting a sync chunk"
            );
            let mut acc = lock(&self.conn.sync_acc);
            match &mut *acc {
                // The first chunk is kept as decoded (no copy).
                None => *acc = Some((pods, containers)),
                Some((all_pods, all_ctrs)) => {
                    all_pods.extend(pods);
                    all_ctrs.extend(containers);
                }
            }
            return Ok(encode(&SynchronizeResponse {
                update: Vec::new(),
                more: true,
            }));
        }
        let (pods, containers) = match lock(&self.conn.sync_acc).take() {
            None => (pods, containers),
            Some((mut all_pods, mut all_ctrs)) => {
                all_pods.extend(pods);
                all_ctrs.extend(containers);
                (all_pods, all_ctrs)
            }
        };
        tracing::debug!(
            pods = pods.len(),
            containers = containers.len(),
            ?kind,
            "nri-plugin: synchronizing"
        );
        match self.plugin.synchronize(pods, containers, kind).await {
            Ok(update) => Ok(self.synced(update)),
            Err(e) => Err(self.conn.fail(Error::SynchronizeFailed {
                reason: e.to_string(),
            })),
        }
    }

    /// [`SyncMode::Streaming`]: hands the message to the plugin undecoded
    /// (framing checked first) and keeps its updates for the last answer.
    async fn synchronize_chunk(self, payload: Bytes) -> nri_ttrpc::HandlerResult {
        let chunk = SyncChunk::new(payload).map_err(|e| {
            // The message with its causes (as a handler error shows them).
            let message = HandlerError::from(e).to_string();
            tracing::warn!(error = %message, "nri-plugin: refusing a Synchronize message");
            Status::new(Code::InvalidArgument, message)
        })?;
        // Counted before any item is decoded; each item is sized when the
        // plugin reaches it (`SyncItems`).
        self.admit_sync(chunk.wire_len(), chunk.pod_count(), chunk.container_count())?;
        let kind = self.conn.sync_kind;
        let more = chunk.more();
        tracing::debug!(
            pods = chunk.pod_count(),
            containers = chunk.container_count(),
            bytes = chunk.wire_len(),
            more,
            ?kind,
            "nri-plugin: synchronizing a chunk"
        );
        let update = match self.plugin.synchronize_chunk(chunk, kind).await {
            Ok(u) => u,
            Err(e) => {
                return Err(self.conn.fail(Error::SynchronizeFailed {
                    reason: e.to_string(),
                }));
            }
        };
        if more {
            // Updates are only allowed in the answer to the last message.
            lock(&self.conn.sync_updates).extend(update);
            return Ok(encode(&SynchronizeResponse {
                update: Vec::new(),
                more: true,
            }));
        }
        let mut all = std::mem::take(&mut *lock(&self.conn.sync_updates));
        all.extend(update);
        Ok(self.synced(all))
    }

    /// The synchronization completed: the connection runs; the answer to
    /// the last message.
    fn synced(&self, update: Vec<ContainerUpdate>) -> Bytes {
        lock(&self.conn.sync_budget).reset();
        self.conn.set_phase(Phase::Running);
        self.conn.synced.notify_one();
        encode(&SynchronizeResponse {
            update,
            more: false,
        })
    }

    async fn state_change(self, payload: Bytes) -> nri_ttrpc::HandlerResult {
        let ev: StateChangeEvent = decode(payload)?;
        let pod = ev.pod.unwrap_or_default();
        let ctr = ev.container.unwrap_or_default();
        let event = Event::try_from(ev.event).unwrap_or(Event::Unknown);
        if event.is_state_change_event() && !P::IMPLEMENTED.events().contains(event) {
            // Like the Go stub: an event without a method is acknowledged.
            return Ok(Bytes::new());
        }
        let p = &*self.plugin;
        let res = match event {
            Event::RunPodSandbox => p.run_pod_sandbox(pod).await,
            Event::StopPodSandbox => p.stop_pod_sandbox(pod).await,
            Event::RemovePodSandbox => p.remove_pod_sandbox(pod).await,
            Event::PostUpdatePodSandbox => p.post_update_pod_sandbox(pod).await,
            Event::PostCreateContainer => p.post_create_container(pod, ctr).await,
            Event::StartContainer => p.start_container(pod, ctr).await,
            Event::PostStartContainer => p.post_start_container(pod, ctr).await,
            Event::PostUpdateContainer => p.post_update_container(pod, ctr).await,
            Event::RemoveContainer => p.remove_container(pod, ctr).await,
            _ => {
                return Err(Status::new(
                    Code::InvalidArgument,
                    format!(
                        "StateChange: event {} is not a state change event",
                        ev.event
                    ),
                ));
            }
        };
        self.answer(event, method::STATE_CHANGE, res, empty)
    }
}

/// Response of the events that return nothing (an empty message).
fn empty(_: ()) -> Bytes {
    Bytes::new()
}

impl<P: Plugin> Service for PluginService<P> {
    fn call(
        &self,
        ctx: RequestContext,
        m: &str,
        payload: Bytes,
    ) -> BoxFuture<'static, nri_ttrpc::HandlerResult> {
        let mut slot = HandlerSlot::default();
        self.call_in(ctx, m, payload, &mut slot);
        Box::pin(slot)
    }

    // Each event's future holds the decoded request (a CreateContainer's
    // pod and container are 2.8 KB by value): the slot reuses one
    // allocation for them instead of a new large one per event.
    #[allow(clippy::too_many_lines)]
    fn call_in(&self, _ctx: RequestContext, m: &str, payload: Bytes, slot: &mut HandlerSlot) {
        if event_of_method(m).is_some_and(|e| !P::IMPLEMENTED.events().contains(e)) {
            // An event without a method: an empty success, as the Go stub
            // answers (every event's empty response encodes to no bytes;
            // for ValidateContainerAdjustment that is "accepted").
            slot.set(std::future::ready(Ok(Bytes::new())));
            return;
        }
        let s = self.clone();
        match m {
            method::CONFIGURE => slot.set(s.configure(payload)),
            method::SYNCHRONIZE => slot.set(s.synchronize(payload)),
            method::STATE_CHANGE => slot.set(s.state_change(payload)),
            method::SHUTDOWN => slot.set(async move {
                tracing::info!("nri-plugin: the runtime asked to shut down");
                s.plugin.shutdown().await;
                s.conn.shutdown.notify_one();
                Ok(Bytes::new())
            }),
            method::RUN_POD_SANDBOX => slot.set(async move {
                let r: RunPodSandboxRequest = decode(payload)?;
                let res = s.plugin.run_pod_sandbox(r.pod.unwrap_or_default()).await;
                s.answer(Event::RunPodSandbox, method::RUN_POD_SANDBOX, res, empty)
            }),
            method::UPDATE_POD_SANDBOX => slot.set(async move {
                let r: UpdatePodSandboxRequest = decode(payload)?;
                let res = s
                    .plugin
                    .update_pod_sandbox(
                        r.pod.unwrap_or_default(),
                        r.overhead_linux_resources,
                        r.linux_resources,
                    )
                    .await;
                s.answer(
                    Event::UpdatePodSandbox,
                    method::UPDATE_POD_SANDBOX,
                    res,
                    empty,
                )
            }),
            method::POST_UPDATE_POD_SANDBOX => slot.set(async move {
                let r: PostUpdatePodSandboxRequest = decode(payload)?;
                let res = s
                    .plugin
                    .post_update_pod_sandbox(r.pod.unwrap_or_default())
                    .await;
                s.answer(
                    Event::PostUpdatePodSandbox,
                    method::POST_UPDATE_POD_SANDBOX,
                    res,
                    empty,
                )
            }),
            method::STOP_POD_SANDBOX => slot.set(async move {
                let r: StopPodSandboxRequest = decode(payload)?;
                let res = s.plugin.stop_pod_sandbox(r.pod.unwrap_or_default()).await;
                s.answer(Event::StopPodSandbox, method::STOP_POD_SANDBOX, res, empty)
            }),
            method::REMOVE_POD_SANDBOX => slot.set(async move {
                let r: RemovePodSandboxRequest = decode(payload)?;
                let res = s.plugin.remove_pod_sandbox(r.pod.unwrap_or_default()).await;
                s.answer(
                    Event::RemovePodSandbox,
                    method::REMOVE_POD_SANDBOX,
                    res,
                    empty,
                )
            }),
            method::CREATE_CONTAINER => slot.set(async move {
                let r: CreateContainerRequest = decode(payload)?;
                let res = s
                    .plugin
                    .create_container(r.pod.unwrap_or_default(), r.container.unwrap_or_default())
                    .await;
                s.answer(Event::CreateContainer, method::CREATE_CONTAINER, res, |v| {
                    encode(&v)
                })
            }),
            method::POST_CREATE_CONTAINER => slot.set(async move {
                let r: PostCreateContainerRequest = decode(payload)?;
                let res = s
                    .plugin
                    .post_create_container(
                        r.pod.unwrap_or_default(),
                        r.container.unwrap_or_default(),
                    )
                    .await;
                s.answer(
                    Event::PostCreateContainer,
                    method::POST_CREATE_CONTAINER,
                    res,
                    empty,
                )
            }),
            method::START_CONTAINER => slot.set(async move {
                let r: StartContainerRequest = decode(payload)?;
                let res = s
                    .plugin
                    .start_container(r.pod.unwrap_or_default(), r.container.unwrap_or_default())
                    .await;
                s.answer(Event::StartContainer, method::START_CONTAINER, res, empty)
            }),
            method::POST_START_CONTAINER => slot.set(async move {
                let r: PostStartContainerRequest = decode(payload)?;
                let res = s
                    .plugin
                    .post_start_container(
                        r.pod.unwrap_or_default(),
                        r.container.unwrap_or_default(),
                    )
                    .await;
                s.answer(
                    Event::PostStartContainer,
                    method::POST_START_CONTAINER,
                    res,
                    empty,
                )
            }),
            method::UPDATE_CONTAINER => slot.set(async move {
                let r: UpdateContainerRequest = decode(payload)?;
                let res = s
                    .plugin
                    .update_container(
                        r.pod.unwrap_or_default(),
                        r.container.unwrap_or_default(),
                        r.linux_resources,
                    )
                    .await;
                s.answer(Event::UpdateContainer, method::UPDATE_CONTAINER, res, |v| {
                    encode(&v)
                })
            }),
            method::POST_UPDATE_CONTAINER => slot.set(async move {
                let r: PostUpdateContainerRequest = decode(payload)?;
                let res = s
                    .plugin
                    .post_update_container(
                        r.pod.unwrap_or_default(),
                        r.container.unwrap_or_default(),
                    )
                    .await;
                s.answer(
                    Event::PostUpdateContainer,
                    method::POST_UPDATE_CONTAINER,
                    res,
                    empty,
                )
            }),
            method::STOP_CONTAINER => slot.set(async move {
                let r: StopContainerRequest = decode(payload)?;
                let res = s
                    .plugin
                    .stop_container(r.pod.unwrap_or_default(), r.container.unwrap_or_default())
                    .await;
                s.answer(Event::StopContainer, method::STOP_CONTAINER, res, |v| {
                    encode(&v)
                })
            }),
            method::REMOVE_CONTAINER => slot.set(async move {
                let r: RemoveContainerRequest = decode(payload)?;
                let res = s
                    .plugin
                    .remove_container(r.pod.unwrap_or_default(), r.container.unwrap_or_default())
                    .await;
                s.answer(Event::RemoveContainer, method::REMOVE_CONTAINER, res, empty)
            }),
            method::VALIDATE_CONTAINER_ADJUSTMENT => slot.set(async move {
                let r: ValidateContainerAdjustmentRequest = decode(payload)?;
                match s.plugin.validate_container_adjustment(r).await {
                    Ok(()) => Ok(encode(&ValidateContainerAdjustmentResponse::default())),
                    Err(e) if e.is_unimplemented() => Err(s.handler_error(
                        Event::ValidateContainerAdjustment,
                        method::VALIDATE_CONTAINER_ADJUSTMENT,
                        e,
                    )),
                    Err(e) => Ok(encode(&ValidateContainerAdjustmentResponse {
                        reject: true,
                        reason: e.to_string(),
                    })),
                }
            }),
            other => {
                let st = Status::unknown_method(other);
                slot.set(async move { Err(st) });
            }
        }
    }
}

/// The teardown events: StopPodSandbox, RemovePodSandbox, StopContainer,
/// RemoveContainer and the Post* notifications. A runtime cannot undo
/// them, and containerd stops delivering some of them at the first error.
fn is_teardown(event: Event) -> bool {
    matches!(
        event,
        Event::StopPodSandbox
            | Event::RemovePodSandbox
            | Event::StopContainer
            | Event::RemoveContainer
            | Event::PostCreateContainer
            | Event::PostStartContainer
            | Event::PostUpdateContainer
            | Event::PostUpdatePodSandbox
    )
}

/// The event of a dedicated event RPC (`None` for the other methods).
fn event_of_method(m: &str) -> Option<Event> {
    Some(match m {
        method::RUN_POD_SANDBOX => Event::RunPodSandbox,
        method::UPDATE_POD_SANDBOX => Event::UpdatePodSandbox,
        method::POST_UPDATE_POD_SANDBOX => Event::PostUpdatePodSandbox,
        method::STOP_POD_SANDBOX => Event::StopPodSandbox,
        method::REMOVE_POD_SANDBOX => Event::RemovePodSandbox,
        method::CREATE_CONTAINER => Event::CreateContainer,
        method::POST_CREATE_CONTAINER => Event::PostCreateContainer,
        method::START_CONTAINER => Event::StartContainer,
        method::POST_START_CONTAINER => Event::PostStartContainer,
        method::UPDATE_CONTAINER => Event::UpdateContainer,
        method::POST_UPDATE_CONTAINER => Event::PostUpdateContainer,
        method::STOP_CONTAINER => Event::StopContainer,
        method::REMOVE_CONTAINER => Event::RemoveContainer,
        method::VALIDATE_CONTAINER_ADJUSTMENT => Event::ValidateContainerAdjustment,
        _ => return None,
    })
}

impl Config {
    pub(crate) fn plugin_name(&self) -> String {
        format!("{}-{}", self.index, self.name)
    }
}
