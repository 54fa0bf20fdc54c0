//! `nri conformance --passive` on the node while the kubelet drives it:
//! the checker only watches the node's containerd (through the NRI socket
//! the DaemonSets use, `/var/run/nri/nri.sock`) for [`WATCH`], through
//! the kubelet's part below and the operator flows of the test that runs
//! it, and must report no finding it does not already know for that
//! containerd version (a new kubelet behaviour becomes a clause or a
//! known finding).
//!
//! The kubelet's part, in namespace `watch`, the things crictl as a
//! stand-in never did:
//!
//! - a Deployment of two pods, scaled down to one (the kubelet stops the
//!   container, then the sandbox, and removes them itself);
//! - a Job whose pod exits on its own (`restartPolicy: Never`: the
//!   container exits, the kubelet then stops the sandbox);
//! - a pod whose container exits with status 3 and is restarted by the
//!   kubelet in the same sandbox (a second container of the same name);
//! - the namespace deleted: every pod torn down in the kubelet's order,
//!   and the sandboxes removed by its garbage collection.
//!
//! The operator flows add DaemonSet pods, their rollouts and deletions,
//! and sandboxes a required plugin behind the proxy refuses (containerd
//! tears the failed sandbox down towards the plugins that saw it).
//!
//! What the kubelet was seen to do (containerd 2.3 and 2.4 alike): pod
//! teardown is StopContainer, StopPodSandbox, RemoveContainer at once, and
//! RemovePodSandbox only at its next garbage collection (up to a minute
//! later); a pod whose containers all exited has its sandbox stopped a
//! few seconds later, its containers removed only with the sandbox; a
//! restarted container is a new container (CreateContainer after the old
//! one's StopContainer), the old one removed once the new one runs. Every
//! clause the passive mode checks holds for all of it.
//!
//! The test checks that the checker saw the kubelet's pods, their
//! teardown, the self exit and the restart, so the clauses were checked on
//! them and not on nothing.

use std::collections::BTreeSet;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use nri_conformance::record::EventKind;
use nri_conformance::{Clause, Mode, Options, Report, Status, known_for, print_table};
use nri_e2e_tests::k8s::{NODE_NRI_SOCKET, Node};

/// How long the checker watches: the kubelet's part (about 20 s), its
/// next garbage collection, which removes the sandboxes of deleted pods
/// (once a minute from the kubelet's start: 55 s into the window in the
/// runs measured), and most of the operator flows.
pub(super) const WATCH: Duration = Duration::from_secs(100);

/// The checker, watching; joined (its report dropped) if not finished.
pub(super) struct Watch {
    thread: Option<JoinHandle<Result<Report, nri_conformance::Error>>>,
    t0: Instant,
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts the checker on the node and waits for its registration (from
/// then on it sees every event).
pub(super) fn watch(node: &Node) -> Result<Watch> {
    let thread = std::thread::spawn(|| {
        nri_conformance::run_blocking(Options::new(
            NODE_NRI_SOCKET,
            Mode::Passive { duration: WATCH },
        ))
    });
    let w = Watch {
        thread: Some(thread),
        t0: Instant::now(),
    };
    let log = node.containerd_log();
    node.wait("the checker's registration", 1, || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        Ok(text
            .lines()
            .any(|l| l.contains("00-conformance") && l.contains("synchronized"))
            .then_some(()))
    })?;
    Ok(w)
}

/// Waits for the end of the window; checks the report (kept as
/// `WORK/conformance.json`).
pub(super) fn finish(mut w: Watch, node: &Node, version: &str) -> Result<()> {
    eprintln!(
        "[e2e k8s conformance {version}] {:.1?} of the {WATCH:?} window used by the test",
        w.t0.elapsed()
    );
    let thread = w.thread.take().context("the checker was joined already")?;
    let report = thread
        .join()
        .map_err(|_| anyhow::anyhow!("the checker's thread panicked"))??;
    std::fs::write(
        node.work().join("conformance.json"),
        serde_json::to_vec_pretty(&report)?,
    )?;
    check(&report, version)
}

fn manifests(image: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata:
  name: watch
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: watch
spec:
  replicas: 2
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
        - name: app
          image: {image}
          command: ["sleep", "3600"]
---
apiVersion: batch/v1
kind: Job
metadata:
  name: once
  namespace: watch
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: once
          image: {image}
          command: ["sh", "-c", "echo done"]
---
apiVersion: v1
kind: Pod
metadata:
  name: crash
  namespace: watch
spec:
  restartPolicy: Always
  terminationGracePeriodSeconds: 1
  containers:
    - name: crash
      image: {image}
      command: ["sh", "-c", "sleep 1; exit 3"]
"#
    )
}

