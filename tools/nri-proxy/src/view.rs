//! The proxy's view of the runtime's pods and containers: what its plugins
//! are synchronized from, and what a resynchronization is compared with.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use nri_api::api::{Container, ContainerState, PodSandbox};

/// Pods and containers by id, as the plugins behind the proxy were told
/// of them.
#[derive(Debug, Default)]
pub(crate) struct View {
    pub(crate) pods: BTreeMap<String, PodSandbox>,
    pub(crate) containers: BTreeMap<String, Container>,
    /// The pods the plugins were told stopped (StopPodSandbox): a pod has
    /// no state of its own on the wire.
    pub(crate) stopped_pods: BTreeSet<String>,
}

/// What changed between two views.
#[derive(Debug, Default)]
pub(crate) struct Changes {
    /// Containers that went away, with their pods (in the state the
    /// plugins were told).
    pub(crate) gone_containers: Vec<(PodSandbox, Container)>,
    /// Pods that went away, and whether the plugins were told they
    /// stopped.
    pub(crate) gone_pods: Vec<(PodSandbox, bool)>,
    /// Pods that appeared.
    pub(crate) new_pods: Vec<PodSandbox>,
    /// Containers that appeared, with their pods.
    pub(crate) new_containers: Vec<(PodSandbox, Container)>,
    /// Containers of both whose state moved on (created to running,
    /// running or created to stopped), as the runtime has them now.
    pub(crate) moved: Vec<(PodSandbox, Container)>,
    /// Containers of both whose resources changed, as the runtime has
    /// them now.
    pub(crate) resized: Vec<(PodSandbox, Container)>,
    /// Pods of both whose resources changed, as the runtime has them now.
    pub(crate) resized_pods: Vec<PodSandbox>,
}

impl Changes {
    /// Whether nothing changed.
    pub(crate) fn is_empty(&self) -> bool {
        self.gone_containers.is_empty()
            && self.gone_pods.is_empty()
            && self.new_pods.is_empty()
            && self.new_containers.is_empty()
            && self.moved.is_empty()
            && self.resized.is_empty()
            && self.resized_pods.is_empty()
    }
}

impl View {
    /// Stores container `c` as the plugins were told of it: in state
    /// `told` when the event says so, and never in a state before the
    /// one they already had (an event may carry an older state than an
    /// earlier one told them).
    pub(crate) fn store_container(&mut self, mut c: Container, told: Option<ContainerState>) {
        if let Some(s) = told
            && rank(s as i32) > rank(c.state)
        {
            c.state = s as i32;
        }
        if let Some(old) = self.containers.get(&c.id)
            && rank(old.state) > rank(c.state)
        {
            c.state = old.state;
        }
        self.containers.insert(c.id.clone(), c);
    }

    /// The pod of `c`, from this view (or an empty pod with its id).
    pub(crate) fn pod_of(&self, c: &Container) -> PodSandbox {
        self.pods
            .get(&c.pod_sandbox_id)
            .cloned()
            .unwrap_or_else(|| PodSandbox {
                id: c.pod_sandbox_id.clone(),
                ..Default::default()
            })
    }

    /// Replaces the view with the runtime's lists (before the plugin side
    /// has started: nobody has been told anything yet).
    pub(crate) fn replace(&mut self, pods: Vec<PodSandbox>, containers: Vec<Container>) {
        self.pods = pods.into_iter().map(|p| (p.id.clone(), p)).collect();
        self.containers = containers.into_iter().map(|c| (c.id.clone(), c)).collect();
        self.stopped_pods.clear();
    }

