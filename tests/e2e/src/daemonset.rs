//! A DaemonSet's pod spec run on the harness's containerd with crictl, as
//! a kubelet would run it: the (only) container's image and args, its
//! volumes moved under a host directory of the test, its security context.
//! Used by the tests that prove a deploy/ manifest or a scaffolded
//! plugin's manifest on a real containerd.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, ensure};
use serde_json::{Value, json};

use crate::Containerd;

/// Creates the node's directories under `<WORK>/host` and links the
/// runtime's NRI socket at `var/run/nri/nri.sock` in it (a hard link to
/// containerd's socket); returns the host directory.
pub fn node_dir(cd: &Containerd) -> Result<PathBuf> {
    let host = cd.work().join("host");
    fs::create_dir_all(host.join("var/run/nri"))?;
    fs::hard_link(cd.nri_socket(), host.join("var/run/nri/nri.sock"))?;
    Ok(host)
}

/// The CRI config of the DaemonSet's (only) container: its image and args
/// (no command: the image's entrypoint runs), its volumes under `host`
/// (hostPath volumes at their path; ConfigMap volumes as files written
/// from `configmaps`, each passed through `edit`), its security context.
pub fn container_config(
    ds: &Value,
    configmaps: &[Value],
    host: &Path,
    edit: impl Fn(&str) -> String,
) -> Result<Value> {
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
        let dir = if let Some(p) = v["hostPath"]["path"].as_str() {
            host.join(p.trim_start_matches('/'))
        } else {
            let name = v["configMap"]["name"].as_str().context("unknown volume")?;
            configmap_dir(configmaps, name, host, &edit)?
        };
        fs::create_dir_all(&dir)?;
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
        "log_path": format!("{}.log", c["name"].as_str().unwrap_or("c")),
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

/// Writes the ConfigMap `name` (from `configmaps`) as files under
/// `host/configmaps/<name>`, each passed through `edit`.
fn configmap_dir(
    configmaps: &[Value],
    name: &str,
    host: &Path,
    edit: &impl Fn(&str) -> String,
) -> Result<PathBuf> {
    let cm = configmaps
        .iter()
        .find(|c| c["metadata"]["name"] == name)
        .with_context(|| format!("ConfigMap {name} not given"))?;
    let dir = host.join("configmaps").join(name);
    fs::create_dir_all(&dir)?;
    for (k, text) in cm["data"].as_object().context("ConfigMap without data")? {
        fs::write(dir.join(k), edit(text.as_str().unwrap_or_default()))?;
    }
    Ok(dir)
}

/// Imports the image archive `tar` into containerd.
pub fn import_image(cd: &Containerd, tar: &Path) -> Result<()> {
    cd.run(&[
        "ctr",
        cd.work().to_str().unwrap_or_default(),
        "images",
        "import",
        tar.to_str().unwrap_or_default(),
    ])?;
    Ok(())
}

/// Runs the container `ctr` (a CRI config, see [`container_config`]) in a
/// new pod `pod`; returns the container's id.
pub fn run_in_pod(cd: &Containerd, pod: &str, ctr: &Value) -> Result<String> {
    let name = ctr["metadata"]["name"].as_str().unwrap_or("c");
    let file = cd.work().join(format!("{name}-container.json"));
    fs::write(&file, serde_json::to_vec(ctr)?)?;
    let pod = cd.pod(pod, &[])?;
    let w = cd.work().to_str().unwrap_or_default().to_owned();
    let id = cd.run(&["create", &w, &pod, file.to_str().unwrap_or_default()])?;
    cd.run(&["start-container", &w, &id])?;
    Ok(id)
}
