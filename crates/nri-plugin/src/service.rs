//! The `Plugin` ttRPC service: decodes each request, calls the [`Plugin`]
//! method and encodes the answer. Both event dialects end in the same
//! methods.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use nri_api::api::{
    ConfigureRequest, Container, ContainerUpdate, CreateContainerRequest, Empty, Event, PodSandbox,
    PostCreateContainerRequest, PostStartContainerRequest, PostUpdateContainerRequest,
    PostUpdatePodSandboxRequest, RemoveContainerRequest, RemovePodSandboxRequest,
    RunPodSandboxRequest, StartContainerRequest, StateChangeEvent, StopContainerRequest,
    StopPodSandboxRequest, SynchronizeRequest, SynchronizeResponse, UpdateContainerRequest,
    UpdatePodSandboxRequest, ValidateContainerAdjustmentRequest,
    ValidateContainerAdjustmentResponse,
};
use nri_api::method;
use nri_api::service::{PluginHandlers, PluginMethod, dispatch_plugin};
use nri_ttrpc::{BoxFuture, Code, HandlerSlot, RequestContext, Service, Status};
use prost::Message;
use tokio::sync::Notify;

use crate::builder::Config;
use crate::handle::{Shared, lock};
use crate::limits::{SyncBudget, SyncMessage, check_request};