    /// Compares the view with the runtime's lists after a reconnection:
    /// refreshes what both have in the same state with the same resources,
    /// returns what went, what appeared, the containers whose state moved
    /// on and the pods and containers whose resources changed. The view
    /// itself keeps what went, lacks what appeared and keeps the old state
    /// and resources of what moved or changed until the plugins have been
    /// told (see
    /// [`crate::event::Upcall::deliver`]).
    pub(crate) fn resync(&mut self, pods: Vec<PodSandbox>, containers: Vec<Container>) -> Changes {
        let new = View {
            pods: pods.into_iter().map(|p| (p.id.clone(), p)).collect(),
            containers: containers.into_iter().map(|c| (c.id.clone(), c)).collect(),
            stopped_pods: BTreeSet::new(),
        };
        let mut ch = Changes::default();
        for (id, c) in &self.containers {
            if !new.containers.contains_key(id) {
                ch.gone_containers.push((self.pod_of(c), c.clone()));
            }
        }
        for (id, p) in &self.pods {
            if !new.pods.contains_key(id) {
                ch.gone_pods
                    .push((p.clone(), self.stopped_pods.contains(id)));
            }
        }
        for (id, p) in &new.pods {
            if !self.pods.contains_key(id) {
                ch.new_pods.push(p.clone());
            }
        }
        for (id, c) in &new.containers {
            if !self.containers.contains_key(id) {
                ch.new_containers.push((new.pod_of(c), c.clone()));
            }
        }
        for (id, p) in new.pods {
            let Some(old) = self.pods.get_mut(&id) else {
                continue;
            };
            if pod_resources(old) == pod_resources(&p) {
                *old = p;
            } else {
                ch.resized_pods.push(p);
            }
        }
        for (id, c) in new.containers {
            let Some(old) = self.containers.get(&id) else {
                continue;
            };
            let (resized, moved) = (
                old.resources() != c.resources(),
                moved_on(old.state, c.state),
            );
            if resized {
                // Told in the state the plugins know it in: the state
                // change, if any, is an event of its own.
                let mut r = c.clone();
                r.state = old.state;
                ch.resized.push((self.pod_of(&c), r));
            }
            if moved {
                ch.moved.push((self.pod_of(&c), c));
            } else if !resized {
                self.store_container(c, None);
            }
        }
        ch
    }
}

/// What PostUpdatePodSandbox tells of a pod: its resources, its pod-level
/// resources and overhead.
fn pod_resources(
    p: &PodSandbox,
) -> (
    Option<&nri_api::api::LinuxResources>,
    Option<&nri_api::api::LinuxResources>,
    Option<&nri_api::api::LinuxResources>,
) {
    (p.resources(), p.pod_resources(), p.pod_overhead())
}

/// Whether a container's state moved from `old` to `new` in a way the
/// plugins learn by an event: it started (created to running or paused),
/// or it exited (to stopped from any other state). A container does not
/// come back from stopped.
fn moved_on(old: i32, new: i32) -> bool {
    use nri_api::api::ContainerState as S;
    let (created, running, paused, stopped) = (
        S::ContainerCreated as i32,
        S::ContainerRunning as i32,
        S::ContainerPaused as i32,
        S::ContainerStopped as i32,
    );
    (old == created && (new == running || new == paused)) || (old != stopped && new == stopped)
}

/// The order of container states in a container's life: created, then
/// running or paused, then stopped (unknown first).
pub(crate) fn rank(state: i32) -> u8 {
    use nri_api::api::ContainerState as S;
    match S::try_from(state) {
        Ok(S::ContainerCreated) => 1,
        Ok(S::ContainerRunning | S::ContainerPaused) => 2,
        Ok(S::ContainerStopped) => 3,
        _ => 0,
    }
}

/// The view, and whether the plugin side has started (before it has,
/// events only update the view).
#[derive(Debug, Default)]
pub(crate) struct Gate {
    pub(crate) view: View,
    pub(crate) started: bool,
}

/// Shared [`Gate`], and the order of deliveries.
#[derive(Debug, Default)]
pub(crate) struct State {
    gate: Mutex<Gate>,
    /// The order of deliveries: the runtime's order per pod, and
    /// resynchronizations between what came before and after them.
    pub(crate) order: Arc<crate::order::Order>,
}

