//! The clause checkers: pure functions from an event log (and what the
//! driver did) to [`Violation`]s. Each violation has a stable `code`, which
//! [`KNOWN_DISCREPANCIES`](crate::KNOWN_DISCREPANCIES) refers to.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde::Serialize;

use crate::record::{EventKind, Record, RecordKind};

/// The clauses of the lifecycle contract, in report order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Clause {
    /// The runtime's NRI version and event dialect (information only).
    Dialect,
    /// Per pod: Run -> (Update -> PostUpdate)* -> Stop -> Remove.
    PodOrder,
    /// Per container: Create -> PostCreate -> Start -> PostStart ->
    /// (Update -> PostUpdate)* -> Stop -> Remove.
    ContainerOrder,
    /// No container event before its pod's Run or after its pod's Remove.
    PodScope,
    /// Every created pod and container gets Stop and Remove.
    Teardown,
    /// A plugin registering while pods and containers are being created sees
    /// each of them exactly once (in Synchronize or as a creation event).
    SyncExactlyOnce,
    /// A plugin error on CreateContainer fails that creation; the next works.
    CreateError,
    /// A plugin answering after the request timeout.
    RequestTimeout,
    /// The runtime sends Shutdown before it goes away.
    Shutdown,
}

impl Clause {
    /// All clauses, in report order.
    pub const ALL: [Clause; 9] = [
        Clause::Dialect,
        Clause::PodOrder,
        Clause::ContainerOrder,
        Clause::PodScope,
        Clause::Teardown,
        Clause::SyncExactlyOnce,
        Clause::CreateError,
        Clause::RequestTimeout,
        Clause::Shutdown,
    ];

    /// Short identifier (`pod-order`, ...), as in JSON.
    pub fn id(self) -> &'static str {
        match self {
            Clause::Dialect => "dialect",
            Clause::PodOrder => "pod-order",
            Clause::ContainerOrder => "container-order",
            Clause::PodScope => "pod-scope",
            Clause::Teardown => "teardown",
            Clause::SyncExactlyOnce => "sync-exactly-once",
            Clause::CreateError => "create-error",
            Clause::RequestTimeout => "request-timeout",
            Clause::Shutdown => "shutdown",
        }
    }

    /// One-line statement of the clause.
    pub fn title(self) -> &'static str {
        match self {
            Clause::Dialect => "runtime NRI version and event dialect",
            Clause::PodOrder => "pod: Run -> (Update -> PostUpdate)* -> Stop -> Remove",
            Clause::ContainerOrder => {
                "container: Create -> PostCreate -> Start -> PostStart -> (Update -> PostUpdate)* -> Stop -> Remove"
            }
            Clause::PodScope => "no container event before its pod's Run or after its pod's Remove",
            Clause::Teardown => "every created pod/container gets Stop and Remove",
            Clause::SyncExactlyOnce => {
                "registration during creations: every object seen exactly once (sync or event)"
            }
            Clause::CreateError => "plugin error on CreateContainer fails it; next request works",
            Clause::RequestTimeout => "plugin answering past the request timeout",
            Clause::Shutdown => "Shutdown sent to plugins when the runtime stops",
        }
    }
}

impl std::fmt::Display for Clause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.id())
    }
}

/// One breach of a clause.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// Stable code, e.g. `StopContainer-after-StopContainer`.
    pub code: String,
    /// What happened, naming the object.
    pub message: String,
}

impl Violation {
    /// A violation.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Violation {
            code: code.into(),
            message: message.into(),
        }
    }
}

/// The records of one instance, in arrival order.
fn of<'a>(records: &'a [Record], instance: &'a str) -> impl Iterator<Item = &'a Record> + 'a {
    records.iter().filter(move |r| r.instance == instance)
}

