//! The plugin against the upstream Go template's outcome of
//! `tests/parity/scenario.yaml` (`tests/parity/golden.json`): the same
//! registrations, subscriptions, answers and containers, except what
//! README.md lists under "Differences from the Go plugin".
#![allow(missing_docs)]

use nri_sample_common::parity::{Case, as_is, check};

#[test]
fn same_registrations_and_containers_as_the_go_plugin() {
    check(&Case {
        plugin: "template",
        binary: env!("CARGO_BIN_EXE_template-under-test"),
        crate_dir: concat!(env!("CARGO_MANIFEST_DIR"), "/../template"),
        normalize: as_is,
    });
}
