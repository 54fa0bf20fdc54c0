//! The plugin against the upstream Go hook-injector's outcome of
//! `tests/parity/scenario.yaml` (`tests/parity/golden.json`): the same hooks
//! injected into the same containers and the same failures, except what
//! README.md lists under "Differences from the Go plugin". The Go plugin
//! read `tests/parity/hooks/usr-share` and `tests/parity/hooks/etc` in
//! place of its fixed directories; this plugin is given them with
//! `-hooks-dir`, through a wrapper script the runtime launches.
#![allow(missing_docs, clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;

use nri_sample_common::parity::{Case, as_is, check};

#[test]
fn same_hooks_as_the_go_plugin() {
    let hooks = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/parity/hooks");
    let dir = tempfile::tempdir().unwrap();
    let wrapper = dir.path().join("hook-injector");
    let script = format!(
        "#!/bin/sh\nexec '{}' -hooks-dir '{}' -hooks-dir '{}' \"$@\"\n",
        env!("CARGO_BIN_EXE_hook-injector"),
        hooks.join("usr-share").display(),
        hooks.join("etc").display(),
    );
    std::fs::write(&wrapper, script).unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    check(&Case {
        plugin: "hook-injector",
        binary: wrapper.to_str().unwrap(),
        crate_dir: env!("CARGO_MANIFEST_DIR"),
        normalize: as_is,
    });
}
