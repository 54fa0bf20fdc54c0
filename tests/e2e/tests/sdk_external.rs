//! The SDK's `adjuster` example, registered externally on `WORK/nri.sock`
//! of a real containerd, next to the SDK's `logger` example subscribed to
//! every event.
//!
//! Checks: the logger sees the pod's whole lifecycle in order; the env var
//! and annotation the adjuster adds are inside the running container
//! (`env` via `crictl exec`) and in the OCI spec (`crictl inspect`).
//!
//! On containerd 2.1 (NRI v0.8.0, which rejects any event bit above 0x7FF)
//! the logger subscribes to *all* events of the SDK, which include newer
//! ones: it registers only because the SDK drops the bits the runtime does
//! not know.

use anyhow::{Result, ensure};
use nri_e2e_tests::{ContainerOpts, Containerd, Target, plugin_binary, run_e2e};

/// Wall-time budget of one version's run, scaled like every e2e deadline.
const BUDGET: std::time::Duration = std::time::Duration::from_secs(90);

const ENV_KEY: &str = "NRI_E2E_SDK";
const ANNOTATION: &str = "e2e.nri.example/sdk";

#[allow(clippy::too_many_lines)]
fn run(version: &str) -> Result<()> {
    let label = format!("sdk_external {version}");
    let adjuster = plugin_binary("nri-plugin", Target::Example, "adjuster")?;
    let logger = plugin_binary("nri-plugin", Target::Example, "logger")?;

    let mut cd = Containerd::new(version, &label)?;
    cd.start()?;
    let sock = cd.nri_socket();
    let sock = sock.to_str().unwrap_or_default();

    // The logger first, subscribed to every event the SDK knows.
    let mut log = cd.spawn_plugin(
        "logger",
        &logger,
        &[
            "--socket",
            sock,
            "--name",
            "e2e-logger",
            "--index",
            "05",
            "--events",
            "all",
        ],
        &[],
    )?;
    log.wait_for(&["synchronize"])?;
    cd.wait_plugin_synchronized("e2e-logger")?;
    if version == "2.1" {
        // NRI v0.8.0 knows events up to 0x7FF: the SDK said it left out
        // UpdatePodSandbox, PostUpdatePodSandbox, ValidateContainerAdjustment.
        log.wait_for(&["dropped_mask=0x3800"])?;
    }

    let env_value = format!("external-{version}");
    let mut adj = cd.spawn_plugin(
        "adjuster",
        &adjuster,
        &[
            "--socket",
            sock,
            "--name",
            "e2e-adjuster",
            "--index",
            "10",
            "--env",
            &format!("{ENV_KEY}={env_value}"),
            "--annotation",
            &format!("{ANNOTATION}=external"),
        ],
        &[],
    )?;
    adj.wait_for(&["configured"])?;
    cd.wait_plugin_synchronized("e2e-adjuster")?;

    let pod = cd.pod("sdk-ext", &[])?;
    let ctr = cd.container(&pod, "c1", &ContainerOpts::default())?;
    adj.wait_for(&["adjusting", "c1"])?;

    // Inside the running container.
    let env = cd.exec_ok(&ctr, &["env"])?;
    ensure!(
        env.lines().any(|l| l == format!("{ENV_KEY}={env_value}")),
        "{ENV_KEY}={env_value} not in the container's env:\n{env}"
    );
    // In the OCI spec.
    let spec = &cd.inspect(&ctr)?["info"]["runtimeSpec"];
    let spec_env: Vec<&str> = spec["process"]["env"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    ensure!(
        spec_env.contains(&format!("{ENV_KEY}={env_value}").as_str()),
        "env not in the inspected spec: {spec_env:?}"
    );
    ensure!(
        spec["annotations"][ANNOTATION] == "external",
        "annotation {ANNOTATION} not in the inspected spec: {}",
        spec["annotations"]
    );

    // The rest of the lifecycle: update, stop/remove the container, the pod.
    cd.crictl(&["update", "--cpu-share", "512", &ctr])?;
    cd.rm(&ctr)?;
    cd.rmp(&pod)?;

    let mut want = vec![
        "RunPodSandbox",
        "CreateContainer",
        "PostCreateContainer",
        "StartContainer",
        "PostStartContainer",
        "UpdateContainer",
        "PostUpdateContainer",
        "StopContainer",
        "RemoveContainer",
        "StopPodSandbox",
        "RemovePodSandbox",
    ];
    if version != "2.1" {
        // NRI v0.12 (containerd 2.3, 2.4) asks plugins to validate adjustments;
        // v0.8.0 (containerd 2.1) has no such request.
        want.insert(2, "ValidateContainerAdjustment");
    }
    let events = log.wait_events("nri-e2e/sdk-ext", &want)?;
    eprintln!("[e2e {label}] events: {events:?}");
    if version == "2.1" {
        ensure!(
            !events.iter().any(|e| e == "ValidateContainerAdjustment"),
            "containerd 2.1 (NRI v0.8.0) sent ValidateContainerAdjustment: {events:?}"
        );
    }
    ensure!(log.is_running(), "logger exited");
    ensure!(adj.is_running(), "adjuster exited");
    cd.passed();
    Ok(())
}

fn test(version: &str) {
    let name = format!("sdk_external_{version}");
    run_e2e(&name, BUDGET, || run(version));
}

#[test]
fn sdk_external_containerd_2_1() {
    test("2.1");
}

#[test]
fn sdk_external_containerd_2_3() {
    test("2.3");
}

#[test]
fn sdk_external_containerd_2_4() {
    test("2.4");
}
