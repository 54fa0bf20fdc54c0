//! The proxy under containerd/nri's Go runtime (`pkg/adaptation`), as
//! containerd embeds it: v0.12.5 (per-event RPCs) and v0.8.0 (the
//! `StateChange` dialect of containerd 2.0/2.1, which takes only the
//! events of mask 0x7FF). The proxy subscribes to every event the runtime
//! can deliver, and its plugins' adjustments reach the runtime. Needs the
//! Go peers (`bash scripts/build-go-peers.sh`); skipped without them unless
//! `NRI_REQUIRE_INTEROP=1`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Stdio;

use common::*;
use nri_plugin::EventMask;
use nri_test_support::go_peer;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// A Go runtime peer driven by JSON lines.
struct GoRuntime {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    next: u64,
}

impl GoRuntime {
    async fn start(bin: &Path, socket: &Path) -> GoRuntime {
        std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
        let mut child = tokio::process::Command::new(bin)
            .arg("--socket")
            .arg(socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        loop {
            let line = lines
                .next_line()
                .await
                .unwrap()
                .expect("the Go runtime's output");
            let v: Value = serde_json::from_str(&line).unwrap();
            match v.get("async").and_then(Value::as_str) {
                Some("started") => break,
                Some("error") => panic!("the Go runtime did not start: {line}"),
                _ => {}
            }
        }
        GoRuntime {
            child,
            stdin,
            lines,
            next: 0,
        }
    }

    async fn cmd(&mut self, mut c: Value) -> Value {
        self.next += 1;
        c["id"] = json!(self.next);
        let line = format!("{c}\n");
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        loop {
            let line = self.lines.next_line().await.unwrap().expect("an answer");
            let v: Value = serde_json::from_str(&line).unwrap();
            if v.get("id") == Some(&json!(self.next)) {
                return v;
            }
        }
    }

    async fn stop(mut self) {
        let _ = self.cmd(json!({"cmd": "stop"})).await;
        let _ = self.child.wait().await;
    }
}

async fn through_the_go_runtime(peer: &str, want: EventMask) {
    let Some(bin) = go_peer(peer) else { return };
    let env = Env::new();
    let mut go = GoRuntime::start(&bin, &env.upstream_socket).await;
    let proxy = Running::start(env.config("", "")).await;
    let r = go
        .cmd(json!({"cmd": "wait_plugins", "count": 1, "timeout_ms": 20000}))
        .await;
    assert_eq!(r["ok"], json!(true), "{r}");
    proxy.wait_serving(&env.proxy_socket).await;
    assert_eq!(proxy.proxy.upstream().subscribed_events(), want);

    let mut behind = Behind::default();
    let plugin = TestPlugin::adding("RUST", "10");
    behind.connect(&env.proxy_socket, "10", "rust", plugin.clone());
    until("the plugin behind", || {
        proxy.proxy.adaptation().plugins().len() == 1
    })
    .await;

    let pod = json!({"id": "p", "name": "p", "uid": "u", "namespace": "default"});
    let r = go.cmd(json!({"cmd": "RunPodSandbox", "pod": pod})).await;
    assert_eq!(r["ok"], json!(true), "{r}");
    let ctr = json!({"id": "c", "pod_sandbox_id": "p", "name": "c"});
    let r = go
        .cmd(json!({"cmd": "CreateContainer", "pod": pod, "container": ctr}))
        .await;
    assert_eq!(r["ok"], json!(true), "{r}");
    let envs = r["response"]["adjust"]["env"].to_string();
    assert!(envs.contains("RUST") && envs.contains("10"), "{r}");
    for ev in ["StartContainer", "StopContainer", "RemoveContainer"] {
        let r = go
            .cmd(json!({"cmd": ev, "pod": pod, "container": ctr}))
            .await;
        assert_eq!(r["ok"], json!(true), "{r}");
    }
    for ev in ["StopPodSandbox", "RemovePodSandbox"] {
        let r = go.cmd(json!({"cmd": ev, "pod": pod})).await;
        assert_eq!(r["ok"], json!(true), "{r}");
    }
    assert_eq!(
        plugin.events(),
        [
            "RunPodSandbox:p",
            "CreateContainer:c",
            "StartContainer:c",
            "StopContainer:c",
            "RemoveContainer:c",
            "StopPodSandbox:p",
            "RemovePodSandbox:p"
        ]
    );

    behind.stop().await;
    proxy.stop().await;
    go.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_go_runtime_v0_12_5_every_event_goes_through() {
    // No validator behind the proxy: every event but validation.
    let want = nri_proxy::UPSTREAM_EVENTS.difference(EventMask::from_events(&[
        nri_api::api::Event::ValidateContainerAdjustment,
    ]));
    through_the_go_runtime("nri-go-runtime", want).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_go_runtime_v0_8_0_the_0x7ff_events_go_through_state_change() {
    through_the_go_runtime("nri-go-runtime-legacy", EventMask::ALL_BEFORE_V0_10).await;
}
