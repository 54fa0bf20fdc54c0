//! The plugin against the upstream Go logger's outcome of
//! `tests/parity/scenario.yaml` (`tests/parity/golden.json`): the same
//! registrations, subscriptions, containers and failures, except what
//! README.md lists under "Differences from the Go plugin".
#![allow(missing_docs)]

use nri_sample_common::parity::Outcome;
use nri_sample_common::parity::{Case, check, mask_numbers_after};

fn without_pids(o: &mut Outcome) {
    mask_numbers_after(o, "logger-pid-");
}

#[test]
fn same_registrations_and_containers_as_the_go_plugin() {
    check(&Case {
        plugin: "logger",
        binary: env!("CARGO_BIN_EXE_logger"),
        crate_dir: env!("CARGO_MANIFEST_DIR"),
        normalize: without_pids,
    });
}
