//! `kubectl rollout restart` of a required plugin's DaemonSet behind the
//! proxy during a stream of pod creations: no pod may be refused. The
//! plugin is rolled as docs/proxy.md ("Rolling plugins behind the proxy")
//! says, with a surge: the new pod registers with the proxy while the old
//! one is still connected and takes over from it (a second instance of
//! `NN-name`, docs/runtime/upgrades.md), so the required plugin is never
//! absent.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use nri_e2e_tests::k8s::{Node, run_k8s};

use super::{BUDGET, check_workload, images, overlays, refusals, required_proxy, workload};

/// A bare pod of the stream in `batch`.
fn stream_pod(image: &str, n: usize) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: stream-{n}
  namespace: batch
  labels: {{app: stream}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: app
      image: {image}
      command: ["sleep", "3600"]
"#
    )
}

/// Creates stream pods, each creator at most one every [`PACE`], until
/// `stop` or until [`MAX_STREAM_PODS`] are claimed (`claimed` numbers
/// them across creators); returns how many this creator made.
fn stream(node: &Node, image: &str, claimed: &AtomicUsize, stop: &AtomicBool) -> Result<usize> {
    let start = Instant::now();
    let mut made: u32 = 0;
    while !stop.load(Ordering::Relaxed) {
        let n = claimed.fetch_add(1, Ordering::Relaxed);
        if n >= MAX_STREAM_PODS {
            break;
        }
        node.apply(&stream_pod(image, n))?;
        made += 1;
        // The stream's rate, part of the scenario (not a wait for
        // anything): at most STREAMS pods a second.
        if let Some(ahead) = (start + PACE * made).checked_duration_since(Instant::now()) {
            std::thread::sleep(ahead);
        }
    }
    Ok(made as usize)
}

/// Creators of the stream at once: one `kubectl apply` takes about a
/// second on a loaded machine, the gap of a rollout without upgrades
/// under one.
const STREAMS: usize = 4;

/// The least time between two creations of one creator. Unpaced, four
/// creators on an idle machine made 134 pods in the 20 s of a rollout,
/// more than a node's default 110 pods, and the rest stayed Pending.
const PACE: Duration = Duration::from_secs(1);

/// At most this many stream pods: 40 s of the stream at [`PACE`], under
/// the test node's `maxPods` (200) with the plugins' and the proxy's
/// pods. The stream must not run out before the rollout has ended.
const MAX_STREAM_PODS: usize = 160;

/// A stream of pod creations in `batch` (four creators, each at most one
/// a second, from before the rollout starts until after it ends) while the required plugin behind
/// the proxy is rolled with `kubectl rollout restart`; no pod may be
/// refused, every one must run. The plugin's DaemonSet gets `maxSurge: 1,
/// maxUnavailable: 0` (and `minReadySeconds: 5`), as docs/proxy.md says:
/// the new instance registers while the old one is connected and takes
/// over, and the old pod is deleted only after that. The 2 s before the
/// restart and the 3 s after the rollout's end are part of the scenario
/// (creations before the hand-over and after the old pod is gone), not
/// synchronisation.
fn rollout_run(version: &str) -> Result<()> {
    let (proxy, ulimit) = images()?;
    let mut node = Node::start(version, &format!("k8s rollout {version}"))?;
    let image = node.env("NRI_E2E_BUSYBOX_IMAGE")?.context("no image")?;
    node.import_image(&proxy.tar)?;
    node.import_image(&ulimit.tar)?;
    node.sh("kubectl apply -k deploy/nri-proxy")?;
    node.sh("kubectl -n kube-system rollout status ds/nri-proxy --timeout=180s")?;
    let (proxy_overlay, plugin_overlay) = overlays(&node, true)?;
    required_proxy(&node, &proxy_overlay)?;
    node.sh(&format!("kubectl apply -k {}", plugin_overlay.display()))?;
    node.sh("kubectl -n kube-system rollout status ds/nri-plugin-ulimit-adjuster --timeout=180s")?;
    node.apply(&workload(&image, 1))?;
    check_workload(&node, 1)?;

    let stop = AtomicBool::new(false);
    let claimed = AtomicUsize::new(0);
    let (created, rolled) = std::thread::scope(|s| {
        let creators: Vec<_> = (0..STREAMS)
            .map(|_| {
                let (node, image, claimed, stop) = (&node, &image, &claimed, &stop);
                s.spawn(move || stream(node, image, claimed, stop))
            })
            .collect();
        let rolled = (|| -> Result<()> {
            std::thread::sleep(Duration::from_secs(2));
            node.sh("kubectl -n kube-system rollout restart ds/nri-plugin-ulimit-adjuster")?;
            node.sh("kubectl -n kube-system rollout status ds/nri-plugin-ulimit-adjuster --timeout=120s")?;
            std::thread::sleep(Duration::from_secs(3));
            Ok(())
        })();
        let ran_out = claimed.load(Ordering::Relaxed) >= MAX_STREAM_PODS;
        stop.store(true, Ordering::Relaxed);
        let created: Result<usize> = creators
            .into_iter()
            .map(|c| {
                c.join()
                    .map_err(|_| anyhow::anyhow!("a creator panicked"))?
            })
            .sum();
        (created, rolled.map(|()| ran_out))
    });
    let ran_out = rolled?;
    let created = created?;
    ensure!(
        !ran_out,
        "the stream reached its {MAX_STREAM_PODS} pods before the rollout ended: no creation covered its end"
    );
    eprintln!("[e2e k8s rollout {version}] {created} pods created during the rollout");
    ensure!(
        created >= 5,
        "only {created} pods created during the rollout"
    );
    let refused = refusals(&node)?;
    ensure!(
        refused.is_empty(),
        "{} pod creations refused during the rollout, e.g. {}",
        refused.len(),
        refused[0]
    );
    node.sh("kubectl -n batch wait --for=condition=Ready pod -l app=stream --timeout=180s")?;
    node.passed();
    Ok(())
}

fn rollout_test(version: &str) {
    let name = format!(
        "k8s_plugin_rollout_containerd_{}",
        version.replace('.', "_")
    );
    run_k8s(&name, BUDGET, || rollout_run(version));
}

#[test]
fn k8s_plugin_rollout_containerd_2_3() {
    rollout_test("2.3");
}

#[test]
fn k8s_plugin_rollout_containerd_2_4() {
    rollout_test("2.4");
}
