//! Two promises of the plugin SDK (docs/plugin-sdk.md), shown on a real
//! containerd 2.1, 2.3 and 2.4 with the plugins of
//! `examples/contract_plugin.rs`, each registered externally.
//!
//! - `all_events_*`: a plugin that implements only CreateContainer and
//!   overrides its subscription to every event. A pod and a container run,
//!   are updated, stopped and removed; the plugin's adjustment is in the
//!   container; containerd's log has no warning or error line that
//!   mentions NRI or the plugin (an UNIMPLEMENTED answer makes containerd
//!   2.3 and later warn that the plugin "uses a deprecated interface", and
//!   fail some requests).
//! - `teardown_errors_*`: plugins at indexes 05 and 06 fail StopPodSandbox
//!   (each for its own pod), a third at index 10 records what it receives.
//!   The one at 05 answers with the SDK's default (the error is logged and
//!   the runtime gets a success): the plugins after it still receive
//!   StopPodSandbox. The one at 06 uses `send_teardown_errors(true)`:
//!   containerd stops delivering StopPodSandbox at that error, and the plugin
//!   at 10 never receives it (it does receive the pod's RemovePodSandbox,
//!   which comes after). containerd logs that one error only; `crictl
//!   stopp` succeeds in both cases.
//!
//! Budget: 60 s per test (scaled like every e2e deadline); measured 10-20 s
//! each on a 2-core machine.

use std::time::Duration;

use anyhow::{Result, ensure};
use nri_e2e_tests::{
    ContainerOpts, Containerd, PluginProcess, Target, plugin_binary, run_e2e, strip_ansi,
};

/// Wall-time budget of one test (one containerd version).
const BUDGET: Duration = Duration::from_secs(60);

