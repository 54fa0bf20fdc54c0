//! The whole checker against a simulated runtime (our `nri-runtime` with an
//! in-memory CRI side): a conforming one passes every clause, and each
//! fault, the way real runtimes break the contract, fails its clause with
//! the documented code.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

mod sim;

use std::time::Duration;

use nri_conformance::{Clause, Mode, Options, Report, Status, print_table, run_with};
use sim::{Faults, Sim};

async fn check(faults: Faults, slow: bool) -> Report {
    let sim = Sim::start(faults)
        .await
        .expect("start the simulated runtime");
    let mut opts = Options::new(
        sim.socket(),
        Mode::Passive {
            duration: Duration::ZERO,
        },
    );
    opts.check_timeout = slow;
    opts.registration_timeout = Duration::from_secs(10);
    let report = run_with(opts, &sim).await.expect("conformance run");
    sim.stop().await;
    report
}

fn table(r: &Report) -> String {
    let mut out = Vec::new();
    print_table(r, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

/// Asserts `clause` failed with (at least) `codes`.
fn assert_fails(r: &Report, clause: Clause, codes: &[&str]) {
    let t = table(r);
    let c = r.clause(clause).expect("clause in report");
    assert_eq!(c.status, Status::Fail, "{clause} should fail:\n{t}");
    for code in codes {
        assert!(
            c.findings.iter().any(|f| f.code == *code),
            "{clause} should report {code}:\n{t}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conforming_runtime_passes_every_clause_slow_phases_included() {
    let r = check(Faults::default(), true).await;
    let t = table(&r);
    for c in &r.clauses {
        let want = match c.clause {
            Clause::Dialect => Status::Info,
            Clause::Shutdown => Status::Skipped,
            _ => Status::Pass,
        };
        assert_eq!(c.status, want, "{}:\n{t}", c.clause);
    }
    // Our runtime drops a plugin whose Synchronize comes after the request
    // timeout: reported in the row, not as a lost container.
    let late = r.clause(Clause::SyncLate).unwrap();
    assert!(late.summary.contains("dropped by the runtime"), "{t}");
    assert!(r.ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_metadata_fails_without_the_pod_uid() {
    let r = check(
        Faults {
            drop_pod_uid: true,
            ..Faults::default()
        },
        false,
    )
    .await;
    assert_fails(
        &r,
        Clause::EventMetadata,
        &[
            "RunPodSandbox-pod-uid-missing",
            "CreateContainer-pod-uid-missing",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_exit_fails_when_stop_comes_only_with_the_removal() {
    let r = check(
        Faults {
            no_stop_on_exit: true,
            ..Faults::default()
        },
        false,
    )
    .await;
    assert_fails(&r, Clause::SelfExit, &["StopContainer-only-on-remove"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_pod_state_fails_when_containers_still_run() {
    let r = check(
        Faults {
            stop_pod_before_containers: true,
            ..Faults::default()
        },
        false,
    )
    .await;
    assert_fails(
        &r,
        Clause::StopPodState,
        &[
            "container-running-during-StopPodSandbox",
            "StopPodSandbox-before-StopContainer",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_twice_and_reuse_fail_on_a_second_event_and_a_reused_pod() {
    let r = check(
        Faults {
            second_stop_event: true,
            create_in_stopped_pod: true,
            ..Faults::default()
        },
        false,
    )
    .await;
    assert_fails(&r, Clause::StopPodTwice, &["second-StopPodSandbox-event"]);
    assert_fails(
        &r,
        Clause::StoppedPodReuse,
        &[
            "create-in-stopped-pod-succeeded",
            "CreateContainer-in-stopped-pod",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_pod_error_fails_when_the_failed_pod_stays() {
    let r = check(
        Faults {
            keep_failed_pod: true,
            ..Faults::default()
        },
        false,
    )
    .await;
    assert_fails(&r, Clause::RunPodError, &["failed-pod-listed"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_pod_blocked_fails_when_the_pod_is_ready_early() {
    let r = check(
        Faults {
            list_pod_during_run: true,
            ..Faults::default()
        },
        false,
    )
    .await;
    assert_fails(
        &r,
        Clause::RunPodBlocked,
        &[
            "pod-listed-ready-during-RunPodSandbox",
            "pod-ready-during-RunPodSandbox",
            "create-in-held-pod-succeeded",
        ],
    );
}

/// The first run of each RunPodSandbox phase goes to no plugin (a runtime
/// still activating the phase's new instance): the checker tries once more
/// with another pod and judges that try.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_pod_phases_try_again_when_the_first_run_misses_the_new_plugin() {
    let r = check(
        Faults {
            missed_runs: 1,
            ..Faults::default()
        },
        false,
    )
    .await;
    let t = table(&r);
    let blocked = r.clause(Clause::RunPodBlocked).expect("clause in report");
    assert_eq!(blocked.status, Status::Pass, "{t}");
    assert!(blocked.summary.contains("held: true (try 2)"), "{t}");
    let refused = r.clause(Clause::RunPodError).expect("clause in report");
    assert_eq!(refused.status, Status::Pass, "{t}");
    assert!(refused.summary.contains("(try 2); retry: worked"), "{t}");
}

/// A runtime that never lets the new instance see these pods' RunPodSandbox
/// fails both clauses after the second try.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_pod_phases_fail_when_no_try_reaches_the_new_plugin() {
    let r = check(
        Faults {
            missed_runs: u64::MAX,
            ..Faults::default()
        },
        false,
    )
    .await;
    assert_fails(&r, Clause::RunPodBlocked, &["RunPodSandbox-not-held"]);
    assert_fails(&r, Clause::RunPodError, &["refused-run-succeeded"]);
    // The retry after it is still made and judged: it worked.
    let refused = r.clause(Clause::RunPodError).expect("clause in report");
    assert!(
        refused.summary.ends_with("(try 2); retry: worked"),
        "{}",
        table(&r)
    );
    assert_eq!(refused.findings.len(), 1, "{}", table(&r));
    let c = r.clause(Clause::RunPodBlocked).expect("clause in report");
    assert!(c.summary.contains("held: false (try 2)"), "{}", table(&r));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_scope_fails_on_container_events_outside_the_pod() {
    let r = check(
        Faults {
            pod_events_out_of_place: true,
            ..Faults::default()
        },
        false,
    )
    .await;
    assert_fails(
        &r,
        Clause::PodScope,
        &[
            "CreateContainer-before-RunPodSandbox",
            "RemoveContainer-after-RemovePodSandbox",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_blocked_fails_when_the_container_is_listed_early() {
    let r = check(
        Faults {
            list_container_during_create: true,
            ..Faults::default()
        },
        false,
    )
    .await;
    assert_fails(
        &r,
        Clause::CreateBlocked,
        &[
            "container-listed-created-during-CreateContainer",
            "container-created-during-CreateContainer",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_error_fails_when_the_refused_container_is_left() {
    let r = check(
        Faults {
            keep_failed_container: true,
            ..Faults::default()
        },
        false,
    )
    .await;
    assert_fails(&r, Clause::CreateError, &["refused-container-listed"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teardown_error_fails_when_a_plugin_error_fails_the_stop() {
    let r = check(
        Faults {
            fail_stop_pod_on_plugin_error: true,
            ..Faults::default()
        },
        false,
    )
    .await;
    assert_fails(
        &r,
        Clause::TeardownError,
        &["stop-pod-failed-on-plugin-error"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_held_fails_when_a_container_made_during_the_sync_is_lost() {
    let r = check(
        Faults {
            hide_during_sync: true,
            ..Faults::default()
        },
        false,
    )
    .await;
    assert_fails(&r, Clause::SyncHeld, &["container-lost"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_late_fails_when_creations_during_the_sync_fail() {
    let r = check(
        Faults {
            refuse_during_sync: true,
            ..Faults::default()
        },
        true,
    )
    .await;
    assert_fails(&r, Clause::SyncHeld, &["create-failed-during-sync"]);
    assert_fails(&r, Clause::SyncLate, &["create-failed-during-sync"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passive_mode_checks_what_it_saw_and_skips_the_rest() {
    use nri_conformance::{ContainerSpec, Cri, PodSpec, run};
    let sim = Sim::start(Faults::default()).await.unwrap();
    let mut opts = Options::new(
        sim.socket(),
        Mode::Passive {
            duration: Duration::from_millis(1500),
        },
    );
    opts.registration_timeout = Duration::from_secs(10);
    // Something happens on the node while the checker watches.
    let node = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let pod = PodSpec {
            name: "watched".into(),
            namespace: "ns".into(),
            uid: "u".into(),
        };
        let ctr = ContainerSpec {
            name: "c".into(),
            command: None,
        };
        let p = sim.run_pod(&pod).await.unwrap().unwrap();
        let c = sim.create_container(&p, &pod, &ctr).await.unwrap().unwrap();
        sim.start_container(&c).await.unwrap().unwrap();
        sim.stop_pod(&p).await.unwrap().unwrap();
        sim.remove_pod(&p).await.unwrap().unwrap();
    };
    let (report, ()) = tokio::join!(run(opts), node);
    let r = report.unwrap();
    sim.stop().await;
    let t = table(&r);
    assert_eq!(r.mode, "passive", "{t}");
    for c in &r.clauses {
        let want = match c.clause {
            Clause::Dialect => Status::Info,
            Clause::PodOrder | Clause::ContainerOrder | Clause::PodScope | Clause::Teardown => {
                Status::Pass
            }
            _ => Status::Skipped,
        };
        assert_eq!(c.status, want, "{}:\n{t}", c.clause);
    }
    let teardown = r.clause(Clause::Teardown).unwrap();
    assert!(teardown.summary.starts_with("1 pods, 1 containers"), "{t}");
}
