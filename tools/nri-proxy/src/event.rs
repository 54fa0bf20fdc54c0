//! One upstream event as a value: what it does to the proxy's view, and
//! its delivery to the plugins behind the proxy (live, late, or as part of
//! a resynchronization), always in the same way: the view changes when the
//! plugins have been told, as a runtime stores an object after its
//! creation event and forgets it after its removal (the runtime library's
//! synchronization barrier relies on that order).

use nri_api::api::{
    Container, ContainerState, CreateContainerResponse, Event, LinuxResources, OwningPlugins,
    PodSandbox, StopContainerResponse, UpdateContainerResponse,
};
use nri_runtime::Adaptation;

use crate::view::{State, View};

/// An event of the runtime for the plugins behind the proxy.
// Made once per event and moved, never stored in bulk: boxing the larger
// variants would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub(crate) enum Upcall {
    /// RunPodSandbox.
    RunPod(PodSandbox),
    /// UpdatePodSandbox with its overhead and resources.
    UpdatePod(PodSandbox, Option<LinuxResources>, Option<LinuxResources>),
    /// PostUpdatePodSandbox or StopPodSandbox (a pod notification).
    PodNote(Event, PodSandbox),
    /// RemovePodSandbox.
    RemovePod(PodSandbox),
    /// CreateContainer.
    Create(PodSandbox, Container),
    /// PostCreateContainer, StartContainer, PostStartContainer or
    /// PostUpdateContainer (a container notification).
    ContainerNote(Event, PodSandbox, Container),
    /// UpdateContainer with the requested resources.
    Update(PodSandbox, Container, Option<LinuxResources>),
    /// StopContainer.
    Stop(PodSandbox, Container),
    /// RemoveContainer.
    Remove(PodSandbox, Container),
}

/// What the plugins answered, for the runtime.
// One per event, returned at once: see `Upcall`.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Answer {
    /// Nothing beyond success.
    Done,
    /// CreateContainer's merged answer, who owns which field of it and
    /// which plugins took part.
    Create(Box<Created>),
    /// UpdateContainer's merged answer.
    Update(UpdateContainerResponse),
    /// StopContainer's merged answer.
    Stop(StopContainerResponse),
}

/// A creation's merged answer.
#[derive(Debug)]
pub(crate) struct Created {
    /// The answer for the runtime.
    pub(crate) response: CreateContainerResponse,
    /// Who behind the proxy owns which field.
    pub(crate) owners: OwningPlugins,
    /// The plugins behind the proxy that took part, in call order.
    pub(crate) plugins: Vec<nri_runtime::PluginId>,
}

impl Upcall {
    /// The event.
    pub(crate) fn event(&self) -> Event {
        match self {
            Upcall::RunPod(_) => Event::RunPodSandbox,
            Upcall::UpdatePod(..) => Event::UpdatePodSandbox,
            Upcall::PodNote(e, _) | Upcall::ContainerNote(e, _, _) => *e,
            Upcall::RemovePod(_) => Event::RemovePodSandbox,
            Upcall::Create(..) => Event::CreateContainer,
            Upcall::Update(..) => Event::UpdateContainer,
            Upcall::Stop(..) => Event::StopContainer,
            Upcall::Remove(..) => Event::RemoveContainer,
        }
    }

    /// The pod the event is about (or the container's pod).
    pub(crate) fn pod(&self) -> &PodSandbox {
        match self {
            Upcall::RunPod(p)
            | Upcall::UpdatePod(p, ..)
            | Upcall::PodNote(_, p)
            | Upcall::RemovePod(p)
            | Upcall::Create(p, _)
            | Upcall::ContainerNote(_, p, _)
            | Upcall::Update(p, ..)
            | Upcall::Stop(p, _)
            | Upcall::Remove(p, _) => p,
        }
    }

    /// The id of the object the event is about.
    pub(crate) fn id(&self) -> &str {
        match self {
            Upcall::Create(_, c)
            | Upcall::ContainerNote(_, _, c)
            | Upcall::Update(_, c, _)
            | Upcall::Stop(_, c)
            | Upcall::Remove(_, c) => &c.id,
            _ => &self.pod().id,
        }
    }

    /// Whether the event creates a pod or container (and so may be failed
    /// for a missing required plugin).
    pub(crate) fn is_creation(&self) -> bool {
        matches!(self, Upcall::RunPod(_) | Upcall::Create(..))
    }

