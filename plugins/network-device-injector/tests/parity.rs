//! The plugin against the upstream Go network-device-injector's outcome of
//! `tests/parity/scenario.yaml` (`tests/parity/golden.json`): the same pods
//! and containers accepted and refused; the specs differ only where
//! README.md says so under "Differences from the Go plugin" (this plugin
//! asks the runtime to move the interfaces, the Go one moves them itself).
#![allow(missing_docs)]

use nri_sample_common::parity::{Case, as_is, check};

#[test]
fn same_outcomes_as_the_go_plugin() {
    check(&Case {
        plugin: "network-device-injector",
        binary: env!("CARGO_BIN_EXE_network-device-injector"),
        crate_dir: env!("CARGO_MANIFEST_DIR"),
        normalize: as_is,
    });
}
