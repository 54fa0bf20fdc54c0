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
use nri_e2e_tests::oci::{ImageDefinition, STATIC_TARGET, pack_image};
use nri_e2e_tests::{
    ContainerOpts, Containerd, check_budget, e2e_enabled, profile_dir, run_with_deadline,
};
use serde_json::{Value, json};

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

/// The CRI config of the DaemonSet's (only) container: its image and args
/// (no command: the image's entrypoint runs), its hostPath mounts moved
/// under `host`, its security context.
fn container_config(ds: &Value, host: &Path) -> Result<Value> {
    let spec = &ds["spec"]["template"]["spec"];
    let c = &spec["containers"][0];
    ensure!(
        c["command"].is_null(),
        "the DaemonSet overrides the entrypoint"
    );
    let volumes = spec["volumes"].as_array().context("no volumes")?;
    let mut mounts = Vec::new();
    for m in c["volumeMounts"].as_array().context("no volumeMounts")? {
        let v = volumes
            .iter()
            .find(|v| v["name"] == m["name"])
            .context("a mount without volume")?;
        let p = v["hostPath"]["path"]
            .as_str()
            .context("not a hostPath volume")?;
        let dir = host.join(p.trim_start_matches('/'));
        std::fs::create_dir_all(&dir)?;
        mounts.push(json!({
            "container_path": m["mountPath"],
            "host_path": dir,
            "readonly": m["readOnly"].as_bool().unwrap_or(false),
        }));
    }
    let sc = &c["securityContext"];
    ensure!(
        sc["seccompProfile"]["type"] == "RuntimeDefault",
        "seccomp profile is not RuntimeDefault"
    );
    let drop: Vec<Value> = sc["capabilities"]["drop"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    Ok(json!({
        "metadata": {"name": c["name"], "attempt": 0},
        "image": {"image": c["image"]},
        "args": c["args"],
        "log_path": "plugin.log",
        "mounts": mounts,
        "linux": {"security_context": {
            "run_as_user": {"value": sc["runAsUser"].as_i64().context("no runAsUser")?},
            "readonly_rootfs": sc["readOnlyRootFilesystem"].as_bool().unwrap_or(false),
            "privileged": sc["privileged"].as_bool().unwrap_or(false),
            "no_new_privs": !sc["allowPrivilegeEscalation"].as_bool().unwrap_or(true),
            "capabilities": {"drop_capabilities": drop},
            "seccomp": {"profile_type": 0},
        }},
    }))
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
    let w = cd.work().to_str().unwrap_or_default().to_owned();
    let tar = cd.work().join("scratch-image.tar");
    pack_image(&bin, &def, &reference, &cd.work().join("image"), &tar)?;
    cd.run(&[
        "ctr",
        &w,
        "images",
        "import",
        tar.to_str().unwrap_or_default(),
    ])?;
    let host = cd.work().join("host");
    std::fs::create_dir_all(host.join("var/run/nri"))?;
    std::fs::hard_link(cd.nri_socket(), host.join("var/run/nri/nri.sock"))?;
    let ctr = container_config(&ds, &host)?;
    let file = cd.work().join("scratch-container.json");
    std::fs::write(&file, serde_json::to_vec(&ctr)?)?;
    let pod = cd.pod("nri-plugin-scratch", &[])?;
    let id = cd.run(&["create", &w, &pod, file.to_str().unwrap_or_default()])?;
    cd.run(&["start-container", &w, &id])?;
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
