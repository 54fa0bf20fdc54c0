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
    ConfigureResponse, ContainerUpdate, CreateContainerResponse, Empty, Event,
    StopContainerResponse, SynchronizeRequest, SynchronizeResponse, UpdateContainerResponse,
    UpdateContainersRequest, UpdateContainersResponse, UpdatePodSandboxResponse,
    ValidateContainerAdjustmentResponse,
};
use nri_api::{RUNTIME_SERVICE, method};
use nri_test_support::plugin_end::{Options, PluginEnd, register_req};
use nri_ttrpc::{CallOptions, Client, Code, HandlerResult, Status, service_fn};
use prost::Message as _;
use tokio::net::UnixStream;
use tokio_util::sync::CancellationToken;

use crate::decode::{Request, decode};
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
        let legacy_rpc = Event::ALL_EVENTS
            .iter()
            .any(|e| e.is_state_change_event() && e.method_name() == Some(m));
        if self.obs.spec.legacy && legacy_rpc {
            // A plugin before NRI v0.12 knows StateChange only.
            return Err(Status::unknown_method(m));
        }
        let req = decode(m, &payload)
            .map_err(bad)?
            .ok_or_else(|| Status::unknown_method(m))?;
        let reply = match req {
            Request::Configure => {
                self.obs.configured();
                ConfigureResponse {
                    events: self.obs.spec.events.as_i32(),
                    failure_policy: None,
                }
                .encode_to_vec()
            }
            Request::Sync(r) => self.sync(r).await?,
            Request::Shutdown => {
                self.obs.record(Seen::Shutdown);
                Empty {}.encode_to_vec()
            }
            Request::Event {
                event,
                pod,
                ctr,
                asked_mem,
            } => {
                let id = ctr.as_ref().map(|c| c.id.clone()).unwrap_or_default();
                self.event(event, pod, ctr, asked_mem).await?;
                self.reply(m, id, asked_mem)
            }
        };
        Ok(Bytes::from(reply))
    }

    async fn sync(&self, r: SynchronizeRequest) -> Result<Vec<u8>, Status> {
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

    /// The answer to an event's request (UpdateContainer repeats the limit
    /// asked for when the plugin echoes).
    fn reply(&self, m: &str, id: String, asked: Option<i64>) -> Vec<u8> {
        match m {
            method::CREATE_CONTAINER => CreateContainerResponse::default().encode_to_vec(),
            method::UPDATE_CONTAINER => {
                let mut resp = UpdateContainerResponse::default();
                if let (true, Some(mem)) = (self.obs.spec.echo, asked) {
                    let mut u = ContainerUpdate::new(id);
                    u.set_linux_memory_limit(mem);
                    resp.update.push(u);
                }
                resp.encode_to_vec()
            }
            method::STOP_CONTAINER => StopContainerResponse::default().encode_to_vec(),
            method::UPDATE_POD_SANDBOX => UpdatePodSandboxResponse::default().encode_to_vec(),
            method::VALIDATE_CONTAINER_ADJUSTMENT => {
                ValidateContainerAdjustmentResponse::default().encode_to_vec()
            }
            _ => Empty {}.encode_to_vec(),
        }
    }
}
