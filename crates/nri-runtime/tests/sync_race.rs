//! No lost (and no duplicated) objects around Synchronize: plugins register
//! while pods and containers are being created; each plugin must see every
//! pod and container exactly once, in its Synchronize or as a creation
//! event. 200 iterations on a multi-threaded runtime; at least 30% of them
//! must take the deferred path (objects queued while the plugin synchronized),
//! and with the queuing turned off (feature `test-no-sync-queue`, run by
//! scripts/test.sh) the test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use nri_api::EventMask;
use nri_api::api::Event;

const ITERATIONS: usize = 200;

/// How many times `plugin` was told about each pod and container (in a
/// Synchronize or as a RunPodSandbox / CreateContainer event), and the ids
/// of those events in arrival order.
fn objects_seen(plugin: &FakePlugin) -> (HashMap<String, usize>, Vec<String>) {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut order = Vec::new();
    for r in plugin.received() {
        for id in r.sync_pods.iter().chain(r.sync_containers.iter()) {
            *seen.entry(id.clone()).or_default() += 1;
        }
        let id = match r.method.as_str() {
            "RunPodSandbox" => r.pod.clone().unwrap(),
            "CreateContainer" => r.container.clone().unwrap(),
            _ => continue,
        };
        order.push(id.clone());
        *seen.entry(id).or_default() += 1;
    }
    (seen, order)
}
const OBJECTS: usize = 12;

/// Records in the plugin's log that the creation of `id` starts (the log
/// is in arrival order, so later entries happened later).
fn note_begin(plugin: &FakePlugin, id: &str) {
    plugin.log.lock().unwrap().push(Received {
        plugin: plugin.full_name(),
        method: "begin".into(),
        event: None,
        pod: Some(id.to_owned()),
        container: None,
        sync_pods: vec![],
        sync_containers: vec![],
        more: false,
    });
}

/// Whether the deferred path was taken: some object whose creation began
/// before the plugin got its Synchronize was left out of it and reached the
/// plugin as an event (it was queued while the plugin synchronized).
fn deferred_path_taken(plugin: &FakePlugin) -> bool {
    let log = plugin.received();
    let Some(sync_at) = log.iter().position(|r| r.method == "Synchronize") else {
        return false;
    };
    let began_before: std::collections::HashSet<&String> = log[..sync_at]
        .iter()
        .filter(|r| r.method == "begin")
        .filter_map(|r| r.pod.as_ref())
        .collect();
    log.iter().any(|r| match r.method.as_str() {
        "RunPodSandbox" => r.pod.as_ref().is_some_and(|id| began_before.contains(id)),
        "CreateContainer" => r
            .container
            .as_ref()
            .is_some_and(|id| began_before.contains(id)),
        _ => false,
    })
}

