//! From the records and what the driver did to one result per clause.

use std::collections::HashSet;

use nri_plugin::NriVersion;
use nri_plugin::api::Event;

use crate::check::{self, Clause, TeardownExpectation, Violation};
use crate::record::{EventKind, Record, RecordKind};
use crate::report::{ClauseResult, RuntimeSummary, Status};
use crate::scenario::Driven;

/// Runs every checker, in [`Clause::ALL`] order.
pub(crate) fn evaluate(
    records: &[Record],
    main: &str,
    rt: &RuntimeSummary,
    driven: Option<&Driven>,
    shutdown_asked: bool,
) -> Vec<ClauseResult> {
    let classify = |c: Clause, s: String, v: Vec<Violation>| {
        ClauseResult::classify(c, s, v, &rt.name, &rt.version)
    };
    let mut out = vec![dialect(rt)];
    let events = records
        .iter()
        .filter(|r| r.instance == main && r.as_event().is_some())
        .count();
    let mut observers = vec![main.to_owned()];
    if let Some(d) = driven {
        observers.extend(d.observers.iter().cloned());
    }
    let undone = driven.map(|d| undone(records, d)).unwrap_or_default();
    let all = |f: &dyn Fn(&str) -> Vec<Violation>| {
        observers.iter().flat_map(|i| f(i)).collect::<Vec<_>>()
    };
    let seen = format!(
        "{events} events of {main} (+{} more instances)",
        observers.len() - 1
    );
    out.push(match driven {
        Some(d) => classify(
            Clause::EventMetadata,
            format!(
                "{events} events of {main} about {} pods and {} containers made",
                d.metadata.pods.len(),
                d.metadata.containers.len()
            ),
            check::check_event_metadata(records, main, &d.metadata),
        ),
        None => ClauseResult::skipped(Clause::EventMetadata, PASSIVE),
    });
    out.push(classify(
        Clause::PodOrder,
        seen.clone(),
        all(&|i| check::check_pod_order(records, i, &undone)),
    ));
    out.push(classify(
        Clause::ContainerOrder,
        seen.clone(),
        all(&|i| check::check_container_order(records, i, &undone)),
    ));
    out.push(classify(
        Clause::PodScope,
        seen,
        all(&|i| check::check_pod_scope(records, i)),
    ));
    let teardown = match driven {
        Some(d) => d.teardown.clone(),
        None => passive_teardown(records, main),
    };
    out.push(classify(
        Clause::Teardown,
        format!(
            "{} pods, {} containers removed, {} failed creations",
            teardown.pods.len(),
            teardown.containers.len(),
            teardown.failed_creates.len()
        ),
        check::check_teardown(records, main, &teardown),
    ));
    match driven {
        Some(d) => driven_clauses(records, main, d, &classify, &mut out),
        None => {
            for c in DRIVEN_ONLY {
                out.push(ClauseResult::skipped(c, PASSIVE));
            }
        }
    }
    out.push(shutdown(records, main, shutdown_asked, &classify));
    out
}

const PASSIVE: &str = "passive mode: needs the CRI driver";

/// The clauses only a driven run checks, in report order.
const DRIVEN_ONLY: [Clause; 13] = [
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
];

fn dialect(rt: &RuntimeSummary) -> ClauseResult {
    let valid = rt
        .nri_version
        .parse::<NriVersion>()
        .unwrap_or(NriVersion::CONSERVATIVE)
        .valid_events();
    let unsupported = Event::ALL_EVENTS
        .iter()
        .filter(|e| !valid.contains(**e))
        .map(|e| e.pretty_name())
        .collect::<Vec<_>>();
    ClauseResult {
        clause: Clause::Dialect,
        status: Status::Info,
        summary: format!(
            "{} {}: NRI {} ({}): {}{}",
            rt.name,
            rt.version,
            rt.nri_version,
            rt.nri_version_origin.to_lowercase(),
            if rt.dialect == "dedicated-rpcs" {
                "a dedicated RPC per event"
            } else {
                "pod/post events through StateChange"
            },
            if unsupported.is_empty() {
                String::new()
            } else {
                format!("; cannot deliver {}", unsupported.join(", "))
            }
        ),
        findings: Vec::new(),
    }
}

