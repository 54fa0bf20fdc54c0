//! The plugin against the upstream Go ulimit-adjuster's outcome of
//! `tests/parity/scenario.yaml` (`tests/parity/golden.json`): the same
//! containers and failures, except what README.md lists under
//! "Differences from the Go plugin".
#![allow(missing_docs)]

use nri_sample_common::parity::{Case, as_is, check};

#[test]
fn same_containers_as_the_go_plugin() {
    check(&Case {
        plugin: "ulimit-adjuster",
        binary: env!("CARGO_BIN_EXE_ulimit-adjuster"),
        crate_dir: env!("CARGO_MANIFEST_DIR"),
        normalize: as_is,
    });
}
