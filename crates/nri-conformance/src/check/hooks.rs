//! What the runtime shows through CRI while a plugin holds (or fails) a
//! RunPodSandbox, CreateContainer or StopPodSandbox hook.
//!
//! A probe made while the hook was held is `Some(result)`; `None` means the
//! probe did not finish within the hold (the runtime's request timeout
//! bounds it), which makes that part inconclusive, never a violation.

use serde::Serialize;

use super::{Violation, of, short};
use crate::cri::{ContainerState, ContainerStatus, PodState, PodStatus};
use crate::record::{EventKind, Record};

/// What the runtime showed while StopPodSandbox was held.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StopPodStateOutcome {
    /// The pod's id.
    pub pod: String,
    /// Its containers (started before the stop).
    pub containers: Vec<String>,
    /// Whether StopPodSandbox reached the holding plugin.
    pub held: bool,
    /// The pod's containers as listed during the hold.
    pub listed: Option<Result<Vec<ContainerStatus>, String>>,
    /// The pod's status during the hold.
    pub pod_status: Option<Result<PodStatus, String>>,
    /// The error of the stop (`None`: it worked).
    pub stop_error: Option<String>,
    /// How many tries it took (a first try can miss a holding instance the
    /// runtime has not made active yet; the outcome is the last try's).
    pub attempts: u32,
}

/// Stop-pod state: when StopPodSandbox reaches plugins, every container of
/// the pod has exited (still listed, as EXITED; its StopContainer reached
/// `instance` before the StopPodSandbox) and the pod's status can still be
/// read. Codes: `StopPodSandbox-not-held`, `container-running-during-StopPodSandbox`,
/// `container-not-listed-during-StopPodSandbox`, `list-failed-during-StopPodSandbox`,
/// `pod-status-unavailable-during-StopPodSandbox`, `StopPodSandbox-before-StopContainer`,
/// `stop-pod-failed`.
pub fn check_stop_pod_state(
    records: &[Record],
    instance: &str,
    o: &StopPodStateOutcome,
) -> Vec<Violation> {
    let mut out = Vec::new();
    let pid = short(&o.pod);
    if let Some(e) = &o.stop_error {
        out.push(Violation::new(
            "stop-pod-failed",
            format!("stopping pod {pid} failed: {e}"),
        ));
    }
    if !o.held {
        out.push(Violation::new(
            "StopPodSandbox-not-held",
            format!("StopPodSandbox of pod {pid} never reached the holding plugin"),
        ));
        return out;
    }
    match &o.listed {
        Some(Ok(list)) => {
            for id in &o.containers {
                match list.iter().find(|c| &c.id == id) {
                    None => out.push(Violation::new(
                        "container-not-listed-during-StopPodSandbox",
                        format!("container {} not listed during StopPodSandbox", short(id)),
                    )),
                    Some(c) if c.state != ContainerState::Exited => out.push(Violation::new(
                        "container-running-during-StopPodSandbox",
                        format!(
                            "container {} is {:?} while StopPodSandbox runs",
                            short(id),
                            c.state
                        ),
                    )),
                    Some(_) => {}
                }
            }
        }
        Some(Err(e)) => out.push(Violation::new(
            "list-failed-during-StopPodSandbox",
            format!("listing the containers of pod {pid} during StopPodSandbox failed: {e}"),
        )),
        None => {}
    }
    if let Some(Err(e)) = &o.pod_status {
        out.push(Violation::new(
            "pod-status-unavailable-during-StopPodSandbox",
            format!("the status of pod {pid} could not be read during StopPodSandbox: {e}"),
        ));
    }
    let stop_pod = of(records, instance).find(|r| {
        r.as_event()
            .is_some_and(|(e, p, c)| e == EventKind::StopPodSandbox && c.is_none() && p.id == o.pod)
    });
    if let Some(sp) = stop_pod {
        for id in &o.containers {
            let stopped_before = of(records, instance).any(|r| {
                r.seq < sp.seq
                    && r.as_event().is_some_and(|(e, _, c)| {
                        e == EventKind::StopContainer && c.is_some_and(|c| &c.id == id)
                    })
            });
            if !stopped_before {
                out.push(Violation::new(
                    "StopPodSandbox-before-StopContainer",
                    format!(
                        "pod {pid}: StopPodSandbox before StopContainer of {}",
                        short(id)
                    ),
                ));
            }
        }
    }
    out
}

/// What happened when a plugin failed the first RunPodSandbox of a pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RunErrorOutcome {
    /// The pod's name.
    pub name: String,
    /// The error of the refused run (`None`: it succeeded).
    pub failed_error: Option<String>,
    /// The sandbox id of the refused attempt (from its RunPodSandbox).
    pub attempted: Option<String>,
    /// Pods listed afterwards with that name or id.
    pub left_behind: Vec<String>,
    /// The error of the retry with the same config (`None`: it worked).
    pub retry_error: Option<String>,
    /// The retried pod's state.
    pub retry_state: Option<Result<PodState, String>>,
    /// How many pods it took to reach the refusing plugin (a first run can
    /// miss a plugin the runtime has not made active yet; the outcome is
    /// the last one's).
    pub attempts: u32,
}

