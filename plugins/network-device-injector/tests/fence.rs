//! The binary with an allow-list in its configuration
//! (`tests/fence/scenario.yaml`): listed interfaces move into pods of
//! listed namespaces, anything else fails the pod. The default (no
//! allow-list) is the parity suite's (`tests/parity.rs`).
#![allow(missing_docs)]

use std::path::Path;

use nri_sample_common::parity::{run, spec_text, step_ok};

#[test]
fn the_allow_list_fences_the_annotation() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = run(
        &dir.join("tests/fence/scenario.yaml"),
        "network-device-injector",
        Path::new(env!("CARGO_BIN_EXE_network-device-injector")),
    );
    assert!(step_ok(&out, "allowed") && step_ok(&out, "allowed-container"));
    let spec = spec_text(&out, "ok/app");
    assert!(
        spec.contains("sriov-vf1") && spec.contains("net1"),
        "{spec}"
    );
    for refused in ["host-nic", "other-namespace"] {
        assert!(!step_ok(&out, refused), "{refused} was not refused");
    }
    assert!(step_ok(&out, "asks-nothing") && step_ok(&out, "asks-nothing-container"));
    assert_eq!(spec_text(&out, "plain/app"), "");
}
