//! An observer without the SDK: the plugin's end of the connection on
//! nri-mux and nri-ttrpc (`nri_test_support::plugin_end`), every request
//! decoded and answered by hand. It can speak like a plugin older than NRI
//! v0.12 (`legacy`: the dedicated notification RPCs answered
//! UNIMPLEMENTED, so the runtime falls back to StateChange), and
//! reconnects itself with a fixed delay when its policy says so.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use nri_api::api::{
    ConfigureResponse, ContainerUpdate, CreateContainerRequest, CreateContainerResponse, Empty,
    Event, PostCreateContainerRequest, StateChangeEvent, StopContainerRequest,
    StopContainerResponse, SynchronizeRequest, SynchronizeResponse, UpdateContainerRequest,
    UpdateContainerResponse, UpdateContainersRequest, UpdateContainersResponse,
    UpdatePodSandboxRequest, UpdatePodSandboxResponse, ValidateContainerAdjustmentRequest,
    ValidateContainerAdjustmentResponse,
};
use nri_api::{RUNTIME_SERVICE, method};
use nri_test_support::plugin_end::{Options, PluginEnd, register_req};
use nri_ttrpc::{CallOptions, Client, Code, HandlerResult, Status, service_fn};
use prost::Message;
use tokio::net::UnixStream;
use tokio_util::sync::CancellationToken;

use crate::observe::{CtrView, Observer, Seen, lock};
use crate::schedule::Hook;

/// Delay before a raw peer dials again.
pub const REDIAL: Duration = Duration::from_millis(100);

/// A raw peer's running state.
#[derive(Debug)]
pub struct RawPeer {
    obs: Arc<Observer>,
    socket: PathBuf,
    stop: CancellationToken,
    client: Mutex<Option<Client>>,
    connected: AtomicBool,
}

fn bad(e: prost::DecodeError) -> Status {
    Status::new(Code::InvalidArgument, e.to_string())
}

impl RawPeer {
    /// A peer of `obs` dialing `socket` (not started).
    pub fn new(obs: Arc<Observer>, socket: PathBuf) -> Arc<RawPeer> {
        Arc::new(RawPeer {
            obs,
            socket,
            stop: CancellationToken::new(),
            client: Mutex::new(None),
            connected: AtomicBool::new(false),
        })
    }

    /// Dials, registers, serves until the connection ends; again after
    /// [`REDIAL`] if it reconnects; until stopped.
    pub async fn run(self: Arc<Self>) {
        loop {
            if let Err(e) = self.clone().connect_once().await {
                tracing::debug!(error = %e, "raw peer connection failed");
            }
            if self.stop.is_cancelled() || !self.obs.spec.reconnect {
                return;
            }
            tokio::select! {
                () = self.stop.cancelled() => return,
                () = tokio::time::sleep(REDIAL) => {}
            }
        }
    }

    async fn connect_once(self: Arc<Self>) -> Result<(), nri_ttrpc::Error> {
        let stream = UnixStream::connect(&self.socket).await?;
        let me = self.clone();
        let svc = service_fn(move |ctx, payload: Bytes| {
            let me = me.clone();
            async move { me.handle(ctx.method(), payload).await }
        });
        let spec = &self.obs.spec;
        let opts = Options {
            register: Some(register_req(&spec.index, &spec.name)),
            wake_hints: false,
        };
        let end = PluginEnd::connect(stream, svc, opts).await?;
        *lock(&self.client) = Some(end.client.clone());
        self.connected.store(true, Ordering::SeqCst);
        tokio::select! {
            _ = end.mux.closed() => {}
            () = self.stop.cancelled() => {}
        }
        self.connected.store(false, Ordering::SeqCst);
        lock(&self.client).take();
        end.shutdown.cancel();
        end.client.close();
        end.mux.close();
        self.obs.record(Seen::Lost);
        Ok(())
    }

    /// Stops the peer for good.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Whether it is registered now.
    pub fn is_connected(&self) -> bool {
        self.connected.load(Ordering::SeqCst)
    }

    /// An unsolicited UpdateContainers; the updates that failed, or the
    /// error as text.
    pub async fn update_containers(
        &self,
        update: Vec<ContainerUpdate>,
    ) -> Result<Vec<ContainerUpdate>, String> {
        let client = lock(&self.client).clone().ok_or("not connected")?;
        let req = UpdateContainersRequest {
            update,
            evict: Vec::new(),
        };
        let r: Result<UpdateContainersResponse, _> = client
            .call_message(
                RUNTIME_SERVICE,
                method::UPDATE_CONTAINERS,
                &req,
                CallOptions::new(Duration::from_secs(5)),
            )
            .await;
        r.map(|resp| resp.failed)
            .map_err(|e| crate::memory::chain(&e))
    }

    /// Records an event, commits its fault; `Err` for an error answer.
    async fn event(
        &self,
        event: Event,
        pod: String,
        ctr: Option<CtrView>,
        asked_mem: Option<i64>,
    ) -> Result<(), Status> {
        let fault = self.obs.take_fault(Hook::Event(event));
        self.obs.record(Seen::Event {
            event,
            pod,
            ctr,
            asked_mem,
            fault,
        });
        self.obs
            .commit(fault)
            .await
            .map_err(|()| Status::new(Code::Unknown, format!("injected failure of {event}")))
    }