/// Run-pod error: the refused RunPodSandbox fails, nothing is listed
/// afterwards, plugins that saw its RunPodSandbox (`instance`) get
/// StopPodSandbox and RemovePodSandbox for it, and a retry works. Codes:
/// `refused-run-succeeded`, `failed-pod-listed`,
/// `failed-run-without-StopPodSandbox`, `failed-run-without-RemovePodSandbox`,
/// `retry-failed`, `retry-blocked-by-failed-pod` (the retry failed because
/// the failed pod left behind still holds the name: a consequence of
/// `failed-pod-listed`), `retry-not-ready`.
pub fn check_run_error(records: &[Record], instance: &str, o: &RunErrorOutcome) -> Vec<Violation> {
    let mut out = Vec::new();
    if o.failed_error.is_none() {
        out.push(Violation::new(
            "refused-run-succeeded",
            format!(
                "pod {} ran although a plugin failed its RunPodSandbox",
                o.name
            ),
        ));
    } else if !o.left_behind.is_empty() {
        out.push(Violation::new(
            "failed-pod-listed",
            format!(
                "the failed pod {} is still listed ({})",
                o.name,
                o.left_behind
                    .iter()
                    .map(|i| short(i))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    if let (Some(id), Some(_)) = (&o.attempted, &o.failed_error) {
        for ev in [EventKind::StopPodSandbox, EventKind::RemovePodSandbox] {
            let seen = of(records, instance).any(|r| {
                r.as_event()
                    .is_some_and(|(e, p, c)| e == ev && c.is_none() && &p.id == id)
            });
            if !seen {
                out.push(Violation::new(
                    format!("failed-run-without-{ev}"),
                    format!(
                        "{instance} saw RunPodSandbox of the failed pod {} ({}) but no {ev}",
                        o.name,
                        short(id)
                    ),
                ));
            }
        }
    }
    if let Some(e) = &o.retry_error {
        let blocked_by = o.left_behind.iter().find(|id| e.contains(id.as_str()));
        out.push(match blocked_by {
            Some(id) => Violation::new(
                "retry-blocked-by-failed-pod",
                format!(
                    "running pod {} again failed because the failed pod left behind ({}) \
                     still holds its name: {e}",
                    o.name,
                    short(id)
                ),
            ),
            None => Violation::new(
                "retry-failed",
                format!("running pod {} again failed: {e}", o.name),
            ),
        });
    } else if !matches!(o.retry_state, Some(Ok(PodState::Ready))) {
        out.push(Violation::new(
            "retry-not-ready",
            format!(
                "the retried pod {} is not ready: {:?}",
                o.name, o.retry_state
            ),
        ));
    }
    out
}

/// What the runtime showed while RunPodSandbox was held.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RunBlockedOutcome {
    /// The pod's name.
    pub name: String,
    /// The id of the pod held in RunPodSandbox (`None`: never reached).
    pub held: Option<String>,
    /// Its state in the pod list during the hold (`Ok(None)`: not listed).
    pub listed: Option<Result<Option<PodState>, String>>,
    /// Its status during the hold (`Err`: not found, as it should be).
    pub status: Option<Result<PodState, String>>,
    /// A container creation in the held pod (`Ok(id)`: it worked; `None`:
    /// not answered within the hold, inconclusive).
    pub create_while_held: Option<Result<String, String>>,
    /// The error of the RunPodSandbox (`None`: it worked once released).
    pub run_error: Option<String>,
    /// The pod's status after the run.
    pub state_after: Option<Result<PodState, String>>,
    /// The error of a creation in the pod after the run.
    pub create_after_error: Option<String>,
    /// How many tries it took (a first try can miss a holding instance the
    /// runtime has not made active yet; the outcome is the last try's).
    pub attempts: u32,
}

/// Run-pod blocked: while a plugin holds RunPodSandbox the pod is not listed
/// (in any state), its status is not ready, and no container can be created
/// in it; once released the run succeeds, the pod is ready and takes
/// containers. Codes: `RunPodSandbox-not-held`,
/// `pod-listed-ready-during-RunPodSandbox`, `pod-listed-during-RunPodSandbox`,
/// `list-failed-during-RunPodSandbox`, `pod-ready-during-RunPodSandbox`,
/// `create-in-held-pod-succeeded`, `run-failed-after-release`,
/// `pod-not-ready-after-release`, `create-after-release-failed`.
pub fn check_run_blocked(o: &RunBlockedOutcome) -> Vec<Violation> {
    let mut out = Vec::new();
    let n = &o.name;
    let v = |c: &str, m: String| Violation::new(c, m);
    if o.held.is_none() {
        out.push(v(
            "RunPodSandbox-not-held",
            format!("RunPodSandbox of {n} never reached the holding plugin"),
        ));
    }
    match &o.listed {
        Some(Ok(Some(PodState::Ready))) => out.push(v(
            "pod-listed-ready-during-RunPodSandbox",
            format!("pod {n} is listed ready while RunPodSandbox is held"),
        )),
        Some(Ok(Some(s))) => out.push(v(
            "pod-listed-during-RunPodSandbox",
            format!("pod {n} is listed ({s:?}) while RunPodSandbox is held"),
        )),
        Some(Err(e)) => out.push(v(
            "list-failed-during-RunPodSandbox",
            format!("listing pods while RunPodSandbox of {n} is held failed: {e}"),
        )),
        Some(Ok(None)) | None => {}
    }
    if let Some(Ok(PodState::Ready)) = &o.status {
        out.push(v(
            "pod-ready-during-RunPodSandbox",
            format!("pod {n} reports ready while RunPodSandbox is held"),
        ));
    }
    if let Some(Ok(id)) = &o.create_while_held {
        out.push(v(
            "create-in-held-pod-succeeded",
            format!(
                "container {} was created in pod {n} while its RunPodSandbox was held",
                short(id)
            ),
        ));
    }
    if let Some(e) = &o.run_error {
        out.push(v(
            "run-failed-after-release",
            format!("RunPodSandbox of {n} failed after the hold: {e}"),
        ));
        return out;
    }
    if !matches!(o.state_after, Some(Ok(PodState::Ready))) {
        out.push(v(
            "pod-not-ready-after-release",
            format!("pod {n} is not ready after the run: {:?}", o.state_after),
        ));
    }
    if let Some(e) = &o.create_after_error {
        out.push(v(
            "create-after-release-failed",
            format!("creating a container in pod {n} after the run failed: {e}"),
        ));
    }
    out
}

/// What the runtime showed while CreateContainer was held.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CreateBlockedOutcome {
    /// The container's name.
    pub name: String,
    /// The id of the container held in CreateContainer (`None`: never reached).
    pub held: Option<String>,
    /// Its state in the pod's container list during the hold (`Ok(None)`:
    /// not listed).
    pub listed: Option<Result<Option<ContainerState>, String>>,
    /// Its status during the hold (`Err`: not found).
    pub status: Option<Result<ContainerState, String>>,
    /// The error of the creation (`None`: it worked once released).
    pub create_error: Option<String>,
    /// Its status after the creation.
    pub state_after: Option<Result<ContainerState, String>>,
    /// How many tries it took (a first try can miss a holding instance the
    /// runtime has not made active yet; the outcome is the last try's).
    pub attempts: u32,
}

/// Create blocked: while a plugin holds CreateContainer the container is not
/// listed (in any state) and its status is not CREATED; once released the
/// creation succeeds and the container is CREATED. Codes:
/// `CreateContainer-not-held`, `container-listed-created-during-CreateContainer`,
/// `container-listed-during-CreateContainer`, `list-failed-during-CreateContainer`,
/// `container-created-during-CreateContainer`, `create-failed-after-release`,
/// `not-created-after-release`.
pub fn check_create_blocked(o: &CreateBlockedOutcome) -> Vec<Violation> {
    let mut out = Vec::new();
    let n = &o.name;
    let v = |c: &str, m: String| Violation::new(c, m);
    if o.held.is_none() {
        out.push(v(
            "CreateContainer-not-held",
            format!("CreateContainer of {n} never reached the holding plugin"),
        ));
    }
    match &o.listed {
        Some(Ok(Some(ContainerState::Created))) => out.push(v(
            "container-listed-created-during-CreateContainer",
            format!("container {n} is listed as created while CreateContainer is held"),
        )),
        Some(Ok(Some(s))) => out.push(v(
            "container-listed-during-CreateContainer",
            format!("container {n} is listed ({s:?}) while CreateContainer is held"),
        )),
        Some(Err(e)) => out.push(v(
            "list-failed-during-CreateContainer",
            format!("listing containers while CreateContainer of {n} is held failed: {e}"),
        )),
        Some(Ok(None)) | None => {}
    }
    if let Some(Ok(ContainerState::Created)) = &o.status {
        out.push(v(
            "container-created-during-CreateContainer",
            format!("container {n} reports CREATED while CreateContainer is held"),
        ));
    }
    if let Some(e) = &o.create_error {
        out.push(v(
            "create-failed-after-release",
            format!("creating {n} failed after the hold: {e}"),
        ));
    } else if !matches!(o.state_after, Some(Ok(ContainerState::Created))) {
        out.push(v(
            "not-created-after-release",
            format!(
                "container {n} is not CREATED after the creation: {:?}",
                o.state_after
            ),
        ));
    }
    out
}
