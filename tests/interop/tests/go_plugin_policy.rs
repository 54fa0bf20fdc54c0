//! A Go stub plugin's declared failure policy (`stub.WithFailurePolicy` of
//! containerd/nri v0.12.5, `nri-go-plugin --failure-policy`) honoured by
//! our runtime (`nri-runtime`) when the plugin misses the request timeout
//! of a CreateContainer: `fail_request` fails the request, `keep_connected`
//! keeps the plugin registered; an explicit entry of the operator wins; a
//! plugin that declares nothing gets the runtime's default policy, which an
//! empty declaration replaces.
//!
//! The runtime runs with a 300 ms request timeout and a strike limit of 1
//! (a plugin is dropped at its first timeout unless it keeps connected);
//! the Go plugin answers CreateContainer after 3 s and StartContainer at
//! once.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nri_api::api::{Container, ContainerEviction, ContainerUpdate, PodSandbox};
use nri_interop_tests::go_peer;
use nri_runtime::{
    Adaptation, BoxFuture, CallbackError, Error, FailurePolicy, PluginFailure, PluginPolicy,
    RuntimeCallbacks, Snapshot,
};
use tokio::io::{AsyncBufReadExt, BufReader};

/// A runtime with no pods and no containers.
struct Empty;

impl RuntimeCallbacks for Empty {
    fn list_pods_and_containers(&self) -> BoxFuture<'_, Result<Snapshot, CallbackError>> {
        Box::pin(async { Ok(Snapshot::new(Vec::new(), Vec::new())) })
    }
    fn update_containers(
        &self,
        _updates: Vec<ContainerUpdate>,
    ) -> BoxFuture<'_, Result<Vec<ContainerUpdate>, CallbackError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    fn evict_containers(
        &self,
        _evictions: Vec<ContainerEviction>,
    ) -> BoxFuture<'_, Result<(), CallbackError>> {
        Box::pin(async { Ok(()) })
    }
}

const WAIT: Duration = Duration::from_secs(20);

fn pod() -> PodSandbox {
    PodSandbox {
        id: "p1".into(),
        name: "pod1".into(),
        uid: "u1".into(),
        namespace: "default".into(),
        ..Default::default()
    }
}

fn ctr(id: &str) -> Container {
    Container {
        id: id.into(),
        pod_sandbox_id: "p1".into(),
        name: id.into(),
        ..Default::default()
    }
}

