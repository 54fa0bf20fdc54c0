//! `nri conformance` (the `nri-conformance` engine) against each real
//! containerd of the harness.
//!
//! Gate as for every e2e test: unless `NRI_E2E=1` the tests print why and
//! return; with `NRI_E2E=1` an unavailable harness fails them. Each run
//! drives the whole scenario (slow phases included), then stops containerd
//! to check Shutdown, and asserts that every clause was checked and passes
//! or breaks only in a way listed in `KNOWN_DISCREPANCIES` for that version
//! (a breach is reported as a finding, never hidden), and that every
//! non-intermittent known discrepancy of that version shows up (so a fix
//! upstream asks for the list to be updated).
//!
//! Budget: 60 s per containerd version (measured 25-35 s on an idle 2-core
//! machine); the run fails when it takes longer.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use nri_conformance::{
    Clause, CriOptions, Mode, Options, Status, known_for, print_table, run_blocking,
};
use nri_e2e_tests::{Containerd, e2e_enabled, harness_path, report_timing, timeout};

/// Wall-time budget of one version's run (scaled like every e2e deadline).
const BUDGET: Duration = Duration::from_secs(60);

fn env_value(env: &str, key: &str) -> Option<String> {
    env.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(str::to_owned)
}

fn crictl_path() -> Result<String> {
    // The harness's env file (written by scripts/setup-e2e.sh) names crictl.
    let env_file = std::env::var("NRI_E2E_ENV").unwrap_or_else(|_| {
        let cache = std::env::var("NRI_E2E_CACHE").unwrap_or_else(|_| {
            let base = std::env::var("XDG_CACHE_HOME").unwrap_or_else(|_| {
                format!("{}/.cache", std::env::var("HOME").unwrap_or_default())
            });
            format!("{base}/nri-rs/e2e")
        });
        format!("{cache}/env.sh")
    });
    let text = std::fs::read_to_string(&env_file).with_context(|| format!("read {env_file}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("export NRI_E2E_CRICTL="))
        .map(|v| v.trim_matches('\'').to_owned())
        .context("NRI_E2E_CRICTL not in the env file")
}

fn run(version: &str) -> Result<()> {
    let label = format!("conformance {version}");
    let mut cd = Containerd::new(version, &label)?;
    cd.start()?;
    let w = cd.work().to_str().unwrap_or_default().to_owned();
    let env = cd.run(&["env", &w])?;
    let endpoint = format!(
        "unix://{}",
        env_value(&env, "NRI_E2E_CONTAINERD_SOCKET").context("no socket")?
    );
    let image = env_value(&env, "NRI_E2E_BUSYBOX_IMAGE").context("no image")?;
    let mut cri = CriOptions::new(endpoint, image);
    cri.crictl = crictl_path()?.into();
    cri.cgroup_parent = env_value(&env, "NRI_E2E_CGROUP_PARENT");
    cri.scratch_dir = cd.work().to_path_buf();
    let mut opts = Options::new(cd.nri_socket(), Mode::Cri(cri));
    let harness = harness_path().to_string_lossy().into_owned();
    opts.stop_runtime = Some(vec![harness, "stop".into(), w.clone()]);

    let report = run_blocking(opts)?;
    let mut table = Vec::new();
    print_table(&report, &mut table)?;
    let table = String::from_utf8_lossy(&table).into_owned();
    eprintln!("[{label}]\n{table}");
    std::fs::write(
        cd.work().join("conformance.json"),
        serde_json::to_vec_pretty(&report)?,
    )?;

    let rt = &report.runtime;
    ensure!(rt.name == "containerd", "runtime {:?}", rt.name);
    ensure!(
        rt.version.starts_with(&format!("v{version}.")),
        "runtime version {} is not {version}.x",
        rt.version
    );
    let want_dialect = if version == "2.1" {
        "state-change"
    } else {
        "dedicated-rpcs"
    };
    ensure!(
        rt.dialect == want_dialect,
        "dialect {} (want {want_dialect})",
        rt.dialect
    );
    ensure!(report.ok(), "a clause failed:\n{table}");
    // Everything but the informational dialect row was checked.
    for c in &report.clauses {
        let ok = match c.clause {
            Clause::Dialect => c.status == Status::Info,
            _ => c.status != Status::Skipped,
        };
        ensure!(ok, "{} was {:?}:\n{table}", c.clause, c.status);
    }
    // Exactly the known set: nothing unknown (report.ok() above), and every
    // known non-intermittent discrepancy of this version found.
    let found: BTreeSet<(Clause, String)> = report.finding_codes().into_iter().collect();
    for k in known_for(&rt.name, &rt.version) {
        ensure!(
            k.intermittent || found.contains(&(k.clause, k.code.to_owned())),
            "known discrepancy {} / {} not found this time (fixed upstream? update \
             KNOWN_DISCREPANCIES):\n{table}",
            k.clause,
            k.code
        );
    }
    let budget = BUDGET.mul_f64(timeout().as_secs_f64() / nri_e2e_tests::E2E_TIMEOUT.as_secs_f64());
    ensure!(
        cd.elapsed() <= budget,
        "the run took {:.1} s, over its budget of {:.0} s",
        cd.elapsed().as_secs_f64(),
        budget.as_secs_f64()
    );
    cd.passed();
    Ok(())
}

fn test(version: &str) {
    let name = format!("conformance_containerd_{version}");
    if !e2e_enabled(&name) {
        return;
    }
    let t0 = std::time::Instant::now();
    if let Err(e) = run(version) {
        panic!("{name}: {e:#}");
    }
    report_timing(&name, t0.elapsed());
}

#[test]
fn conformance_containerd_2_1() {
    test("2.1");
}

#[test]
fn conformance_containerd_2_3() {
    test("2.3");
}

#[test]
fn conformance_containerd_2_4() {
    test("2.4");
}
