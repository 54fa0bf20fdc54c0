//! The smoke test of the one-node Kubernetes cluster
//! (`tests/e2e/k8s-node.sh`): the node registers and is Ready with the
//! kubelet and containerd versions expected; containerd's NRI socket is
//! the host's `/var/run/nri/nri.sock`; a pod on the pod network (the
//! distribution's bridge and host-local CNI plugins) and one on the host
//! network run, `kubectl logs` and `kubectl exec` work, the host-network
//! pod reaches the other pod's address; the pods are deleted; the stop
//! leaves nothing behind (no containerd, no mount under WORK, the host
//! socket and the node's owner file gone).
//!
//! On containerd 2.4 only: it checks the node's own machinery, which does
//! not depend on the containerd line; `k8s_deploy` runs the node on 2.3
//! and 2.4.
//!
//! Budget: 150 s, of which the node's start is under a minute; builds
//! (the Kubernetes binaries) and waiting for another test's node are left
//! out.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use nri_e2e_tests::k8s::{NODE_NRI_SOCKET, Node, run_k8s};

const BUDGET: Duration = Duration::from_secs(150);

fn pods(image: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata:
  name: smoke
---
apiVersion: v1
kind: Pod
metadata:
  name: net
  namespace: smoke
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: web
      image: {image}
      command: ["sh", "-c", "mkdir -p /tmp/www && echo hello-from-pod >/tmp/www/index.html && echo hello && exec httpd -f -p 8080 -h /tmp/www"]
---
apiVersion: v1
kind: Pod
metadata:
  name: host
  namespace: smoke
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
    - name: sh
      image: {image}
      command: ["sleep", "3600"]
"#
    )
}

/// The node: one, Ready, the kubelet and containerd versions expected,
/// containerd's NRI at the host path.
fn check_node(node: &Node, version: &str) -> Result<()> {
    let k8s_version = node.env("NRI_K8S_VERSION")?.context("no version")?;
    let nodes = node.get_json(&["get", "nodes"])?;
    let items = nodes["items"].as_array().context("no nodes")?;
    ensure!(items.len() == 1, "{} nodes", items.len());
    let info = &items[0]["status"]["nodeInfo"];
    ensure!(
        info["kubeletVersion"] == k8s_version.as_str(),
        "kubelet {} is not {k8s_version}",
        info["kubeletVersion"]
    );
    let runtime = info["containerRuntimeVersion"].as_str().unwrap_or_default();
    let bare = runtime.strip_prefix("containerd://").unwrap_or_default();
    ensure!(
        bare.trim_start_matches('v')
            .starts_with(&format!("{version}.")),
        "runtime {runtime} is not containerd {version}"
    );
    ensure!(
        Path::new(NODE_NRI_SOCKET).exists(),
        "no NRI socket at {NODE_NRI_SOCKET}"
    );
    let log = std::fs::read_to_string(node.containerd_log())?;
    ensure!(
        log.contains(r#"Registered namespace \"k8s.io\" with NRI"#)
            || log.contains(r#"Registered namespace "k8s.io" with NRI"#),
        "containerd did not register k8s.io with NRI"
    );
    Ok(())
}

/// A pod on the pod network and one on the host network: logs, exec, the
/// node reaching the pod's address; deleted.
fn check_pods(node: &Node) -> Result<()> {
    let node_ip = node.env("NRI_K8S_NODE_IP")?.context("no node IP")?;
    let image = node.env("NRI_E2E_BUSYBOX_IMAGE")?.context("no image")?;
    node.apply(&pods(&image))?;
    node.kubectl(&[
        "-n",
        "smoke",
        "wait",
        "--for=condition=Ready",
        "pod/net",
        "pod/host",
        "--timeout=120s",
    ])?;
    let logs = node.kubectl(&["-n", "smoke", "logs", "net"])?;
    ensure!(logs.lines().any(|l| l == "hello"), "kubectl logs: {logs}");
    let status = node.kubectl(&[
        "-n",
        "smoke",
        "exec",
        "net",
        "--",
        "cat",
        "/proc/self/status",
    ])?;
    ensure!(status.contains("Name:"), "kubectl exec: {status}");
    let net_ip = node.kubectl(&[
        "-n",
        "smoke",
        "get",
        "pod",
        "net",
        "-o",
        "jsonpath={.status.podIP}",
    ])?;
    let host_ip = node.kubectl(&[
        "-n",
        "smoke",
        "get",
        "pod",
        "host",
        "-o",
        "jsonpath={.status.podIP}",
    ])?;
    ensure!(
        host_ip == node_ip,
        "host-network pod has {host_ip}, node {node_ip}"
    );
    ensure!(
        !net_ip.is_empty() && net_ip != node_ip,
        "pod-network pod has {net_ip:?}"
    );
    let page = node.kubectl(&[
        "-n",
        "smoke",
        "exec",
        "host",
        "--",
        "wget",
        "-qO-",
        &format!("http://{net_ip}:8080/"),
    ])?;
    ensure!(
        page.trim() == "hello-from-pod",
        "wget from the node: {page}"
    );

    node.kubectl(&[
        "delete",
        "namespace",
        "smoke",
        "--wait=true",
        "--timeout=120s",
    ])?;
    Ok(())
}

fn run(version: &str) -> Result<()> {
    let mut node = Node::start(version, &format!("k8s node {version}"))?;
    let t0 = Instant::now();
    check_node(&node, version)?;
    check_pods(&node)?;
    eprintln!("[e2e k8s node {version}] checks took {:.1?}", t0.elapsed());
    let t = Instant::now();
    node.stop()?;
    eprintln!("[e2e k8s node {version}] stopped in {:.1?}", t.elapsed());
    ensure!(
        !Path::new(NODE_NRI_SOCKET).exists(),
        "{NODE_NRI_SOCKET} left after the stop"
    );
    ensure!(
        !Path::new("/run/nri-rs-k8s-node").exists(),
        "the node's owner file is left after the stop"
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")?;
    let work = node.work().to_string_lossy().into_owned();
    ensure!(
        !mounts.lines().any(|l| l.contains(&format!("{work}/"))),
        "mounts left under {work}"
    );
    node.passed();
    Ok(())
}

fn test(version: &str) {
    let name = format!("k8s_node_containerd_{}", version.replace('.', "_"));
    run_k8s(&name, BUDGET, || run(version));
}

#[test]
fn k8s_node_containerd_2_4() {
    test("2.4");
}
