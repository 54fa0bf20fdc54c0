//! The clause checkers on synthetic event logs: a conforming log passes,
//! and each clause detects its violations with the documented code.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use nri_conformance::check::{
    self, CreateErrorOutcome, TeardownExpectation, TimeoutOutcome, check_container_order,
    check_pod_order, check_pod_scope, check_shutdown, check_sync_exactly_once, check_teardown,
};
use nri_conformance::record::{ContainerRef, EventKind, PodRef, Record, RecordKind};
use nri_conformance::{Clause, ClauseResult, Report, RuntimeSummary, Status, print_table};

use EventKind::*;

const I: &str = "conformance";

/// Builds a log for instance `I`.
#[derive(Default)]
struct Log(Vec<Record>);

impl Log {
    fn push_as(&mut self, instance: &str, kind: RecordKind) -> &mut Self {
        let seq = self.0.len() as u64;
        self.0.push(Record {
            seq,
            at_ms: seq,
            instance: instance.into(),
            kind,
        });
        self
    }
    fn sync(&mut self, pods: &[&str], ctrs: &[(&str, &str)]) -> &mut Self {
        self.sync_as(I, pods, ctrs)
    }
    fn sync_as(&mut self, inst: &str, pods: &[&str], ctrs: &[(&str, &str)]) -> &mut Self {
        self.push_as(
            inst,
            RecordKind::Synchronized {
                pods: pods
                    .iter()
                    .map(|p| PodRef::new(p, p, "ns", "uid"))
                    .collect(),
                containers: ctrs
                    .iter()
                    .map(|(c, p)| ContainerRef::new(c, c, p))
                    .collect(),
            },
        )
    }
    fn pod(&mut self, ev: EventKind, pod: &str) -> &mut Self {
        self.pod_as(I, ev, pod)
    }
    fn pod_as(&mut self, inst: &str, ev: EventKind, pod: &str) -> &mut Self {
        self.push_as(
            inst,
            RecordKind::Event {
                event: ev,
                pod: PodRef::new(pod, pod, "ns", "uid"),
                container: None,
            },
        )
    }
    fn ctr(&mut self, ev: EventKind, pod: &str, ctr: &str) -> &mut Self {
        self.ctr_as(I, ev, pod, ctr)
    }
    fn ctr_as(&mut self, inst: &str, ev: EventKind, pod: &str, ctr: &str) -> &mut Self {
        self.push_as(
            inst,
            RecordKind::Event {
                event: ev,
                pod: PodRef::new(pod, pod, "ns", "uid"),
                container: Some(ContainerRef::new(ctr, ctr, pod)),
            },
        )
    }
    fn ctr_events(&mut self, pod: &str, ctr: &str, evs: &[EventKind]) -> &mut Self {
        for e in evs {
            self.ctr(*e, pod, ctr);
        }
        self
    }
    fn records(&self) -> &[Record] {
        &self.0
    }
}

fn none() -> std::collections::HashSet<String> {
    std::collections::HashSet::new()
}

fn codes(v: &[check::Violation]) -> Vec<&str> {
    v.iter().map(|v| v.code.as_str()).collect()
}

/// The order containerd delivers for one pod with one container.
fn conforming() -> Log {
    let mut l = Log::default();
    l.sync(&[], &[]).pod(RunPodSandbox, "p1").ctr_events(
        "p1",
        "c1",
        &[
            CreateContainer,
            ValidateContainerAdjustment,
            PostCreateContainer,
            StartContainer,
            PostStartContainer,
            UpdateContainer,
            PostUpdateContainer,
            UpdateContainer,
            PostUpdateContainer,
            StopContainer,
            RemoveContainer,
        ],
    );
    // A container never started, torn down with its pod.
    l.ctr_events(
        "p1",
        "c2",
        &[CreateContainer, PostCreateContainer, StopContainer],
    )
    .pod(StopPodSandbox, "p1")
    .ctr(RemoveContainer, "p1", "c2")
    .pod(RemovePodSandbox, "p1");
    l
}

