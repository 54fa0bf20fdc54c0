//! The invariants every run is checked against, and the violations they
//! report (values, never panics).
//!
//! 1. Lifecycle order, per plugin connection instance (`view.rs`).
//! 2. After quiescence, each connected plugin's view equals the truth, as
//!    far as its subscription lets it know; and the truth is what the
//!    runtime asked for (no update applied after a newer one).
//! 3. Every request is answered within its deadline (paused time).
//! 4. Teardown never fails; a validator that fails makes the creation
//!    fail (fail closed); a `required` plugin absent for a whole creation
//!    fails it; a request failed "by" a plugin was failed by that plugin.
//! 5. Memory: what the library counts as known containers is the truth
//!    (checked by a probe at quiescence, `run.rs`).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use nri_api::api::Event;
use nri_runtime::ErrorClass;

use crate::model::{Model, Request, Truth};
use crate::observe::{Instance, Seen, lock};
use crate::schedule::{Fault, Mode, Peer, Policy, Setup};
use crate::view::{View, walk};

/// Slack on deadlines: time the library may spend after its last plugin
/// call (paused time does not move while code runs, so this is timers).
pub const DEADLINE_SLACK: Duration = Duration::from_millis(5);

/// One broken invariant, with its evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which invariant (1-5; 0 for liveness of the harness: a step that
    /// never finished, a plugin that never came back).
    pub invariant: u8,
    /// Short name of what broke (shrinking keeps a removal only while the
    /// same invariant and kind still fail).
    pub kind: &'static str,
    /// The plugin (`NN-name`), if one.
    pub plugin: Option<String>,
    /// The pod or container, if one.
    pub object: Option<String>,
    /// Expected against seen.
    pub detail: String,
}

impl Violation {
    /// A violation.
    pub fn new(
        invariant: u8,
        kind: &'static str,
        plugin: Option<String>,
        object: Option<String>,
        detail: String,
    ) -> Self {
        Violation {
            invariant,
            kind,
            plugin,
            object,
            detail,
        }
    }

    /// `invariant/kind`, what shrinking keeps failing.
    pub fn key(&self) -> (u8, &'static str) {
        (self.invariant, self.kind)
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invariant {} ({})", self.invariant, self.kind)?;
        if let Some(p) = &self.plugin {
            write!(f, " plugin {p}")?;
        }
        if let Some(o) = &self.object {
            write!(f, " object {o}")?;
        }
        write!(f, ": {}", self.detail)
    }
}

/// What the checks read after a run.
pub struct Evidence<'a> {
    /// The set-up.
    pub setup: &'a Setup,
    /// The model runtime.
    pub model: &'a Model,
    /// The truth at quiescence.
    pub truth: &'a Truth,
    /// Each slot's instances.
    pub instances: Vec<Vec<Instance>>,
    /// Which slots' plugins were active at quiescence.
    pub active: Vec<bool>,
}

/// Every check but the memory probe's.
pub fn check(ev: &Evidence<'_>) -> Vec<Violation> {
    let mut out = Vec::new();
    let requests = lock(&ev.model.requests).clone();
    let excused = excused(ev, &requests);
    for (slot, insts) in ev.instances.iter().enumerate() {
        let spec = &ev.setup.plugins[slot];
        for (k, inst) in insts.iter().enumerate() {
            let (view, mut v) = walk(spec, inst);
            v.retain(|x| {
                !x.object
                    .as_ref()
                    .is_some_and(|o| excused.contains(&(slot, o.clone())))
            });
            out.extend(v);
            if k + 1 == insts.len() && ev.active[slot] {
                out.extend(converged(ev, slot, inst, &view, &excused));
            }
        }
    }
    out.extend(asked_for(ev));
    out.extend(deadlines(ev.setup, &requests));
    out.extend(teardown_and_blame(ev, &requests));
    out.extend(required_absent(ev, &requests));
    out.extend(strikes(ev));
    out.extend(crate::wasm_checks::check(ev, &requests));
    out
}