    /// Applies the event to the view: the object is stored (a copy),
    /// refreshed or forgotten.
    pub(crate) fn apply(&self, v: &mut View) {
        self.clone().store(v);
    }

    /// Applies the event to the view, moving the object into it (no copy:
    /// the event is done with it).
    pub(crate) fn store(self, v: &mut View) {
        match self {
            Upcall::PodNote(Event::StopPodSandbox, p) => {
                v.stopped_pods.insert(p.id.clone());
                v.pods.insert(p.id.clone(), p);
            }
            Upcall::RunPod(p) | Upcall::UpdatePod(p, ..) | Upcall::PodNote(_, p) => {
                v.pods.insert(p.id.clone(), p);
            }
            Upcall::RemovePod(p) => {
                v.stopped_pods.remove(&p.id);
                v.pods.remove(&p.id);
            }
            // The plugins were told it stopped or started, whatever state
            // the runtime sent it in (containerd sends StartContainer
            // before it marks the container running).
            Upcall::Stop(_, c) => v.store_container(c, Some(ContainerState::ContainerStopped)),
            Upcall::ContainerNote(Event::StartContainer, _, c) => {
                v.store_container(c, Some(ContainerState::ContainerRunning));
            }
            Upcall::Create(_, c) | Upcall::ContainerNote(_, _, c) | Upcall::Update(_, c, _) => {
                v.store_container(c, None);
            }
            Upcall::Remove(_, c) => {
                v.containers.remove(&c.id);
            }
        }
    }

    /// The lane of the event in the delivery order ([`crate::order`]): its
    /// pod (the container's pod for a container event).
    pub(crate) fn lane(&self) -> &str {
        match self {
            Upcall::Create(p, c)
            | Upcall::ContainerNote(_, p, c)
            | Upcall::Update(p, c, _)
            | Upcall::Stop(p, c)
            | Upcall::Remove(p, c)
                if p.id.is_empty() =>
            {
                &c.pod_sandbox_id
            }
            _ => &self.pod().id,
        }
    }

    /// Whether the plugins behind the proxy have been told of the object
    /// the event is about (always true for a creation): the view holds
    /// exactly what they were told.
    pub(crate) fn is_known(&self, v: &View) -> bool {
        match self {
            Upcall::RunPod(_) | Upcall::Create(..) => true,
            Upcall::UpdatePod(p, ..) | Upcall::PodNote(_, p) | Upcall::RemovePod(p) => {
                v.pods.contains_key(&p.id)
            }
            Upcall::ContainerNote(_, _, c)
            | Upcall::Update(_, c, _)
            | Upcall::Stop(_, c)
            | Upcall::Remove(_, c) => v.containers.contains_key(&c.id),
        }
    }

    /// Whether the plugins behind the proxy have to be told: they know the
    /// object ([`Self::is_known`]) and not yet what the event says. A
    /// StopContainer, StartContainer or StopPodSandbox they already had
    /// (from a resynchronization that found the container exited or
    /// started, or the pod gone stopped) is not news: the runtime's own
    /// event for it, reported after the resynchronization, is not
    /// delivered again.
    pub(crate) fn is_news(&self, v: &View) -> bool {
        if !self.is_known(v) {
            return false;
        }
        let state = |c: &Container| v.containers.get(&c.id).map_or(0, |c| c.state);
        match self {
            Upcall::Stop(_, c) => state(c) != ContainerState::ContainerStopped as i32,
            Upcall::ContainerNote(Event::StartContainer, _, c) => {
                crate::view::rank(state(c))
                    <= crate::view::rank(ContainerState::ContainerCreated as i32)
            }
            Upcall::PodNote(Event::StopPodSandbox, p) => !v.stopped_pods.contains(&p.id),
            _ => true,
        }
    }