#[test]
fn conforming_log_passes_every_checker() {
    let l = conforming();
    let r = l.records();
    assert_eq!(codes(&check_pod_order(r, I, &none())), Vec::<&str>::new());
    assert_eq!(
        codes(&check_container_order(r, I, &none())),
        Vec::<&str>::new()
    );
    assert_eq!(codes(&check_pod_scope(r, I)), Vec::<&str>::new());
    let t = TeardownExpectation {
        pods: vec!["p1".into()],
        containers: vec!["c1".into(), "c2".into()],
        failed_creates: vec![],
    };
    assert_eq!(codes(&check_teardown(r, I, &t)), Vec::<&str>::new());
}

#[test]
fn pod_order_detects_remove_without_stop_duplicates_and_missing_run() {
    let mut l = Log::default();
    l.sync(&["old"], &[])
        .pod(RunPodSandbox, "p1")
        .pod(RemovePodSandbox, "p1")
        .pod(RunPodSandbox, "p2")
        .pod(StopPodSandbox, "p2")
        .pod(StopPodSandbox, "p2")
        .pod(StopPodSandbox, "ghost")
        // A pod known from Synchronize may start anywhere.
        .pod(StopPodSandbox, "old")
        .pod(RemovePodSandbox, "old")
        .pod(RunPodSandbox, "p3")
        .pod(UpdatePodSandbox, "p3")
        .pod(PostUpdatePodSandbox, "p3")
        .pod(PostUpdatePodSandbox, "p3");
    assert_eq!(
        codes(&check_pod_order(l.records(), I, &none())),
        [
            "RemovePodSandbox-after-RunPodSandbox",
            "StopPodSandbox-after-StopPodSandbox",
            "StopPodSandbox-without-RunPodSandbox",
            "PostUpdatePodSandbox-after-PostUpdatePodSandbox",
        ]
    );
}

#[test]
fn pod_order_only_looks_at_the_given_instance() {
    let mut l = Log::default();
    l.pod_as("other", RemovePodSandbox, "p1");
    assert!(check_pod_order(l.records(), I, &none()).is_empty());
    assert_eq!(check_pod_order(l.records(), "other", &none()).len(), 1);
}

#[test]
fn container_order_detects_each_wrong_transition() {
    let mut l = Log::default();
    l.sync(&["p"], &[("old", "p")]);
    l.ctr_events("p", "a", &[CreateContainer, StartContainer]); // no PostCreate
    l.ctr_events(
        "p",
        "b",
        &[
            CreateContainer,
            PostCreateContainer,
            StartContainer,
            PostStartContainer,
            RemoveContainer, // no Stop
        ],
    );
    l.ctr_events(
        "p",
        "c",
        &[
            CreateContainer,
            PostCreateContainer,
            StartContainer,
            PostStartContainer,
            UpdateContainer,
            PostUpdateContainer,
            StartContainer, // started twice
        ],
    );
    l.ctr_events(
        "p",
        "d",
        &[
            CreateContainer,
            PostCreateContainer,
            StopContainer,
            RemoveContainer,
            StopContainer, // after removal
        ],
    );
    l.ctr_events("p", "e", &[PostStartContainer]); // never created
    l.ctr_events("p", "old", &[StopContainer, RemoveContainer]); // synced: fine
    // Update before start is fine, and so is the start after it.
    l.ctr_events(
        "p",
        "f",
        &[
            CreateContainer,
            PostCreateContainer,
            UpdateContainer,
            PostUpdateContainer,
            StartContainer,
            PostStartContainer,
        ],
    );
    assert_eq!(
        codes(&check_container_order(l.records(), I, &none())),
        [
            "StartContainer-after-CreateContainer",
            "RemoveContainer-after-PostStartContainer",
            "StartContainer-after-PostUpdateContainer",
            "StopContainer-after-RemoveContainer",
            "PostStartContainer-without-CreateContainer",
        ]
    );
}

#[test]
fn failed_creation_may_be_undone_right_after_create() {
    let mut l = Log::default();
    l.pod(RunPodSandbox, "p").ctr_events(
        "p",
        "x",
        &[CreateContainer, StopContainer, RemoveContainer],
    );
    assert!(check_container_order(l.records(), I, &none()).is_empty());
}