/// Invariant 4, "a timeout fails one call": a plugin the runtime dropped
/// (its connection ended though neither the harness nor a crash cut it,
/// and no Shutdown came) had at least the strike limit of answers that
/// may have been late (a delay, a hang) in that connection. (WebAssembly
/// plugins: `wasm_checks.rs`.)
fn strikes(ev: &Evidence<'_>) -> Vec<Violation> {
    let mut out = Vec::new();
    for (slot, insts) in ev.instances.iter().enumerate() {
        let spec = &ev.setup.plugins[slot];
        if spec.peer == Peer::Wasm {
            continue;
        }
        for inst in insts {
            let mut late = 0;
            let mut events = 0;
            for r in &inst.records {
                match &r.seen {
                    Seen::Event { fault, .. } => {
                        events += 1;
                        late += u32::from(matches!(fault, Some(Fault::Delay(_) | Fault::Hang)));
                    }
                    Seen::Cut | Seen::Shutdown => break,
                    Seen::Lost if events > 0 && late < ev.setup.strikes => {
                        let detail = format!(
                            "the runtime dropped the plugin after {late} answers that may have been late, the strike limit is {}",
                            ev.setup.strikes
                        );
                        out.push(Violation::new(
                            4,
                            "struck-out-early",
                            Some(spec.full_name()),
                            None,
                            detail,
                        ));
                        break;
                    }
                    Seen::Lost => break,
                    Seen::Sync { .. } => {}
                }
            }
        }
    }
    out
}

/// Objects a plugin cannot be held to: their creation failed and the
/// runtime did not tell plugins (`undo` off). A plugin the runtime (or
/// the proxy) did not call for an event in time is held to it: it gets
/// the event afterwards.
fn excused(ev: &Evidence<'_>, requests: &[Request]) -> HashSet<(usize, String)> {
    let mut out = HashSet::new();
    for r in requests {
        let creation = matches!(r.event, Event::RunPodSandbox | Event::CreateContainer);
        if creation && !ev.setup.undo && !exists(ev.truth, &r.object) {
            for s in 0..ev.setup.plugins.len() {
                out.insert((s, r.object.clone()));
            }
        }
    }
    out
}

fn exists(t: &Truth, id: &str) -> bool {
    t.pods.contains_key(id) || t.ctrs.contains_key(id)
}

/// When each object's creation began, for the plugins: in proxy mode an
/// object created while the proxy was away begins for its plugins when it
/// resynchronizes (never, here: only subscribers are held to know it).
fn began(ev: &Evidence<'_>) -> HashMap<String, u64> {
    let mut began = lock(&ev.model.began).clone();
    if ev.setup.mode == Mode::Proxy {
        let requests = lock(&ev.model.requests);
        for r in requests.iter().filter(|r| !proxy_answered(r)) {
            if matches!(r.event, Event::RunPodSandbox | Event::CreateContainer) {
                began.insert(r.object.clone(), u64::MAX);
            }
        }
    }
    began
}

