//! Order, scope and teardown of the events one instance saw.

use std::collections::{BTreeSet, HashMap, HashSet};

use serde::Serialize;

use super::{Violation, of, short, synced};
use crate::record::{EventKind, Record};

fn pod_allowed(last: EventKind, next: EventKind) -> bool {
    use EventKind::*;
    match last {
        RunPodSandbox | PostUpdatePodSandbox => matches!(next, UpdatePodSandbox | StopPodSandbox),
        UpdatePodSandbox => matches!(
            next,
            PostUpdatePodSandbox | UpdatePodSandbox | StopPodSandbox
        ),
        StopPodSandbox => next == RemovePodSandbox,
        _ => false,
    }
}

fn container_allowed(last: EventKind, next: EventKind, started: bool) -> bool {
    use EventKind::*;
    match last {
        // A creation that fails (in the runtime or a later plugin) may be
        // undone with Stop/Remove without PostCreate.
        CreateContainer | ValidateContainerAdjustment => matches!(
            next,
            ValidateContainerAdjustment | PostCreateContainer | StopContainer | RemoveContainer
        ),
        PostCreateContainer => matches!(next, StartContainer | UpdateContainer | StopContainer),
        StartContainer => matches!(next, PostStartContainer | StopContainer),
        PostStartContainer => matches!(next, UpdateContainer | StopContainer),
        UpdateContainer => matches!(next, PostUpdateContainer | UpdateContainer | StopContainer),
        PostUpdateContainer => {
            matches!(next, UpdateContainer | StopContainer) || (next == StartContainer && !started)
        }
        StopContainer => next == RemoveContainer,
        _ => false,
    }
}

/// Pod order: per pod, `RunPodSandbox -> (UpdatePodSandbox ->
/// PostUpdatePodSandbox)* -> StopPodSandbox -> RemovePodSandbox`. Pods in the
/// instance's Synchronize may start anywhere; pods in `undone` (whose
/// RunPodSandbox failed) may be torn down without their RunPodSandbox (the
/// runtime undoes the failed run towards every plugin, also those after
/// the one that failed it). Codes: `X-after-Y` (Y the pod's previous event)
/// and `X-without-RunPodSandbox`.
pub fn check_pod_order(
    records: &[Record],
    instance: &str,
    undone: &HashSet<String>,
) -> Vec<Violation> {
    let (sync_pods, _) = synced(records, instance);
    let mut last: HashMap<&str, EventKind> = HashMap::new();
    let mut out = Vec::new();
    for r in of(records, instance) {
        let Some((ev, pod, None)) = r.as_event() else {
            continue;
        };
        match last.get(pod.id.as_str()).copied() {
            None if ev == EventKind::RunPodSandbox || sync_pods.contains(&pod.id) => {}
            None if ev == EventKind::StopPodSandbox && undone.contains(&pod.id) => {}
            None => out.push(Violation::new(
                format!("{ev}-without-RunPodSandbox"),
                format!(
                    "pod {} ({}): {ev} without RunPodSandbox",
                    pod.name,
                    short(&pod.id)
                ),
            )),
            Some(prev) if pod_allowed(prev, ev) => {}
            Some(prev) => out.push(Violation::new(
                format!("{ev}-after-{prev}"),
                format!("pod {} ({}): {ev} after {prev}", pod.name, short(&pod.id)),
            )),
        }
        last.insert(&pod.id, ev);
    }
    out
}

/// Container order: per container, `CreateContainer ->
/// (ValidateContainerAdjustment) -> PostCreateContainer -> StartContainer ->
/// PostStartContainer -> (UpdateContainer -> PostUpdateContainer)* ->
/// StopContainer -> RemoveContainer`; an update may also come before the
/// start, and a failed creation may be undone right after CreateContainer,
/// or without it for containers in `undone` (whose creation failed, undone
/// towards every plugin). A Post* event out of place is reported once and
/// does not move the container's lifecycle. Codes: `X-after-Y` and
/// `X-without-CreateContainer`.
pub fn check_container_order(
    records: &[Record],
    instance: &str,
    undone: &HashSet<String>,
) -> Vec<Violation> {
    let (_, sync_ctrs) = synced(records, instance);
    let mut last: HashMap<&str, (EventKind, bool)> = HashMap::new();
    let mut out = Vec::new();
    for r in of(records, instance) {
        let Some((ev, _, Some(c))) = r.as_event() else {
            continue;
        };
        let prev = last.get(c.id.as_str()).copied();
        let started_before = prev.is_some_and(|(_, s)| s) || sync_ctrs.contains(&c.id);
        match prev {
            None if ev == EventKind::CreateContainer || sync_ctrs.contains(&c.id) => {}
            None if ev == EventKind::StopContainer && undone.contains(&c.id) => {}
            None => out.push(Violation::new(
                format!("{ev}-without-CreateContainer"),
                format!(
                    "container {} ({}): {ev} without CreateContainer",
                    c.name,
                    short(&c.id)
                ),
            )),
            Some((p, started)) if container_allowed(p, ev, started) => {}
            Some((p, _)) => {
                out.push(Violation::new(
                    format!("{ev}-after-{p}"),
                    format!("container {} ({}): {ev} after {p}", c.name, short(&c.id)),
                ));
                if is_post(ev) {
                    // A notification that came late: the lifecycle goes on
                    // from where it was (one finding, not two).
                    continue;
                }
            }
        }
        last.insert(
            &c.id,
            (ev, started_before || ev == EventKind::StartContainer),
        );
    }
    out
}

