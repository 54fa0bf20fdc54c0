//! Checks of what the driver observed through CRI (and the log).

use serde::Serialize;

use super::{Violation, of, short};
use crate::record::{EventKind, Record, RecordKind};

/// What happened when a plugin failed CreateContainer on purpose.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CreateErrorOutcome {
    /// The pod (id) of both creations.
    pub pod: String,
    /// The name of the refused container.
    pub refused_name: String,
    /// The error of the refused creation (`None`: it succeeded).
    pub refused_error: Option<String>,
    /// Whether a container of that name was listed in the pod afterwards.
    pub refused_listed: bool,
    /// The error of the next creation, in the same pod (`None`: it worked).
    pub next_error: Option<String>,
    /// The error of starting, stopping or removing the next container.
    pub next_lifecycle_error: Option<String>,
}

/// Create error: the refused creation fails and leaves no container (none
/// listed, none started: no StartContainer reaches `instance`); the next one
/// is created, started, stopped and removed. Codes:
/// `refused-create-succeeded`, `refused-container-listed`,
/// `refused-container-started`, `next-create-failed`, `next-lifecycle-failed`.
pub fn check_create_error(
    records: &[Record],
    instance: &str,
    o: &CreateErrorOutcome,
) -> Vec<Violation> {
    let mut out = Vec::new();
    if o.refused_error.is_none() {
        out.push(Violation::new(
            "refused-create-succeeded",
            "the container was created although a plugin answered CreateContainer with an error",
        ));
    } else if o.refused_listed {
        out.push(Violation::new(
            "refused-container-listed",
            format!(
                "the creation of {} failed but the container is listed in the pod",
                o.refused_name
            ),
        ));
    }
    let started = of(records, instance).any(|r| {
        r.as_event().is_some_and(|(e, p, c)| {
            e == EventKind::StartContainer
                && c.is_some_and(|c| {
                    c.name == o.refused_name && (c.pod_id == o.pod || p.id == o.pod)
                })
        })
    });
    if started {
        out.push(Violation::new(
            "refused-container-started",
            format!(
                "StartContainer for the refused container {}",
                o.refused_name
            ),
        ));
    }
    if let Some(e) = &o.next_error {
        out.push(Violation::new(
            "next-create-failed",
            format!("the next creation failed too: {e}"),
        ));
    } else if let Some(e) = &o.next_lifecycle_error {
        out.push(Violation::new(
            "next-lifecycle-failed",
            format!("the next container was created but: {e}"),
        ));
    }
    out
}

/// What happened when a plugin answered CreateContainer too late.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TimeoutOutcome {
    /// The runtime's request timeout (ms), as it told the plugin.
    pub request_timeout_ms: u64,
    /// How long the slow plugin waited before answering (ms).
    pub delay_ms: u64,
    /// The error of the slow creation (`None`: it succeeded).
    pub slow_error: Option<String>,
    /// How long the slow creation took (ms).
    pub slow_elapsed_ms: u64,
    /// Whether the runtime dropped the slow plugin's connection.
    pub disconnected: bool,
    /// Whether the slow plugin saw the next creation (it is still served).
    pub next_seen_by_slow_plugin: bool,
    /// The error of the next creation (`None`: it worked).
    pub next_error: Option<String>,
}

/// Request timeout, against our contract (a timeout fails that one event
/// for that plugin, counts a strike, does not disconnect on the first miss;
/// the next request works). Codes: `disconnected-on-first-timeout`,
/// `closed-plugin-still-called` (the slow creation failed with an error
/// about a closed connection: the runtime called the plugin it had just
/// dropped), `next-create-failed`.
pub fn check_request_timeout(o: &TimeoutOutcome) -> Vec<Violation> {
    let mut out = Vec::new();
    if o.disconnected || !o.next_seen_by_slow_plugin {
        out.push(Violation::new(
            "disconnected-on-first-timeout",
            format!(
                "the plugin was {} after one late answer ({} ms > timeout {} ms); the slow \
                 creation {} after {} ms",
                if o.disconnected {
                    "disconnected"
                } else {
                    "no longer called"
                },
                o.delay_ms,
                o.request_timeout_ms,
                match &o.slow_error {
                    None => "succeeded without it".to_owned(),
                    Some(e) => format!("failed ({e})"),
                },
                o.slow_elapsed_ms
            ),
        ));
    }
    if let Some(e) = o.slow_error.as_deref().filter(|e| e.contains("closed")) {
        out.push(Violation::new(
            "closed-plugin-still-called",
            format!(
                "after dropping the late plugin the runtime still called it in the same request \
                 and failed the creation: {e}"
            ),
        ));
    }
    if let Some(e) = &o.next_error {
        out.push(Violation::new(
            "next-create-failed",
            format!("the next creation failed: {e}"),
        ));
    }
    out
}

