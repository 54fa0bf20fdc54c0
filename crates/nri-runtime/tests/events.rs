//! Every event, both dialects, and the deterministic plugin order.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use nri_runtime::Adaptation;

async fn lifecycle(a: &Adaptation) {
    let p = pod("p1");
    let c = ctr("p1", "c1");
    let run = a.run_pod_sandbox(&p).await.unwrap();
    drop(run.guard);
    a.update_pod_sandbox(&p, None, None).await.unwrap();
    a.post_update_pod_sandbox(&p).await.unwrap();
    let cr = a.create_container(&p, &c).await.unwrap();
    drop(cr.guard);
    a.post_create_container(&p, &c).await.unwrap();
    a.start_container(&p, &c).await.unwrap();
    a.post_start_container(&p, &c).await.unwrap();
    a.update_container(&p, &c, None).await.unwrap();
    a.post_update_container(&p, &c).await.unwrap();
    a.stop_container(&p, &c).await.unwrap();
    a.remove_container(&p, &c).await.unwrap();
    a.stop_pod_sandbox(&p).await.unwrap();
    a.remove_pod_sandbox(&p).await.unwrap();
}

const ALL: &[&str] = &[
    "RunPodSandbox",
    "UpdatePodSandbox",
    "PostUpdatePodSandbox",
    "CreateContainer",
    "PostCreateContainer",
    "StartContainer",
    "PostStartContainer",
    "UpdateContainer",
    "PostUpdateContainer",
    "StopContainer",
    "RemoveContainer",
    "StopPodSandbox",
    "RemovePodSandbox",
];

#[tokio::test(flavor = "multi_thread")]
async fn every_event_reaches_modern_and_legacy_plugins() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let modern = FakePlugin::new("10", "modern").events("all".parse().unwrap());
    let legacy = FakePlugin::new("20", "legacy")
        .events(nri_api::EventMask::ALL_BEFORE_V0_10)
        .legacy();
    let _m = modern.clone().connect(&env.socket).await.unwrap();
    let _l = legacy.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 2).await;
    lifecycle(&a).await;

    // Modern: every event by its dedicated RPC (plus validation).
    let m = modern.received();
    let got: Vec<_> = events_of(&m)
        .into_iter()
        .filter(|e| e != "ValidateContainerAdjustment")
        .collect();
    assert_eq!(got, ALL);
    assert!(m.iter().all(|r| r.method != "StateChange"));
    // The nine legacy events each arrived with the method named after them.
    assert!(m.iter().any(|r| r.method == "PostStartContainer"));

    // Legacy: the nine through StateChange, the others dedicated; no 0x800+ events.
    let l = legacy.received();
    let want: Vec<_> = ALL
        .iter()
        .filter(|e| !e.contains("PodSandbox") || !e.contains("Update"))
        .copied()
        .collect();
    assert_eq!(events_of(&l), want);
    for r in &l {
        let ev = r.event.map(|e| e.pretty_name()).unwrap_or("");
        let via_state_change = r.method == "StateChange";
        let should = r.event.map(|e| e.is_state_change_event()).unwrap_or(false);
        assert_eq!(via_state_change, should, "{ev} via {}", r.method);
    }
    assert!(a.plugins().iter().any(|p| p.legacy_dialect));
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn subscription_is_respected() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let only =
        FakePlugin::new("10", "only").events("StartContainer,RemovePodSandbox".parse().unwrap());
    let _c = only.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    lifecycle(&a).await;
    assert_eq!(
        events_of(&only.received()),
        vec!["StartContainer", "RemovePodSandbox"]
    );
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn plugins_are_called_by_index_then_name() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut conns = Vec::new();
    // Registration order deliberately scrambled.
    for (idx, name) in [
        ("20", "b"),
        ("10", "z"),
        ("99", "a"),
        ("10", "a"),
        ("00", "x"),
        ("10", "m"),
    ] {
        let p = FakePlugin::new(idx, name).log_to(log.clone());
        conns.push(p.connect(&env.socket).await.unwrap());
    }
    wait_active(&a, 6).await;
    for round in 0..5 {
        log.lock().unwrap().clear();
        let c = ctr("p", &format!("c{round}"));
        a.start_container(&pod("p"), &c).await.unwrap();
        let order: Vec<_> = log
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.plugin.clone())
            .collect();
        assert_eq!(order, ["00-x", "10-a", "10-m", "10-z", "20-b", "99-a"]);
    }
    let ids: Vec<_> = a.plugins().iter().map(|p| p.id.to_string()).collect();
    assert_eq!(ids, ["00-x", "10-a", "10-m", "10-z", "20-b", "99-a"]);
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_is_sent_on_stop() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let p = FakePlugin::new("10", "bye");
    let c = p.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    a.stop().await;
    assert!(p.received().iter().any(|r| r.method == "Shutdown"));
    let _ = c.mux.closed().await;
    assert!(!env.socket.exists(), "socket removed on stop");
}

#[tokio::test(flavor = "multi_thread")]
async fn plugin_crash_is_survived() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let crashing = FakePlugin::new("10", "crash");
    let ok = FakePlugin::new("20", "ok");
    let c1 = crashing.clone().connect(&env.socket).await.unwrap();
    let _c2 = ok.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 2).await;
    c1.crash();
    // The next events still work and reach the survivor.
    let p = pod("p");
    let c = ctr("p", "c");
    a.run_pod_sandbox(&p).await.unwrap();
    a.create_container(&p, &c).await.unwrap();
    wait_active_exact(&a, 1).await;
    assert!(events_of(&ok.received()).contains(&"CreateContainer".to_owned()));
    a.stop().await;
}
