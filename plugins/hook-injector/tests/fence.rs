//! The binary with an allow-list in its configuration
//! (`tests/fence/scenario.yaml`, hook files in `tests/fence/hooks`), and
//! upstream's start-up check: a broken hook file stops the plugin. The
//! default (no allow-list) is the parity suite's (`tests/parity.rs`).
#![allow(missing_docs, clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use nri_sample_common::parity::{run, spec_text, step_ok};

const BIN: &str = env!("CARGO_BIN_EXE_hook-injector");

#[test]
fn the_allow_list_fences_the_hooks() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fence");
    let tmp = tempfile::tempdir().unwrap();
    let wrapper = tmp.path().join("hook-injector");
    let script = format!(
        "#!/bin/sh\nexec '{BIN}' -hooks-dir '{}' \"$@\"\n",
        dir.join("hooks").display()
    );
    std::fs::write(&wrapper, script).unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = run(&dir.join("scenario.yaml"), "hook-injector", &wrapper);
    assert!(step_ok(&out, "allowed"));
    let spec = spec_text(&out, "gpu/asks");
    assert!(spec.contains("always") && spec.contains("gpu"), "{spec}");
    assert!(!step_ok(&out, "hook-path"));
    assert!(step_ok(&out, "not-asked"));
    assert_eq!(
        spec_text(&out, "web/plain"),
        "",
        "the always hook is fenced out"
    );
    assert!(!step_ok(&out, "other-namespace"));
}

fn start(hooks: &Path) -> (Option<i32>, String) {
    let out = Command::new(BIN)
        .args([
            "-hooks-dir",
            hooks.to_str().unwrap(),
            "-no-reconnect",
            "-idx",
            "10",
        ])
        .args(["-socket-path", "/nonexistent/nri.sock"])
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_broken_hook_file_stops_the_start_as_upstream() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("ok.json"),
        r#"{"version": "1.0.0", "hook": {"path": "/bin/true"}, "when": {"always": true}, "stages": []}"#,
    )
    .unwrap();
    // Valid files: it gets past the check (and fails on the missing socket).
    let (code, err) = start(tmp.path());
    assert_eq!(code, Some(1));
    assert!(!err.contains("hook manager"), "{err}");
    std::fs::write(tmp.path().join("broken.json"), "{\"version\": ").unwrap();
    let (code, err) = start(tmp.path());
    assert_eq!(code, Some(1));
    assert!(err.contains("failed to set up the hook manager"), "{err}");
    assert!(err.contains("broken.json"), "{err}");
}
