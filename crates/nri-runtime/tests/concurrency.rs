//! No global lock across the fan-out: events for different containers
//! proceed in parallel; sync messages are chunked under the size cap.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn concurrent_creations_run_in_parallel() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let slow = FakePlugin::new("10", "slow").delay("CreateContainer", Duration::from_millis(100));
    let _c = slow.connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    let t0 = tokio::time::Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for k in 0..8 {
        let a = a.clone();
        set.spawn(async move {
            a.create_container(&pod("p"), &ctr("p", &format!("c{k}")))
                .await
                .map(|_| ())
        });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap().unwrap();
    }
    let took = t0.elapsed();
    // Serialized (as upstream's global lock does) this would take 800 ms.
    assert!(took < Duration::from_millis(200), "{took:?}");
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn large_sync_is_split_into_chunks() {
    let env = TestEnv::new();
    // ~6 MiB of pods: 30 pods with 200 KiB of annotations each.
    for k in 0..30 {
        let mut p = pod(&format!("p{k}"));
        p.annotations.insert("big".into(), "x".repeat(200 * 1024));
        env.runtime.add_pod(p);
        env.runtime
            .add_container(ctr(&format!("p{k}"), &format!("c{k}")));
    }
    let a = env.start(env.builder()).await;
    let p = FakePlugin::new("10", "sync");
    let _c = p.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    let syncs: Vec<_> = p
        .received()
        .into_iter()
        .filter(|r| r.method == "Synchronize")
        .collect();
    assert!(syncs.len() >= 2, "{}", syncs.len());
    assert!(syncs[..syncs.len() - 1].iter().all(|r| r.more));
    assert!(!syncs.last().unwrap().more);
    let pods: usize = syncs.iter().map(|r| r.sync_pods.len()).sum();
    let ctrs: usize = syncs.iter().map(|r| r.sync_containers.len()).sum();
    assert_eq!((pods, ctrs), (30, 30));
    a.stop().await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn teardown_fans_out_to_all_plugins_at_once() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let mut conns = Vec::new();
    for name in ["a", "b", "c", "d"] {
        let p = FakePlugin::new("10", name)
            .delay("StopContainer", Duration::from_millis(100))
            .delay("RemoveContainer", Duration::from_millis(100));
        conns.push(p.connect(&env.socket).await.unwrap());
    }
    wait_active(&a, 4).await;
    let (p, c) = (pod("p"), ctr("p", "c0"));
    let t0 = tokio::time::Instant::now();
    let stop = a.stop_container(&p, &c).await.unwrap();
    assert!(stop.errors.is_empty());
    let removed = a.remove_container(&p, &c).await.unwrap();
    assert!(removed.errors.is_empty());
    let took = t0.elapsed();
    // One plugin after the other this would take 800 ms.
    assert!(took < Duration::from_millis(300), "{took:?}");
    a.stop().await;
}