    /// Hands the event to the plugins behind the proxy through `a`, then
    /// moves it into the view: the view holds what the plugins have been
    /// told. With `runtime_has_it` (the runtime was answered before, or
    /// listed the object) the event goes through the library's
    /// [`Adaptation::committed`] handle: a creation is not refused (a
    /// `required` plugin absent, a plugin's error), so it reaches every
    /// plugin, those synchronizing meanwhile included, and is stored. A
    /// creation the plugins failed live is stored too when some of them
    /// were called (the runtime then undoes it with Stop/Remove events, or
    /// a resynchronization finds it gone). A creation is stored before its
    /// guard is released.
    pub(crate) async fn deliver(
        self,
        a: &Adaptation,
        state: &State,
        runtime_has_it: bool,
    ) -> Result<Answer, nri_runtime::Error> {
        let committed;
        let a = if runtime_has_it {
            committed = a.committed();
            &committed
        } else {
            a
        };
        let r = match &self {
            Upcall::RunPod(pod) => match a.run_pod_sandbox(pod).await {
                Ok(out) => {
                    state.update(|v| self.store(v));
                    drop(out.guard);
                    return Ok(Answer::Done);
                }
                Err(e) => Err(e),
            },
            Upcall::Create(pod, c) => match a.create_container(pod, c).await {
                Ok(out) => {
                    state.update(|v| self.store(v));
                    drop(out.guard);
                    return Ok(Answer::Create(Box::new(Created {
                        response: CreateContainerResponse {
                            adjust: Some(out.adjustment),
                            update: out.updates,
                            evict: out.evictions,
                        },
                        owners: out.owners,
                        plugins: out.plugins,
                    })));
                }
                Err(e) => Err(e),
            },
            _ => self.deliver_other(a).await,
        };
        let told = match &r {
            Ok(_) => true,
            Err(e) => runtime_has_it || !self.is_creation() || reached_plugins(e),
        };
        if told {
            state.update(|v| self.store(v));
        }
        r
    }

    /// Delivers an event that creates nothing.
    async fn deliver_other(&self, a: &Adaptation) -> Result<Answer, nri_runtime::Error> {
        match self {
            Upcall::RunPod(_) | Upcall::Create(..) => Ok(Answer::Done),
            Upcall::UpdatePod(pod, overhead, resources) => a
                .update_pod_sandbox(pod, overhead.clone(), resources.clone())
                .await
                .map(|_| Answer::Done),
            Upcall::PodNote(Event::StopPodSandbox, pod) => {
                a.stop_pod_sandbox(pod).await.map(|_| Answer::Done)
            }
            Upcall::PodNote(_, pod) => a.post_update_pod_sandbox(pod).await.map(|_| Answer::Done),
            Upcall::RemovePod(pod) => a.remove_pod_sandbox(pod).await.map(|_| Answer::Done),
            Upcall::ContainerNote(e, pod, c) => {
                let r = match e {
                    Event::PostCreateContainer => a.post_create_container(pod, c).await,
                    Event::StartContainer => a.start_container(pod, c).await,
                    Event::PostStartContainer => a.post_start_container(pod, c).await,
                    _ => a.post_update_container(pod, c).await,
                };
                r.map(|_| Answer::Done)
            }
            Upcall::Update(pod, c, resources) => a
                .update_container(pod, c, resources.clone())
                .await
                .map(|out| Answer::Update(update_answer(c, resources.as_ref(), out))),
            Upcall::Stop(pod, c) => a.stop_container(pod, c).await.map(|out| {
                Answer::Stop(StopContainerResponse {
                    update: out.updates,
                })
            }),
            Upcall::Remove(pod, c) => a.remove_container(pod, c).await.map(|_| Answer::Done),
        }
    }
}

/// Whether a creation that failed with `e` may have reached some plugin:
/// all failures but those raised before the first plugin is called.
fn reached_plugins(e: &nri_runtime::Error) -> bool {
    !matches!(
        e,
        nri_runtime::Error::RequiredPluginMissing { .. }
            | nri_runtime::Error::InvalidState { .. }
            | nri_runtime::Error::Stopping
    )
}

/// The UpdateContainer answer: the library ends its updates with the
/// target's full resources; an echo of the request would only claim fields
/// upstream that no plugin here changed (and conflict with plugins that
/// did, there), so it is left out.
fn update_answer(
    c: &Container,
    requested: Option<&LinuxResources>,
    out: nri_runtime::UpdateContainerOutcome,
) -> UpdateContainerResponse {
    let mut update = out.updates;
    if update.last().is_some_and(|u| {
        u.container_id == c.id && u.linux.as_ref().and_then(|l| l.resources.as_ref()) == requested
    }) {
        update.pop();
    }
    UpdateContainerResponse {
        update,
        evict: out.evictions,
    }
}
