//! What the page's `sh cluster` blocks do, on the one-node Kubernetes
//! cluster of the e2e tests (`tests/e2e/k8s-node.sh`, containerd 2.4):
//!
//! - `podman build` and `push`: no image builder and no registry here; the
//!   scaffold the page wrote is built static (`crt-static` on this
//!   machine's glibc target: there is no musl target here; the release
//!   profile without LTO, to keep the cost down) and packed into an image
//!   laid out as the scaffold's `Containerfile`'s final stage says, under
//!   the reference its `daemonset.yaml` names (the one `podman build -t`
//!   gives), and imported into the node's containerd;
//! - `kubectl apply -f daemonset.yaml`, `kubectl rollout status` and
//!   `kubectl logs`: the page's block runs as written in the scaffold's
//!   directory; the kubelet runs the DaemonSet, the pod becomes ready, its
//!   log shows `starting` and the runtime's `configuring`; the container
//!   the kubelet made has the DaemonSet's security context;
//! - the plugin works on the node: a pod with the annotation
//!   `scratch.example.com/size: 16m` gets a 16 MiB tmpfs at `/scratch`.
//! - `sudo ./target/debug/scratch` and the node checks (`ls`, `containerd
//!   config dump`, `journalctl`) are covered by the same run (the plugin
//!   connecting to the node's socket `/var/run/nri/nri.sock` as root).
//!
//! One containerd version (2.4) only: the blocks are about the image and
//! the DaemonSet, not about version differences. Budget: 150 s after the
//! builds (the local blocks and the static build are builds; waiting for
//! another test's node is not counted).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, ensure};
use nri_e2e_tests::k8s::{Node, k8s_enabled};
use nri_e2e_tests::oci::{ImageDefinition, STATIC_TARGET, pack_image};
use nri_e2e_tests::{check_budget, profile_dir, run_with_deadline};
use serde_json::Value;

use super::{CLUSTER_BLOCKS, page, run_local, shell_blocks};

const BUDGET: std::time::Duration = std::time::Duration::from_secs(150);

/// Builds the scaffold in `scaffold` static; returns the binary.
fn static_build(scaffold: &Path) -> Result<PathBuf> {
    let target = profile_dir()?
        .parent()
        .context("no target dir")?
        .to_path_buf();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = std::process::Command::new(cargo);
    cmd.current_dir(scaffold)
        .env("CARGO_TARGET_DIR", &target)
        .env("CARGO_INCREMENTAL", "0")
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        .env("CARGO_PROFILE_RELEASE_LTO", "false")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "16")
        .args(["build", "--release", "--target", STATIC_TARGET]);
    eprintln!("[e2e] static build of the scaffold: {cmd:?}");
    let out = run_with_deadline(cmd, scaffold, std::time::Duration::from_secs(1800))?;
    ensure!(
        out.status.success(),
        "static build of the scaffold failed:\n{}",
        out.stderr
    );
    let bin = target.join(STATIC_TARGET).join("release").join("scratch");
    ensure!(bin.is_file(), "{} missing after the build", bin.display());
    Ok(bin)
}

/// A pod asking the scaffold's plugin for a 16 MiB scratch tmpfs.
fn workload(image: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: workload
  annotations:
    scratch.example.com/size: 16m
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: c1
      image: {image}
      command: ["sleep", "3600"]
"#
    )
}

fn run(version: &str) -> Result<()> {
    let blocks = shell_blocks(&page()?)?;
    ensure!(blocks.iter().filter(|b| b.cluster).count() == CLUSTER_BLOCKS);
    let deploy = blocks
        .iter()
        .find(|b| b.cluster && b.text.contains("kubectl apply -f daemonset.yaml"))
        .context("no cluster block applies daemonset.yaml")?;
    let dir = run_local()?;
    let scaffold = dir.join("work/scratch");
    let bin = static_build(&scaffold)?;
    let t0 = std::time::Instant::now();
    let def = ImageDefinition::parse(&std::fs::read_to_string(scaffold.join("Containerfile"))?)?;
    let ds: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(scaffold.join("daemonset.yaml"))?)?;
    let reference = ds["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .context("no image in the DaemonSet")?
        .to_owned();
    // The page builds the image the DaemonSet runs.
    ensure!(
        blocks
            .iter()
            .any(|b| b.cluster && b.text.contains(&format!("podman build -t {reference} "))),
        "no cluster block builds {reference}"
    );
    ensure!(def.runs_as_root(), "the image does not run as root");

    let mut node = Node::start(version, &format!("plugin-authors cluster {version}"))?;
    let tar = node.work().join("scratch-image.tar");
    pack_image(&bin, &def, &reference, &node.work().join("image"), &tar)?;
    node.import_image(&tar)?;
    // The page's block, as written, where the page runs it.
    let out = node.sh_in(&scaffold, &deploy.text)?;
    ensure!(
        out.status.success(),
        "the page's deploy block failed ({}):\n{}\n{}",
        out.status,
        out.stdout,
        out.stderr
    );
    ensure!(
        out.stdout.contains("starting"),
        "no `starting` in the plugin's log:\n{}",
        out.stdout
    );
    node.wait("`configuring` in the plugin's log", 1, || {
        let log = node.kubectl(&["logs", "daemonset/nri-plugin-scratch"])?;
        Ok(log.contains("configuring").then_some(()))
    })?;

    // The DaemonSet's security context, as the kubelet applied it.
    let pod = node.kubectl(&["get", "pods", "-o", "jsonpath={.items[0].metadata.name}"])?;
    let spec = node.runtime_spec(&node.sandbox("default", &pod)?, "plugin")?;
    ensure!(spec["root"]["readonly"] == true, "root not read-only");
    ensure!(spec["process"]["user"]["uid"] == 0, "not uid 0");
    let bounding = &spec["process"]["capabilities"]["bounding"];
    ensure!(
        bounding.as_array().is_none_or(Vec::is_empty),
        "capabilities left: {bounding}"
    );

    // The plugin works on the node.
    let image = node.env("NRI_E2E_BUSYBOX_IMAGE")?.context("no image")?;
    node.apply(&workload(&image))?;
    node.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pod/workload",
        "--timeout=120s",
    ])?;
    let mounts = node.kubectl(&["exec", "workload", "--", "cat", "/proc/mounts"])?;
    ensure!(
        mounts
            .lines()
            .any(|l| l.contains(" /scratch tmpfs ") && l.contains("size=16384k")),
        "no 16 MiB tmpfs at /scratch in the workload:\n{mounts}"
    );
    node.passed();
    drop(node);
    check_budget("plugin_authors_cluster", t0.elapsed(), BUDGET);
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

#[test]
fn plugin_authors_cluster_blocks_containerd_2_4() {
    let name = "plugin_authors_cluster_blocks_containerd_2_4";
    if !k8s_enabled(name) {
        return;
    }
    if let Err(e) = run("2.4") {
        panic!("{name}: {e:#}");
    }
}
