//! A request of the plugin service, decoded from its ttRPC method and
//! bytes into what an observer records: for the raw peer (which answers
//! it) and the WebAssembly guest (whose copy of it reaches the checker
//! through the runtime's log).

use nri_api::api::{
    CreateContainerRequest, Event, PostCreateContainerRequest, StateChangeEvent,
    StopContainerRequest, SynchronizeRequest, UpdateContainerRequest, UpdatePodSandboxRequest,
    ValidateContainerAdjustmentRequest,
};
use nri_api::method;
use prost::Message;

use crate::observe::{CtrView, Observer, Seen};

/// A request, as an observer records it.
#[derive(Debug, Clone)]
pub enum Request {
    /// Configure: a new connection instance.
    Configure,
    /// Synchronize (one message).
    Sync(SynchronizeRequest),
    /// Shutdown.
    Shutdown,
    /// An event of a pod (and a container).
    Event {
        /// The event.
        event: Event,
        /// The pod's id.
        pod: String,
        /// The container.
        ctr: Option<CtrView>,
        /// UpdateContainer: the memory limit asked for.
        asked_mem: Option<i64>,
    },
}

/// Decodes the request of `method`; `Ok(None)` for a method that is not
/// one of the plugin service's.
pub fn decode(m: &str, b: &[u8]) -> Result<Option<Request>, prost::DecodeError> {
    let ev =
        |event, pod: Option<nri_api::api::PodSandbox>, ctr: Option<&nri_api::api::Container>| {
            Request::Event {
                event,
                pod: pod.map(|p| p.id).unwrap_or_default(),
                ctr: ctr.map(CtrView::of),
                asked_mem: None,
            }
        };
    let r = match m {
        method::CONFIGURE => Request::Configure,
        method::SYNCHRONIZE => Request::Sync(SynchronizeRequest::decode(b)?),
        method::SHUTDOWN => Request::Shutdown,
        method::STATE_CHANGE => {
            let r = StateChangeEvent::decode(b)?;
            let e = Event::try_from(r.event).unwrap_or(Event::Unknown);
            ev(e, r.pod, r.container.as_ref())
        }
        method::CREATE_CONTAINER => {
            let r = CreateContainerRequest::decode(b)?;
            ev(Event::CreateContainer, r.pod, r.container.as_ref())
        }
        method::UPDATE_CONTAINER => {
            let r = UpdateContainerRequest::decode(b)?;
            let asked = r.linux_resources.as_ref().and_then(|l| l.memory_limit());
            let mut e = ev(Event::UpdateContainer, r.pod, r.container.as_ref());
            if let Request::Event { asked_mem, .. } = &mut e {
                *asked_mem = asked;
            }
            e
        }
        method::STOP_CONTAINER => {
            let r = StopContainerRequest::decode(b)?;
            ev(Event::StopContainer, r.pod, r.container.as_ref())
        }
        method::UPDATE_POD_SANDBOX => {
            let r = UpdatePodSandboxRequest::decode(b)?;
            ev(Event::UpdatePodSandbox, r.pod, None)
        }
        method::VALIDATE_CONTAINER_ADJUSTMENT => {
            let r = ValidateContainerAdjustmentRequest::decode(b)?;
            ev(
                Event::ValidateContainerAdjustment,
                r.pod,
                r.container.as_ref(),
            )
        }
        other => {
            let Some(e) = Event::ALL_EVENTS
                .into_iter()
                .find(|e| e.method_name() == Some(other))
            else {
                return Ok(None);
            };
            // Every one of them carries pod = 1, container = 2 (or only pod).
            let r = PostCreateContainerRequest::decode(b)?;
            ev(e, r.pod, r.container.as_ref())
        }
    };
    Ok(Some(r))
}

/// Records `r` in `obs` (without a fault: callers that commit faults
/// record events themselves).
pub fn record(obs: &Observer, r: &Request) {
    match r {
        Request::Configure => obs.configured(),
        Request::Sync(s) => obs.record_sync(&s.pods, &s.containers, s.more),
        Request::Shutdown => obs.record(Seen::Shutdown),
        Request::Event {
            event,
            pod,
            ctr,
            asked_mem,
        } => obs.record(Seen::Event {
            event: *event,
            pod: pod.clone(),
            ctr: ctr.clone(),
            asked_mem: *asked_mem,
            fault: None,
        }),
    }
}