#[test]
fn pod_scope_detects_container_events_outside_the_pod_lifetime() {
    let mut l = Log::default();
    l.sync(&["synced"], &[])
        .ctr(CreateContainer, "p1", "early") // before Run
        .pod(RunPodSandbox, "p1")
        .ctr(CreateContainer, "p1", "ok")
        .pod(StopPodSandbox, "p1")
        .ctr(StopContainer, "p1", "ok") // after Stop, before Remove: fine
        .pod(RemovePodSandbox, "p1")
        .ctr(RemoveContainer, "p1", "ok") // after Remove
        .ctr(StartContainer, "synced", "s"); // pod known from sync: fine
    assert_eq!(
        codes(&check_pod_scope(l.records(), I)),
        [
            "CreateContainer-before-RunPodSandbox",
            "RemoveContainer-after-RemovePodSandbox"
        ]
    );
}

#[test]
fn teardown_detects_missing_stop_and_remove() {
    let mut l = Log::default();
    l.pod(RunPodSandbox, "p1")
        .ctr_events(
            "p1",
            "c1",
            &[
                CreateContainer,
                PostCreateContainer,
                StartContainer,
                PostStartContainer,
            ],
        )
        .ctr_events(
            "p1",
            "c2",
            &[CreateContainer, PostCreateContainer, RemoveContainer],
        )
        .ctr(CreateContainer, "p1", "refused")
        .ctr(StopContainer, "p1", "refused")
        .pod(RemovePodSandbox, "p1");
    let t = TeardownExpectation {
        pods: vec!["p1".into()],
        containers: vec!["c1".into(), "c2".into()],
        failed_creates: vec![("p1".into(), "refused".into())],
    };
    assert_eq!(
        codes(&check_teardown(l.records(), I, &t)),
        [
            "pod-without-StopPodSandbox",
            "container-without-StopContainer",
            "container-without-RemoveContainer",
            "container-without-StopContainer",
            "failed-create-without-RemoveContainer",
        ]
    );
}

#[test]
fn sync_detects_lost_and_duplicated_objects() {
    let pods: Vec<String> = ["p1", "p2", "p3"].map(String::from).to_vec();
    let ctrs: Vec<String> = ["c1", "c2", "c3"].map(String::from).to_vec();
    let mut l = Log::default();
    // p1/c1 in sync; p2/c2 as events; p3 both (duplicated); c3 neither (lost).
    l.sync_as("late", &["p1", "p3"], &[("c1", "p1")])
        .pod_as("late", RunPodSandbox, "p2")
        .pod_as("late", RunPodSandbox, "p3")
        .ctr_as("late", CreateContainer, "p2", "c2")
        .ctr_as("late", StartContainer, "p3", "c3");
    assert_eq!(
        codes(&check_sync_exactly_once(l.records(), "late", &pods, &ctrs)),
        ["pod-duplicated", "container-lost"]
    );
    // Exactly once each: passes.
    let mut ok = Log::default();
    ok.sync_as("late", &["p1", "p3"], &[("c1", "p1"), ("c3", "p3")])
        .pod_as("late", RunPodSandbox, "p2")
        .ctr_as("late", CreateContainer, "p2", "c2");
    assert!(check_sync_exactly_once(ok.records(), "late", &pods, &ctrs).is_empty());
    // Never synchronized.
    assert_eq!(
        codes(&check_sync_exactly_once(
            ok.records(),
            "nobody",
            &pods,
            &ctrs
        )),
        ["not-synchronized"]
    );
}

#[test]
fn create_error_detects_success_leaks_and_failure_of_next() {
    let ok = CreateErrorOutcome {
        pod: "p".into(),
        refused_name: "refuse-1".into(),
        refused_error: Some("refused".into()),
        ..Default::default()
    };
    let mut l = Log::default();
    l.pod(RunPodSandbox, "p")
        .ctr(CreateContainer, "p", "refuse-1");
    assert!(check::check_create_error(l.records(), I, &ok).is_empty());
    let bad = CreateErrorOutcome {
        refused_error: None,
        next_error: Some("broken".into()),
        ..ok.clone()
    };
    assert_eq!(
        codes(&check::check_create_error(l.records(), I, &bad)),
        ["refused-create-succeeded", "next-create-failed"]
    );
    // Failed, but listed and even started; the next one created but not startable.
    let leaked = CreateErrorOutcome {
        refused_listed: true,
        next_lifecycle_error: Some("start: no".into()),
        ..ok
    };
    l.ctr(StartContainer, "p", "refuse-1");
    assert_eq!(
        codes(&check::check_create_error(l.records(), I, &leaked)),
        [
            "refused-container-listed",
            "refused-container-started",
            "next-lifecycle-failed"
        ]
    );
}