/// Ids of the pods and containers in the instance's Synchronize(s).
fn synced(records: &[Record], instance: &str) -> (HashSet<String>, HashSet<String>) {
    let mut pods = HashSet::new();
    let mut ctrs = HashSet::new();
    for r in of(records, instance) {
        if let RecordKind::Synchronized {
            pods: p,
            containers,
        } = &r.kind
        {
            pods.extend(p.iter().map(|p| p.id.clone()));
            ctrs.extend(containers.iter().map(|c| c.id.clone()));
        }
    }
    (pods, ctrs)
}

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
/// instance's Synchronize may start anywhere. Codes: `X-after-Y` (Y the
/// pod's previous event) and `X-without-RunPodSandbox`.
pub fn check_pod_order(records: &[Record], instance: &str) -> Vec<Violation> {
    let (sync_pods, _) = synced(records, instance);
    let mut last: HashMap<&str, EventKind> = HashMap::new();
    let mut out = Vec::new();
    for r in of(records, instance) {
        let Some((ev, pod, None)) = r.as_event() else {
            continue;
        };
        match last.get(pod.id.as_str()).copied() {
            None if ev == EventKind::RunPodSandbox || sync_pods.contains(&pod.id) => {}
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
/// start, and a failed creation may be undone right after CreateContainer.
/// Codes: `X-after-Y` and `X-without-CreateContainer`.
pub fn check_container_order(records: &[Record], instance: &str) -> Vec<Violation> {
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
            None => out.push(Violation::new(
                format!("{ev}-without-CreateContainer"),
                format!(
                    "container {} ({}): {ev} without CreateContainer",
                    c.name,
                    short(&c.id)
                ),
            )),
            Some((p, started)) if container_allowed(p, ev, started) => {}
            Some((p, _)) => out.push(Violation::new(
                format!("{ev}-after-{p}"),
                format!("container {} ({}): {ev} after {p}", c.name, short(&c.id)),
            )),
        }
        last.insert(
            &c.id,
            (ev, started_before || ev == EventKind::StartContainer),
        );
    }
    out
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

/// Sync exactly once: each expected pod (ids) and container (ids) is seen by
/// the instance exactly once, either in its Synchronize or as its
/// RunPodSandbox / CreateContainer event. Codes: `not-synchronized`,
/// `pod-lost`, `pod-duplicated`, `container-lost`, `container-duplicated`.
pub fn check_sync_exactly_once(
    records: &[Record],
    instance: &str,
    pods: &[String],
    containers: &[String],
) -> Vec<Violation> {
    let mut out = Vec::new();
    if !of(records, instance).any(|r| matches!(r.kind, RecordKind::Synchronized { .. })) {
        out.push(Violation::new(
            "not-synchronized",
            format!("instance {instance} never synchronized"),
        ));
        return out;
    }
    let mut count: BTreeMap<&str, (u32, u32)> = BTreeMap::new(); // (sync, events)
    for r in of(records, instance) {
        match &r.kind {
            RecordKind::Synchronized {
                pods: p,
                containers: c,
            } => {
                for id in p.iter().map(|p| &p.id).chain(c.iter().map(|c| &c.id)) {
                    count.entry(id).or_default().0 += 1;
                }
            }
            RecordKind::Event {
                event: EventKind::RunPodSandbox,
                pod,
                container: None,
            } => count.entry(&pod.id).or_default().1 += 1,
            RecordKind::Event {
                event: EventKind::CreateContainer,
                container: Some(c),
                ..
            } => count.entry(&c.id).or_default().1 += 1,
            _ => {}
        }
    }
    for (what, ids) in [("pod", pods), ("container", containers)] {
        for id in ids {
            let (s, e) = count.get(id.as_str()).copied().unwrap_or((0, 0));
            if s + e == 0 {
                out.push(Violation::new(
                    format!("{what}-lost"),
                    format!(
                        "{instance}: {what} {} neither in Synchronize nor as an event",
                        short(id)
                    ),
                ));
            } else if s + e > 1 {
                out.push(Violation::new(
                    format!("{what}-duplicated"),
                    format!(
                        "{instance}: {what} {} seen {} times ({s} in Synchronize, {e} as events)",
                        short(id),
                        s + e
                    ),
                ));
            }
        }
    }
    out
}

/// What happened when a plugin failed CreateContainer on purpose.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CreateErrorOutcome {
    /// The error of the refused creation (`None`: it succeeded).
    pub refused_error: Option<String>,
    /// The error of the next creation, in the same pod (`None`: it worked).
    pub next_error: Option<String>,
}

/// Create error: the refused creation fails, the next one works. Codes:
/// `refused-create-succeeded`, `next-create-failed`.
pub fn check_create_error(o: &CreateErrorOutcome) -> Vec<Violation> {
    let mut out = Vec::new();
    if o.refused_error.is_none() {
        out.push(Violation::new(
            "refused-create-succeeded",
            "the container was created although a plugin answered CreateContainer with an error",
        ));
    }
    if let Some(e) = &o.next_error {
        out.push(Violation::new(
            "next-create-failed",
            format!("the next creation failed too: {e}"),
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

/// The first 12 characters of an id, for messages.
pub fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}
