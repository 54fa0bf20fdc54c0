//! Evictions a plugin behind the proxy asks for outside of an event
//! (UpdateContainers): containerd/nri's Go runtime drops them in every
//! release (through v0.12.5, so every containerd and CRI-O), so the proxy
//! does not report them done there: the plugin gets an error naming the
//! runtime and why. A runtime on our runtime library carries them out,
//! and gets them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use nri_api::api::{ConfigureRequest, ContainerEviction};
use nri_plugin::PluginHandle;
use nri_test_support::fake_runtime::{FakeRuntime, Register};

fn evict(id: &str) -> Vec<ContainerEviction> {
    vec![ContainerEviction {
        container_id: id.into(),
        reason: "too greedy".into(),
    }]
}

/// The full text of an error and its causes.
fn text(e: &nri_plugin::Error) -> String {
    let mut msg = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        msg = format!("{msg}: {c}");
        cause = c.source();
    }
    msg
}

async fn one_plugin(env: &Env, proxy: &Running, behind: &mut Behind) -> PluginHandle {
    let h = behind.connect(&env.proxy_socket, "10", "evictor", TestPlugin::default());
    until("the plugin", || {
        proxy.proxy.adaptation().plugins().len() == 1
    })
    .await;
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_on_our_library_gets_the_evictions() {
    let env = Env::new();
    let up = env.upstream(Duration::from_secs(2)).await;
    let proxy = Running::start(env.config("", "")).await;
    proxy.wait_serving(&env.proxy_socket).await;
    let mut behind = Behind::default();
    let h = one_plugin(&env, &proxy, &mut behind).await;
    until("the proxy upstream", || up.plugins().len() == 1).await;
    h.update_containers(Vec::new(), evict("c")).await.unwrap();
    let got: Vec<String> = (env.runtime.evictions.lock().unwrap().iter())
        .map(|e| e.container_id.clone())
        .collect();
    assert_eq!(got, ["c"]);
    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}

/// containerd 2.1 (NRI v0.8.0, inferred from its version; it reports none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containerd_drops_evictions_so_the_plugin_gets_an_error() {
    let fake = FakeRuntime::new();
    let mut env = Env::new();
    env.upstream_socket = fake.path.clone();
    let proxy = Running::start(env.config("", "")).await;
    let conn = fake.accept(Register::Accept).await;
    conn.registered().await;
    conn.configure(ConfigureRequest {
        runtime_name: "containerd".into(),
        runtime_version: "v2.1.4".into(),
        registration_timeout: 5000,
        request_timeout: 2000,
        ..Default::default()
    })
    .await
    .unwrap();
    conn.sync(vec![pod("p")], vec![ctr("p", "c")])
        .await
        .unwrap();
    proxy.wait_serving(&env.proxy_socket).await;
    let mut behind = Behind::default();
    let h = one_plugin(&env, &proxy, &mut behind).await;

    let err = text(
        &h.update_containers(Vec::new(), evict("c"))
            .await
            .unwrap_err(),
    );
    assert!(
        err.contains("containerd v2.1.4") && err.contains("ignores evictions"),
        "{err}"
    );
    assert!(
        conn.updates.lock().await.try_recv().is_err(),
        "nothing was sent upstream"
    );

    behind.stop().await;
    drop(conn);
    proxy.stop().await;
}

/// The real Go runtime (containerd/nri v0.12.5) above the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_go_runtime_drops_evictions_so_the_plugin_gets_an_error() {
    let Some(bin) = nri_test_support::go_peer("nri-go-runtime") else {
        return;
    };
    let env = Env::new();
    std::fs::create_dir_all(env.upstream_socket.parent().unwrap()).unwrap();
    let mut go = tokio::process::Command::new(bin)
        .arg("--socket")
        .arg(&env.upstream_socket)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let proxy = Running::start(env.config("", "")).await;
    proxy.wait_serving(&env.proxy_socket).await;
    let mut behind = Behind::default();
    let h = one_plugin(&env, &proxy, &mut behind).await;
    until("the proxy upstream", || {
        proxy.proxy.upstream().is_connected()
    })
    .await;
    let err = text(
        &h.update_containers(Vec::new(), evict("c"))
            .await
            .unwrap_err(),
    );
    assert!(
        err.contains("nri-go-runtime v0.12.5") && err.contains("ignores evictions"),
        "{err}"
    );
    behind.stop().await;
    proxy.stop().await;
    let _ = go.kill().await;
}
