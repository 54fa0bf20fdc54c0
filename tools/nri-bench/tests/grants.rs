//! The grants run of the runtime harness (`nri-bench-runtime --grants`):
//! with the bench grant the adjusting plugins' answers pass the check and
//! the run succeeds; with a grant that leaves out what they set, every
//! answer is refused, so the check really runs. No timing assertions.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use nri_api::{Capability, CapabilitySet};
use nri_bench::harness::{self, HarnessOptions};
use nri_bench::{Flavour, result::RunResult};

fn plugin_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_nri-bench-plugin"))
}

#[test]
fn the_grants_run_passes_its_adjustment_check() {
    let out = Command::new(env!("CARGO_BIN_EXE_nri-bench-runtime"))
        .args([
            "--flavour",
            "adjusting",
            "--k",
            "2",
            "--n",
            "60",
            "--warmup",
            "5",
            "--idle-wait",
            "50ms",
            "--grants",
            "--plugin-bin",
        ])
        .arg(plugin_bin())
        .output()
        .expect("run nri-bench-runtime");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: RunResult = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(r.error, None, "{stdout}");
    assert_eq!(r.call_errors, 0, "{stdout}");
    assert_eq!(
        r.adjust_check.as_deref(),
        Some("ok: 2 env, 2 annotations"),
        "{stdout}"
    );
}

#[test]
fn a_grant_without_env_refuses_every_answer() {
    let o = HarnessOptions {
        plugin_bin: plugin_bin(),
        k: 1,
        n: 20,
        warmup: 2,
        flavour: Flavour::Adjusting,
        idle_wait: Duration::from_millis(50),
        ..HarnessOptions::default()
    };
    let annotations_only =
        nri_runtime::Grant::new(["*"]).allow(CapabilitySet::of(&[Capability::AdjustAnnotations]));
    let r = harness::run_with_grants(&o, Some(vec![annotations_only]));
    // Every timed call fails (the plugin's policy is fail): its answer
    // sets env, which the grant does not allow.
    assert_eq!(r.call_errors, 20, "{r:?}");
    assert_eq!(r.error.as_deref(), Some("20 calls failed"), "{r:?}");
    // The same run under the bench grant (env and annotations) passes.
    let r = harness::run_with_grants(&o, Some(vec![harness::bench_grant(true)]));
    assert_eq!((r.call_errors, r.error.as_deref()), (0, None), "{r:?}");
}
