//! The proxy under containerd/nri's Go runtime (`pkg/adaptation`), as
//! containerd embeds it: v0.12.5 (per-event RPCs) and v0.8.0 (the
//! `StateChange` dialect of containerd 2.0/2.1, which takes only the
//! events of mask 0x7FF). The proxy subscribes to every event the runtime
//! can deliver, and its plugins' adjustments reach the runtime. Announced
//! as containerd 2.1.9 and 2.4.2, the proxy declares to its plugins what
//! that containerd applies: a plugin requiring sysctls fails at start-up
//! on 2.1 as it would without the proxy, and runs on 2.4. Needs the
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
        GoRuntime::start_as(bin, socket, &[]).await
    }

    /// Started with more arguments (`--name containerd --version v2.1.9`).
    async fn start_as(bin: &Path, socket: &Path, args: &[&str]) -> GoRuntime {
        std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
        let mut child = tokio::process::Command::new(bin)
            .arg("--socket")
            .arg(socket)
            .args(args)
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

/// Sets one sysctl on every container (what containerd 2.1 drops).
struct Tuner;

#[nri_plugin::plugin]
impl nri_plugin::Plugin for Tuner {
    async fn create_container(
        &self,
        _pod: nri_api::api::PodSandbox,
        _ctr: nri_api::api::Container,
    ) -> nri_plugin::HandlerResult<nri_api::api::CreateContainerResponse> {
        let mut adjust = nri_api::api::ContainerAdjustment::default();
        adjust
            .linux_mut()
            .sysctl
            .insert("net.core.somaxconn".into(), "1024".into());
        Ok(nri_api::api::CreateContainerResponse {
            adjust: Some(adjust),
            ..Default::default()
        })
    }
}

/// A plugin behind the proxy that requires sysctls, against the Go
/// runtime `peer` announcing itself as containerd `version`: it fails at
/// start-up exactly where it would on that containerd directly (the
/// proxy declares what the SDK infers for containerd, no more), and runs
/// where containerd applies sysctls, the sysctl reaching the runtime.
/// Budget: a few seconds.
async fn requiring_sysctls_behind_the_proxy(peer: &str, version: &str, served: bool) {
    use nri_api::api::Event;
    use nri_plugin::{Capability, CapabilityBasis, Error, Requirement};
    let Some(bin) = go_peer(peer) else { return };
    let env = Env::new();
    let args = ["--name", "containerd", "--version", version];
    let mut go = GoRuntime::start_as(&bin, &env.upstream_socket, &args).await;
    let proxy = Running::start(env.config("", "")).await;
    let r = go
        .cmd(json!({"cmd": "wait_plugins", "count": 1, "timeout_ms": 20000}))
        .await;
    assert_eq!(r["ok"], json!(true), "{r}");
    proxy.wait_serving(&env.proxy_socket).await;
    let direct = nri_api::RuntimeCapabilities::of_runtime("", "containerd", version);
    let declared = proxy.proxy.adaptation().declared();
    // What the SDK infers for that containerd, passed on as it is.
    assert_eq!(declared.basis, CapabilityBasis::Inferred);
    for c in Capability::ALL {
        let r = Requirement::from(*c);
        assert_eq!(declared.supports(r), direct.supports(r), "{version}: {c}");
    }
    let sysctl = Requirement::from(Capability::AdjustLinuxSysctl);
    assert_eq!(declared.supports(sysctl), Some(served));

    let stub = nri_plugin::Builder::new(Tuner)
        .name("tuner")
        .index("10")
        .socket_path(&env.proxy_socket)
        .requires([sysctl])
        .build()
        .unwrap();
    if !served {
        let res = tokio::time::timeout(std::time::Duration::from_secs(20), stub.run())
            .await
            .expect("the plugin neither ran nor failed");
        let Err(Error::Unsupported { missing, basis, .. }) = res else {
            panic!("want Unsupported, got {res:?}");
        };
        assert_eq!(&missing[..], [sysctl]);
        assert_eq!(basis, CapabilityBasis::Declared);
        // Nor could it wait for pod updates, which v0.8.0 does not send.
        assert_eq!(
            declared.supports(Event::UpdatePodSandbox.into()),
            Some(false)
        );
        assert!(proxy.proxy.adaptation().plugins().is_empty());
    } else {
        let handle = stub.handle();
        let task = tokio::spawn(async move { stub.run().await });
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
        assert!(r.to_string().contains("somaxconn"), "{r}");
        handle.stop();
        task.await.unwrap().unwrap();
    }
    proxy.stop().await;
    go.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_containerd_2_1_a_plugin_requiring_sysctls_fails_fast_behind_the_proxy() {
    requiring_sysctls_behind_the_proxy("nri-go-runtime-legacy", "v2.1.9", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_containerd_2_4_a_plugin_requiring_sysctls_runs_behind_the_proxy() {
    requiring_sysctls_behind_the_proxy("nri-go-runtime", "v2.4.2", true).await;
}
