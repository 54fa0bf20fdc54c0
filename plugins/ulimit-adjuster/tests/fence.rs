//! The binary with an allow-list in its configuration
//! (`tests/fence/scenario.yaml`): listed rlimits up to their ceiling are
//! set, others fail the creation. The default (no allow-list) is the
//! parity suite's (`tests/parity.rs`).
#![allow(missing_docs)]

use std::path::Path;

use nri_sample_common::parity::{run, spec_text, step_ok};

#[test]
fn the_allow_list_fences_the_annotation() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = run(
        &dir.join("tests/fence/scenario.yaml"),
        "ulimit-adjuster",
        Path::new(env!("CARGO_BIN_EXE_ulimit-adjuster")),
    );
    assert!(step_ok(&out, "allowed"));
    let spec = spec_text(&out, "job/ok");
    assert!(
        spec.contains("RLIMIT_NOFILE") && spec.contains("RLIMIT_MEMLOCK"),
        "{spec}"
    );
    for refused in ["above-ceiling", "unlisted", "other-namespace"] {
        assert!(!step_ok(&out, refused), "{refused} was not refused");
    }
    assert!(step_ok(&out, "asks-nothing"));
    assert_eq!(spec_text(&out, "web/plain"), "");
}
