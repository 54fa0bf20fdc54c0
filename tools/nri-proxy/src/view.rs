//! The proxy's view of the runtime's pods and containers: what its plugins
//! are synchronized from, and what a resynchronization is compared with.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use nri_api::api::{Container, PodSandbox};

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
}

impl Changes {
    /// Whether nothing changed.
    pub(crate) fn is_empty(&self) -> bool {
        self.gone_containers.is_empty()
            && self.gone_pods.is_empty()
            && self.new_pods.is_empty()
            && self.new_containers.is_empty()
            && self.moved.is_empty()
    }
}

impl View {
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
    /// refreshes what both have in the same state, returns what went, what
    /// appeared and the containers whose state moved on. The view itself
    /// keeps what went, lacks what appeared and keeps the old state of
    /// what moved until the plugins have been told (see
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
            if let Some(old) = self.pods.get_mut(&id) {
                *old = p;
            }
        }
        for (id, c) in new.containers {
            if let Some(old) = self.containers.get_mut(&id) {
                if moved_on(old.state, c.state) {
                    ch.moved.push((self.pod_of(&c), c));
                } else {
                    *old = c;
                }
            }
        }
        ch
    }
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
