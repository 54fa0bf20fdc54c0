//! Events through the proxy: our runtime library above it (as the node's
//! runtime), plugins on our SDK behind it. Upstream sees one plugin whose
//! answers merge its plugins' in order; the plugins see every event; a
//! plugin that registers late is synchronized from the proxy's view;
//! unsolicited updates go upstream and the failed ones come back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use nri_api::api::{ContainerUpdate, Event, LinuxContainerUpdate, LinuxCpu, LinuxResources};
use nri_plugin::EventMask;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_sees_one_plugin_and_the_merged_answer_of_those_behind() {
    let env = Env::new();
    env.runtime.pods.lock().unwrap().push(pod("old"));
    env.runtime
        .containers
        .lock()
        .unwrap()
        .push(ctr("old", "old-c"));
    let up = env.upstream(Duration::from_secs(2)).await;
    let proxy = Running::start(env.config("", "")).await;
    proxy.wait_serving(&env.proxy_socket).await;

    let mut behind = Behind::default();
    let b = TestPlugin::adding("B", "20");
    let a = TestPlugin::adding("A", "10");
    behind.connect(&env.proxy_socket, "20", "bee", b.clone());
    behind.connect(&env.proxy_socket, "10", "ay", a.clone());
    until("two plugins behind the proxy", || {
        proxy.proxy.adaptation().plugins().len() == 2
    })
    .await;

    // Synchronized from the runtime's state, through the proxy.
    assert_eq!(
        a.synced.lock().unwrap().as_slice(),
        [(vec!["old".to_owned()], vec!["old-c".to_owned()])]
    );

    let names: Vec<String> = up.plugins().iter().map(|p| p.id.to_string()).collect();
    assert_eq!(names, ["50-proxy"], "upstream sees the proxy only");

    up.run_pod_sandbox(&pod("p")).await.unwrap();
    let out = up
        .create_container(&pod("p"), &ctr("p", "c"))
        .await
        .unwrap();
    assert_eq!(env_of(&out.adjustment), ["A=10", "B=20"], "in index order");
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    up.start_container(&pod("p"), &ctr("p", "c")).await.unwrap();
    up.stop_container(&pod("p"), &ctr("p", "c")).await.unwrap();
    up.remove_container(&pod("p"), &ctr("p", "c"))
        .await
        .unwrap();
    up.stop_pod_sandbox(&pod("p")).await.unwrap();
    up.remove_pod_sandbox(&pod("p")).await.unwrap();
    let want = [
        "RunPodSandbox:p",
        "CreateContainer:c",
        "StartContainer:c",
        "StopContainer:c",
        "RemoveContainer:c",
        "StopPodSandbox:p",
        "RemovePodSandbox:p",
    ];
    assert_eq!(a.events(), want);
    assert_eq!(b.events(), want);

    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_plugin_is_synchronized_from_the_proxys_view() {
    let env = Env::new();
    env.runtime.pods.lock().unwrap().push(pod("p0"));
    let up = env.upstream(Duration::from_secs(2)).await;
    let proxy = Running::start(env.config("", "")).await;
    proxy.wait_serving(&env.proxy_socket).await;
    until("the proxy registered upstream", || up.plugins().len() == 1).await;

    // Created after the proxy's Synchronize: only events told the proxy.
    up.run_pod_sandbox(&pod("p1")).await.unwrap();
    up.create_container(&pod("p1"), &ctr("p1", "c1"))
        .await
        .unwrap();
    up.run_pod_sandbox(&pod("p2")).await.unwrap();
    up.remove_pod_sandbox(&pod("p2")).await.unwrap();

    let mut behind = Behind::default();
    let late = TestPlugin::default();
    behind.connect_with(
        &env.proxy_socket,
        "10",
        "late",
        late.clone(),
        Some(EventMask::from_events(&[Event::RunPodSandbox])),
    );
    until("the late plugin", || {
        proxy.proxy.adaptation().plugins().len() == 1
    })
    .await;
    let synced = late.synced.lock().unwrap().clone();
    assert_eq!(synced.len(), 1);
    let (mut pods, ctrs) = synced[0].clone();
    pods.sort();
    assert_eq!(pods, ["p0", "p1"]);
    assert_eq!(ctrs, ["c1"]);

    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsolicited_updates_go_upstream_and_the_failed_ones_come_back() {
    let env = Env::new();
    env.runtime.fail_updates.lock().unwrap().push("bad".into());
    let up = env.upstream(Duration::from_secs(2)).await;
    let proxy = Running::start(env.config("", "")).await;
    proxy.wait_serving(&env.proxy_socket).await;
    let mut behind = Behind::default();
    let h = behind.connect(&env.proxy_socket, "10", "updater", TestPlugin::default());
    until("the plugin", || {
        proxy.proxy.adaptation().plugins().len() == 1
    })
    .await;

    let update = |id: &str| ContainerUpdate {
        container_id: id.into(),
        linux: Some(LinuxContainerUpdate {
            resources: Some(LinuxResources {
                cpu: Some(LinuxCpu {
                    shares: Some(nri_api::api::OptionalUInt64 { value: 512 }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }),
        ..Default::default()
    };
    let failed = h
        .update_containers(vec![update("good"), update("bad")], Vec::new())
        .await
        .unwrap();
    let failed: Vec<String> = failed.into_iter().map(|u| u.container_id).collect();
    assert_eq!(failed, ["bad"], "the runtime's answer reaches the plugin");
    let seen: Vec<String> = env
        .runtime
        .updates
        .lock()
        .unwrap()
        .iter()
        .map(|u| u.container_id.clone())
        .collect();
    assert_eq!(seen, ["good", "bad"]);

    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_required_plugin_that_is_absent_fails_creation_upstream_naming_it() {
    let env = Env::new();
    let up = env.upstream(Duration::from_secs(2)).await;
    let proxy = Running::start(env.config("plugins:\n  guard: { policy: required }\n", "")).await;
    proxy.wait_serving(&env.proxy_socket).await;
    until("the proxy registered upstream", || up.plugins().len() == 1).await;

    let err = up.run_pod_sandbox(&pod("p")).await.unwrap_err().to_string();
    assert!(err.contains("guard") && err.contains("50-proxy"), "{err}");
    let err = up
        .create_container(&pod("p"), &ctr("p", "c"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("guard"), "{err}");
    // Teardown is always answered with success.
    let report = up.stop_pod_sandbox(&pod("p")).await.unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    // Pods of exempt namespaces are not refused.
    let mut system = pod("sys");
    system.namespace = "kube-system".into();
    up.run_pod_sandbox(&system).await.unwrap();

    proxy.stop().await;
    up.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_of_the_plugins_behind_are_served() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let env = Env::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let up = env.upstream(Duration::from_secs(2)).await;
    let proxy =
        Running::start(env.config("", &format!("  metrics-address: 127.0.0.1:{port}\n"))).await;
    proxy.wait_serving(&env.proxy_socket).await;
    let mut behind = Behind::default();
    behind.connect(&env.proxy_socket, "10", "ay", TestPlugin::adding("A", "1"));
    until("the plugin", || {
        proxy.proxy.adaptation().plugins().len() == 1
    })
    .await;
    until("the proxy upstream", || up.plugins().len() == 1).await;
    up.create_container(&pod("p"), &ctr("p", "c"))
        .await
        .unwrap();

    let get = |path: &'static str| async move {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).await.unwrap();
        body
    };
    let body = get("/metrics").await;
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(
        body.contains(r#"nri_plugin_invocations_total{plugin="10-ay",operation="CreateContainer",status="ok",error=""} 1"#),
        "{body}"
    );
    assert!(body.contains("nri_active_plugins 1"), "{body}");
    assert!(get("/other").await.starts_with("HTTP/1.1 404"));

    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_sending_garbage_is_disconnected_and_nothing_else_notices() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let env = Env::new();
    let up = env.upstream(Duration::from_secs(2)).await;
    let proxy = Running::start(env.config("", "")).await;
    proxy.wait_serving(&env.proxy_socket).await;
    let mut behind = Behind::default();
    let good = TestPlugin::adding("GOOD", "1");
    let h = behind.connect(&env.proxy_socket, "10", "good", good.clone());
    until("the plugin", || {
        proxy.proxy.adaptation().plugins().len() == 1
    })
    .await;
    until("the proxy upstream", || up.plugins().len() == 1).await;

    // Frames of no protocol: a header claiming an oversize payload, then
    // bytes of nothing.
    for garbage in [[0xffu8; 64], [0x00u8; 64]] {
        let mut s = tokio::net::UnixStream::connect(&env.proxy_socket)
            .await
            .unwrap();
        s.write_all(&garbage).await.unwrap();
        let mut buf = Vec::new();
        // The proxy closes the connection (EOF or reset), nothing more.
        let _ = s.read_to_end(&mut buf).await;
    }

    assert!(h.is_connected());
    let out = up
        .create_container(&pod("p"), &ctr("p", "c"))
        .await
        .unwrap();
    assert_eq!(env_of(&out.adjustment), ["GOOD=1"]);
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    let names: Vec<String> = up.plugins().iter().map(|p| p.id.to_string()).collect();
    assert_eq!(names, ["50-proxy"]);
    assert_eq!(up.plugins()[0].strikes, 0);

    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}