/// One result from an optional outcome: the check, or SKIPPED.
fn outcome<T>(
    clause: Clause,
    o: Option<&T>,
    summary: impl FnOnce(&T) -> String,
    check: impl FnOnce(&T) -> Vec<Violation>,
    classify: &impl Fn(Clause, String, Vec<Violation>) -> ClauseResult,
) -> ClauseResult {
    match o {
        Some(o) => classify(clause, summary(o), check(o)),
        None => ClauseResult::skipped(clause, "not run (needs the slow phases)"),
    }
}

fn driven_clauses(
    records: &[Record],
    main: &str,
    d: &Driven,
    classify: &impl Fn(Clause, String, Vec<Violation>) -> ClauseResult,
    out: &mut Vec<ClauseResult>,
) {
    let err = |e: &Option<String>| e.as_deref().map_or("worked".into(), one_line);
    out.push(outcome(
        Clause::SelfExit,
        d.self_exit.as_ref(),
        |o| {
            format!(
                "container exited: {}; waited {} ms for StopContainer",
                o.exited, o.waited_ms
            )
        },
        |o| check::check_self_exit(records, main, o),
        classify,
    ));
    out.push(outcome(
        Clause::StopPodState,
        d.stop_pod_state.as_ref(),
        |o| {
            format!(
                "StopPodSandbox held: {}{}; containers listed during it: {}",
                o.held,
                tries(o.attempts),
                probe(&o.listed)
            )
        },
        |o| check::check_stop_pod_state(records, main, o),
        classify,
    ));
    out.push(outcome(
        Clause::StopPodTwice,
        d.stop_twice.as_ref(),
        |o| format!("second stop: {}", err(&o.second_error)),
        |o| check::check_stop_twice(records, main, o),
        classify,
    ));
    out.push(outcome(
        Clause::StoppedPodReuse,
        d.stop_twice.as_ref(),
        |o| match &o.reuse_created {
            Some(_) => "creation in the stopped pod worked".into(),
            None => "creation in the stopped pod refused".into(),
        },
        |o| check::check_stopped_pod_reuse(records, main, o),
        classify,
    ));
    out.push(outcome(
        Clause::RunPodError,
        d.run_error.as_ref(),
        |o| {
            format!(
                "refused run: {}{}; retry: {}",
                err(&o.failed_error),
                tries(o.attempts),
                err(&o.retry_error)
            )
        },
        |o| check::check_run_error(records, main, o),
        classify,
    ));
    out.push(outcome(
        Clause::RunPodBlocked,
        d.run_blocked.as_ref(),
        |o| {
            format!(
                "held: {}{}; pod listed during the hold: {}; creation in it: {}",
                o.held.is_some(),
                tries(o.attempts),
                probe(&o.listed),
                match &o.create_while_held {
                    Some(Ok(_)) => "worked".into(),
                    Some(Err(e)) => format!("refused ({})", one_line(e)),
                    None => "not in time (inconclusive)".into(),
                }
            )
        },
        check::check_run_blocked,
        classify,
    ));
    error_and_sync_clauses(records, main, d, classify, out);
}

#[allow(clippy::too_many_lines)]
fn error_and_sync_clauses(
    records: &[Record],
    main: &str,
    d: &Driven,
    classify: &impl Fn(Clause, String, Vec<Violation>) -> ClauseResult,
    out: &mut Vec<ClauseResult>,
) {
    let err = |e: &Option<String>| e.as_deref().map_or("worked".into(), one_line);
    out.push(outcome(
        Clause::CreateBlocked,
        d.create_blocked.as_ref(),
        |o| {
            format!(
                "held: {}{}; listed during the hold: {}",
                o.held.is_some(),
                tries(o.attempts),
                probe(&o.listed)
            )
        },
        check::check_create_blocked,
        classify,
    ));
    out.push(outcome(
        Clause::CreateError,
        d.create_error.as_ref(),
        |o| format!("refused creation: {}", err(&o.refused_error)),
        |o| check::check_create_error(records, main, o),
        classify,
    ));
    out.push(outcome(
        Clause::TeardownError,
        d.teardown_error.as_ref(),
        |o| {
            format!(
                "{} refused every teardown event; {} CRI steps failed",
                o.failing,
                o.failed_steps.len()
            )
        },
        |o| check::check_teardown_error(records, o),
        classify,
    ));
    let v = d
        .sync_instances
        .iter()
        .flat_map(|i| check::check_sync_exactly_once(records, i, &d.sync_pods, &d.sync_containers))
        .collect();
    out.push(classify(
        Clause::SyncExactlyOnce,
        format!(
            "{} instances registered during {} pod + {} container creations",
            d.sync_instances.len(),
            d.sync_pods.len(),
            d.sync_containers.len()
        ),
        v,
    ));
    out.push(outcome(
        Clause::SyncHeld,
        d.sync_held.as_ref(),
        sync_summary,
        |o| check::check_sync_held(records, o),
        classify,
    ));
    out.push(outcome(
        Clause::SyncLate,
        d.sync_late.as_ref(),
        sync_summary,
        |o| check::check_sync_late(records, o),
        classify,
    ));
    out.push(outcome(
        Clause::RequestTimeout,
        d.timeout.as_ref(),
        |o| {
            format!(
                "answer after {} ms (timeout {} ms): creation {} in {} ms; plugin {}",
                o.delay_ms,
                o.request_timeout_ms,
                if o.slow_error.is_some() {
                    "failed"
                } else {
                    "succeeded"
                },
                o.slow_elapsed_ms,
                if o.disconnected {
                    "disconnected by the runtime"
                } else {
                    "kept"
                }
            )
        },
        check::check_request_timeout,
        classify,
    ));
}