/// Invariant 2 for the last instance of an active plugin.
fn converged(
    ev: &Evidence<'_>,
    slot: usize,
    inst: &Instance,
    view: &View,
    excused: &HashSet<(usize, String)>,
) -> Vec<Violation> {
    let spec = &ev.setup.plugins[slot];
    let began = began(ev);
    let mut out = Vec::new();
    let mut flag = |kind: &'static str, id: &str, detail: String| {
        if !excused.contains(&(slot, id.to_owned())) {
            let p = Some(spec.full_name());
            out.push(Violation::new(2, kind, p, Some(id.to_owned()), detail));
        }
    };
    let must_know = |id: &str, creation: Event| {
        spec.subscribed(creation) || began.get(id).copied().unwrap_or(0) < inst.configured
    };
    for id in ev.truth.pods.keys() {
        let known = view.pods.get(id).is_some_and(|b| !b.removed);
        if !known && must_know(id, Event::RunPodSandbox) {
            flag(
                "lost",
                id,
                "the runtime has this pod, the plugin never heard of it".into(),
            );
        }
    }
    for (id, c) in &ev.truth.ctrs {
        let belief = view.ctrs.get(id).filter(|b| !b.removed);
        let Some(b) = belief else {
            if must_know(id, Event::CreateContainer) {
                flag(
                    "lost",
                    id,
                    "the runtime has this container, the plugin never heard of it".into(),
                );
            }
            continue;
        };
        let tracks_state =
            spec.subscribed(Event::StartContainer) && spec.subscribed(Event::StopContainer);
        if tracks_state && b.state != c.state {
            let detail = format!(
                "state {} in the runtime, {} for the plugin",
                c.state, b.state
            );
            flag("state", id, detail);
        }
        if spec.subscribed(Event::PostUpdateContainer) && b.mem != c.memory_limit() {
            let detail = format!(
                "memory {:?} in the runtime, {:?} for the plugin",
                c.memory_limit(),
                b.mem
            );
            flag("state", id, detail);
        }
    }
    for (id, b) in &view.pods {
        if !b.removed && !ev.truth.pods.contains_key(id) && spec.subscribed(Event::RemovePodSandbox)
        {
            flag(
                "stale",
                id,
                "the plugin still has a pod the runtime removed".into(),
            );
        }
    }
    for (id, b) in &view.ctrs {
        if !b.removed && !ev.truth.ctrs.contains_key(id) && spec.subscribed(Event::RemoveContainer)
        {
            flag(
                "stale",
                id,
                "the plugin still has a container the runtime removed".into(),
            );
        }
    }
    out
}

/// Invariant 2, the runtime's side: each container's memory limit is the
/// last one the runtime set (a late answer applied over a newer update is
/// a lost update).
fn asked_for(ev: &Evidence<'_>) -> Vec<Violation> {
    let asked = lock(&ev.model.asked_mem).clone();
    let mut out = Vec::new();
    for (id, c) in &ev.truth.ctrs {
        let want = asked.get(id).copied().flatten();
        if c.memory_limit() != want {
            out.push(Violation::new(
                2,
                "lost-update",
                None,
                Some(id.clone()),
                format!(
                    "memory limit {:?}, the runtime last set {:?}",
                    c.memory_limit(),
                    want
                ),
            ));
        }
    }
    out
}

/// Invariant 3.
fn deadlines(setup: &Setup, requests: &[Request]) -> Vec<Violation> {
    let mut out = Vec::new();
    for r in requests {
        if let Some(d) = r.deadline {
            if r.elapsed > d + DEADLINE_SLACK {
                out.push(Violation::new(
                    3,
                    "deadline",
                    None,
                    Some(r.object.clone()),
                    format!("{} took {:?}, deadline {d:?}", r.event, r.elapsed),
                ));
            }
        }
        if setup.mode == Mode::Proxy {
            let late = (r.reported.iter())
                .any(|(p, c)| p == crate::env::PROXY_NAME && *c == ErrorClass::Timeout)
                || (r.failed_by.as_deref() == Some(crate::env::PROXY_NAME)
                    && r.failed_class == Some(ErrorClass::Timeout));
            if late {
                out.push(Violation::new(
                    3,
                    "proxy-deadline",
                    Some(crate::env::PROXY_NAME.into()),
                    Some(r.object.clone()),
                    format!(
                        "the proxy did not answer {} within the runtime's timeout",
                        r.event
                    ),
                ));
            }
        }
    }
    out
}

fn is_teardown(e: Event) -> bool {
    matches!(
        e,
        Event::StopContainer
            | Event::RemoveContainer
            | Event::StopPodSandbox
            | Event::RemovePodSandbox
            | Event::PostCreateContainer
            | Event::PostStartContainer
            | Event::PostUpdateContainer
            | Event::PostUpdatePodSandbox
    )
}

/// The faults a slot committed per object (any instance).
fn faults_by_object(insts: &[Instance]) -> HashMap<(String, Event), Vec<Fault>> {
    let mut out: HashMap<(String, Event), Vec<Fault>> = HashMap::new();
    for i in insts {
        for r in &i.records {
            if let Seen::Event {
                event,
                pod,
                ctr,
                fault: Some(f),
                ..
            } = &r.seen
            {
                let id = ctr.as_ref().map_or(pod.clone(), |c| c.id.clone());
                out.entry((id, *event)).or_default().push(*f);
            }
        }
    }
    out
}

