//! The binary with an allow-list in its configuration
//! (`tests/fence/scenario.yaml`): allowed requests are injected, others
//! fail the creation, pods that ask for nothing are untouched. The
//! default (no allow-list) is the parity suite's (`tests/parity.rs`).
#![allow(missing_docs)]

use std::path::Path;

use nri_sample_common::parity::{run, spec_text, step_ok};

#[test]
fn the_allow_list_fences_the_annotations() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = run(
        &dir.join("tests/fence/scenario.yaml"),
        "device-injector",
        Path::new(env!("CARGO_BIN_EXE_device-injector")),
    );
    assert!(step_ok(&out, "allowed"));
    let spec = spec_text(&out, "gpu/ok");
    for want in ["/dev/nvidia0", "/srv/datasets/a", "net.core.somaxconn"] {
        assert!(spec.contains(want), "{want} missing from\n{spec}");
    }
    for refused in [
        "device-numbers",
        "host-root-mount",
        "core-pattern",
        "host-nic",
        "realtime",
        "proc-mount",
        "sysfs-mount",
        "overlay-mount",
        "node-sysctl-under-entry",
        "host-network-sysctl",
        "other-namespace",
    ] {
        assert!(!step_ok(&out, refused), "{refused} was not refused");
    }
    assert!(step_ok(&out, "asks-nothing"));
    assert_eq!(spec_text(&out, "web/plain"), "");
}
