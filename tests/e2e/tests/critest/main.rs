//! critest's NRI cases (kubernetes-sigs/cri-tools, the peer suite of
//! `nri conformance`) against each real containerd of the harness, with the
//! outcome of every case compared to what is known of that version.
//!
//! critest needs what `nri conformance` does not: a CNI network (its pods
//! have their own network namespace; a stand-in plugin, see `cni.rs`) and a
//! registry to pull its test image from (a read-only one serving the
//! harness's busybox image, see `registry.rs`). Built by
//! `scripts/setup-critest.sh`; without it the tests skip (and fail when
//! `NRI_E2E=1` and `NRI_E2E_REQUIRE_CRITEST=1`).
//!
//! Budget: 150 s per containerd version (critest's NRI cases wait on their
//! own: a 2 s Synchronize hold twice, 2 s "consistently" checks).

mod cni;
mod registry;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use nri_e2e_tests::{Containerd, e2e_enabled, report_timing, run_with_deadline, timeout};

/// Wall-time budget of one critest run (scaled like every e2e deadline).
const BUDGET: Duration = Duration::from_secs(150);

/// What a critest case did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Passed,
    /// Skipped by the case itself ("spec discrepancy").
    Skipped,
    Failed,
}

/// One critest NRI case: a unique part of its text, and the outcomes it may
/// have on containerd 2.1, 2.3 and 2.4 (more than one: a race the case does
/// not control).
struct Case {
    text: &'static str,
    clause: &'static str,
    expect: [&'static [Outcome]; 3],
}

const PASSED: &[Outcome] = &[Passed];
/// Timing decides (see the Synchronize cases).
const EITHER: &[Outcome] = &[Passed, Skipped];

use Outcome::{Failed, Passed, Skipped};

/// Every NRI case of critest v1.37.0, with the clause of `nri conformance`
/// that checks the same thing.
const CASES: &[Case] = &[
    Case {
        text: "RunPodSandbox, StopPodSandbox, and RemovePodSandbox in strict order",
        clause: "pod-order, event-metadata",
        expect: [PASSED; 3],
    },
    Case {
        text: "CreateContainer, StartContainer, StopContainer, and RemoveContainer in strict order",
        clause: "container-order, event-metadata",
        expect: [PASSED; 3],
    },
    Case {
        text: "for a container that exits with a non-zero code",
        clause: "self-exit",
        expect: [PASSED; 3],
    },
    Case {
        text: "should not expose sandbox while RunPodSandbox hook is in progress",
        clause: "run-pod-blocked",
        expect: [PASSED; 3],
    },
    Case {
        text: "should not start workload containers until RunPodSandbox hook completes",
        clause: "run-pod-blocked",
        expect: [PASSED; 3],
    },
    Case {
        text: "should fail RunPodSandbox and clean up when the NRI hook errors",
        clause: "run-pod-error",
        // Now and then containerd fails to clean the failed sandbox up
        // ("encountered an error cleaning up failed sandbox ..., marking
        // sandbox state as SANDBOX_UNKNOWN") and it stays listed.
        expect: [&[Passed, Failed]; 3],
    },
    Case {
        text: "should stop all workload containers and keep sandbox accessible",
        clause: "stop-pod-state",
        expect: [PASSED; 3],
    },
    Case {
        text: "should handle StopPodSandbox idempotently and never reuse sandbox",
        clause: "stop-pod-twice, stopped-pod-reuse",
        // containerd 2.1 creates containers in a stopped pod.
        expect: [&[Skipped], PASSED, PASSED],
    },
    Case {
        text: "should not expose container while CreateContainer hook is in progress",
        clause: "create-blocked",
        expect: [PASSED; 3],
    },
    Case {
        text: "should fail CreateContainer when the NRI hook errors",
        clause: "create-error",
        expect: [PASSED; 3],
    },
    Case {
        text: "should synchronize a newly connected plugin with existing pods and containers",
        clause: "sync-exactly-once",
        expect: [PASSED; 3],
    },
    // critest holds Synchronize for 2 s, containerd's request timeout:
    // mostly containerd drops the plugin, and critest reports the
    // containers created meanwhile (and after) as lost; when the answer
    // beats containerd's timer, nothing is lost and the case passes.
    Case {
        text: "should receive a callback for container created during the Synchronize call",
        clause: "sync-held, sync-late",
        expect: [EITHER; 3],
    },
    Case {
        text: "without the race condition during initialization",
        clause: "sync-held, sync-late",
        expect: [EITHER; 3],
    },
];

/// Failures that are the race above lost the other way: critest's second
/// stub holds its Synchronize until containerd's 2 s timer ends the
/// connection, and critest then reports the stub as never ready (seen on
/// containerd 2.4 on a quiet 2-vCPU machine). The case text, and the part
/// of critest's message that says so; any other failure of the case is
/// new.
const LOST_RACE: &[(&str, &str)] = &[(
    "without the race condition during initialization",
    "stub failed to become ready",
)];

/// Whether `outcome` (with critest's message `msg`) is what is known of
/// `case` on the containerd version of index `vi`.
fn as_known(case: &Case, vi: usize, outcome: Outcome, msg: &str) -> bool {
    case.expect[vi].contains(&outcome)
        || (outcome == Outcome::Failed
            && LOST_RACE
                .iter()
                .any(|(text, says)| *text == case.text && msg.contains(says)))
}

fn version_index(version: &str) -> Result<usize> {
    Ok(match version {
        "2.1" => 0,
        "2.3" => 1,
        "2.4" => 2,
        v => bail!("no critest expectations for containerd {v}"),
    })
}

fn cache_dir() -> PathBuf {
    let cache = std::env::var("NRI_E2E_CACHE").unwrap_or_else(|_| {
        let base = std::env::var("XDG_CACHE_HOME")
            .unwrap_or_else(|_| format!("{}/.cache", std::env::var("HOME").unwrap_or_default()));
        format!("{base}/nri-rs/e2e")
    });
    PathBuf::from(cache)
}

/// The critest binary, if `scripts/setup-critest.sh` built it.
fn critest_path() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("NRI_E2E_CRITEST") {
        return Some(PathBuf::from(p));
    }
    let v = std::env::var("NRI_E2E_CRITEST_VERSION").unwrap_or_else(|_| "v1.37.0".into());
    let p = cache_dir().join(format!("critest-{v}/bin/critest"));
    p.is_file().then_some(p)
}

