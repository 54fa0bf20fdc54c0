//! The sample WebAssembly plugin (`plugins/wasm-annotator`, Go source
//! built with the standard toolchain by its `build.sh`) run through
//! `nri sim` from a plugin directory with its drop-in configuration: it
//! annotates containers as configured and leaves the skipped namespace
//! alone.
//!
//! Needs a Go toolchain (>= 1.24): without one the test says so and
//! returns, unless `NRI_REQUIRE_INTEROP=1`, which makes a missing
//! toolchain a failure.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Go toolchain the build script would use, if there is one.
fn have_go() -> bool {
    let go = std::env::var_os("GO").unwrap_or_else(|| "go".into());
    let found = Command::new(&go)
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success())
        || Path::new("/usr/local/go/bin/go").is_file();
    if !found {
        assert!(
            std::env::var("NRI_REQUIRE_INTEROP").as_deref() != Ok("1"),
            "no Go toolchain (NRI_REQUIRE_INTEROP=1): cannot build plugins/wasm-annotator"
        );
        eprintln!(
            "skipping: no Go toolchain to build plugins/wasm-annotator (set GO or put go on PATH)"
        );
    }
    found
}

const CONFIG: &str = "# the sample's drop-in configuration\n\
example.com/team=storage\n\
example.com/tier = gold\n\
skip-namespace=kube-system\n";

const SCENARIO: &str = "\
pods:
  - name: web
    namespace: shop
    containers:
      - name: app
  - name: dns
    namespace: kube-system
    containers:
      - name: coredns
        annotations: { existing: 'yes' }
steps:
  - up: web
  - up: dns
expect:
  - container: web/app
    annotations:
      example.com/team: storage
      example.com/tier: gold
      wasm-annotator.nri-rs.io/pod: shop/web
    owners:
      annotations/example.com/team: 10-annotator
  - container: dns/coredns
    annotations: { existing: 'yes' }
  - plugin: annotator
    registered: true
  - plugin: annotator
    event: CreateContainer
    calls: 2
  - plugin: annotator
    event: RunPodSandbox
    calls: 0
";

#[test]
fn the_sample_wasm_plugin_annotates_containers_in_nri_sim() {
    if !have_go() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    let wasm = plugins.join("10-annotator");
    let built = Command::new("bash")
        .arg(repo().join("plugins/wasm-annotator/build.sh"))
        .arg(&wasm)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "build.sh failed:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    assert_eq!(&std::fs::read(&wasm).unwrap()[..4], b"\0asm");
    std::fs::write(plugins.join("10-annotator.conf"), CONFIG).unwrap();
    let scenario = dir.path().join("annotate.yaml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    // Loading a 10 MB Go guest takes a second or more on a busy machine:
    // room beyond the default 5 s registration timeout.
    let config = dir.path().join("runtime.yaml");
    std::fs::write(&config, "registration-timeout: 60s\nrequest-timeout: 30s\n").unwrap();

    let out = Command::new(env!("CARGO_BIN_EXE_nri"))
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .args(["sim", "--no-bundled", "--outcome", "--config"])
        .arg(&config)
        .arg("--plugin-dir")
        .arg(&plugins)
        .arg(&scenario)
        .output()
        .unwrap();
    let text = format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{text}");
    // The plugin's own view of what it did: CreateContainer only, and the
    // skipped namespace's container unchanged (the scenario language
    // checks present values only).
    let outcome: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("--outcome is not one JSON document ({e}):\n{text}");
    });
    assert_eq!(
        outcome["plugins"]["10-annotator"]["events"],
        serde_json::json!(["CreateContainer"]),
        "{text}"
    );
    let specs = &outcome["specs"];
    assert_eq!(specs["dns/coredns"], serde_json::json!([]), "{text}");
    let changed: Vec<&str> = specs["web/app"]
        .as_array()
        .unwrap_or_else(|| panic!("web/app unchanged:\n{text}"))
        .iter()
        .filter_map(|c| c["path"].as_str())
        .collect();
    assert_eq!(
        changed,
        [
            "annotations.example.com/team",
            "annotations.example.com/tier",
            "annotations.wasm-annotator.nri-rs.io/pod"
        ],
        "{text}"
    );
}
