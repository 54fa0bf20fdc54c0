//! `deploy/nri-proxy` proven on containerd 2.1 with crictl standing in for
//! the kubelet, without a registry: the proxy is built static for this
//! machine's target (min-size profile, stripped; under 10 MB), packed into
//! an image laid out as `deploy/Containerfile`'s final stage says
//! (`nri_e2e_tests::images`), imported into containerd and run as a pod
//! with crictl with the DaemonSet's arguments, mounts (host paths under
//! WORK, the ConfigMap's files) and security context. The image containerd
//! reports has the Containerfile's entrypoint and user; the running
//! container has the security context applied; a plugin connecting to the
//! proxy's socket in its host directory adjusts a workload container.
//!
//! On containerd 2.3 and 2.4 a real kubelet runs the DaemonSet instead
//! (`k8s_deploy.rs`, `kubectl apply -k deploy/nri-proxy` on the one-node
//! cluster). This stand-in stays for containerd 2.1 (NRI v0.8, the
//! StateChange dialect), which the cluster is not run on: one line of the
//! suite's matrix less for the node's minute of start-up.
//!
//! One change to the deployment: the test pod uses the host network (the
//! harness has no pod network), so the ConfigMap's metrics address
//! `0.0.0.0:9464` becomes `127.0.0.1:0` (tests run in parallel).

use std::fs;

use anyhow::{Result, ensure};
use nri_e2e_tests::daemonset::{container_config, import_image, node_dir, run_in_pod};
use nri_e2e_tests::images::{deploy_image, yaml_file};
use nri_e2e_tests::oci::ImageDefinition;
use nri_e2e_tests::{
    ContainerOpts, Containerd, Target, plugin_binary, poll, run_e2e, timeout, workspace_root,
};
use serde_json::{Value, json};

const BUDGET: std::time::Duration = std::time::Duration::from_secs(90);
/// The stripped static proxy must stay under this size.
const MAX_SIZE: u64 = 10 * 1024 * 1024;
const ENV_KEY: &str = "NRI_E2E_DEPLOYED_PROXY";

/// Builds, packs and imports the image; checks it against the
/// Containerfile; returns the reference.
fn image(cd: &Containerd, def: &ImageDefinition) -> Result<String> {
    let img = deploy_image("nri-proxy")?;
    let size = fs::metadata(&img.binary)?.len();
    eprintln!(
        "[e2e] static stripped nri-proxy: {size} bytes ({:.2} MiB)",
        size as f64 / 1048576.0
    );
    ensure!(
        size < MAX_SIZE,
        "the static proxy is {size} bytes, over 10 MB"
    );
    let reference = img.reference;
    import_image(cd, &img.tar)?;
    let info: Value = serde_json::from_str(&cd.crictl(&["inspecti", "-o", "json", &reference])?)?;
    let config = &info["info"]["imageSpec"]["config"];
    ensure!(
        config["Entrypoint"] == json!(def.entrypoint),
        "the image's entrypoint {} is not the Containerfile's {:?}",
        config["Entrypoint"],
        def.entrypoint
    );
    let user = config["User"].as_str().unwrap_or_default();
    ensure!(
        user == def.user,
        "the image's user {user:?} is not {:?}",
        def.user
    );
    Ok(reference)
}

#[allow(clippy::too_many_lines)]
fn run(version: &str) -> Result<()> {
    let label = format!("proxy deploy {version}");
    let deploy = workspace_root().join("deploy");
    let def = ImageDefinition::parse(&fs::read_to_string(deploy.join("Containerfile"))?)?;
    let ds = yaml_file(&deploy.join("nri-proxy/daemonset.yaml"))?;
    let cm = yaml_file(&deploy.join("nri-proxy/configmap.yaml"))?;
    let sc = &ds["spec"]["template"]["spec"]["containers"][0]["securityContext"];
    ensure!(
        def.runs_as_root() == (sc["runAsUser"] == 0),
        "the DaemonSet's runAsUser {} does not match the image's user {:?}",
        sc["runAsUser"],
        def.user
    );
    let adjuster = plugin_binary("nri-plugin", Target::Example, "adjuster")?;
    let mut cd = Containerd::new(version, &label)?;
    cd.start()?;
    let reference = image(&cd, &def)?;

    // The node's directories: the runtime's socket in /var/run/nri (a hard
    // link to containerd's socket), the proxy's socket directory, the
    // ConfigMap's files.
    let host = node_dir(&cd)?;
    let mut ctr = container_config(&ds, &[cm], &host, |text| {
        text.replace("0.0.0.0:9464", "127.0.0.1:0")
    })?;
    ctr["image"]["image"] = json!(reference);
    let id = run_in_pod(&cd, "nri-proxy", &ctr)?;
    cd.wait_plugin_synchronized("nri-proxy")?;

    // The security context is applied.
    let spec = &cd.inspect(&id)?["info"]["runtimeSpec"];
    ensure!(spec["root"]["readonly"] == true, "root not read-only");
    ensure!(
        spec["process"]["noNewPrivileges"] == true,
        "noNewPrivileges not set"
    );
    ensure!(spec["process"]["user"]["uid"] == 0, "not uid 0");
    let bounding = &spec["process"]["capabilities"]["bounding"];
    ensure!(
        bounding.as_array().is_none_or(Vec::is_empty),
        "capabilities left: {bounding}"
    );
    ensure!(!spec["linux"]["seccomp"].is_null(), "no seccomp profile");

    let sock = host.join("var/run/nri-proxy/nri.sock");
    poll("the proxy's socket", timeout(), || {
        Ok(sock.exists().then_some(()))
    })?;
    let value = format!("deployed-{version}");
    let mut adj = cd.spawn_plugin(
        "adjuster",
        &adjuster,
        &[
            "--socket",
            sock.to_str().unwrap_or_default(),
            "--name",
            "e2e-adjuster",
            "--index",
            "10",
            "--env",
            &format!("{ENV_KEY}={value}"),
        ],
        &[],
    )?;
    poll("the adjuster behind the proxy", timeout(), || {
        let log = cd.container_log("nri-proxy", "proxy").join("\n");
        Ok(
            (log.contains("synchronized and active") && log.contains("10-e2e-adjuster"))
                .then_some(()),
        )
    })?;
    let wpod = cd.pod("workload", &[])?;
    let c = cd.container(&wpod, "c1", &ContainerOpts::default())?;
    adj.wait_for(&["adjusting", "c1"])?;
    let env = cd.exec_ok(&c, &["env"])?;
    ensure!(
        env.lines().any(|l| l == format!("{ENV_KEY}={value}")),
        "the workload lacks the adjustment of the plugin behind the deployed proxy:\n{env}"
    );
    cd.rm(&c)?;
    cd.rmp(&wpod)?;
    cd.passed();
    Ok(())
}

fn test(version: &str) {
    let name = format!("proxy_deploy_{version}");
    run_e2e(&name, BUDGET, || run(version));
}

#[test]
fn proxy_deploy_containerd_2_1() {
    test("2.1");
}
