//! The clause checkers: pure functions from an event log (and what the
//! driver observed through CRI) to [`Violation`]s. Each violation has a
//! stable `code`, which [`KNOWN_DISCREPANCIES`](crate::KNOWN_DISCREPANCIES)
//! refers to.

use std::collections::HashSet;

use serde::Serialize;

use crate::record::{Record, RecordKind};

mod hooks;
mod metadata;
mod order;
mod outcomes;
mod sync;

pub use hooks::{
    CreateBlockedOutcome, RunBlockedOutcome, RunErrorOutcome, StopPodStateOutcome,
    check_create_blocked, check_run_blocked, check_run_error, check_stop_pod_state,
};
pub use metadata::{MetadataExpectation, check_event_metadata};
pub use order::{
    TeardownExpectation, check_container_order, check_pod_order, check_pod_scope, check_teardown,
};
pub use outcomes::{
    CreateErrorOutcome, SelfExitOutcome, StopTwiceOutcome, TeardownErrorOutcome, TimeoutOutcome,
    check_create_error, check_request_timeout, check_self_exit, check_shutdown, check_stop_twice,
    check_stopped_pod_reuse, check_teardown_error,
};
pub use sync::{SyncHoldOutcome, check_sync_exactly_once, check_sync_held, check_sync_late};

/// The clauses of the lifecycle contract, in report order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Clause {
    /// The runtime's NRI version and event dialect (information only).
    Dialect,
    /// Pod name, namespace and UID, and the container name, in every event.
    EventMetadata,
    /// Per pod: Run -> (Update -> PostUpdate)* -> Stop -> Remove.
    PodOrder,
    /// Per container: Create -> PostCreate -> Start -> PostStart ->
    /// (Update -> PostUpdate)* -> Stop -> Remove.
    ContainerOrder,
    /// No container event before its pod's Run or after its pod's Remove.
    PodScope,
    /// Every created pod and container gets Stop and Remove.
    Teardown,
    /// A container that exits on its own gets StopContainer before its
    /// RemoveContainer.
    SelfExit,
    /// When StopPodSandbox reaches plugins, every container of the pod has
    /// exited (and the pod is still there).
    StopPodState,
    /// A second StopPodSandbox of a stopped pod sends no second event.
    StopPodTwice,
    /// No container can be created in a stopped pod.
    StoppedPodReuse,
    /// A plugin error on RunPodSandbox fails the pod, leaves nothing behind,
    /// and a retry works.
    RunPodError,
    /// While RunPodSandbox is held by a plugin the pod is not listed ready
    /// and takes no containers.
    RunPodBlocked,
    /// While CreateContainer is held by a plugin the container is not listed
    /// as created.
    CreateBlocked,
    /// A plugin error on CreateContainer fails it, leaks nothing; the next
    /// request works.
    CreateError,
    /// A plugin error on a teardown event does not keep the event from later
    /// plugins nor fail the request.
    TeardownError,
    /// A plugin registering while pods and containers are being created sees
    /// each of them exactly once (in Synchronize or as a creation event).
    SyncExactlyOnce,
    /// Containers created while a plugin holds its Synchronize open (within
    /// the request timeout) are not lost.
    SyncHeld,
    /// A Synchronize answered after the request timeout: the plugin is
    /// dropped (reported as such) or keeps every container.
    SyncLate,
    /// A plugin answering past the request timeout.
    RequestTimeout,
    /// The runtime sends Shutdown before it goes away.
    Shutdown,
}

impl Clause {
    /// All clauses, in report order.
    pub const ALL: [Clause; 20] = [
        Clause::Dialect,
        Clause::EventMetadata,
        Clause::PodOrder,
        Clause::ContainerOrder,
        Clause::PodScope,
        Clause::Teardown,
        Clause::SelfExit,
        Clause::StopPodState,
        Clause::StopPodTwice,
        Clause::StoppedPodReuse,
        Clause::RunPodError,
        Clause::RunPodBlocked,
        Clause::CreateBlocked,
        Clause::CreateError,
        Clause::TeardownError,
        Clause::SyncExactlyOnce,
        Clause::SyncHeld,
        Clause::SyncLate,
        Clause::RequestTimeout,
        Clause::Shutdown,
    ];

    /// Short identifier (`pod-order`, ...), as in JSON.
    pub fn id(self) -> &'static str {
        match self {
            Clause::Dialect => "dialect",
            Clause::EventMetadata => "event-metadata",
            Clause::PodOrder => "pod-order",
            Clause::ContainerOrder => "container-order",
            Clause::PodScope => "pod-scope",
            Clause::Teardown => "teardown",
            Clause::SelfExit => "self-exit",
            Clause::StopPodState => "stop-pod-state",
            Clause::StopPodTwice => "stop-pod-twice",
            Clause::StoppedPodReuse => "stopped-pod-reuse",
            Clause::RunPodError => "run-pod-error",
            Clause::RunPodBlocked => "run-pod-blocked",
            Clause::CreateBlocked => "create-blocked",
            Clause::CreateError => "create-error",
            Clause::TeardownError => "teardown-error",
            Clause::SyncExactlyOnce => "sync-exactly-once",
            Clause::SyncHeld => "sync-held",
            Clause::SyncLate => "sync-late",
            Clause::RequestTimeout => "request-timeout",
            Clause::Shutdown => "shutdown",
        }
    }

    /// One-line statement of the clause.
    pub fn title(self) -> &'static str {
        match self {
            Clause::Dialect => "runtime NRI version and event dialect",
            Clause::EventMetadata => {
                "pod name, namespace, UID and container name carried in every event"
            }
            Clause::PodOrder => "pod: Run -> (Update -> PostUpdate)* -> Stop -> Remove",
            Clause::ContainerOrder => {
                "container: Create -> PostCreate -> Start -> PostStart -> (Update -> PostUpdate)* -> Stop -> Remove"
            }
            Clause::PodScope => "no container event before its pod's Run or after its pod's Remove",
            Clause::Teardown => "every created pod/container gets Stop and Remove",
            Clause::SelfExit => "a container exiting on its own gets StopContainer before Remove",
            Clause::StopPodState => "containers exited (pod still there) when StopPodSandbox runs",
            Clause::StopPodTwice => "a second StopPodSandbox sends no second event",
            Clause::StoppedPodReuse => "no container can be created in a stopped pod",
            Clause::RunPodError => {
                "plugin error on RunPodSandbox fails it, nothing left; retry works"
            }
            Clause::RunPodBlocked => {
                "pod not ready and takes no containers while RunPodSandbox is held"
            }
            Clause::CreateBlocked => {
                "container not listed as created while CreateContainer is held"
            }
            Clause::CreateError => {
                "plugin error on CreateContainer fails it, leaks nothing; next works"
            }
            Clause::TeardownError => {
                "plugin error on teardown reaches no further: later plugins get it"
            }
            Clause::SyncExactlyOnce => {
                "registration during creations: every object seen exactly once (sync or event)"
            }
            Clause::SyncHeld => "containers created while Synchronize is held are not lost",
            Clause::SyncLate => "late Synchronize: plugin dropped (reported) or nothing lost",
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

/// The first 12 characters of an id, for messages.
pub fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}
