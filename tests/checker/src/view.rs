//! A plugin's view, rebuilt from what one connection instance saw, and the
//! lifecycle-order checks of invariant 1 on the way.
//!
//! The rules, per object, per instance (Synchronize counts as creation):
//! nothing reaches a plugin before its Synchronize; nothing after the
//! object's removal (nor a container event after its pod's removal);
//! nothing created twice (a Create of an object listed or created
//! before); for a plugin subscribed to the object's creation event, no
//! non-teardown event of an object it never heard of (Start before
//! Create); no Start of a started or stopped container, no Stop of a
//! stopped one, unless the state came from the Synchronize (an event that
//! happened while the plugin synchronized is delivered after its
//! snapshot, which may already show it). Teardown events of objects the
//! plugin never heard of are allowed: the teardown of a failed creation
//! reaches every subscribed plugin.

use std::collections::BTreeMap;

use nri_api::api::{ContainerState, Event};

use crate::invariants::Violation;
use crate::observe::{CtrView, Instance, Seen};
use crate::schedule::PluginSpec;

/// What the plugin believes about a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CtrBelief {
    /// Its pod.
    pub pod: String,
    /// `ContainerState` as an integer.
    pub state: i32,
    /// Memory limit as last seen in full (Synchronize, CreateContainer,
    /// PostUpdateContainer).
    pub mem: Option<i64>,
    /// The state came from the Synchronize.
    pub from_sync: bool,
    /// Removed.
    pub removed: bool,
}

/// What the plugin believes about a pod.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodBelief {
    /// Stopped.
    pub stopped: bool,
    /// Known from the Synchronize.
    pub from_sync: bool,
    /// Removed.
    pub removed: bool,
}

/// The view of one instance.
#[derive(Debug, Default)]
pub struct View {
    /// Pods heard of.
    pub pods: BTreeMap<String, PodBelief>,
    /// Containers heard of.
    pub ctrs: BTreeMap<String, CtrBelief>,
    /// The Synchronize has been seen (all of it).
    pub synced: bool,
    /// The connection ended.
    pub lost: bool,
}

const CREATED: i32 = ContainerState::ContainerCreated as i32;
const RUNNING: i32 = ContainerState::ContainerRunning as i32;
const STOPPED: i32 = ContainerState::ContainerStopped as i32;

fn is_teardown(e: Event) -> bool {
    matches!(
        e,
        Event::StopContainer
            | Event::RemoveContainer
            | Event::StopPodSandbox
            | Event::RemovePodSandbox
    )
}

/// Walks one instance; returns its view and the order violations.
pub fn walk(spec: &PluginSpec, inst: &Instance) -> (View, Vec<Violation>) {
    let mut w = Walker {
        spec,
        view: View::default(),
        out: Vec::new(),
    };
    for r in &inst.records {
        match &r.seen {
            Seen::Sync { pods, ctrs, more } => w.sync(pods, ctrs, *more),
            Seen::Event {
                event, pod, ctr, ..
            } => {
                if !w.view.synced {
                    w.flag(
                        "event-before-sync",
                        pod,
                        format!("{event} before the Synchronize"),
                    );
                }
                match ctr {
                    Some(c) if !event.is_pod_event() => w.ctr_event(*event, c),
                    _ => w.pod_event(*event, pod),
                }
            }
            Seen::Shutdown | Seen::Cut => {}
            Seen::Lost => w.view.lost = true,
        }
    }
    (w.view, w.out)
}

struct Walker<'a> {
    spec: &'a PluginSpec,
    view: View,
    out: Vec<Violation>,
}