/// At least this share of the iterations must take the deferred path, or
/// the test does not exercise the race it is about.
const MIN_DEFERRED_SHARE: f64 = 0.30;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[allow(clippy::too_many_lines)]
async fn registrations_race_creations_without_losing_or_duplicating() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let rt = env.runtime.clone();
    let mut deferred = 0usize;
    for it in 0..ITERATIONS {
        let active = Arc::new(AtomicBool::new(false));
        rt.pods.lock().unwrap().clear();
        rt.containers.lock().unwrap().clear();
        // A few objects exist before the plugin arrives.
        for k in 0..2 {
            rt.add_pod(pod(&format!("pre{it}-{k}")));
            rt.add_container(ctr(&format!("pre{it}-{k}"), &format!("prec{it}-{k}")));
        }
        let mut plugin = FakePlugin::new("10", &format!("late{it}"))
            .events("RunPodSandbox,CreateContainer".parse().unwrap());
        if it % 2 == 0 {
            plugin = plugin.delay("Synchronize", Duration::from_micros(200));
        }
        let creator = {
            let a = a.clone();
            let rt = rt.clone();
            let plugin = plugin.clone();
            let active = active.clone();
            tokio::spawn(async move {
                // At least OBJECTS, and on until the plugin is active, so
                // that creations overlap its registration and sync.
                let mut k = 0;
                while k < OBJECTS || !active.load(Ordering::Relaxed) {
                    let p = pod(&format!("p{it}-{k}"));
                    note_begin(&plugin, &p.id);
                    let run = a.run_pod_sandbox(&p).await.unwrap();
                    if k % 3 == 0 {
                        tokio::task::yield_now().await;
                    }
                    rt.add_pod(p.clone());
                    drop(run.guard);
                    let c = ctr(&p.id, &format!("c{it}-{k}"));
                    note_begin(&plugin, &c.id);
                    let out = a.create_container(&p, &c).await.unwrap();
                    tokio::task::yield_now().await;
                    rt.add_container(c);
                    drop(out.guard);
                    k += 1;
                }
            })
        };
        for _ in 0..(it % 5) {
            tokio::task::yield_now().await;
        }
        let conn = plugin.clone().connect(&env.socket).await.unwrap();
        wait_active(&a, 1).await;
        active.store(true, Ordering::Relaxed);
        creator.await.unwrap();

        let (seen, _) = objects_seen(&plugin);
        let all: Vec<String> = rt
            .pods
            .lock()
            .unwrap()
            .iter()
            .map(|p| p.id.clone())
            .chain(rt.containers.lock().unwrap().iter().map(|c| c.id.clone()))
            .collect();
        assert!(all.len() >= 2 * (OBJECTS + 2));
        for id in &all {
            assert_eq!(
                seen.get(id).copied().unwrap_or(0),
                1,
                "iteration {it}: {id} seen {:?} times (objects lost or duplicated around Synchronize)",
                seen.get(id),
            );
        }
        assert_eq!(
            seen.len(),
            all.len(),
            "iteration {it}: unexpected objects {seen:?}"
        );
        if deferred_path_taken(&plugin) {
            deferred += 1;
        }
        conn.crash();
        wait_active_exact(&a, 0).await;
    }
    a.stop().await;
    let share = deferred as f64 / ITERATIONS as f64;
    eprintln!("deferred path taken in {deferred} of {ITERATIONS} iterations");
    assert!(
        share >= MIN_DEFERRED_SHARE,
        "the deferred path was taken in only {deferred} of {ITERATIONS} iterations: the test no longer provokes the race"
    );
}

/// Registration never blocks lifecycle events: a plugin whose Synchronize
/// hangs (until its timeout) does not delay pod/container creation for
/// others (containerd#14083 froze the node in the analogous situation).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_slow_sync_does_not_block_lifecycle_events() {
    let env = TestEnv::new();
    let a = env
        .start(env.builder().request_timeout(Duration::from_secs(2)))
        .await;
    let fast = FakePlugin::new("10", "fast");
    let _f = fast.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    // Subscribed to everything but CreateContainer (a creation does wait,
    // within the plugin's timeout, for a plugin that registers during its
    // fan-out and takes CreateContainer: see the next test).
    let mut events = EventMask::ALL;
    events.clear(Event::CreateContainer);
    let slow = FakePlugin::new("20", "slowsync")
        .events(events)
        .delay("Synchronize", Duration::from_secs(60));
    let _s = slow.clone().connect(&env.socket).await.unwrap();
    // Let the runtime enter the slow plugin's Synchronize.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let t0 = tokio::time::Instant::now();
    for k in 0..10 {
        let p = pod(&format!("p{k}"));
        a.run_pod_sandbox(&p).await.unwrap();
        a.create_container(&p, &ctr(&p.id, &format!("c{k}")))
            .await
            .unwrap();
        a.stop_container(&p, &ctr(&p.id, &format!("c{k}")))
            .await
            .unwrap();
    }
    assert!(
        t0.elapsed() < Duration::from_millis(100),
        "{:?}",
        t0.elapsed()
    );
    a.stop().await;
}

/// A creation waits for a plugin that registers during its fan-out and
/// takes CreateContainer (so that the plugin's adjustment counts), but at
/// most for that plugin's request timeout: a plugin whose Synchronize
/// hangs delays creations by at most 2 s here, and is reported.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_hanging_sync_delays_a_creation_by_at_most_the_plugin_timeout() {
    let env = TestEnv::new();
    let a = env
        .start(env.builder().request_timeout(Duration::from_secs(2)))
        .await;
    let slow = FakePlugin::new("20", "slowsync").delay("Synchronize", Duration::from_secs(60));
    let _s = slow.clone().connect(&env.socket).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let t0 = tokio::time::Instant::now();
    let mut reported = 0;
    for k in 0..10 {
        let p = pod(&format!("p{k}"));
        a.run_pod_sandbox(&p).await.unwrap();
        let out = a
            .create_container(&p, &ctr(&p.id, &format!("c{k}")))
            .await
            .unwrap();
        reported += out.errors.len();
    }
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert_eq!(reported, 1, "the first creation reports the plugin");
    a.stop().await;
}

