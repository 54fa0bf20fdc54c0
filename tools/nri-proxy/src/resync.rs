//! A resynchronization with the runtime (after it restarted) delivered to
//! the plugins behind the proxy as the events that would have told them:
//! the protocol has no second Synchronize.

use std::sync::Arc;

use nri_api::api::{ContainerState, Event};
use nri_runtime::Adaptation;

use crate::event::Upcall;
use crate::metrics::ProxyMetrics;
use crate::view::{Changes, State};

/// The events telling what changed: Stop/Remove for the containers and
/// pods that went (Remove alone for those the plugins were told stopped),
/// PostUpdatePodSandbox and PostUpdateContainer for the pods and
/// containers whose resources changed, StartContainer or StopContainer
/// for the containers that started or exited, RunPodSandbox,
/// CreateContainer (then StartContainer for a running container,
/// StopContainer for one that has exited) for what appeared, in that
/// order.
pub(crate) fn events(ch: Changes) -> Vec<Upcall> {
    let mut out = Vec::new();
    for (pod, c) in ch.gone_containers {
        if c.state != ContainerState::ContainerStopped as i32 {
            out.push(Upcall::Stop(pod.clone(), c.clone()));
        }
        out.push(Upcall::Remove(pod, c));
    }
    for (pod, stopped) in ch.gone_pods {
        if !stopped {
            out.push(Upcall::PodNote(Event::StopPodSandbox, pod.clone()));
        }
        out.push(Upcall::RemovePod(pod));
    }
    for pod in ch.resized_pods {
        out.push(Upcall::PodNote(Event::PostUpdatePodSandbox, pod));
    }
    for (pod, c) in ch.resized {
        out.push(Upcall::ContainerNote(Event::PostUpdateContainer, pod, c));
    }
    for (pod, c) in ch.moved {
        out.push(if c.state == ContainerState::ContainerStopped as i32 {
            Upcall::Stop(pod, c)
        } else {
            Upcall::ContainerNote(Event::StartContainer, pod, c)
        });
    }
    out.extend(ch.new_pods.into_iter().map(Upcall::RunPod));
    for (pod, c) in ch.new_containers {
        let state = c.state;
        out.push(Upcall::Create(pod.clone(), c.clone()));
        if state == ContainerState::ContainerRunning as i32 {
            out.push(Upcall::ContainerNote(Event::StartContainer, pod, c));
        } else if state == ContainerState::ContainerStopped as i32 {
            out.push(Upcall::Stop(pod, c));
        }
    }
    out
}

/// Delivers the differences one event at a time (in the turn of the
/// resynchronization's place in the delivery order, held by the caller
/// until this returns, so that the runtime's later events reach the
/// plugins after them). Answers
/// are only logged: the runtime has already done what they could have
/// changed. The view follows each event, failed or not (the runtime has
/// the object either way).
pub(crate) async fn deliver(a: Adaptation, state: Arc<State>, ch: Changes, metrics: ProxyMetrics) {
    tracing::info!(
        moved_containers = ch.moved.len(),
        gone_pods = ch.gone_pods.len(),
        gone_containers = ch.gone_containers.len(),
        new_pods = ch.new_pods.len(),
        new_containers = ch.new_containers.len(),
        resized_containers = ch.resized.len(),
        resized_pods = ch.resized_pods.len(),
        "nri-proxy: delivering the differences of a resynchronization as events"
    );
    for up in events(ch) {
        metrics.replayed.inc();
        let (event, id) = (up.event(), up.id().to_owned());
        if let Err(e) = up.deliver(&a, &state, true).await {
            tracing::warn!(
                event = event.pretty_name(),
                %id,
                error = %e,
                "nri-proxy: resync event failed"
            );
        }
    }
    tracing::info!("nri-proxy: resynchronization delivered");
}