/// Shutdown: the instance got `Shutdown` before its connection ended.
/// Codes: `not-disconnected` (the runtime did not go away),
/// `no-Shutdown-before-disconnect`.
pub fn check_shutdown(records: &[Record], instance: &str) -> Vec<Violation> {
    let mut shutdown = false;
    for r in of(records, instance) {
        match &r.kind {
            RecordKind::Shutdown => shutdown = true,
            RecordKind::Disconnected { cause } => {
                if shutdown {
                    return Vec::new();
                }
                return vec![Violation::new(
                    "no-Shutdown-before-disconnect",
                    format!("connection ended without Shutdown: {cause}"),
                )];
            }
            _ => {}
        }
    }
    vec![Violation::new(
        "not-disconnected",
        "the runtime was asked to stop but the connection stayed up",
    )]
}

/// Sequence number of the first record of `instance` at or after `from`
/// that is `event` about object `id` (a container id for container events,
/// else a pod id).
fn first_seq(
    records: &[Record],
    instance: &str,
    event: EventKind,
    id: &str,
    from: u64,
) -> Option<u64> {
    of(records, instance)
        .filter(|r| r.seq >= from)
        .find(|r| is_event_about(r, event, id))
        .map(|r| r.seq)
}

fn is_event_about(r: &Record, event: EventKind, id: &str) -> bool {
    r.as_event().is_some_and(|(e, p, c)| {
        e == event
            && match c {
                Some(c) => c.id == id,
                None => p.id == id,
            }
    })
}

/// Records of `instance` in `[from, to)` that are `event` about pod `pod`
/// (for container events: any container of the pod).
fn count_in(
    records: &[Record],
    instance: &str,
    event: EventKind,
    pod: &str,
    (from, to): (u64, u64),
) -> usize {
    of(records, instance)
        .filter(|r| r.seq >= from && r.seq < to)
        .filter(|r| {
            r.as_event().is_some_and(|(e, p, c)| {
                e == event
                    && match c {
                        Some(c) => c.pod_id == pod || p.id == pod,
                        None => p.id == pod,
                    }
            })
        })
        .count()
}

/// What happened to a container that exited on its own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SelfExitOutcome {
    /// The container's id.
    pub container: String,
    /// Whether the runtime reported it exited (before the deadline).
    pub exited: bool,
    /// How long the checker waited for StopContainer after the exit (ms).
    pub waited_ms: u64,
    /// The log's length when the checker asked for the removal: records
    /// with a smaller `seq` came before it.
    pub remove_asked_seq: u64,
    /// The error of the removal (`None`: it worked).
    pub remove_error: Option<String>,
}

/// Self exit: a container that exits on its own gets StopContainer without
/// being asked to stop or be removed, and RemoveContainer after it. Codes:
/// `did-not-exit`, `no-StopContainer`, `StopContainer-only-on-remove`,
/// `RemoveContainer-before-StopContainer`, `no-RemoveContainer`,
/// `remove-failed`.
pub fn check_self_exit(records: &[Record], instance: &str, o: &SelfExitOutcome) -> Vec<Violation> {
    let id = short(&o.container);
    if !o.exited {
        return vec![Violation::new(
            "did-not-exit",
            format!("container {id} (command exits at once) was never reported exited"),
        )];
    }
    let mut out = Vec::new();
    let stop = first_seq(records, instance, EventKind::StopContainer, &o.container, 0);
    let remove = first_seq(
        records,
        instance,
        EventKind::RemoveContainer,
        &o.container,
        0,
    );
    match stop {
        None => out.push(Violation::new(
            "no-StopContainer",
            format!("container {id} exited on its own and never got StopContainer"),
        )),
        Some(s) if s >= o.remove_asked_seq => out.push(Violation::new(
            "StopContainer-only-on-remove",
            format!(
                "container {id} exited on its own; StopContainer came only when it was removed \
                 (waited {} ms before removing it)",
                o.waited_ms
            ),
        )),
        Some(_) => {}
    }
    if let Some(e) = &o.remove_error {
        out.push(Violation::new(
            "remove-failed",
            format!("removing exited container {id} failed: {e}"),
        ));
    } else if remove.is_none() {
        out.push(Violation::new(
            "no-RemoveContainer",
            format!("container {id} was removed without RemoveContainer"),
        ));
    }
    if let (Some(s), Some(r)) = (stop, remove)
        && r < s
    {
        out.push(Violation::new(
            "RemoveContainer-before-StopContainer",
            format!("container {id}: RemoveContainer before StopContainer"),
        ));
    }
    out
}

/// What happened when a pod was stopped twice and then used again. The
/// `*_seq` fields are the log's length at those moments (a record with a
/// smaller `seq` came before).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StopTwiceOutcome {
    /// The pod's id.
    pub pod: String,
    /// Before the first StopPodSandbox call.
    pub first_start_seq: u64,
    /// After the first StopPodSandbox call returned.
    pub first_done_seq: u64,
    /// After the second StopPodSandbox call returned.
    pub second_done_seq: u64,
    /// The error of the first stop (`None`: it worked).
    pub first_error: Option<String>,
    /// The error of the second stop (`None`: it worked).
    pub second_error: Option<String>,
    /// After the creation attempt in the stopped pod returned.
    pub reuse_done_seq: u64,
    /// The id of a container created in the stopped pod (`None`: refused).
    pub reuse_created: Option<String>,
}