/// The Go plugin's stdout lines, collected as they come.
struct GoPlugin {
    child: tokio::process::Child,
    lines: Arc<Mutex<Vec<serde_json::Value>>>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for GoPlugin {
    fn drop(&mut self) {
        self.reader.abort();
        let _ = self.child.start_kill();
    }
}

impl GoPlugin {
    fn start(bin: &Path, socket: &Path, policy: Option<&str>) -> GoPlugin {
        let mut cmd = tokio::process::Command::new(bin);
        cmd.arg("--socket")
            .arg(socket)
            .args(["--name", "gop", "--idx", "10"])
            .args(["--events", "createcontainer,startcontainer"])
            .args(["--delay-event", "CreateContainer=3s"]);
        if let Some(p) = policy {
            cmd.args(["--failure-policy", p]);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l = Arc::clone(&lines);
        let reader = tokio::spawn(async move {
            let mut rd = BufReader::new(out).lines();
            while let Ok(Some(line)) = rd.next_line().await {
                if let Ok(v) = serde_json::from_str(&line) {
                    l.lock().unwrap().push(v);
                }
            }
        });
        GoPlugin {
            child,
            lines,
            reader,
        }
    }

    fn saw(&self, event: &str, container: &str) -> bool {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .any(|v| v["event"] == event && v["container_id"] == container)
    }
}

/// Polls `cond` until it holds, for up to [`WAIT`].
async fn until(what: &str, cond: impl FnMut() -> bool) {
    assert!(
        nri_test_support::eventually(WAIT, cond).await,
        "timed out waiting for {what}"
    );
}

/// What our runtime did with the Go plugin that timed out.
#[derive(Debug)]
struct Outcome {
    declared: Option<nri_api::api::FailurePolicy>,
    created: Result<Vec<PluginFailure>, Error>,
    kept: bool,
}

async fn run(
    configure: impl FnOnce(nri_runtime::Builder) -> nri_runtime::Builder,
    policy: Option<&str>,
) -> Option<Outcome> {
    let bin = go_peer("nri-go-plugin")?;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    let b = Adaptation::builder("nri-rs-interop", "v0.0.0")
        .socket_path(&socket)
        .plugin_dir(dir.path().join("plugins"))
        .config_dir(dir.path().join("conf.d"))
        .request_timeout(Duration::from_millis(300))
        .strike_limit(1);
    let a = configure(b).build(Arc::new(Empty)).unwrap();
    a.start().await.unwrap();
    let go = GoPlugin::start(&bin, &socket, policy);
    until("the Go plugin to register", || a.plugins().len() == 1).await;
    let declared = a.plugins()[0].declared_policy;

    a.run_pod_sandbox(&pod()).await.unwrap();
    let created = a
        .create_container(&pod(), &ctr("c1"))
        .await
        .map(|o| o.errors.into_iter().map(|e| e.failure).collect());
    // A plugin that is kept serves the next request; a dropped one is gone.
    let kept = !a.plugins().is_empty();
    if kept {
        a.start_container(&pod(), &ctr("c1")).await.unwrap();
        until("StartContainer at the Go plugin", || {
            go.saw("StartContainer", "c1")
        })
        .await;
    }
    a.stop().await;
    drop(go);
    Some(Outcome {
        declared,
        created,
        kept,
    })
}

fn declared(fail_request: bool, keep_connected: bool) -> Option<nri_api::api::FailurePolicy> {
    Some(nri_api::api::FailurePolicy {
        fail_request,
        keep_connected,
    })
}

fn timed_out_and_went_on(o: &Outcome) {
    match &o.created {
        Ok(errs) => assert!(matches!(errs[..], [PluginFailure::Timeout { .. }]), "{o:?}"),
        Err(e) => panic!("the request failed: {e:?}"),
    }
}

fn timed_out_and_failed(o: &Outcome) {
    assert!(
        matches!(&o.created, Err(Error::PluginFailed { plugin, cause: PluginFailure::Timeout { .. }, .. }) if plugin == "10-gop"),
        "{o:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_declaration_the_default_policy_applies() {
    let Some(o) = run(|b| b, None).await else {
        return;
    };
    assert_eq!(o.declared, None);
    timed_out_and_went_on(&o);
    assert!(!o.kept, "{o:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn fail_request_fails_the_request() {
    let Some(o) = run(|b| b, Some("fail_request")).await else {
        return;
    };
    assert_eq!(o.declared, declared(true, false));
    timed_out_and_failed(&o);
    assert!(!o.kept, "{o:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn keep_connected_keeps_the_plugin() {
    let Some(o) = run(|b| b, Some("keep_connected")).await else {
        return;
    };
    assert_eq!(o.declared, declared(false, true));
    timed_out_and_went_on(&o);
    assert!(o.kept, "{o:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn both_fail_the_request_and_keep_the_plugin() {
    let Some(o) = run(|b| b, Some("fail_request,keep_connected")).await else {
        return;
    };
    timed_out_and_failed(&o);
    assert!(o.kept, "{o:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_entry_of_the_operator_wins_over_the_declaration() {
    let ignore = |b: nri_runtime::Builder| b.failure_policy("gop", FailurePolicy::Ignore);
    let Some(o) = run(ignore, Some("fail_request")).await else {
        return;
    };
    assert_eq!(o.declared, declared(true, false));
    timed_out_and_went_on(&o);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_empty_declaration_is_not_an_absent_one() {
    // The operator's default fails requests on a timeout; a plugin that
    // declares a policy, even an empty one, replaces it with its own.
    let required =
        |b: nri_runtime::Builder| b.default_policy(PluginPolicy::new(FailurePolicy::Required));
    let Some(absent) = run(required, None).await else {
        return;
    };
    timed_out_and_failed(&absent);
    let Some(empty) = run(required, Some("empty")).await else {
        return;
    };
    assert_eq!(empty.declared, declared(false, false));
    timed_out_and_went_on(&empty);
}