    async fn handle(&self, m: &str, payload: Bytes) -> HandlerResult {
        let reply = match m {
            method::CONFIGURE => {
                self.obs.configured();
                let events = self.obs.spec.events.as_i32();
                ConfigureResponse {
                    events,
                    failure_policy: None,
                }
                .encode_to_vec()
            }
            method::SYNCHRONIZE => self.sync(payload).await?,
            method::SHUTDOWN => {
                self.obs.record(Seen::Shutdown);
                Empty {}.encode_to_vec()
            }
            method::STATE_CHANGE => {
                let r = StateChangeEvent::decode(payload).map_err(bad)?;
                let ev = Event::try_from(r.event).unwrap_or(Event::Unknown);
                let pod = r.pod.map(|p| p.id).unwrap_or_default();
                self.event(ev, pod, r.container.as_ref().map(CtrView::of), None)
                    .await?;
                Empty {}.encode_to_vec()
            }
            _ => self.answer(m, payload).await?,
        };
        Ok(Bytes::from(reply))
    }

    async fn sync(&self, payload: Bytes) -> Result<Vec<u8>, Status> {
        let r = SynchronizeRequest::decode(payload).map_err(bad)?;
        self.obs.record_sync(&r.pods, &r.containers, r.more);
        if !r.more {
            let fault = self.obs.take_fault(Hook::Synchronize);
            self.obs
                .commit(fault)
                .await
                .map_err(|()| Status::new(Code::Unknown, "injected failure of Synchronize"))?;
        }
        Ok(SynchronizeResponse {
            update: Vec::new(),
            more: r.more,
        }
        .encode_to_vec())
    }

    /// The events with an answer of their own, and the notifications.
    async fn answer(&self, m: &str, payload: Bytes) -> Result<Vec<u8>, Status> {
        let reply = match m {
            method::CREATE_CONTAINER => {
                let r = CreateContainerRequest::decode(payload).map_err(bad)?;
                let pod = r.pod.map(|p| p.id).unwrap_or_default();
                let ctr = r.container.as_ref().map(CtrView::of);
                self.event(Event::CreateContainer, pod, ctr, None).await?;
                CreateContainerResponse::default().encode_to_vec()
            }
            method::UPDATE_CONTAINER => self.update(payload).await?,
            method::STOP_CONTAINER => {
                let r = StopContainerRequest::decode(payload).map_err(bad)?;
                let pod = r.pod.map(|p| p.id).unwrap_or_default();
                let ctr = r.container.as_ref().map(CtrView::of);
                self.event(Event::StopContainer, pod, ctr, None).await?;
                StopContainerResponse::default().encode_to_vec()
            }
            method::UPDATE_POD_SANDBOX => {
                let r = UpdatePodSandboxRequest::decode(payload).map_err(bad)?;
                let pod = r.pod.map(|p| p.id).unwrap_or_default();
                self.event(Event::UpdatePodSandbox, pod, None, None).await?;
                UpdatePodSandboxResponse::default().encode_to_vec()
            }
            method::VALIDATE_CONTAINER_ADJUSTMENT => {
                let r = ValidateContainerAdjustmentRequest::decode(payload).map_err(bad)?;
                let pod = r.pod.map(|p| p.id).unwrap_or_default();
                let ctr = r.container.as_ref().map(CtrView::of);
                let ev = Event::ValidateContainerAdjustment;
                self.event(ev, pod, ctr, None).await?;
                ValidateContainerAdjustmentResponse::default().encode_to_vec()
            }
            other => return self.notification(other, payload).await,
        };
        Ok(reply)
    }

    async fn update(&self, payload: Bytes) -> Result<Vec<u8>, Status> {
        let r = UpdateContainerRequest::decode(payload).map_err(bad)?;
        let asked = r.linux_resources.as_ref().and_then(|l| l.memory_limit());
        let pod = r.pod.map(|p| p.id).unwrap_or_default();
        let ctr = r.container.as_ref().map(CtrView::of);
        let id = ctr.as_ref().map(|c| c.id.clone()).unwrap_or_default();
        self.event(Event::UpdateContainer, pod, ctr, asked).await?;
        let mut resp = UpdateContainerResponse::default();
        if let (true, Some(mem)) = (self.obs.spec.echo, asked) {
            let mut u = ContainerUpdate::new(id);
            u.set_linux_memory_limit(mem);
            resp.update.push(u);
        }
        Ok(resp.encode_to_vec())
    }

    /// One of the nine dedicated notification RPCs (UNIMPLEMENTED when
    /// legacy, as a plugin before NRI v0.12 answers).
    async fn notification(&self, m: &str, payload: Bytes) -> Result<Vec<u8>, Status> {
        let Some(ev) = Event::ALL_EVENTS
            .into_iter()
            .find(|e| e.method_name() == Some(m))
        else {
            return Err(Status::unknown_method(m));
        };
        if self.obs.spec.legacy {
            return Err(Status::unknown_method(m));
        }
        // Every one of them carries pod = 1, container = 2 (or only pod).
        let r = PostCreateContainerRequest::decode(payload).map_err(bad)?;
        let pod = r.pod.map(|p| p.id).unwrap_or_default();
        let ctr = r.container.as_ref().map(CtrView::of);
        self.event(ev, pod, ctr, None).await?;
        Ok(Empty {}.encode_to_vec())
    }
}