#[test]
fn request_timeout_detects_disconnect_closed_plugin_calls_and_broken_next() {
    let kept = TimeoutOutcome {
        request_timeout_ms: 2000,
        delay_ms: 3000,
        slow_error: Some("deadline exceeded".into()),
        slow_elapsed_ms: 2000,
        disconnected: false,
        next_seen_by_slow_plugin: true,
        next_error: None,
    };
    assert!(check::check_request_timeout(&kept).is_empty());
    let dropped = TimeoutOutcome {
        slow_error: Some("validator plugin 91-x failed: ttrpc: closed".into()),
        disconnected: true,
        next_seen_by_slow_plugin: false,
        next_error: Some("x".into()),
        ..kept.clone()
    };
    assert_eq!(
        codes(&check::check_request_timeout(&dropped)),
        [
            "disconnected-on-first-timeout",
            "closed-plugin-still-called",
            "next-create-failed"
        ]
    );
    // Still connected but no longer called counts as dropped too.
    let ignored = TimeoutOutcome {
        next_seen_by_slow_plugin: false,
        ..kept
    };
    assert_eq!(
        codes(&check::check_request_timeout(&ignored)),
        ["disconnected-on-first-timeout"]
    );
}

#[test]
fn shutdown_needs_shutdown_before_the_disconnect() {
    let gone = |cause: &str| RecordKind::Disconnected {
        cause: cause.into(),
    };
    let mut ok = Log::default();
    ok.push_as(I, RecordKind::Shutdown).push_as(I, gone("lost"));
    assert!(check_shutdown(ok.records(), I).is_empty());
    let mut bad = Log::default();
    bad.push_as(I, gone("lost"))
        .push_as(I, RecordKind::Shutdown);
    assert_eq!(
        codes(&check_shutdown(bad.records(), I)),
        ["no-Shutdown-before-disconnect"]
    );
    assert_eq!(
        codes(&check_shutdown(Log::default().records(), I)),
        ["not-disconnected"]
    );
}

#[test]
fn classify_marks_known_discrepancies_and_fails_on_new_ones() {
    let v = |code: &str| check::Violation::new(code, "example");
    let pass = ClauseResult::classify(Clause::PodOrder, "s", vec![], "containerd", "v2.3.7");
    assert_eq!(pass.status, Status::Pass);
    let known = ClauseResult::classify(
        Clause::Shutdown,
        "s",
        vec![v("no-Shutdown-before-disconnect")],
        "containerd",
        "v2.1.9",
    );
    assert_eq!(known.status, Status::Discrepancy);
    assert!(known.findings[0].explanation.is_some());
    // The same code on a runtime it is not recorded for is a failure.
    let other = ClauseResult::classify(
        Clause::Shutdown,
        "s",
        vec![v("no-Shutdown-before-disconnect")],
        "cri-o",
        "v1.33.0",
    );
    assert_eq!(other.status, Status::Fail);
    // Known only for 2.3.
    let v21 = ClauseResult::classify(
        Clause::RequestTimeout,
        "s",
        vec![v("closed-plugin-still-called")],
        "containerd",
        "v2.1.9",
    );
    assert_eq!(v21.status, Status::Fail);
    let mixed = ClauseResult::classify(
        Clause::Shutdown,
        "s",
        vec![
            v("no-Shutdown-before-disconnect"),
            v("something-new"),
            v("something-new"),
        ],
        "containerd",
        "v2.3.7",
    );
    assert_eq!(mixed.status, Status::Fail);
    assert_eq!(mixed.findings.len(), 2);
    assert_eq!(mixed.findings[1].count, 2);
}