/// (case text, outcome, failure or skip message) of every NRI case run.
fn parse_report(json: &serde_json::Value) -> Vec<(String, Outcome, String)> {
    let mut out = Vec::new();
    for suite in json.as_array().into_iter().flatten() {
        for spec in suite["SpecReports"].as_array().into_iter().flatten() {
            let hierarchy = spec["ContainerHierarchyTexts"].to_string();
            let text = spec["LeafNodeText"].as_str().unwrap_or_default();
            if !hierarchy.contains("NRI") || text.is_empty() {
                continue;
            }
            let msg = spec["Failure"]["Message"].as_str().unwrap_or_default();
            let outcome = match spec["State"].as_str().unwrap_or_default() {
                "passed" => Passed,
                // Left out by the focus: no message.
                "skipped" if msg.is_empty() => continue,
                "skipped" => Skipped,
                _ => Failed,
            };
            out.push((
                text.to_owned(),
                outcome,
                msg.lines().next().unwrap_or("").to_owned(),
            ));
        }
    }
    out
}

#[allow(clippy::too_many_lines)]
fn run(version: &str) -> Result<()> {
    let vi = version_index(version)?;
    let Some(critest) = critest_path() else {
        if std::env::var("NRI_E2E_REQUIRE_CRITEST").as_deref() == Ok("1") {
            bail!("critest is not built: run scripts/setup-critest.sh");
        }
        eprintln!("critest {version}: skipped: critest is not built (scripts/setup-critest.sh)");
        return Ok(());
    };
    let label = format!("critest {version}");
    let mut cd = Containerd::new(version, &label)?;
    cni::install(cd.work())?;
    cd.start()?;
    let w = cd.work().to_path_buf();

    // The registry serves the harness's busybox image layout.
    let layout = w.join("registry");
    std::fs::create_dir_all(&layout)?;
    let env = cd.run(&["env", w.to_str().unwrap_or_default()])?;
    let tar = busybox_tar()?;
    let st = Command::new("tar")
        .arg("-xf")
        .arg(&tar)
        .arg("-C")
        .arg(&layout)
        .status()?;
    ensure!(st.success(), "unpacking {tar} failed");
    let reg = registry::Registry::start(&layout)?;
    let image = format!("{}/nri-e2e/busybox:1", reg.host());
    let images = w.join("critest-images.yaml");
    std::fs::write(&images, format!("defaultTestContainerImage: {image}\n"))?;

    let endpoint = format!(
        "unix://{}",
        env.lines()
            .find_map(|l| l.strip_prefix("NRI_E2E_CONTAINERD_SOCKET="))
            .context("no socket")?
    );
    let report = w.join("critest-report.json");
    let mut cmd = Command::new(&critest);
    cmd.current_dir(&w)
        .arg(format!("--runtime-endpoint={endpoint}"))
        .arg(format!("--image-endpoint={endpoint}"))
        .arg(format!("--nri-socket={}", cd.nri_socket().display()))
        .arg(format!("--test-images-file={}", images.display()))
        .arg("--ginkgo.focus=NRI")
        .arg("--ginkgo.no-color")
        .arg(format!("--ginkgo.json-report={}", report.display()));
    let t = Instant::now();
    let budget = BUDGET.mul_f64(timeout().as_secs_f64() / nri_e2e_tests::E2E_TIMEOUT.as_secs_f64());
    let out = run_with_deadline(cmd, &w, budget)?;
    let took = t.elapsed();
    std::fs::write(w.join("critest.out"), &out.stdout)?;
    let json: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&report)
            .with_context(|| format!("critest wrote no report:\n{}", out.stderr))?,
    )?;
    let results = parse_report(&json);
    let mut table = String::new();
    let mut wrong = Vec::new();
    for case in CASES {
        let got = results.iter().find(|(t, _, _)| t.contains(case.text));
        let (outcome, msg) = match got {
            Some((_, o, m)) => (Some(*o), m.as_str()),
            None => (None, "not run"),
        };
        let ok = outcome.is_some_and(|o| as_known(case, vi, o, msg));
        if !ok {
            wrong.push(case.text);
        }
        table.push_str(&format!(
            "{:<8} {:<7} {:<70} [{}] {msg}\n",
            outcome.map_or("-".into(), |o| format!("{o:?}")),
            if ok { "as-known" } else { "NEW" },
            case.text,
            case.clause
        ));
    }
    eprintln!(
        "[{label}] critest NRI cases in {:.1} s\n{table}",
        took.as_secs_f64()
    );
    ensure!(
        results.len() == CASES.len(),
        "critest ran {} NRI cases, {} are known (new cases in this critest version?):\n{table}",
        results.len(),
        CASES.len()
    );
    ensure!(
        wrong.is_empty(),
        "critest cases not as known for containerd {version}: {wrong:?}\n{table}"
    );
    cd.passed();
    Ok(())
}

