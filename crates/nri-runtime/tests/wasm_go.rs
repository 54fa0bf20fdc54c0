//! The same WebAssembly plugin (interop/wasm-guest, built with the
//! standard Go toolchain against containerd/nri v0.12.5 `pkg/api` by
//! scripts/build-go-peers.sh) through upstream's Go host (`pkg/adaptation`
//! with wazero, driven by nri-go-runtime) and through nri-runtime, on the
//! same requests: the event mask, the adjustments, the errors and which
//! events reached the guest (it lists them in an annotation) are identical.
//! Missing peers: the test fails if NRI_REQUIRE_INTEROP=1, otherwise it
//! says why and returns.
#![cfg(feature = "wasm")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;

use common::*;
use nri_api::api::{Container, ContainerAdjustment, PodSandbox};
use nri_runtime::{Adaptation, Error};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{ChildStdin, ChildStdout};

const RUNTIME_NAME: &str = "compare-runtime";
const PLUGIN: &str = "10-wasm-guest";

/// One step of the run: an event on pod `pod` (and container `ctr`).
#[derive(Clone, Copy)]
struct Step {
    event: &'static str,
    pod: &'static str,
    ctr: Option<&'static str>,
}

const fn step(event: &'static str, pod: &'static str, ctr: Option<&'static str>) -> Step {
    Step { event, pod, ctr }
}

/// Subscribed events, events it does not subscribe to, a refused
/// container, and creations whose annotation lists what reached it.
const STEPS: &[Step] = &[
    step("RunPodSandbox", "p", None),
    step("CreateContainer", "p", Some("c1")),
    step("PostCreateContainer", "p", Some("c1")),
    step("StartContainer", "p", Some("c1")),
    step("CreateContainer", "p", Some("refused")),
    step("StopContainer", "p", Some("c1")),
    step("RemoveContainer", "p", Some("c1")),
    step("StopPodSandbox", "p", None),
    step("RemovePodSandbox", "p", None),
    step("RunPodSandbox", "q", None),
    step("CreateContainer", "q", Some("c2")),
];

/// What one step produced, host-independently: for CreateContainer the
/// adjustment's env, annotations and mounts, or the guest's error.
#[derive(Debug, PartialEq)]
enum Seen {
    Done,
    Adjusted {
        env: Vec<(String, String)>,
        annotations: BTreeMap<String, String>,
        mounts: Vec<(String, String, String, Vec<String>)>,
    },
    Failed(String),
}

fn pod_of(id: &str) -> PodSandbox {
    pod(id)
}

fn ctr_of(pod: &str, name: &str) -> Container {
    Container {
        name: name.into(),
        ..ctr(pod, name)
    }
}

/// The guest's own error text inside a host's error message.
fn guest_error(text: &str) -> String {
    let marker = "wasm-guest refuses container ";
    match text.find(marker) {
        Some(i) => {
            let rest = &text[i + marker.len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            format!("{marker}{name}")
        }
        None => format!("unexpected error: {text}"),
    }
}

fn from_adjustment(a: &ContainerAdjustment) -> Seen {
    Seen::Adjusted {
        env: a
            .env
            .iter()
            .map(|kv| (kv.key.clone(), kv.value.clone()))
            .collect(),
        annotations: a
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        mounts: a
            .mounts
            .iter()
            .map(|m| {
                (
                    m.destination.clone(),
                    m.r#type.clone(),
                    m.source.clone(),
                    m.options.clone(),
                )
            })
            .collect(),
    }
}

fn plugin_dir(guest: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let dst = dir.path().join(PLUGIN);
    std::fs::copy(guest, &dst).unwrap();
    std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(dir.path().join(format!("{PLUGIN}.conf")), "fail=refused\n").unwrap();
    dir
}

async fn run_rust(guest: &Path) -> (i32, Vec<Seen>) {
    let dir = plugin_dir(guest);
    let env = TestEnv::new();
    let a: Adaptation = env
        .start(
            Adaptation::builder(RUNTIME_NAME, "v0.12.5")
                // A debug build of the interpreter takes seconds to load
                // a 10 MB Go guest (a release build, milliseconds).
                .registration_timeout(std::time::Duration::from_secs(60))
                .plugin_dir(dir.path())
                .config_dir(dir.path())
                .disable_connections(true),
        )
        .await;
    let plugins = a.plugins();
    assert_eq!(plugins.len(), 1, "the guest did not start in nri-runtime");
    let mask = plugins[0].events.as_i32();
    let mut seen = Vec::new();
    for s in STEPS {
        let p = pod_of(s.pod);
        let c = s.ctr.map(|n| ctr_of(s.pod, n));
        let done = |r: Result<nri_runtime::EventReport, Error>| {
            r.unwrap();
            Seen::Done
        };
        let out = match (s.event, &c) {
            ("RunPodSandbox", _) => {
                a.run_pod_sandbox(&p).await.unwrap();
                Seen::Done
            }
            ("StopPodSandbox", _) => done(a.stop_pod_sandbox(&p).await),
            ("RemovePodSandbox", _) => done(a.remove_pod_sandbox(&p).await),
            ("CreateContainer", Some(c)) => match a.create_container(&p, c).await {
                Ok(o) => from_adjustment(&o.adjustment),
                Err(e) => Seen::Failed(guest_error(&e.to_string())),
            },
            ("PostCreateContainer", Some(c)) => done(a.post_create_container(&p, c).await),
            ("StartContainer", Some(c)) => done(a.start_container(&p, c).await),
            ("StopContainer", Some(c)) => {
                a.stop_container(&p, c).await.unwrap();
                Seen::Done
            }
            ("RemoveContainer", Some(c)) => done(a.remove_container(&p, c).await),
            other => panic!("no such step {:?}", other.0),
        };
        seen.push(out);
    }
    a.stop().await;
    (mask, seen)
}

struct GoRuntime {
    child: tokio::process::Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl GoRuntime {
    /// The next line that is not an asynchronous report.
    async fn result(&mut self) -> Value {
        loop {
            let line = self
                .lines
                .next_line()
                .await
                .unwrap()
                .expect("nri-go-runtime ended");
            let v: Value = serde_json::from_str(&line).unwrap();
            if v.get("async").is_none() {
                return v;
            }
        }
    }

    async fn send(&mut self, cmd: Value) -> Value {
        let mut line = cmd.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        self.result().await
    }
}

fn go_pod(id: &str) -> Value {
    let p = pod_of(id);
    json!({"id": p.id, "name": p.name, "uid": p.uid, "namespace": p.namespace})
}

fn go_ctr(pod: &str, name: &str) -> Value {
    json!({"id": name, "pod_sandbox_id": pod, "name": name, "state": "CONTAINER_CREATED"})
}

fn go_seen(event: &str, v: &Value) -> Seen {
    if v["ok"] != json!(true) {
        return Seen::Failed(guest_error(v["error"].as_str().unwrap_or_default()));
    }
    if event != "CreateContainer" {
        return Seen::Done;
    }
    let adj = &v["response"]["adjust"];
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let list = |v: &Value| v.as_array().cloned().unwrap_or_default();
    Seen::Adjusted {
        env: list(&adj["env"])
            .iter()
            .map(|kv| (s(&kv["key"]), s(&kv["value"])))
            .collect(),
        annotations: adj["annotations"]
            .as_object()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), s(v))).collect())
            .unwrap_or_default(),
        mounts: list(&adj["mounts"])
            .iter()
            .map(|m| {
                (
                    s(&m["destination"]),
                    s(&m["type"]),
                    s(&m["source"]),
                    list(&m["options"]).iter().map(s).collect(),
                )
            })
            .collect(),
    }
}