#[test]
fn table_and_json_name_each_discrepancy() {
    let report = Report {
        runtime: RuntimeSummary {
            name: "containerd".into(),
            version: "v2.3.7".into(),
            ..Default::default()
        },
        mode: "cri".into(),
        duration_ms: 1234,
        clauses: vec![
            ClauseResult::classify(
                Clause::PodOrder,
                "12 events",
                vec![],
                "containerd",
                "v2.3.7",
            ),
            ClauseResult::classify(
                Clause::Shutdown,
                "stopped",
                vec![check::Violation::new(
                    "no-Shutdown-before-disconnect",
                    "lost",
                )],
                "containerd",
                "v2.3.7",
            ),
            ClauseResult::classify(
                Clause::Teardown,
                "1 pod",
                vec![check::Violation::new(
                    "pod-without-StopPodSandbox",
                    "pod p1",
                )],
                "containerd",
                "v2.3.7",
            ),
        ],
        records: conforming().0,
    };
    let mut out = Vec::new();
    print_table(&report, &mut out).unwrap();
    let table = String::from_utf8(out).unwrap();
    assert!(table.contains("PASS         pod-order"), "{table}");
    assert!(table.contains("DISCREPANCY  shutdown"), "{table}");
    assert!(
        table.contains("[known] no-Shutdown-before-disconnect x1"),
        "{table}"
    );
    assert!(table.contains("FAIL         teardown"), "{table}");
    assert!(
        table.contains("[NEW] pod-without-StopPodSandbox"),
        "{table}"
    );
    assert!(
        table.contains("result: FAILED (1 failed, 1 with known discrepancies)"),
        "{table}"
    );
    assert!(!report.ok());
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["clauses"][1]["status"], "DISCREPANCY");
    assert_eq!(json["clauses"][1]["clause"], "shutdown");
    assert_eq!(json["records"][1]["kind"], "event");
    assert_eq!(json["records"][1]["event"], "RunPodSandbox");
}

#[test]
fn order_lets_a_failed_creation_be_undone_towards_plugins_that_never_saw_it() {
    let mut l = Log::default();
    l.pod(StopPodSandbox, "failed-pod")
        .pod(RemovePodSandbox, "failed-pod")
        .pod(RunPodSandbox, "p")
        .ctr_events("p", "failed-ctr", &[StopContainer, RemoveContainer]);
    let undone: std::collections::HashSet<String> =
        ["failed-pod", "failed-ctr"].map(String::from).into();
    assert!(check_pod_order(l.records(), I, &undone).is_empty());
    assert!(check_container_order(l.records(), I, &undone).is_empty());
    // Not known as failed: a teardown out of nowhere.
    assert_eq!(
        codes(&check_pod_order(l.records(), I, &none())),
        ["StopPodSandbox-without-RunPodSandbox"]
    );
    assert_eq!(
        codes(&check_container_order(l.records(), I, &none())),
        ["StopContainer-without-CreateContainer"]
    );
}

#[test]
fn metadata_detects_missing_and_wrong_fields() {
    use nri_conformance::PodSpec;
    let spec = PodSpec {
        name: "p".into(),
        namespace: "ns".into(),
        uid: "uid".into(),
    };
    let mut expect = check::MetadataExpectation::default();
    expect.pods.insert("p".into(), spec);
    expect
        .containers
        .insert("c".into(), ("c".into(), "p".into()));
    let mut l = Log::default();
    l.pod(RunPodSandbox, "p").ctr(CreateContainer, "p", "c");
    assert!(check::check_event_metadata(l.records(), I, &expect).is_empty());
    l.push_as(
        I,
        RecordKind::Event {
            event: StopContainer,
            pod: PodRef::new("p", "p", "other", ""),
            container: Some(ContainerRef::new("c", "", "p")),
        },
    );
    assert_eq!(
        codes(&check::check_event_metadata(l.records(), I, &expect)),
        [
            "StopContainer-container-name-missing",
            "StopContainer-pod-namespace-wrong",
            "StopContainer-pod-uid-missing"
        ]
    );
}

#[test]
fn self_exit_needs_stop_before_the_removal_was_asked() {
    let mut l = Log::default();
    l.pod(RunPodSandbox, "p").ctr_events(
        "p",
        "c",
        &[
            CreateContainer,
            PostCreateContainer,
            StartContainer,
            PostStartContainer,
        ],
    );
    let asked = l.0.len() as u64;
    l.ctr_events("p", "c", &[StopContainer, RemoveContainer]);
    let o = check::SelfExitOutcome {
        container: "c".into(),
        exited: true,
        waited_ms: 10_000,
        remove_asked_seq: asked,
        remove_error: None,
    };
    assert_eq!(
        codes(&check::check_self_exit(l.records(), I, &o)),
        ["StopContainer-only-on-remove"]
    );
    let before = check::SelfExitOutcome {
        remove_asked_seq: asked + 1,
        ..o.clone()
    };
    assert!(check::check_self_exit(l.records(), I, &before).is_empty());
    let never = check::SelfExitOutcome { exited: false, ..o };
    assert_eq!(
        codes(&check::check_self_exit(l.records(), I, &never)),
        ["did-not-exit"]
    );
}