fn busybox_tar() -> Result<String> {
    let env_file = std::env::var("NRI_E2E_ENV")
        .unwrap_or_else(|_| cache_dir().join("env.sh").to_string_lossy().into_owned());
    let text = std::fs::read_to_string(&env_file).with_context(|| format!("read {env_file}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("export NRI_E2E_BUSYBOX_TAR="))
        .map(|v| v.trim_matches('\'').to_owned())
        .context("NRI_E2E_BUSYBOX_TAR not in the env file")
}

fn test(version: &str) {
    let name = format!("critest_containerd_{version}");
    if !e2e_enabled(&name) {
        return;
    }
    let t0 = Instant::now();
    if let Err(e) = run(version) {
        panic!("{name}: {e:#}");
    }
    report_timing(&name, t0.elapsed());
}

#[test]
fn critest_containerd_2_1() {
    test("2.1");
}

#[test]
fn critest_containerd_2_3() {
    test("2.3");
}

#[test]
fn critest_containerd_2_4() {
    test("2.4");
}

/// The lost race of the initialization case counts as known, no other
/// failure of it does, and no other case gains anything.
#[test]
#[allow(clippy::expect_used)]
fn a_lost_initialization_race_is_known_and_nothing_else_is() {
    let case = |text: &str| CASES.iter().find(|c| c.text == text).expect("a known case");
    let init = case("without the race condition during initialization");
    let ready = "second NRI test stub failed to become ready";
    for vi in 0..3 {
        assert!(as_known(init, vi, Outcome::Failed, ready));
        assert!(as_known(init, vi, Outcome::Passed, ""));
        assert!(!as_known(init, vi, Outcome::Failed, "container was lost"));
        let other = case("should fail CreateContainer when the NRI hook errors");
        assert!(!as_known(other, vi, Outcome::Failed, ready));
    }
}