/// Stop twice: the first StopPodSandbox call sends the event exactly once,
/// the second succeeds and sends none. Codes: `first-stop-failed`,
/// `no-StopPodSandbox-event`, `StopPodSandbox-event-repeated`,
/// `second-stop-failed`, `second-StopPodSandbox-event`.
pub fn check_stop_twice(
    records: &[Record],
    instance: &str,
    o: &StopTwiceOutcome,
) -> Vec<Violation> {
    let mut out = Vec::new();
    let id = short(&o.pod);
    let ev = EventKind::StopPodSandbox;
    if let Some(e) = &o.first_error {
        out.push(Violation::new(
            "first-stop-failed",
            format!("stopping pod {id} failed: {e}"),
        ));
    }
    match count_in(
        records,
        instance,
        ev,
        &o.pod,
        (o.first_start_seq, o.first_done_seq),
    ) {
        0 if o.first_error.is_none() => out.push(Violation::new(
            "no-StopPodSandbox-event",
            format!("pod {id} was stopped without StopPodSandbox"),
        )),
        n if n > 1 => out.push(Violation::new(
            "StopPodSandbox-event-repeated",
            format!("one stop of pod {id} sent StopPodSandbox {n} times"),
        )),
        _ => {}
    }
    if let Some(e) = &o.second_error {
        out.push(Violation::new(
            "second-stop-failed",
            format!("stopping the stopped pod {id} again failed (must be idempotent): {e}"),
        ));
    }
    let again = count_in(
        records,
        instance,
        ev,
        &o.pod,
        (o.first_done_seq, o.second_done_seq),
    );
    if again > 0 {
        out.push(Violation::new(
            "second-StopPodSandbox-event",
            format!("stopping the stopped pod {id} again sent StopPodSandbox again"),
        ));
    }
    out
}

/// Stopped-pod reuse: a container cannot be created in a stopped pod, and
/// the attempt sends no CreateContainer. Codes:
/// `create-in-stopped-pod-succeeded`, `CreateContainer-in-stopped-pod`.
pub fn check_stopped_pod_reuse(
    records: &[Record],
    instance: &str,
    o: &StopTwiceOutcome,
) -> Vec<Violation> {
    let mut out = Vec::new();
    let id = short(&o.pod);
    if let Some(c) = &o.reuse_created {
        out.push(Violation::new(
            "create-in-stopped-pod-succeeded",
            format!("container {} was created in the stopped pod {id}", short(c)),
        ));
    }
    let window = (o.second_done_seq, o.reuse_done_seq);
    if count_in(
        records,
        instance,
        EventKind::CreateContainer,
        &o.pod,
        window,
    ) > 0
    {
        out.push(Violation::new(
            "CreateContainer-in-stopped-pod",
            format!("CreateContainer sent for a container of the stopped pod {id}"),
        ));
    }
    out
}

/// What happened when a plugin failed every teardown event of a pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TeardownErrorOutcome {
    /// The pod's id.
    pub pod: String,
    /// Its (started) container's id.
    pub container: String,
    /// The instance failing StopContainer, RemoveContainer, StopPodSandbox
    /// and RemovePodSandbox (called first).
    pub failing: String,
    /// The instance after it.
    pub later: String,
    /// CRI steps that failed: (`stop-container`, `remove-container`,
    /// `stop-pod` or `remove-pod`, error).
    pub failed_steps: Vec<(String, String)>,
}

/// Teardown error: every teardown event reaches the plugin after the one
/// that fails it, and the CRI call succeeds. Codes:
/// `later-plugin-without-E` (E the event), `failing-plugin-without-E` (the
/// event never came at all), `STEP-failed-on-plugin-error`.
pub fn check_teardown_error(records: &[Record], o: &TeardownErrorOutcome) -> Vec<Violation> {
    let mut out = Vec::new();
    for (ev, id) in [
        (EventKind::StopContainer, &o.container),
        (EventKind::RemoveContainer, &o.container),
        (EventKind::StopPodSandbox, &o.pod),
        (EventKind::RemovePodSandbox, &o.pod),
    ] {
        let what = if ev.is_pod_event() {
            "pod"
        } else {
            "container"
        };
        if first_seq(records, &o.failing, ev, id, 0).is_none() {
            out.push(Violation::new(
                format!("failing-plugin-without-{ev}"),
                format!("{ev} of {what} {} never reached {}", short(id), o.failing),
            ));
        } else if first_seq(records, &o.later, ev, id, 0).is_none() {
            out.push(Violation::new(
                format!("later-plugin-without-{ev}"),
                format!(
                    "{} failed {ev} of {what} {}; {} (after it) never got it",
                    o.failing,
                    short(id),
                    o.later
                ),
            ));
        }
    }
    for (step, e) in &o.failed_steps {
        out.push(Violation::new(
            format!("{step}-failed-on-plugin-error"),
            format!("{step} failed because a plugin failed its teardown event: {e}"),
        ));
    }
    out
}