/// What the kubelet does during the window (see the module docs).
pub(super) fn drive(node: &Node, image: &str) -> Result<()> {
    node.apply(&manifests(image))?;
    node.sh("kubectl -n watch rollout status deploy/web --timeout=120s")?;
    node.sh("kubectl -n watch wait --for=condition=complete job/once --timeout=120s")?;
    node.wait("the crash pod restarted by the kubelet", 2, || {
        let n = node.kubectl(&[
            "-n",
            "watch",
            "get",
            "pod",
            "crash",
            "-o",
            "jsonpath={.status.containerStatuses[0].restartCount}",
        ])?;
        Ok((n.trim().parse::<u32>().unwrap_or(0) >= 1).then_some(()))
    })?;
    node.kubectl(&["-n", "watch", "scale", "deploy/web", "--replicas=1"])?;
    node.wait("the Deployment scaled down", 2, || {
        let v = node.get_json(&["-n", "watch", "get", "pods", "-l", "app=web"])?;
        Ok((v["items"].as_array().map_or(0, Vec::len) == 1).then_some(()))
    })?;
    node.kubectl(&[
        "delete",
        "namespace",
        "watch",
        "--wait=true",
        "--timeout=120s",
    ])?;
    Ok(())
}

/// The events the main instance saw about pods of `watch`.
fn seen(report: &Report) -> Vec<(EventKind, String, String)> {
    report
        .records
        .iter()
        .filter(|r| r.instance == "conformance")
        .filter_map(|r| r.as_event())
        .filter(|(_, p, _)| p.namespace == "watch")
        .map(|(e, p, c)| {
            (
                e,
                p.name.clone(),
                c.map(|c| c.name.clone()).unwrap_or_default(),
            )
        })
        .collect()
}

fn check(report: &Report, version: &str) -> Result<()> {
    let mut table = Vec::new();
    print_table(report, &mut table)?;
    let table = String::from_utf8_lossy(&table).into_owned();
    eprintln!("[k8s conformance {version}]\n{table}");
    ensure!(report.mode == "passive", "mode {}", report.mode);
    ensure!(
        report.runtime.version.starts_with(&format!("v{version}.")),
        "runtime {}",
        report.runtime.version
    );
    ensure!(
        report.ok(),
        "a clause failed on the kubelet-driven node:\n{table}"
    );
    for c in [
        Clause::PodOrder,
        Clause::ContainerOrder,
        Clause::PodScope,
        Clause::Teardown,
    ] {
        let r = report.clause(c).context("clause missing")?;
        ensure!(
            matches!(r.status, Status::Pass | Status::Discrepancy),
            "{c} was {:?}:\n{table}",
            r.status
        );
    }
    // Findings: only known ones (report.ok() says no FAIL); say which.
    let known: BTreeSet<(Clause, String)> =
        known_for(&report.runtime.name, &report.runtime.version)
            .iter()
            .map(|k| (k.clause, k.code.to_owned()))
            .collect();
    for f in report.finding_codes() {
        ensure!(
            known.contains(&f),
            "finding {f:?} is not a known one:\n{table}"
        );
    }
    let seen = seen(report);
    let count = |e: EventKind| seen.iter().filter(|(k, _, _)| *k == e).count();
    let pods: BTreeSet<&str> = seen.iter().map(|(_, p, _)| p.as_str()).collect();
    ensure!(
        pods.len() >= 4 && count(EventKind::RunPodSandbox) >= 4,
        "the checker saw too little of the kubelet's pods: {pods:?}"
    );
    let crash = seen
        .iter()
        .filter(|(e, p, _)| *e == EventKind::CreateContainer && p == "crash")
        .count();
    ensure!(
        crash >= 2,
        "the restarted container was created {crash} times"
    );
    ensure!(
        count(EventKind::StopPodSandbox) >= 4 && count(EventKind::RemovePodSandbox) >= 1,
        "teardown not seen: {} StopPodSandbox, {} RemovePodSandbox",
        count(EventKind::StopPodSandbox),
        count(EventKind::RemovePodSandbox)
    );
    Ok(())
}