/// Invariant 4: teardown never fails; validators fail closed; a request
/// failed by a plugin's error was failed by a plugin that answered one.
fn teardown_and_blame(ev: &Evidence<'_>, requests: &[Request]) -> Vec<Violation> {
    let mut out = Vec::new();
    let faults: Vec<_> = ev.instances.iter().map(|i| faults_by_object(i)).collect();
    let created: HashMap<&str, &Request> = (requests.iter())
        .filter(|r| r.event == Event::CreateContainer)
        .map(|r| (r.object.as_str(), r))
        .collect();
    for r in requests {
        if is_teardown(r.event) && r.error.is_some() {
            let detail = format!("{} failed: {}", r.event, r.error.as_deref().unwrap_or(""));
            out.push(Violation::new(
                4,
                "teardown-failed",
                None,
                Some(r.object.clone()),
                detail,
            ));
        }
    }
    if ev.setup.mode == Mode::Runtime {
        for (slot, f) in faults.iter().enumerate() {
            for ((id, event), list) in f {
                let failing = list
                    .iter()
                    .any(|x| matches!(x, Fault::Error | Fault::Crash | Fault::Hang));
                if *event != Event::ValidateContainerAdjustment || !failing {
                    continue;
                }
                if created.get(id.as_str()).is_some_and(|r| r.error.is_none()) {
                    let p = Some(ev.setup.plugins[slot].full_name());
                    let detail = "the validator failed, the creation went on (fail closed)".into();
                    out.push(Violation::new(
                        4,
                        "validator-open",
                        p,
                        Some(id.clone()),
                        detail,
                    ));
                }
            }
        }
    }
    out
}

/// Invariant 4: a creation during which a `required` plugin had no
/// connection at all fails.
fn required_absent(ev: &Evidence<'_>, requests: &[Request]) -> Vec<Violation> {
    let mut out = Vec::new();
    for (slot, spec) in ev.setup.plugins.iter().enumerate() {
        if spec.policy != Policy::Required {
            continue;
        }
        let alive: Vec<(u64, u64)> = ev.instances[slot].iter().map(alive_span).collect();
        for r in requests {
            let creation = matches!(r.event, Event::RunPodSandbox | Event::CreateContainer);
            if ev.setup.mode == Mode::Proxy && !proxy_answered(r) {
                // A proxy the runtime did not reach cannot fail anything.
                continue;
            }
            let (start, end) = r.ticks;
            // Absent: not active where the runtime looked when the request
            // started (a plugin whose connection just ended may still be),
            // and no connection of it during the request.
            let looked = if ev.setup.mode == Mode::Proxy {
                &r.behind
            } else {
                &r.active
            };
            let name = spec.full_name();
            let present =
                looked.contains(&name) || alive.iter().any(|(a, b)| *a < end && *b > start);
            if creation && !present && r.error.is_none() {
                out.push(Violation::new(
                    4,
                    "required-absent",
                    Some(spec.full_name()),
                    Some(r.object.clone()),
                    format!(
                        "{} succeeded while the required plugin had no connection",
                        r.event
                    ),
                ));
            }
        }
    }
    out
}

/// Whether the proxy was active upstream when `r` started and answered it
/// (not reported as failed).
fn proxy_answered(r: &Request) -> bool {
    let name = crate::env::PROXY_NAME;
    r.active.iter().any(|p| p == name)
        && !r.reported.iter().any(|(p, _)| p == name)
        && r.failed_by.as_deref() != Some(name)
}

/// From the instance's Configure to its end (the first Lost or Shutdown),
/// or open.
fn alive_span(i: &Instance) -> (u64, u64) {
    let end = (i.records.iter())
        .find(|r| matches!(r.seen, Seen::Lost))
        .map_or(u64::MAX, |r| r.tick);
    (i.configured, end)
}