/// A plugin that registers while creations never pause still becomes
/// active, and its backlog (what happened during its sync) is delivered
/// before the events that follow activation. Before the ready gate, the
/// deferred queue was drained one call at a time while 8 creators kept
/// adding to it: the plugin stayed "syncing" (and the queue grew) for as
/// long as the load lasted, so `wait_active` below never returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plugin_registering_under_sustained_load_becomes_active() {
    const CREATORS: usize = 8;
    let env = TestEnv::new();
    // A generous request timeout: on a slow machine the backlog may take a
    // while, and a direct call that waited out its timeout at the gate would
    // skip the plugin (this test is about activation, not timeouts).
    let a = env
        .start(env.builder().request_timeout(Duration::from_secs(60)))
        .await;
    let rt = env.runtime.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let mut creators = tokio::task::JoinSet::new();
    for w in 0..CREATORS {
        let (a, rt, stop) = (a.clone(), rt.clone(), stop.clone());
        creators.spawn(async move {
            let mut k = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let p = pod(&format!("w{w}-p{k}"));
                let run = a.run_pod_sandbox(&p).await.unwrap();
                rt.add_pod(p.clone());
                drop(run.guard);
                let c = ctr(&p.id, &format!("w{w}-c{k}"));
                let out = a.create_container(&p, &c).await.unwrap();
                rt.add_container(c);
                drop(out.guard);
                k += 1;
                // About 8 x 1000 creations per second in all.
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        });
    }
    // Slow enough per call that a one-at-a-time drain cannot keep up with
    // 8 creators that do not wait for this plugin.
    let plugin = FakePlugin::new("10", "late")
        .events("RunPodSandbox,CreateContainer".parse().unwrap())
        .delay("Synchronize", Duration::from_millis(20))
        .delay("CreateContainer", Duration::from_millis(1))
        .delay("RunPodSandbox", Duration::from_millis(1));
    let conn = plugin.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    // The load is still on when the plugin becomes active.
    assert!(!creators.is_empty());
    // More load reaches the active plugin directly, then stop. (Creations
    // that overlapped the plugin's sync waited for it as a late plugin, so
    // the load before activation may have been small.)
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, Ordering::Relaxed);
    while let Some(r) = creators.join_next().await {
        r.unwrap();
    }
    // One more creation: it reaches the plugin directly, so only after the
    // whole backlog has been delivered.
    let p = pod("last");
    let run = a.run_pod_sandbox(&p).await.unwrap();
    assert!(run.errors.is_empty(), "{:?}", run.errors);
    rt.add_pod(p);
    drop(run.guard);

    let (seen, order) = objects_seen(&plugin);
    let pods: Vec<_> = rt
        .pods
        .lock()
        .unwrap()
        .iter()
        .map(|p| p.id.clone())
        .collect();
    let ctrs: Vec<_> = rt
        .containers
        .lock()
        .unwrap()
        .iter()
        .map(|c| (c.id.clone(), c.pod_sandbox_id.clone()))
        .collect();
    assert!(pods.len() > 50, "load ran: {} pods", pods.len());
    for id in pods.iter().chain(ctrs.iter().map(|(c, _)| c)) {
        assert_eq!(seen.get(id).copied(), Some(1), "{id}");
    }
    assert_eq!(seen.len(), pods.len() + ctrs.len());
    // Every container announced after its pod (or its pod was in the sync).
    let pos: HashMap<&String, usize> = order.iter().enumerate().map(|(i, id)| (id, i)).collect();
    for (c, p) in &ctrs {
        if let (Some(ci), Some(pi)) = (pos.get(c), pos.get(p)) {
            assert!(pi < ci, "{c} reached the plugin before its pod {p}");
        }
    }
    drop(conn);
    a.stop().await;
}