impl State {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Gate> {
        self.gate.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the view if the plugin side has not started yet (and
    /// returns false); returns true, without running it, once it has.
    pub(crate) fn update_unless_started(&self, f: impl FnOnce(&mut View)) -> bool {
        let mut g = self.lock();
        if g.started {
            return true;
        }
        f(&mut g.view);
        false
    }

    /// Runs `f` on the view.
    pub(crate) fn update(&self, f: impl FnOnce(&mut View)) {
        f(&mut self.lock().view);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Upcall;
    use nri_api::api::{Event, LinuxResources};

    fn ctr(id: &str, state: ContainerState, limit: i64) -> Container {
        let mut r = LinuxResources::default();
        r.memory_mut().limit = Some(limit.into());
        let mut c = Container {
            id: id.to_owned(),
            pod_sandbox_id: "p".to_owned(),
            state: state as i32,
            ..Default::default()
        };
        c.linux.get_or_insert_default().resources = Some(r);
        c
    }

    fn pod(id: &str) -> PodSandbox {
        PodSandbox {
            id: id.to_owned(),
            ..Default::default()
        }
    }

    fn view(containers: Vec<Container>) -> View {
        let mut v = View::default();
        v.replace(vec![pod("p")], containers);
        v
    }

    const CREATED: ContainerState = ContainerState::ContainerCreated;
    const RUNNING: ContainerState = ContainerState::ContainerRunning;
    const STOPPED: ContainerState = ContainerState::ContainerStopped;

    #[test]
    fn a_resync_reports_resources_that_changed_and_keeps_the_old_ones_until_told() {
        let mut v = view(vec![
            ctr("same", RUNNING, 1),
            ctr("resized", RUNNING, 1),
            ctr("both", CREATED, 1),
        ]);
        let mut p = pod("p");
        p.linux.get_or_insert_default().pod_resources = Some(LinuxResources::default());
        let ch = v.resync(
            vec![p],
            vec![
                ctr("same", RUNNING, 1),
                ctr("resized", RUNNING, 2),
                ctr("both", STOPPED, 2),
            ],
        );
        let resized: Vec<_> = (ch.resized.iter())
            .map(|(_, c)| (c.id.as_str(), c.memory_limit(), c.state))
            .collect();
        assert_eq!(
            resized,
            [
                ("both", Some(2), CREATED as i32),
                ("resized", Some(2), RUNNING as i32)
            ],
            "told with the new resources, in the state the plugins know"
        );
        assert_eq!(ch.moved.len(), 1);
        assert_eq!(ch.resized_pods.len(), 1);
        assert_eq!(v.containers["resized"].memory_limit(), Some(1));
        assert_eq!(v.containers["both"].state, CREATED as i32);
        assert!(v.pods["p"].pod_resources().is_none());

        let events: Vec<_> = crate::resync::events(ch)
            .iter()
            .map(|u| (u.event(), u.id().to_owned()))
            .collect();
        assert_eq!(
            events,
            [
                (Event::PostUpdatePodSandbox, "p".to_owned()),
                (Event::PostUpdateContainer, "both".to_owned()),
                (Event::PostUpdateContainer, "resized".to_owned()),
                (Event::StopContainer, "both".to_owned()),
            ]
        );
    }

    #[test]
    fn the_view_keeps_the_state_the_plugins_were_told() {
        let mut v = view(vec![ctr("c", CREATED, 1)]);
        // containerd sends StartContainer before it marks the container
        // running: the plugins were told it started all the same.
        let start = Upcall::ContainerNote(Event::StartContainer, pod("p"), ctr("c", CREATED, 1));
        assert!(start.is_news(&v));
        start.apply(&mut v);
        assert_eq!(v.containers["c"].state, RUNNING as i32);
        assert!(!start.is_news(&v), "a second StartContainer is not news");
        // An event carrying an older state does not take the view back.
        Upcall::ContainerNote(Event::PostCreateContainer, pod("p"), ctr("c", CREATED, 1))
            .apply(&mut v);
        assert_eq!(v.containers["c"].state, RUNNING as i32);
        let stop = Upcall::Stop(pod("p"), ctr("c", RUNNING, 1));
        assert!(stop.is_news(&v));
        stop.apply(&mut v);
        assert_eq!(v.containers["c"].state, STOPPED as i32);
        assert!(
            !Upcall::Stop(pod("p"), ctr("c", STOPPED, 1)).is_news(&v),
            "an exit the plugins were told of (by a resync) is not told again"
        );
        let stop_pod = Upcall::PodNote(Event::StopPodSandbox, pod("p"));
        assert!(stop_pod.is_news(&v));
        stop_pod.apply(&mut v);
        assert!(!stop_pod.is_news(&v));
        assert!(Upcall::Remove(pod("p"), ctr("c", STOPPED, 1)).is_news(&v));
    }
}
