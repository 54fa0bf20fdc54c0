//! What the page's `sh cluster` blocks do, stood in for on the e2e
//! containerd (no registry, no kubelet), the way `proxy_deploy` runs the
//! proxy's DaemonSet:
//!
//! - `podman build` and `push`: the scaffold the page wrote is built
//!   static (`crt-static` on this machine's glibc target: there is no musl
//!   target here; the release profile without LTO, to keep the cost
//!   down) and packed into an image laid out as the scaffold's
//!   `Containerfile`'s final stage says, under the reference its
//!   `daemonset.yaml` names, and imported into containerd;
//! - `kubectl apply` and `rollout status`: the DaemonSet's container runs
//!   in a pod through crictl with its args, its hostPath mount (the host's
//!   `/var/run/nri` is a directory under WORK holding a hard link to
//!   containerd's NRI socket) and its security context; the plugin must
//!   register (containerd logs it synchronized);
//! - the plugin works on the node: a pod with the annotation
//!   `scratch.example.com/size: 16m` gets a 16 MiB tmpfs at `/scratch`.
//! - `sudo ./target/debug/scratch` and the node checks are covered by the
//!   same run (the plugin connecting to the node's socket as root).
//!
//! One containerd version (2.4) only: the blocks are about the image and
//! the DaemonSet, not about version differences. Budget: 120 s after the
//! builds (the local blocks and the static build are builds).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, ensure};
use nri_e2e_tests::daemonset::{container_config, import_image, node_dir, run_in_pod};
use nri_e2e_tests::oci::{ImageDefinition, STATIC_TARGET, pack_image};
use nri_e2e_tests::{
    ContainerOpts, Containerd, check_budget, e2e_enabled, profile_dir, run_with_deadline,
};
use serde_json::Value;

use super::{CLUSTER_BLOCKS, page, run_local, shell_blocks};

const BUDGET: std::time::Duration = std::time::Duration::from_secs(120);

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

fn run(version: &str) -> Result<()> {
    let blocks = shell_blocks(&page()?)?;
    ensure!(blocks.iter().filter(|b| b.cluster).count() == CLUSTER_BLOCKS);
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

    let mut cd = Containerd::new(version, &format!("plugin-authors cluster {version}"))?;
    cd.start()?;
    let tar = cd.work().join("scratch-image.tar");
    pack_image(&bin, &def, &reference, &cd.work().join("image"), &tar)?;
    import_image(&cd, &tar)?;
    let host = node_dir(&cd)?;
    let ctr = container_config(&ds, &[], &host, str::to_owned)?;
    let id = run_in_pod(&cd, "nri-plugin-scratch", &ctr)?;
    cd.wait_plugin_synchronized("scratch")?;

    // The DaemonSet's security context is applied.
    let spec = &cd.inspect(&id)?["info"]["runtimeSpec"];
    ensure!(spec["root"]["readonly"] == true, "root not read-only");
    ensure!(spec["process"]["user"]["uid"] == 0, "not uid 0");
    let bounding = &spec["process"]["capabilities"]["bounding"];
    ensure!(
        bounding.as_array().is_none_or(Vec::is_empty),
        "capabilities left: {bounding}"
    );

    // The plugin works on the node.
    let wpod = cd.pod("workload", &[("scratch.example.com/size", "16m")])?;
    let c = cd.container(&wpod, "c1", &ContainerOpts::default())?;
    let mounts = cd.exec_ok(&c, &["cat", "/proc/mounts"])?;
    ensure!(
        mounts
            .lines()
            .any(|l| l.contains(" /scratch tmpfs ") && l.contains("size=16384k")),
        "no 16 MiB tmpfs at /scratch in the workload:\n{mounts}"
    );
    cd.rm(&c)?;
    cd.rmp(&wpod)?;
    cd.passed();
    check_budget("plugin_authors_cluster", t0.elapsed(), BUDGET);
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

#[test]
fn plugin_authors_cluster_blocks_containerd_2_4() {
    let name = "plugin_authors_cluster_blocks_containerd_2_4";
    if !e2e_enabled(name) {
        return;
    }
    if let Err(e) = run("2.4") {
        panic!("{name}: {e:#}");
    }
}
