//! End-to-end tests of Rust NRI plugins against a real containerd.
//!
//! A thin Rust wrapper around `tests/e2e/harness.sh` (see the README next to
//! it): [`Containerd`] owns a private WORK dir and the containerd running in
//! it (torn down by `Drop`, also when a test panics), [`PluginProcess`] owns
//! an externally started plugin and its log, [`plugin_binary`] finds (or
//! builds once) the plugin executables.
//!
//! # Gate
//!
//! Every test starts with [`e2e_enabled`]: unless `NRI_E2E=1` it prints why
//! and the test returns early; with `NRI_E2E=1` a harness that is not
//! available (not root, `scripts/setup-e2e.sh` not run) fails the test.
//! `scripts/test.sh` runs the set-up and sets `NRI_E2E=1`.
//!
//! # Robustness
//!
//! Nothing sleeps to synchronise: waits poll a condition against a generous
//! deadline ([`E2E_TIMEOUT`], scaled by `NRI_E2E_TIMEOUT_SCALE`). Each test
//! uses its own WORK (`/tmp/nri-e2e.XXXXXX`, well under the harness's
//! 40-byte limit), so tests may run in parallel. On failure the WORK dir is
//! kept and the tails of containerd's and the plugins' logs are printed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

pub mod daemonset;
pub mod images;
pub mod k8s;
pub mod oci;

mod binaries;
mod containerd;
mod logs;
mod plugin_process;
mod process;

pub use binaries::*;
pub use containerd::*;
pub use logs::*;
pub use plugin_process::*;
pub use process::*;

/// The containerd versions the harness provides, as `harness.sh start` takes them.
pub const VERSIONS: [&str; 3] = ["2.1", "2.3", "2.4"];

/// Base deadline for one containerd-facing step (a crictl call, a plugin
/// registering, a log line appearing). Generous on purpose: the suite must
/// pass on a loaded 2-core machine.
pub const E2E_TIMEOUT: Duration = Duration::from_secs(60);

/// The deadline for one step: [`E2E_TIMEOUT`] times `NRI_E2E_TIMEOUT_SCALE`
/// (a positive number, default 1).
pub fn timeout() -> Duration {
    let scale = std::env::var("NRI_E2E_TIMEOUT_SCALE")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .unwrap_or(1.0);
    E2E_TIMEOUT.mul_f64(scale)
}

/// Path of `tests/e2e/harness.sh`.
pub fn harness_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("harness.sh")
}

/// The workspace root (where `Cargo.toml` with `[workspace]` is).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Whether the e2e tests run (see the crate docs). `test` names the caller
/// for the skip message.
///
/// # Panics
///
/// When `NRI_E2E=1` and `harness.sh available` fails: the tests were asked
/// for and cannot run, which is a failure, not a skip.
pub fn e2e_enabled(test: &str) -> bool {
    if std::env::var("NRI_E2E").as_deref() != Ok("1") {
        eprintln!(
            "{test}: skipped: NRI_E2E is not 1 (run `bash scripts/setup-e2e.sh` and set NRI_E2E=1, \
             or use scripts/test.sh)"
        );
        return false;
    }
    static AVAILABLE: Mutex<Option<std::result::Result<(), String>>> = Mutex::new(None);
    let mut guard = AVAILABLE.lock().unwrap_or_else(|e| e.into_inner());
    let result =
        guard.get_or_insert_with(
            || match Command::new(harness_path()).arg("available").output() {
                Ok(out) if out.status.success() => Ok(()),
                Ok(out) => Err(format!(
                    "harness.sh available failed ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                )),
                Err(e) => Err(format!("cannot run {}: {e}", harness_path().display())),
            },
        );
    if let Err(why) = result {
        panic!("{test}: NRI_E2E=1 but the e2e harness is not available: {why}");
    }
    true
}

/// Runs one e2e test: skips it, saying why, unless [`e2e_enabled`]; fails
/// it with the error of `body`; then checks its wall time against `budget`
/// ([`check_budget`]).
///
/// # Panics
///
/// When `body` fails, or the test is over its budget.
pub fn run_e2e(test: &str, budget: Duration, body: impl FnOnce() -> anyhow::Result<()>) {
    if e2e_enabled(test) {
        run_timed(test, budget, body);
    }
}

/// `body` run as a test named `test`, its error a failure, its wall time
/// checked against `budget`.
fn run_timed(test: &str, budget: Duration, body: impl FnOnce() -> anyhow::Result<()>) {
    let t0 = std::time::Instant::now();
    if let Err(e) = body() {
        panic!("{test}: {e:#}");
    }
    check_budget(test, t0.elapsed(), budget);
}

/// Prints one timing line the suite's report greps for.
pub fn report_timing(test: &str, t: Duration) {
    eprintln!("[e2e timing] {test}: {:.1} s", t.as_secs_f64());
}

/// `budget` scaled like every e2e deadline (`NRI_E2E_TIMEOUT_SCALE`).
pub fn scaled(budget: Duration) -> Duration {
    budget.mul_f64(timeout().as_secs_f64() / E2E_TIMEOUT.as_secs_f64())
}

/// Reports `test`'s wall time and fails the test when it is over its
/// `budget` (scaled, see [`scaled`]): the suite's cost is part of what it
/// checks. Time the test's thread spent building plugins in
/// [`plugin_binary`] (a build `cargo test --workspace` has not done
/// already) or the Kubernetes binaries, and waiting for another test's
/// Kubernetes node ([`k8s::Node`]), is left out of the comparison and
/// reported apart.
///
/// # Panics
///
/// When `took`, less the build time, is over the scaled budget.
pub fn check_budget(test: &str, took: Duration, budget: Duration) {
    let building = binaries::BUILD_TIME.with(|t| t.replace(Duration::ZERO));
    let waiting = k8s::NODE_WAIT.with(|t| t.replace(Duration::ZERO));
    let ran = took.saturating_sub(building).saturating_sub(waiting);
    report_timing(test, took);
    if building >= Duration::from_secs(1) {
        eprintln!(
            "[e2e timing] {test}: {:.1} s of it building (plugins, images, Kubernetes)",
            building.as_secs_f64()
        );
    }
    if waiting >= Duration::from_secs(1) {
        eprintln!(
            "[e2e timing] {test}: {:.1} s of it waiting for another test's Kubernetes node",
            waiting.as_secs_f64()
        );
    }
    let budget = scaled(budget);
    assert!(
        ran <= budget,
        "{test} took {:.1} s (not counting {:.1} s of builds and {:.1} s waiting for a node), over its budget of {:.0} s",
        ran.as_secs_f64(),
        building.as_secs_f64(),
        waiting.as_secs_f64(),
        budget.as_secs_f64()
    );
}