impl Walker<'_> {
    fn flag(&mut self, kind: &'static str, object: &str, detail: String) {
        self.out.push(Violation::new(
            1,
            kind,
            Some(self.spec.full_name()),
            Some(object.to_owned()),
            detail,
        ));
    }

    fn sync(&mut self, pods: &[String], ctrs: &[CtrView], more: bool) {
        if self.view.synced {
            self.flag(
                "second-sync",
                "-",
                "a second Synchronize on one connection".into(),
            );
        }
        for p in pods {
            let b = PodBelief {
                from_sync: true,
                ..PodBelief::default()
            };
            if self.view.pods.insert(p.clone(), b).is_some() {
                self.flag(
                    "listed-twice",
                    p,
                    "pod listed twice in the Synchronize".into(),
                );
            }
        }
        for c in ctrs {
            let b = CtrBelief {
                pod: c.pod.clone(),
                state: c.state,
                mem: c.mem,
                from_sync: true,
                removed: false,
            };
            if self.view.ctrs.insert(c.id.clone(), b).is_some() {
                self.flag(
                    "listed-twice",
                    &c.id,
                    "container listed twice in the Synchronize".into(),
                );
            }
        }
        self.view.synced = !more;
    }

    fn pod_event(&mut self, e: Event, pod: &str) {
        let subscribed = self.spec.subscribed(Event::RunPodSandbox);
        let known = self.view.pods.get(pod).cloned();
        if known.as_ref().is_some_and(|b| b.removed) {
            self.flag("after-removal", pod, format!("{e} after RemovePodSandbox"));
            return;
        }
        match e {
            Event::RunPodSandbox => {
                if known.is_some() {
                    self.flag(
                        "created-twice",
                        pod,
                        "RunPodSandbox of a pod it already had".into(),
                    );
                }
                self.view.pods.insert(pod.into(), PodBelief::default());
            }
            Event::StopPodSandbox => {
                if known.as_ref().is_some_and(|b| b.stopped && !b.from_sync) {
                    self.flag("stopped-twice", pod, "StopPodSandbox twice".into());
                }
                let b = self.view.pods.entry(pod.into()).or_default();
                b.stopped = true;
                b.from_sync = false;
            }
            Event::RemovePodSandbox => self.remove_pod(pod),
            _ => {
                if known.is_none() && subscribed {
                    self.flag("never-created", pod, format!("{e} of a pod it never saw"));
                }
                self.view.pods.entry(pod.into()).or_default();
            }
        }
    }

    fn remove_pod(&mut self, pod: &str) {
        let left: Vec<String> = (self.view.ctrs.iter())
            .filter(|(_, c)| c.pod == pod && !c.removed)
            .map(|(id, _)| id.clone())
            .collect();
        if self.spec.subscribed(Event::RemoveContainer) && !left.is_empty() {
            let detail = format!("RemovePodSandbox while it still had containers {left:?}");
            self.flag("pod-removed-first", pod, detail);
        }
        self.view.pods.entry(pod.into()).or_default().removed = true;
    }

    fn ctr_event(&mut self, e: Event, c: &CtrView) {
        let id = c.id.as_str();
        if self.view.pods.get(&c.pod).is_some_and(|b| b.removed) {
            self.flag(
                "after-removal",
                id,
                format!("{e} after its pod {} was removed", c.pod),
            );
            return;
        }
        if !self.view.pods.contains_key(&c.pod) {
            if self.spec.subscribed(Event::RunPodSandbox) && !is_teardown(e) {
                self.flag(
                    "pod-never-created",
                    id,
                    format!("{e} in pod {} it never saw", c.pod),
                );
            }
            self.view.pods.insert(c.pod.clone(), PodBelief::default());
        }
        let known = self.view.ctrs.get(id).cloned();
        if known.as_ref().is_some_and(|b| b.removed) {
            self.flag("after-removal", id, format!("{e} after RemoveContainer"));
            return;
        }
        if e == Event::ValidateContainerAdjustment {
            return;
        }
        let Some(mut b) = known else {
            self.first_ctr_event(e, c);
            return;
        };
        self.transition(e, c, &mut b);
        self.view.ctrs.insert(id.to_owned(), b);
    }

    /// An event of a container the plugin never heard of.
    fn first_ctr_event(&mut self, e: Event, c: &CtrView) {
        let subscribed = self.spec.subscribed(Event::CreateContainer);
        if e != Event::CreateContainer && subscribed && !is_teardown(e) {
            self.flag(
                "never-created",
                &c.id,
                format!("{e} of a container it never saw"),
            );
        }
        let state = match e {
            Event::StartContainer | Event::PostStartContainer => RUNNING,
            Event::StopContainer | Event::RemoveContainer => STOPPED,
            Event::CreateContainer | Event::PostCreateContainer => CREATED,
            _ => c.state,
        };
        let b = CtrBelief {
            pod: c.pod.clone(),
            state,
            mem: c.mem,
            from_sync: false,
            removed: e == Event::RemoveContainer,
        };
        self.view.ctrs.insert(c.id.clone(), b);
    }

    fn transition(&mut self, e: Event, c: &CtrView, b: &mut CtrBelief) {
        let id = c.id.as_str();
        let lax = b.from_sync;
        match e {
            Event::CreateContainer => {
                self.flag(
                    "created-twice",
                    id,
                    "CreateContainer of a container it already had".into(),
                );
            }
            Event::StartContainer => {
                if b.state == RUNNING && !lax {
                    self.flag("started-twice", id, "StartContainer twice".into());
                } else if b.state == STOPPED && !lax {
                    self.flag(
                        "started-after-stop",
                        id,
                        "StartContainer after StopContainer".into(),
                    );
                }
                b.state = RUNNING;
                b.from_sync = false;
            }
            Event::StopContainer => {
                if b.state == STOPPED && !lax {
                    self.flag("stopped-twice", id, "StopContainer twice".into());
                }
                b.state = STOPPED;
                b.from_sync = false;
            }
            Event::RemoveContainer => {
                let stop_seen = self.spec.subscribed(Event::StopContainer);
                if b.state == RUNNING && stop_seen && !lax {
                    self.flag(
                        "removed-running",
                        id,
                        "RemoveContainer of a running container".into(),
                    );
                }
                b.removed = true;
            }
            Event::PostUpdateContainer => b.mem = c.mem,
            _ => {}
        }
    }
}