mod configure;
use crate::{
    Encoded, Error, HandlerError, HandlerResult, Phase, Plugin, SyncChunk, SyncKind, SyncMode,
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

    /// Hands a `CreateContainer` request to the plugin undecoded.
    fn create_container_encoded(
        &self,
        request: Encoded<CreateContainerRequest>,
        slot: &mut HandlerSlot,
    ) {
        let s = self.clone();
        slot.set(async move {
            let res = s.plugin.create_container_encoded(request).await;
            let m = method::CREATE_CONTAINER;
            s.answer(Event::CreateContainer, m, res, |v| encode(&v))
        });
    }

    /// Runs the method future `fut` of `event`: for a teardown event
    /// answered with success, a panic in it is an error (see
    /// `contain.rs`); otherwise a panic goes on to the ttRPC server.
    async fn guarded<T>(
        &self,
        event: Event,
        fut: impl Future<Output = HandlerResult<T>>,
    ) -> HandlerResult<T> {
        if self.acknowledges(event) {
            crate::contain::teardown(event, fut).await
        } else {
            fut.await
        }
    }

    /// Whether an error of `event`'s method is answered with success.
    fn acknowledges(&self, event: Event) -> bool {
        event.is_teardown() && !self.config.send_teardown_errors
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

    /// Counts one `Synchronize` message against the limits; going over
    /// them ends the connection.
    fn admit_sync(&self, m: SyncMessage) -> Result<(), Status> {
        lock(&self.conn.sync_budget)
            .admit(&self.config.sync_limits, m)
            .map_err(|e| self.conn.fail(e))
    }

    /// A `Synchronize` message before it is decoded: in
    /// [`SyncMode::Streaming`] it goes to the plugin undecoded
    /// (`synchronize_chunk`, answered in `slot`); otherwise it is counted
    /// and sized against the limits, and handed on to be decoded.
    fn admit_synchronize(&self, payload: Bytes, slot: &mut HandlerSlot) -> Option<Bytes> {
        if self.config.sync_mode == SyncMode::Streaming {
            slot.set(self.clone().synchronize_chunk(payload));
            return None;
        }
        match self.check_synchronize(&payload) {
            Ok(()) => Some(payload),
            Err(st) => {
                slot.set(std::future::ready(Err(st)));
                None
            }
        }
    }

    /// Counts (a quick pass over the top level), then sizes (a pass over
    /// everything) a `Synchronize` message, before anything is decoded:
    /// its pods, containers and bytes, then its decoded size.
    fn check_synchronize(&self, payload: &Bytes) -> Result<(), Status> {
        let framed = SyncChunk::new(payload.clone()).ok();
        if let Some(c) = &framed {
            self.admit_sync(SyncMessage {
                bytes: c.wire_len(),
                pods: c.pod_count(),
                containers: c.container_count(),
                decoded: 0,
            })?;
        }
        let scan =
            check_request::<SynchronizeRequest>(payload, &["pods", "containers"]).map_err(|r| {
                tracing::warn!(reason = %r.reason, "nri-plugin: refusing a Synchronize message");
                r.status()
            })?;
        let counted = framed.is_some();
        self.admit_sync(SyncMessage {
            bytes: if counted { 0 } else { scan.wire_len() },
            pods: if counted { 0 } else { scan.count("pods") },
            containers: if counted { 0 } else { scan.count("containers") },
            decoded: scan.decoded_size(),
        })
    }

    /// A decoded `Synchronize` message (decoding consumed the payload: the
    /// message's bytes were released before the plugin sees the structs).
    async fn run_synchronize(self, req: SynchronizeRequest) -> nri_ttrpc::HandlerResult {
        let SynchronizeRequest {
            pods,
            containers,
            more,
        } = req;
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
        self.admit_sync(SyncMessage {
            bytes: chunk.wire_len(),
            pods: chunk.pod_count(),
            containers: chunk.container_count(),
            decoded: 0,
        })?;
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

    async fn run_state_change(self, ev: StateChangeEvent) -> nri_ttrpc::HandlerResult {
        let pod = ev.pod.unwrap_or_default();
        let ctr = ev.container.unwrap_or_default();
        let event = Event::try_from(ev.event).unwrap_or(Event::Unknown);
        if event.is_state_change_event() && !P::IMPLEMENTED.events().contains(event) {
            // Like the Go stub: an event without a method is acknowledged.
            return Ok(Bytes::new());
        }
        if !event.is_state_change_event() {
            return Err(Status::new(
                Code::InvalidArgument,
                format!(
                    "StateChange: event {} is not a state change event",
                    ev.event
                ),
            ));
        }
        let p = &*self.plugin;
        let call = async {
            match event {
                Event::RunPodSandbox => p.run_pod_sandbox(pod).await,
                Event::StopPodSandbox => p.stop_pod_sandbox(pod).await,
                Event::RemovePodSandbox => p.remove_pod_sandbox(pod).await,
                Event::PostUpdatePodSandbox => p.post_update_pod_sandbox(pod).await,
                Event::PostCreateContainer => p.post_create_container(pod, ctr).await,
                Event::StartContainer => p.start_container(pod, ctr).await,
                Event::PostStartContainer => p.post_start_container(pod, ctr).await,
                Event::PostUpdateContainer => p.post_update_container(pod, ctr).await,
                Event::RemoveContainer => p.remove_container(pod, ctr).await,
                // Not reached: only state change events get here.
                _ => Ok(()),
            }
        };
        let res = self.guarded(event, call).await;
        self.answer(event, method::STATE_CHANGE, res, empty)
    }
}

tokio::task_local! {
    /// Whether the call being handled carries `METADATA_COMMITTED`.
    static COMMITTED: bool;
}

/// Whether the event being handled is about an object the runtime has
/// already committed, so that the answer cannot refuse it: a runtime on
/// `nri-runtime` delivers a creation that happened while the plugin
/// synchronized after the plugin's Synchronize, marked with the ttRPC
/// metadata [`nri_api::METADATA_COMMITTED`], and keeps the object whatever
/// the plugin answers. `false` for every other call, for every other
/// runtime (containerd and CRI-O hold a registration until their
/// creations in flight are done), and outside an event handler: call it
/// in the handler itself, not in a task it spawns. For a plugin that
/// stands for others (`nri-proxy` tells its plugins of such an object
/// whatever they would have answered).
///
/// ```
/// assert!(!nri_plugin::event_committed());
/// ```
pub fn event_committed() -> bool {
    COMMITTED.try_with(|c| *c).unwrap_or(false)
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
    fn call_in(&self, ctx: RequestContext, m: &str, payload: Bytes, slot: &mut HandlerSlot) {
        let committed = ctx
            .metadata_values(nri_api::METADATA_COMMITTED)
            .any(|v| v == "true");
        if committed {
            // Rare (a creation a runtime on nri-runtime delivers after the
            // fact): the handler runs with `event_committed()` true.
            let mut inner = HandlerSlot::default();
            dispatch_plugin(self, m, payload, &mut inner);
            slot.set(COMMITTED.scope(true, inner));
            return;
        }
        dispatch_plugin(self, m, payload, slot);
    }
}

/// The typed methods of the `Plugin` service (the trait and its dispatcher
/// are generated from the schema): each starts its handler in the slot.
impl<P: Plugin> PluginHandlers for PluginService<P> {
    type Slot = HandlerSlot;

    fn raw(&self, m: PluginMethod, payload: Bytes, slot: &mut HandlerSlot) -> Option<Bytes> {
        if m.event()
            .is_some_and(|e| !P::IMPLEMENTED.events().contains(e))
        {
            // An event without a method: an empty success, as the Go stub
            // answers (every event's empty response encodes to no bytes;
            // for ValidateContainerAdjustment that is "accepted").
            slot.set(std::future::ready(Ok(Bytes::new())));
            return None;
        }
        match m {
            PluginMethod::Synchronize => self.admit_synchronize(payload, slot),
            // The plugin decodes what it needs (by default, everything).
            PluginMethod::CreateContainer => {
                self.create_container_encoded(Encoded::new(payload), slot);
                None
            }
            _ => Some(payload),
        }
    }

    fn decode<M: Message + prost::Name + Default>(
        &self,
        m: PluginMethod,
        payload: Bytes,
        slot: &mut HandlerSlot,
    ) -> Option<M> {
        let decoded = match m {
            // Nothing in it to look at.
            PluginMethod::Shutdown => Ok(M::default()),
            // Counted and sized by `raw` already.
            PluginMethod::Synchronize => decode_unchecked(payload),
            _ => decode(payload),
        };
        match decoded {
            Ok(req) => Some(req),
            Err(st) => {
                slot.set(std::future::ready(Err(st)));
                None
            }
        }
    }

    fn unknown(&self, m: &str, slot: &mut HandlerSlot) {
        let st = Status::unknown_method(m);
        slot.set(std::future::ready(Err(st)));
    }

    fn configure(&self, req: ConfigureRequest, slot: &mut HandlerSlot) {
        slot.set(self.clone().run_configure(req));
    }

    fn synchronize(&self, req: SynchronizeRequest, slot: &mut HandlerSlot) {
        slot.set(self.clone().run_synchronize(req));
    }

    fn shutdown(&self, _req: Empty, slot: &mut HandlerSlot) {
        let s = self.clone();
        slot.set(async move {
            tracing::info!("nri-plugin: the runtime asked to shut down");
            s.plugin.shutdown().await;
            s.conn.shutdown.notify_one();
            Ok(Bytes::new())
        });
    }

    fn run_pod_sandbox(&self, r: RunPodSandboxRequest, slot: &mut HandlerSlot) {
        let s = self.clone();
        slot.set(async move {
            let res = s.plugin.run_pod_sandbox(r.pod.unwrap_or_default()).await;
            s.answer(Event::RunPodSandbox, method::RUN_POD_SANDBOX, res, empty)
        });
    }

    fn update_pod_sandbox(&self, r: UpdatePodSandboxRequest, slot: &mut HandlerSlot) {
        let s = self.clone();
        slot.set(async move {
            let pod = r.pod.unwrap_or_default();
            let (overhead, resources) = (r.overhead_linux_resources, r.linux_resources);
            let res = s.plugin.update_pod_sandbox(pod, overhead, resources).await;
            let m = method::UPDATE_POD_SANDBOX;
            s.answer(Event::UpdatePodSandbox, m, res, empty)
        });
    }

    fn post_update_pod_sandbox(&self, r: PostUpdatePodSandboxRequest, slot: &mut HandlerSlot) {
        let s = self.clone();
        slot.set(async move {
            let pod = r.pod.unwrap_or_default();
            let ev = Event::PostUpdatePodSandbox;
            let res = s.guarded(ev, s.plugin.post_update_pod_sandbox(pod)).await;
            let m = method::POST_UPDATE_POD_SANDBOX;
            s.answer(Event::PostUpdatePodSandbox, m, res, empty)
        });
    }

    fn stop_pod_sandbox(&self, r: StopPodSandboxRequest, slot: &mut HandlerSlot) {
        let s = self.clone();
        slot.set(async move {
            let pod = r.pod.unwrap_or_default();
            let ev = Event::StopPodSandbox;
            let res = s.guarded(ev, s.plugin.stop_pod_sandbox(pod)).await;
            s.answer(Event::StopPodSandbox, method::STOP_POD_SANDBOX, res, empty)
        });
    }

    fn remove_pod_sandbox(&self, r: RemovePodSandboxRequest, slot: &mut HandlerSlot) {
        let s = self.clone();
        slot.set(async move {
            let pod = r.pod.unwrap_or_default();
            let ev = Event::RemovePodSandbox;
            let res = s.guarded(ev, s.plugin.remove_pod_sandbox(pod)).await;
            let m = method::REMOVE_POD_SANDBOX;
            s.answer(Event::RemovePodSandbox, m, res, empty)
        });
    }

    // Not reached: `raw` takes every CreateContainer undecoded. Kept
    // correct all the same.
    fn create_container(&self, r: CreateContainerRequest, slot: &mut HandlerSlot) {
        self.create_container_encoded(Encoded::from_message(&r), slot);
    }

    fn post_create_container(&self, r: PostCreateContainerRequest, slot: &mut HandlerSlot) {
        let s = self.clone();
        slot.set(async move {
            let (pod, ctr) = (r.pod.unwrap_or_default(), r.container.unwrap_or_default());
            let ev = Event::PostCreateContainer;
            let res = s
                .guarded(ev, s.plugin.post_create_container(pod, ctr))
                .await;
            let m = method::POST_CREATE_CONTAINER;
            s.answer(Event::PostCreateContainer, m, res, empty)
        });
    }

    fn start_container(&self, r: StartContainerRequest, slot: &mut HandlerSlot) {
        let s = self.clone();
        slot.set(async move {
            let (pod, ctr) = (r.pod.unwrap_or_default(), r.container.unwrap_or_default());
            let res = s.plugin.start_container(pod, ctr).await;
            s.answer(Event::StartContainer, method::START_CONTAINER, res, empty)
        });
    }

    fn post_start_container(&self, r: PostStartContainerRequest, slot: &mut HandlerSlot) {
        let s = self.clone();
        slot.set(async move {
            let (pod, ctr) = (r.pod.unwrap_or_default(), r.container.unwrap_or_default());
            let ev = Event::PostStartContainer;
            let res = s.guarded(ev, s.plugin.post_start_container(pod, ctr)).await;
            let m = method::POST_START_CONTAINER;
            s.answer(Event::PostStartContainer, m, res, empty)
        });
    }

    fn update_container(&self, r: UpdateContainerRequest, slot: &mut HandlerSlot) {
        let s = self.clone();
        slot.set(async move {
            let (pod, ctr) = (r.pod.unwrap_or_default(), r.container.unwrap_or_default());
            let res = s.plugin.update_container(pod, ctr, r.linux_resources).await;
            let m = method::UPDATE_CONTAINER;
            s.answer(Event::UpdateContainer, m, res, |v| encode(&v))
        });
    }

    fn post_update_container(&self, r: PostUpdateContainerRequest, slot: &mut HandlerSlot) {
        let s = self.clone();
        slot.set(async move {
            let (pod, ctr) = (r.pod.unwrap_or_default(), r.container.unwrap_or_default());
            let ev = Event::PostUpdateContainer;
            let res = s
                .guarded(ev, s.plugin.post_update_container(pod, ctr))
                .await;
            let m = method::POST_UPDATE_CONTAINER;
            s.answer(Event::PostUpdateContainer, m, res, empty)
        });
    }

    fn stop_container(&self, r: StopContainerRequest, slot: &mut HandlerSlot) {
        let s = self.clone();
        slot.set(async move {
            let (pod, ctr) = (r.pod.unwrap_or_default(), r.container.unwrap_or_default());
            let ev = Event::StopContainer;
            let res = s.guarded(ev, s.plugin.stop_container(pod, ctr)).await;
            let m = method::STOP_CONTAINER;
            s.answer(Event::StopContainer, m, res, |v| encode(&v))
        });
    }

    fn remove_container(&self, r: RemoveContainerRequest, slot: &mut HandlerSlot) {
        let s = self.clone();
        slot.set(async move {
            let (pod, ctr) = (r.pod.unwrap_or_default(), r.container.unwrap_or_default());
            let ev = Event::RemoveContainer;
            let res = s.guarded(ev, s.plugin.remove_container(pod, ctr)).await;
            s.answer(Event::RemoveContainer, method::REMOVE_CONTAINER, res, empty)
        });
    }

    fn state_change(&self, ev: StateChangeEvent, slot: &mut HandlerSlot) {
        slot.set(self.clone().run_state_change(ev));
    }

    fn validate_container_adjustment(
        &self,
        r: ValidateContainerAdjustmentRequest,
        slot: &mut HandlerSlot,
    ) {
        let s = self.clone();
        slot.set(async move {
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
        });
    }
}

impl Config {
    pub(crate) fn plugin_name(&self) -> String {
        format!("{}-{}", self.index, self.name)
    }
}
