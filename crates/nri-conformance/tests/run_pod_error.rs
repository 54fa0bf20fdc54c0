//! The `run-pod-error` clause when containerd keeps the sandbox of a failed
//! RunPodSandbox: the retry that fails because that sandbox still holds the
//! pod's name is its own, known, code; any other retry failure is
//! `retry-failed`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use nri_conformance::check::{self, RunErrorOutcome};
use nri_conformance::{Clause, known_discrepancy};

const KEPT: &str = "09a16f45dc65ad992e97d1e5561ae224194ef077dedc04e78ebecb632a52eafd";

fn outcome(retry_error: &str) -> RunErrorOutcome {
    RunErrorOutcome {
        name: "nc-1-runerr".into(),
        failed_error: Some("NRI RunPodSandbox failed: refusing on purpose".into()),
        attempted: None,
        left_behind: vec![KEPT.into()],
        retry_error: Some(retry_error.into()),
        retry_state: None,
        attempts: 1,
    }
}

fn codes(o: &RunErrorOutcome) -> Vec<String> {
    check::check_run_error(&[], "conformance", o)
        .into_iter()
        .map(|v| v.code)
        .collect()
}

#[test]
fn a_retry_refused_for_the_kept_sandbox_follows_from_it() {
    // containerd v2.3.7's answer, as the checker saw it.
    let o = outcome(&format!(
        "run pod sandbox: rpc error: code = FailedPrecondition desc = failed to reserve \
         sandbox name \"nc-1-runerr_nri-conformance_1-runerr_0\": name \
         \"nc-1-runerr_nri-conformance_1-runerr_0\" is reserved for \"{KEPT}\""
    ));
    assert_eq!(
        codes(&o),
        ["failed-pod-listed", "retry-blocked-by-failed-pod"]
    );
    for code in ["failed-pod-listed", "retry-blocked-by-failed-pod"] {
        let k = known_discrepancy("containerd", "v2.3.7", Clause::RunPodError, code)
            .unwrap_or_else(|| panic!("{code} not known"));
        assert!(k.intermittent, "{code}");
    }
}

#[test]
fn any_other_retry_failure_is_retry_failed() {
    let o = outcome("run pod sandbox: rpc error: code = Unknown desc = no space left");
    assert_eq!(codes(&o), ["failed-pod-listed", "retry-failed"]);
    assert!(
        known_discrepancy("containerd", "v2.4.2", Clause::RunPodError, "retry-failed").is_none()
    );
}
