//! A plugin on containerd/nri's Go stub (v0.12.5) behind the proxy, beside
//! one on our SDK: both adjustments reach the runtime above the proxy, and
//! the Go plugin's unsolicited UpdateContainers goes upstream and its
//! failed updates come back to it. Needs the Go peers
//! (`bash scripts/build-go-peers.sh`); skipped without them unless
//! `NRI_REQUIRE_INTEROP=1`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncBufReadExt, BufReader};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_go_plugin_behind_the_proxy_adjusts_and_updates_through_it() {
    let Some(bin) = nri_test_support::go_peer("nri-go-plugin") else {
        return;
    };
    let env = Env::new();
    env.runtime.pods.lock().unwrap().push(pod("p0"));
    env.runtime
        .containers
        .lock()
        .unwrap()
        .push(ctr("p0", "old-c"));
    env.runtime
        .fail_updates
        .lock()
        .unwrap()
        .push("old-c".into());
    let up = env.upstream(Duration::from_secs(2)).await;
    let proxy = Running::start(env.config("", "")).await;
    proxy.wait_serving(&env.proxy_socket).await;

    let mut go = tokio::process::Command::new(&bin)
        .args(["--name", "gop", "--idx", "30", "--adjust", "env"])
        .arg("--unsolicited-update=old-c")
        .arg("--socket")
        .arg(&env.proxy_socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(go.stdout.take().unwrap()).lines();
    let mut behind = Behind::default();
    behind.connect(
        &env.proxy_socket,
        "10",
        "rust",
        TestPlugin::adding("RUST", "10"),
    );
    until("both plugins behind the proxy", || {
        proxy.proxy.adaptation().plugins().len() == 2
    })
    .await;

    // The Go plugin's unsolicited update, answered by the runtime above.
    let failed = loop {
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("the Go plugin's output");
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        if let Some(f) = v.get("failed") {
            assert!(v.get("error").is_none(), "{line}");
            break f.clone();
        }
    };
    assert!(failed.to_string().contains("old-c"), "{failed}");
    assert!(
        env.runtime
            .updates
            .lock()
            .unwrap()
            .iter()
            .any(|u| u.container_id == "old-c"),
        "the update reached the runtime above the proxy"
    );

    up.run_pod_sandbox(&pod("p")).await.unwrap();
    let out = up
        .create_container(&pod("p"), &ctr("p", "c"))
        .await
        .unwrap();
    assert_eq!(
        env_of(&out.adjustment),
        ["RUST=10", "BENCH_PLUGIN_30=30-gop"]
    );

    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
    let _ = go.kill().await;
}
