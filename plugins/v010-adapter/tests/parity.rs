//! The plugin against the upstream Go v010-adapter's outcome of
//! `tests/parity/scenario.yaml` (`tests/parity/golden.json`): the same
//! registrations, subscriptions, answers and containers on a node without NRI v0.1 configuration, except what
//! README.md lists under "Differences from the Go plugin".
#![allow(missing_docs)]

use nri_sample_common::parity::{Case, as_is, check};

#[test]
fn same_registrations_and_containers_as_the_go_plugin() {
    check(&Case {
        plugin: "v010-adapter",
        binary: env!("CARGO_BIN_EXE_v010-adapter"),
        crate_dir: env!("CARGO_MANIFEST_DIR"),
        normalize: as_is,
    });
}