fn sync_summary(o: &check::SyncHoldOutcome) -> String {
    format!(
        "Synchronize held {} ms (timeout {} ms); {} creations took {:?} ms; plugin {}",
        o.hold_ms,
        o.request_timeout_ms,
        o.containers.len() + o.create_errors.len(),
        o.create_ms,
        match o.dropped_after_ms {
            Some(ms) => format!("dropped by the runtime {ms} ms into Synchronize"),
            None => "kept".into(),
        }
    )
}

/// " (try N)" after a hold phase's verdict when its first try missed.
fn tries(attempts: u32) -> String {
    if attempts > 1 {
        format!(" (try {attempts})")
    } else {
        String::new()
    }
}

fn probe<T: std::fmt::Debug, E>(p: &Option<Result<T, E>>) -> String {
    match p {
        None => "not in time (inconclusive)".into(),
        Some(Ok(v)) => format!("{v:?}"),
        Some(Err(_)) => "refused".into(),
    }
}

fn shutdown(
    records: &[Record],
    main: &str,
    asked: bool,
    classify: &impl Fn(Clause, String, Vec<Violation>) -> ClauseResult,
) -> ClauseResult {
    if !asked {
        return ClauseResult::skipped(Clause::Shutdown, "no stop-runtime command given");
    }
    let got = records
        .iter()
        .any(|r| r.instance == main && r.kind == RecordKind::Shutdown);
    classify(
        Clause::Shutdown,
        format!(
            "runtime stopped with the stop command; {}",
            if got {
                "Shutdown received"
            } else {
                "no Shutdown received"
            }
        ),
        check::check_shutdown(records, main),
    )
}

/// Ids of pods and containers whose creation failed (torn down without
/// having been created, as far as some plugins know).
fn undone(records: &[Record], d: &Driven) -> HashSet<String> {
    let mut ids: HashSet<String> = HashSet::new();
    ids.extend(d.run_error.as_ref().and_then(|o| o.attempted.clone()));
    if let Some(o) = d.run_blocked.as_ref().filter(|o| o.run_error.is_some()) {
        ids.extend(o.held.clone());
    }
    for r in records {
        if let Some((EventKind::CreateContainer, p, Some(c))) = r.as_event()
            && d.teardown
                .failed_creates
                .iter()
                .any(|(pod, name)| (pod == &c.pod_id || pod == &p.id) && name == &c.name)
        {
            ids.insert(c.id.clone());
        }
    }
    ids
}

/// Passive teardown expectation: pods seen removed, and the containers
/// seen in them.
fn passive_teardown(records: &[Record], main: &str) -> TeardownExpectation {
    let mut t = TeardownExpectation::default();
    let mine = records.iter().filter(|r| r.instance == main);
    for r in mine.clone() {
        if let Some((EventKind::RemovePodSandbox, p, None)) = r.as_event()
            && !t.pods.contains(&p.id)
        {
            t.pods.push(p.id.clone());
        }
    }
    for r in mine {
        if let Some((_, _, Some(c))) = r.as_event()
            && t.pods.contains(&c.pod_id)
            && !t.containers.contains(&c.id)
        {
            t.containers.push(c.id.clone());
        }
    }
    t
}

/// The last line of an error, at most 200 bytes.
pub(crate) fn one_line(s: &str) -> String {
    let mut s = s.lines().last().unwrap_or_default().to_owned();
    if s.len() > 200 {
        let mut cut = 197;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}
