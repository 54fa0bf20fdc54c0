//! Known discrepancies: where a runtime release breaks a clause of our
//! contract on purpose or by a known bug, with the explanation printed in
//! the report.

use crate::check::Clause;

/// One known way a runtime release departs from the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownDiscrepancy {
    /// Runtime name as it reports itself in Configure (`containerd`).
    pub runtime: &'static str,
    /// Version prefixes it applies to (`v2.1.`, `v2.3.`).
    pub versions: &'static [&'static str],
    /// The clause.
    pub clause: Clause,
    /// The violation code.
    pub code: &'static str,
    /// Whether it shows in every run (`false`) or only when a race is hit
    /// (`true`): a test asserts the non-intermittent ones are always found.
    pub intermittent: bool,
    /// Why.
    pub explanation: &'static str,
}

const CONTAINERD_2_1: &[&str] = &["v2.1."];
/// NRI v0.12 (validation plugins).
const CONTAINERD_NRI_0_12: &[&str] = &["v2.3.", "v2.4."];
const CONTAINERD_ALL: &[&str] = &["v2.1.", "v2.3.", "v2.4."];

const ABORTED_TEARDOWN: &str = "containerd's NRI adaptation stops delivering a teardown \
    event (StopContainer, RemoveContainer, StopPodSandbox, RemovePodSandbox) at the first \
    plugin that answers it with an error: the plugins after it never get the event (the CRI \
    call still succeeds; the error is only logged). Our contract delivers teardown events to \
    every plugin; our SDK answers teardown events with success by default for this reason";

const REUSE_STOPPED: &str = "containerd 2.1 creates containers in a stopped pod (and sends \
    CreateContainer for them); CRI says a stopped sandbox is never used again. From 2.3 on \
    the creation is refused";

/// The known discrepancies, per runtime version.
pub const KNOWN_DISCREPANCIES: &[KnownDiscrepancy] = &[
    teardown("later-plugin-without-StopContainer", CONTAINERD_ALL),
    teardown("later-plugin-without-RemoveContainer", CONTAINERD_ALL),
    teardown("later-plugin-without-StopPodSandbox", CONTAINERD_ALL),
    teardown("later-plugin-without-RemovePodSandbox", CONTAINERD_ALL),
    KnownDiscrepancy {
        runtime: "containerd",
        versions: CONTAINERD_ALL,
        clause: Clause::RunPodError,
        code: "failed-pod-listed",
        // Seen by critest on 2.3.7 under load; the code path is the same in
        // 2.1 and 2.4.
        intermittent: true,
        explanation: "when a plugin fails RunPodSandbox, containerd tears the new sandbox \
                      down; now and then deleting its task fails (the shim is already gone: \
                      'ttrpc: closed') and containerd keeps the sandbox, listed as \
                      SANDBOX_UNKNOWN ('encountered an error cleaning up failed sandbox')",
    },
    KnownDiscrepancy {
        runtime: "containerd",
        versions: CONTAINERD_ALL,
        clause: Clause::RunPodError,
        code: "retry-blocked-by-failed-pod",
        // Follows from failed-pod-listed, so just as intermittent (seen on
        // 2.3.7).
        intermittent: true,
        explanation: "the sandbox containerd keeps after a failed RunPodSandbox (see \
                      failed-pod-listed) still reserves the pod's name, so running the same \
                      pod again fails ('failed to reserve sandbox name ... is reserved for' \
                      the kept sandbox) until that sandbox is removed",
    },
    KnownDiscrepancy {
        runtime: "containerd",
        versions: CONTAINERD_ALL,
        clause: Clause::ContainerOrder,
        code: "PostStartContainer-after-StopContainer",
        // Only when the container exits before StartContainer returns (the
        // self-exit phase's container exits at once): seen on 2.4.2, 2.1.9.
        intermittent: true,
        explanation: "containerd starts watching the container's exit before it sends \
                      PostStartContainer; a container that exits at once gets its \
                      StopContainer (from the exit) before its PostStartContainer",
    },
    KnownDiscrepancy {
        runtime: "containerd",
        versions: CONTAINERD_2_1,
        clause: Clause::StoppedPodReuse,
        code: "create-in-stopped-pod-succeeded",
        intermittent: false,
        explanation: REUSE_STOPPED,
    },
    KnownDiscrepancy {
        runtime: "containerd",
        versions: CONTAINERD_2_1,
        clause: Clause::StoppedPodReuse,
        code: "CreateContainer-in-stopped-pod",
        intermittent: false,
        explanation: REUSE_STOPPED,
    },
    KnownDiscrepancy {
        runtime: "containerd",
        versions: CONTAINERD_ALL,
        clause: Clause::RequestTimeout,
        code: "disconnected-on-first-timeout",
        // Intermittent: our SDK enforces the deadline the runtime sends
        // (timeout_nano) and may answer DEADLINE_EXCEEDED a moment before
        // containerd's own timer fires; containerd then sees a plugin error,
        // not its own deadline, and keeps the plugin.
        intermittent: true,
        explanation: "containerd's NRI adaptation treats a deadline-exceeded call as fatal and \
                      closes the plugin's connection on the first late answer (upstream \
                      behaviour: 'closing plugin ..., failed to handle CreateContainer request: \
                      context deadline exceeded'); our contract fails only that event for that \
                      plugin and counts strikes toward a limit. Seen only when containerd's own \
                      timer fires before the plugin's deadline answer arrives",
    },
    KnownDiscrepancy {
        runtime: "containerd",
        versions: CONTAINERD_NRI_0_12,
        clause: Clause::RequestTimeout,
        code: "closed-plugin-still-called",
        // Follows from the disconnect above, so just as intermittent.
        intermittent: true,
        explanation: "NRI v0.12 (containerd 2.3, 2.4) closes the late plugin but still calls it as a \
                      validator (ValidateContainerAdjustment) in the same request, so the \
                      creation fails with 'validator plugin NN-name failed: ttrpc: closed'; \
                      NRI v0.8 (containerd 2.1) goes on without the plugin and the creation succeeds",
    },
    KnownDiscrepancy {
        runtime: "containerd",
        versions: CONTAINERD_ALL,
        clause: Clause::Shutdown,
        code: "no-Shutdown-before-disconnect",
        intermittent: false,
        explanation: "containerd does not send Shutdown to NRI plugins when it stops; external \
                      plugins only see the connection close (our contract, DESIGN 4.7: the \
                      runtime sends Shutdown when it stops)",
    },
];

/// containerd keeps a teardown event from the plugins after one failing it.
const fn teardown(code: &'static str, versions: &'static [&'static str]) -> KnownDiscrepancy {
    KnownDiscrepancy {
        runtime: "containerd",
        versions,
        clause: Clause::TeardownError,
        code,
        intermittent: false,
        explanation: ABORTED_TEARDOWN,
    }
}

/// The known discrepancy of `runtime` `version` for (`clause`, `code`), if any.
pub fn known_discrepancy(
    runtime: &str,
    version: &str,
    clause: Clause,
    code: &str,
) -> Option<&'static KnownDiscrepancy> {
    KNOWN_DISCREPANCIES.iter().find(|k| {
        k.runtime == runtime
            && k.clause == clause
            && k.code == code
            && k.versions.iter().any(|p| version.starts_with(p))
    })
}

/// All known discrepancies of `runtime` `version`.
pub fn known_for(runtime: &str, version: &str) -> Vec<&'static KnownDiscrepancy> {
    KNOWN_DISCREPANCIES
        .iter()
        .filter(|k| k.runtime == runtime && k.versions.iter().any(|p| version.starts_with(p)))
        .collect()
}