async fn run_go(bin: &Path, guest: &Path) -> (i32, Vec<Seen>) {
    let dir = plugin_dir(guest);
    let mut child = tokio::process::Command::new(bin)
        .args([
            "--no-listen",
            "--name",
            RUNTIME_NAME,
            "--version",
            "v0.12.5",
        ])
        .arg("--plugin-dir")
        .arg(dir.path())
        .arg("--config-dir")
        .arg(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut go = GoRuntime {
        child,
        stdin,
        lines,
    };
    let listed = go.send(json!({"cmd": "list_plugins"})).await;
    let plugins = listed["plugins"].as_array().cloned().unwrap_or_default();
    assert_eq!(plugins.len(), 1, "the guest did not start in Go: {listed}");
    let mask = i32::try_from(plugins[0]["events"].as_i64().unwrap()).unwrap();
    let mut seen = Vec::new();
    for s in STEPS {
        let mut cmd = json!({"cmd": s.event, "pod": go_pod(s.pod)});
        if let Some(c) = s.ctr {
            cmd["container"] = go_ctr(s.pod, c);
        }
        let v = go.send(cmd).await;
        seen.push(go_seen(s.event, &v));
    }
    go.send(json!({"cmd": "stop"})).await;
    let _ = go.child.wait().await;
    (mask, seen)
}

#[tokio::test(flavor = "multi_thread")]
async fn go_guest_behaves_the_same_in_the_go_host_and_in_nri_runtime() {
    let (Some(go_rt), Some(guest)) = (go_peer("nri-go-runtime"), go_peer("wasm-guest.wasm")) else {
        return;
    };
    let (rust_mask, rust) = run_rust(&guest).await;
    let (go_mask, go) = run_go(&go_rt, &guest).await;
    assert_eq!(rust_mask, go_mask, "event masks");
    // RunPodSandbox, CreateContainer, StartContainer, StopContainer,
    // RemovePodSandbox.
    assert_eq!(rust_mask, 0b10_0010_1101);
    for (i, (r, g)) in rust.iter().zip(&go).enumerate() {
        assert_eq!(r, g, "step {i} ({})", STEPS[i].event);
    }
    assert_eq!(rust.len(), go.len());
    // And what they agree on is what the guest was written to do.
    assert_eq!(
        rust[4],
        Seen::Failed("wasm-guest refuses container refused".into())
    );
    let Seen::Adjusted {
        env,
        annotations,
        mounts,
    } = &rust[10]
    else {
        panic!("{:?}", rust[10]);
    };
    assert_eq!(env, &[("WASM_GUEST".to_owned(), "yes".to_owned())]);
    assert_eq!(mounts[0].0, "/run/wasm-guest");
    assert_eq!(
        annotations["wasm-guest.nri-rs.io/seen"],
        "Configure:compare-runtime,Synchronize:0/0,RunPodSandbox:p-name,CreateContainer:c1,\
         StartContainer:c1,CreateContainer:refused,StopContainer:c1,RemovePodSandbox:p-name,\
         RunPodSandbox:q-name,CreateContainer:c2"
    );
}