fn is_post(ev: EventKind) -> bool {
    matches!(
        ev,
        EventKind::PostCreateContainer
            | EventKind::PostStartContainer
            | EventKind::PostUpdateContainer
    )
}

/// Pod scope: no container event before its pod's `RunPodSandbox` (unless
/// the pod came in Synchronize) or after its `RemovePodSandbox`. Codes:
/// `X-before-RunPodSandbox`, `X-after-RemovePodSandbox`.
pub fn check_pod_scope(records: &[Record], instance: &str) -> Vec<Violation> {
    let (sync_pods, _) = synced(records, instance);
    let mut run: HashSet<&str> = HashSet::new();
    let mut removed: HashSet<&str> = HashSet::new();
    let mut out = Vec::new();
    for r in of(records, instance) {
        let Some((ev, pod, ctr)) = r.as_event() else {
            continue;
        };
        match (ev, ctr) {
            (EventKind::RunPodSandbox, None) => {
                run.insert(&pod.id);
            }
            (EventKind::RemovePodSandbox, None) => {
                removed.insert(&pod.id);
            }
            (_, None) => {}
            (_, Some(c)) => {
                let pid = if c.pod_id.is_empty() {
                    &pod.id
                } else {
                    &c.pod_id
                };
                if removed.contains(pid.as_str()) {
                    out.push(Violation::new(
                        format!("{ev}-after-RemovePodSandbox"),
                        format!(
                            "container {} ({}): {ev} after RemovePodSandbox of pod {}",
                            c.name,
                            short(&c.id),
                            pod.name
                        ),
                    ));
                } else if !run.contains(pid.as_str()) && !sync_pods.contains(pid) {
                    out.push(Violation::new(
                        format!("{ev}-before-RunPodSandbox"),
                        format!(
                            "container {} ({}): {ev} before RunPodSandbox of pod {}",
                            c.name,
                            short(&c.id),
                            pod.name
                        ),
                    ));
                }
            }
        }
    }
    out
}

/// What the teardown check expects.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TeardownExpectation {
    /// Pods (ids) that were removed: each needs StopPodSandbox and
    /// RemovePodSandbox.
    pub pods: Vec<String>,
    /// Containers (ids) that were created and then removed (directly or with
    /// their pod): each needs StopContainer and RemoveContainer.
    pub containers: Vec<String>,
    /// Creations that failed, as (pod id, container name): a plugin that saw
    /// their CreateContainer needs StopContainer and RemoveContainer too, or
    /// it keeps whatever it reserved for them.
    pub failed_creates: Vec<(String, String)>,
}

/// Teardown: every expected pod gets StopPodSandbox and RemovePodSandbox,
/// every expected container StopContainer and RemoveContainer, and every
/// failed creation the instance saw is undone with both. Codes:
/// `pod-without-StopPodSandbox`, `pod-without-RemovePodSandbox`,
/// `container-without-StopContainer`, `container-without-RemoveContainer`,
/// `failed-create-without-StopContainer`, `failed-create-without-RemoveContainer`.
pub fn check_teardown(
    records: &[Record],
    instance: &str,
    expect: &TeardownExpectation,
) -> Vec<Violation> {
    let mut seen: HashMap<&str, BTreeSet<EventKind>> = HashMap::new();
    let mut names: HashMap<&str, &str> = HashMap::new();
    let mut failed_ids: Vec<(&str, &str)> = Vec::new();
    for r in of(records, instance) {
        let Some((ev, pod, ctr)) = r.as_event() else {
            continue;
        };
        let (id, name) = match ctr {
            Some(c) => (c.id.as_str(), c.name.as_str()),
            None => (pod.id.as_str(), pod.name.as_str()),
        };
        seen.entry(id).or_default().insert(ev);
        names.insert(id, name);
        if let (EventKind::CreateContainer, Some(c)) = (ev, ctr) {
            let pid = if c.pod_id.is_empty() {
                &pod.id
            } else {
                &c.pod_id
            };
            if expect
                .failed_creates
                .iter()
                .any(|(p, n)| p == pid && n == &c.name)
            {
                failed_ids.push((&c.id, &c.name));
            }
        }
    }
    let mut out = Vec::new();
    let mut need = |what: &str, id: &str, name: &str, evs: &[EventKind]| {
        for ev in evs {
            if !seen.get(id).is_some_and(|s| s.contains(ev)) {
                out.push(Violation::new(
                    format!("{what}-without-{ev}"),
                    format!("{what} {name} ({}): no {ev}", short(id)),
                ));
            }
        }
    };
    for id in &expect.pods {
        let name = names.get(id.as_str()).copied().unwrap_or("?");
        need(
            "pod",
            id,
            name,
            &[EventKind::StopPodSandbox, EventKind::RemovePodSandbox],
        );
    }
    for id in &expect.containers {
        let name = names.get(id.as_str()).copied().unwrap_or("?");
        need(
            "container",
            id,
            name,
            &[EventKind::StopContainer, EventKind::RemoveContainer],
        );
    }
    for (id, name) in failed_ids {
        need(
            "failed-create",
            id,
            name,
            &[EventKind::StopContainer, EventKind::RemoveContainer],
        );
    }
    out
}