#[test]
fn stop_twice_counts_events_between_the_calls() {
    let mut l = Log::default();
    l.pod(RunPodSandbox, "p");
    let start = l.0.len() as u64;
    l.pod(StopPodSandbox, "p");
    let first = l.0.len() as u64;
    l.pod(StopPodSandbox, "p");
    let second = l.0.len() as u64;
    l.ctr(CreateContainer, "p", "reuse");
    let o = check::StopTwiceOutcome {
        pod: "p".into(),
        first_start_seq: start,
        first_done_seq: first,
        second_done_seq: second,
        reuse_done_seq: l.0.len() as u64,
        reuse_created: Some("reuse".into()),
        ..Default::default()
    };
    assert_eq!(
        codes(&check::check_stop_twice(l.records(), I, &o)),
        ["second-StopPodSandbox-event"]
    );
    assert_eq!(
        codes(&check::check_stopped_pod_reuse(l.records(), I, &o)),
        [
            "create-in-stopped-pod-succeeded",
            "CreateContainer-in-stopped-pod"
        ]
    );
}

#[test]
fn sync_hold_tells_a_drop_at_the_timeout_from_a_lost_container() {
    let mut l = Log::default();
    l.sync_as("late", &[], &[]);
    let late = check::SyncHoldOutcome {
        instance: "late".into(),
        request_timeout_ms: 2000,
        hold_ms: 3000,
        held: true,
        containers: vec!["c1".into()],
        dropped_after_ms: Some(2004),
        ..Default::default()
    };
    // Dropped at the timeout: not a lost container.
    assert!(check::check_sync_late(l.records(), &late).is_empty());
    let early = check::SyncHoldOutcome {
        dropped_after_ms: Some(500),
        ..late.clone()
    };
    assert_eq!(
        codes(&check::check_sync_late(l.records(), &early)),
        ["dropped-before-request-timeout"]
    );
    // Kept but never told about c1: lost.
    let kept = check::SyncHoldOutcome {
        dropped_after_ms: None,
        ..late.clone()
    };
    assert_eq!(
        codes(&check::check_sync_late(l.records(), &kept)),
        ["container-lost"]
    );
    // Held within the timeout and dropped anyway.
    let held = check::SyncHoldOutcome {
        hold_ms: 1000,
        create_errors: vec!["busy".into()],
        ..late
    };
    assert_eq!(
        codes(&check::check_sync_held(l.records(), &held)),
        [
            "create-failed-during-sync",
            "dropped-within-request-timeout"
        ]
    );
}

#[test]
fn teardown_error_names_the_event_the_later_plugin_missed() {
    let mut l = Log::default();
    for inst in ["failing", "later"] {
        l.ctr_as(inst, StopContainer, "p", "c")
            .ctr_as(inst, RemoveContainer, "p", "c")
            .pod_as(inst, StopPodSandbox, "p");
    }
    l.pod_as("failing", RemovePodSandbox, "p");
    let o = check::TeardownErrorOutcome {
        pod: "p".into(),
        container: "c".into(),
        failing: "failing".into(),
        later: "later".into(),
        failed_steps: vec![("remove-pod".into(), "plugin failed".into())],
    };
    assert_eq!(
        codes(&check::check_teardown_error(l.records(), &o)),
        [
            "later-plugin-without-RemovePodSandbox",
            "remove-pod-failed-on-plugin-error"
        ]
    );
}

#[test]
fn a_late_post_event_is_one_finding_and_does_not_move_the_lifecycle() {
    // containerd 2.4: a container exiting at once gets StopContainer before
    // its PostStartContainer.
    let mut l = Log::default();
    l.pod(RunPodSandbox, "p").ctr_events(
        "p",
        "c",
        &[
            CreateContainer,
            PostCreateContainer,
            StartContainer,
            StopContainer,
            PostStartContainer,
            RemoveContainer,
        ],
    );
    assert_eq!(
        codes(&check_container_order(l.records(), I, &none())),
        ["PostStartContainer-after-StopContainer"]
    );
}