/// The containerd log lines at level warning or above that mention NRI
/// (any case) or one of `names`. The harness's own `nri-e2e` (in WORK
/// paths, the pod namespace, image names) is not a mention of NRI.
fn nri_warnings(log: &str, names: &[&str]) -> Vec<String> {
    strip_ansi(log)
        .lines()
        .filter(|l| {
            ["level=warning", "level=error", "level=fatal", "level=panic"]
                .iter()
                .any(|lvl| l.contains(lvl))
        })
        .filter(|l| {
            let rest = l.replace("nri-e2e", "");
            rest.to_ascii_lowercase().contains("nri") || names.iter().any(|n| rest.contains(n))
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn nri_warnings_finds_what_containerd_logs_about_plugins() {
    // containerd 2.3/2.4's warning for an event answered UNIMPLEMENTED, an
    // NRI error, and lines that only mention the harness (all in
    // containerd's log format).
    let log = concat!(
        "time=\"2026-11-25T19:10:38.1Z\" level=warning msg=\"NRI plugin uses a deprecated ",
        "interface.\" deprecated=StateChange details=\"does not implement a dedicated ",
        "StopPodSandbox RPC call\" plugin=20-e2e-all-events\n",
        "time=\"2026-11-25T19:10:38.2Z\" level=error msg=\"failed to stop\" plugin=e2e-x\n",
        "time=\"2026-11-25T19:10:38.3Z\" level=info msg=\"NRI plugin synchronized\"\n",
        "time=\"2026-11-25T19:10:38.4Z\" level=warning msg=\"failed to load cni\" ",
        "error=\"no network config found in /tmp/nri-e2e.kpKlsc/cni/net.d\"\n",
    );
    let found = nri_warnings(log, &["e2e-x"]);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found[0].contains("deprecated interface"));
    assert!(found[1].contains("failed to stop"));
}

fn spawn(cd: &Containerd, name: &str, index: &str, extra: &[&str]) -> Result<PluginProcess> {
    let bin = plugin_binary("nri-e2e-tests", Target::Example, "contract_plugin")?;
    let sock = cd.nri_socket();
    let mut args = vec![
        "--socket",
        sock.to_str().unwrap_or_default(),
        "--name",
        name,
        "--index",
        index,
    ];
    args.extend_from_slice(extra);
    let p = cd.spawn_plugin(name, &bin, &args, &[])?;
    cd.wait_plugin_synchronized(name)?;
    Ok(p)
}

fn all_events(version: &str) -> Result<()> {
    const NAME: &str = "e2e-all-events";
    let mut cd = Containerd::new(version, &format!("sdk_contract all_events {version}"))?;
    cd.start()?;
    let mut plugin = spawn(&cd, NAME, "20", &["--role", "create-only"])?;
    // The subscription really is every event the runtime can deliver (NRI
    // v0.8.0 of containerd 2.1 cannot deliver the three newest).
    let line = plugin.wait_for(&["events without a method"])?;
    let mut must = vec![
        "RunPodSandbox",
        "StopPodSandbox",
        "RemovePodSandbox",
        "PostCreateContainer",
        "StartContainer",
        "PostStartContainer",
        "UpdateContainer",
        "PostUpdateContainer",
        "StopContainer",
        "RemoveContainer",
    ];
    if version != "2.1" {
        must.extend([
            "UpdatePodSandbox",
            "PostUpdatePodSandbox",
            "ValidateContainerAdjustment",
        ]);
    }
    let acknowledged: Vec<&str> = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("events="))
        .map(|l| l.split(',').collect())
        .unwrap_or_default();
    for e in &must {
        ensure!(
            acknowledged.contains(e),
            "{e} is not among the subscribed events without a method: {line}"
        );
    }
    ensure!(
        !acknowledged.contains(&"CreateContainer"),
        "CreateContainer has a method: {line}"
    );

    let pod = cd.pod("contract-all", &[])?;
    let ctr = cd.container(&pod, "c1", &ContainerOpts::default())?;
    plugin.wait_for(&["CreateContainer", "nri-e2e/contract-all", "c1"])?;
    let env = cd.exec_ok(&ctr, &["env"])?;
    ensure!(
        env.lines().any(|l| l == "NRI_E2E_CONTRACT=create-only"),
        "the plugin's adjustment is not in the container:\n{env}"
    );
    cd.crictl(&["update", "--cpu-share", "512", &ctr])?;
    cd.rm(&ctr)?;
    cd.rmp(&pod)?;
    let left = cd.crictl(&["pods", "-q"])?;
    ensure!(left.is_empty(), "pods left after removal: {left}");

    let log = std::fs::read_to_string(cd.log_path())?;
    let bad = nri_warnings(&log, &[NAME]);
    ensure!(
        bad.is_empty(),
        "containerd logged {} warning/error line(s) about NRI or the plugin:\n{}",
        bad.len(),
        bad.join("\n")
    );
    ensure!(plugin.is_running(), "the plugin exited");
    cd.passed();
    Ok(())
}

fn teardown_errors(version: &str) -> Result<()> {
    let mut cd = Containerd::new(version, &format!("sdk_contract teardown {version}"))?;
    cd.start()?;
    let mut answers = spawn(
        &cd,
        "e2e-fail-default",
        "05",
        &["--role", "teardown", "--fail-pod", "default"],
    )?;
    let mut sends = spawn(
        &cd,
        "e2e-fail-send",
        "06",
        &[
            "--role",
            "teardown",
            "--fail-pod",
            "send",
            "--send-teardown-errors",
        ],
    )?;
    let mut last = spawn(&cd, "e2e-receiver", "10", &["--role", "teardown"])?;

    // The SDK's default: the error of 05 is answered with success.
    let pod = cd.pod("tear-default", &[])?;
    cd.rmp(&pod)?;
    answers.wait_for(&["teardown error answered with success", "StopPodSandbox"])?;
    let all = ["RunPodSandbox", "StopPodSandbox", "RemovePodSandbox"];
    sends.wait_events("nri-e2e/tear-default", &all)?;
    let got = last.wait_events("nri-e2e/tear-default", &all)?;
    eprintln!("[e2e teardown {version}] receiver, default: {got:?}");

    // send_teardown_errors(true): containerd stops at the error of 06.
    let pod = cd.pod("tear-send", &[])?;
    cd.rmp(&pod)?;
    sends.wait_events("nri-e2e/tear-send", &["StopPodSandbox"])?;
    let got = last.wait_events("nri-e2e/tear-send", &["RunPodSandbox", "RemovePodSandbox"])?;
    eprintln!("[e2e teardown {version}] receiver, errors sent: {got:?}");
    ensure!(
        !got.iter().any(|e| e == "StopPodSandbox"),
        "containerd {version} delivered StopPodSandbox after a plugin sent an error for it \
         (the runtime no longer aborts teardown events: update docs/plugin-sdk.md and the \
         conformance checker's known discrepancies): {got:?}"
    );
    ensure!(
        !sends.log().contains("teardown error answered with success"),
        "the plugin with send_teardown_errors answered an error with success:\n{}",
        sends.log()
    );
    // containerd saw only the error that was sent (the CRI calls succeeded
    // either way: `rmp` above did not fail).
    let log = std::fs::read_to_string(cd.log_path())?;
    let errors = nri_warnings(&log, &[]);
    ensure!(
        !errors.iter().any(|l| l.contains("tear-default")),
        "containerd saw the error answered with success: {errors:#?}"
    );
    ensure!(
        errors.iter().any(|l| l.contains("tear-send")),
        "containerd logged no error for the StopPodSandbox error sent to it: {errors:#?}"
    );
    for p in [&mut answers, &mut sends, &mut last] {
        ensure!(p.is_running(), "a plugin exited");
    }
    cd.passed();
    Ok(())
}

fn test(name: &str, version: &str, f: fn(&str) -> Result<()>) {
    let name = format!("{name}_containerd_{version}");
    run_e2e(&name, BUDGET, || f(version));
}

#[test]
fn all_events_containerd_2_1() {
    test("all_events", "2.1", all_events);
}

#[test]
fn all_events_containerd_2_3() {
    test("all_events", "2.3", all_events);
}

#[test]
fn all_events_containerd_2_4() {
    test("all_events", "2.4", all_events);
}

#[test]
fn teardown_errors_containerd_2_1() {
    test("teardown_errors", "2.1", teardown_errors);
}

#[test]
fn teardown_errors_containerd_2_3() {
    test("teardown_errors", "2.3", teardown_errors);
}

#[test]
fn teardown_errors_containerd_2_4() {
    test("teardown_errors", "2.4", teardown_errors);
}
