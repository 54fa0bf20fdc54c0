//! Upgrades without a gap, over generated interleavings: while pods and
//! containers are created, updated and stopped concurrently, a second
//! instance of a `required` plugin connects (at a generated moment, with
//! generated answer delays) and takes over; the first instance is then
//! stopped (at a generated moment after the second one is active, as a
//! surging DaemonSet deletes the old pod once the new one is ready), or
//! stays connected. Invariants, in every case:
//!
//! * no creation is refused, and every container is adjusted by exactly
//!   one instance: the one that got its CreateContainer;
//! * every event goes to exactly one instance (never both, never
//!   neither), whether it was in flight during the hand-over or not;
//! * the new instance knows every object exactly once: in its
//!   Synchronize or from an event, never both;
//! * once the new instance is active, later events go to it only.
//!
//! Paused tokio time on a current-thread runtime; 48 cases by default
//! (about 10 s in CI; `PROPTEST_CASES` raises it by hand).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use nri_api::api::{ContainerAdjustment, CreateContainerResponse, KeyValue};
use nri_runtime::{Adaptation, FailurePolicy, InstanceState, PluginPolicy};
use proptest::prelude::*;

const WAIT: Duration = Duration::from_secs(60);

/// What happens to one pod and its container, relative to the start.
#[derive(Debug, Clone)]
struct Object {
    /// When its RunPodSandbox starts (ms).
    start: u64,
    /// Between the pod stored and its CreateContainer (ms).
    gap: u64,
    /// How long the runtime takes to store the container once created
    /// (ms): its creation stays in flight that long.
    store: u64,
    /// An UpdateContainer after the container is stored.
    update: bool,
    /// A StopContainer after that.
    stop: bool,
}

#[derive(Debug, Clone)]
struct Plan {
    objects: Vec<Object>,
    /// When the new instance connects (ms).
    new_at: u64,
    /// How long after the new instance is active the old one is stopped
    /// (ms); `None`: it stays connected.
    old_stop: Option<u64>,
    /// Answer delays (ms): the old instance's CreateContainer, the new
    /// one's Synchronize, the new one's CreateContainer, both instances'
    /// UpdateContainer.
    old_create: u64,
    new_sync: u64,
    new_create: u64,
    update: u64,
}

fn ms() -> impl Strategy<Value = u64> {
    prop::sample::select(vec![0u64, 1, 3, 7, 15, 30, 60, 120])
}

fn object() -> impl Strategy<Value = Object> {
    (ms(), ms(), ms(), any::<bool>(), any::<bool>()).prop_map(
        |(start, gap, store, update, stop)| Object {
            start,
            gap,
            store,
            update,
            stop,
        },
    )
}

fn plan() -> impl Strategy<Value = Plan> {
    (
        prop::collection::vec(object(), 2..7),
        ms(),
        prop::option::of(ms()),
        (ms(), ms(), ms(), ms()),
    )
        .prop_map(
            |(objects, new_at, old_stop, (old_create, new_sync, new_create, update))| Plan {
                objects,
                new_at,
                old_stop,
                old_create,
                new_sync,
                new_create,
                update,
            },
        )
}

type Log = Arc<Mutex<Vec<Received>>>;

/// Instance `tag` of plugin `10-up`: its adjustment names it.
fn instance(tag: &'static str) -> (FakePlugin, Log) {
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let p = FakePlugin::new("10", "up")
        .log_to(log.clone())
        .on_create(move |_| CreateContainerResponse {
            adjust: Some(ContainerAdjustment {
                env: vec![KeyValue {
                    key: "BY".into(),
                    value: tag.into(),
                }],
                ..Default::default()
            }),
            ..Default::default()
        });
    (p, log)
}

fn states(a: &Adaptation) -> Vec<InstanceState> {
    (a.plugins().into_iter())
        .filter(|p| p.id.name() == "up")
        .map(|p| p.state)
        .collect()
}

async fn wait_states(a: &Adaptation, want: &[InstanceState]) {
    let ok = eventually(WAIT, || states(a) == want).await;
    assert!(ok, "instances {:?}, wanted {want:?}", states(a));
}

/// The (method, object) pairs of the events an instance got.
fn events(log: &Log) -> Vec<(String, String)> {
    (log.lock().unwrap().iter())
        .filter(|r| r.event.is_some())
        .map(|r| {
            let id = r.container.clone().or(r.pod.clone()).unwrap_or_default();
            (r.method.clone(), id)
        })
        .collect()
}

fn synced(log: &Log) -> Vec<String> {
    (log.lock().unwrap().iter())
        .flat_map(|r| r.sync_pods.iter().chain(r.sync_containers.iter()).cloned())
        .collect()
}

/// One object's life; returns who adjusted its container.
async fn life(a: Adaptation, rt: Arc<FakeRuntime>, i: usize, o: Object) -> Vec<String> {
    let ms = Duration::from_millis;
    tokio::time::sleep(ms(o.start)).await;
    let p = pod(&format!("p{i}"));
    let run = a.run_pod_sandbox(&p).await.expect("RunPodSandbox refused");
    rt.add_pod(p.clone());
    drop(run.guard);
    tokio::time::sleep(ms(o.gap)).await;
    let c = ctr(&p.id, &format!("c{i}"));
    let out = a
        .create_container(&p, &c)
        .await
        .expect("CreateContainer refused");
    let by: Vec<String> = (out.adjustment.env.iter())
        .filter(|kv| kv.key == "BY")
        .map(|kv| kv.value.clone())
        .collect();
    tokio::time::sleep(ms(o.store)).await;
    rt.add_container(c.clone());
    drop(out.guard);
    if o.update {
        a.update_container(&p, &c, None)
            .await
            .expect("UpdateContainer refused");
    }
    if o.stop {
        a.stop_container(&p, &c)
            .await
            .expect("StopContainer refused");
    }
    by
}

/// The events the runtime sent for `o` (number `i`).
fn expected(i: usize, o: &Object) -> Vec<(String, String)> {
    let c = format!("c{i}");
    let mut v = vec![
        ("RunPodSandbox".to_owned(), format!("p{i}")),
        ("CreateContainer".to_owned(), c.clone()),
        ("ValidateContainerAdjustment".to_owned(), c.clone()),
    ];
    if o.update {
        v.push(("UpdateContainer".to_owned(), c.clone()));
    }
    if o.stop {
        v.push(("StopContainer".to_owned(), c));
    }
    v
}

/// Runs one generated interleaving and checks that each event reached
/// exactly one instance (one straight script: set-up, events, hand-over,
/// checks).
#[allow(clippy::too_many_lines)]
async fn run_case(plan: Plan) {
    let ms = Duration::from_millis;
    let env = TestEnv::new();
    let builder = (env.builder()).plugin_policy("up", PluginPolicy::new(FailurePolicy::Required));
    let a = env.start(builder).await;
    let (old, old_log) = instance("old");
    let old = (old.delay("CreateContainer", ms(plan.old_create)))
        .delay("UpdateContainer", ms(plan.update))
        .connect(&env.socket)
        .await
        .unwrap();
    wait_states(&a, &[InstanceState::Active]).await;

    let mut lives = tokio::task::JoinSet::new();
    for (i, o) in plan.objects.iter().enumerate() {
        lives.spawn(life(a.clone(), env.runtime.clone(), i, o.clone()));
    }
    tokio::time::sleep(ms(plan.new_at)).await;
    let (new, new_log) = instance("new");
    let _new = (new.delay("Synchronize", ms(plan.new_sync)))
        .delay("CreateContainer", ms(plan.new_create))
        .delay("UpdateContainer", ms(plan.update))
        .connect(&env.socket)
        .await
        .unwrap();
    wait_states(&a, &[InstanceState::Superseded, InstanceState::Active]).await;
    if let Some(after) = plan.old_stop {
        tokio::time::sleep(ms(after)).await;
        old.crash();
    }
    let mut by = HashMap::new();
    while let Some(r) = lives.join_next().await {
        let b = r.expect("an object's life panicked");
        assert_eq!(b.len(), 1, "a container adjusted by {b:?}");
        by.insert(by.len(), b);
    }
    let want = if plan.old_stop.is_some() {
        vec![InstanceState::Active]
    } else {
        vec![InstanceState::Superseded, InstanceState::Active]
    };
    wait_states(&a, &want).await;

    // Every event to exactly one instance; the adjustment from the one
    // that got the CreateContainer.
    let (old_ev, new_ev) = (events(&old_log), events(&new_log));
    let mut count: HashMap<(String, String), (usize, usize)> = HashMap::new();
    for e in &old_ev {
        count.entry(e.clone()).or_default().0 += 1;
    }
    for e in &new_ev {
        count.entry(e.clone()).or_default().1 += 1;
    }
    let mut all_expected = Vec::new();
    for (i, o) in plan.objects.iter().enumerate() {
        all_expected.extend(expected(i, o));
    }
    for e in &all_expected {
        let (o, n) = count.get(e).copied().unwrap_or_default();
        assert_eq!(o + n, 1, "{e:?}: old {o} times, new {n} times");
    }
    assert_eq!(
        count.len(),
        all_expected.len(),
        "unexpected events: {count:?}"
    );
    let creators: usize = (count.iter())
        .filter(|((m, _), _)| m == "CreateContainer")
        .filter(|(_, (o, _))| *o == 1)
        .count();
    let adjusted_by_old = by.values().filter(|b| b[0] == "old").count();
    assert_eq!(
        creators, adjusted_by_old,
        "adjustments do not match who got the creations"
    );

    // The new instance knows every object exactly once.
    let synced = synced(&new_log);
    for (i, _) in plan.objects.iter().enumerate() {
        for (id, method) in [
            (format!("p{i}"), "RunPodSandbox"),
            (format!("c{i}"), "CreateContainer"),
        ] {
            let listed = synced.iter().filter(|s| **s == id).count();
            let told = new_ev
                .iter()
                .filter(|(m, x)| m == method && *x == id)
                .count();
            assert_eq!(
                listed + told,
                1,
                "{id}: listed {listed} times, told {told} times"
            );
        }
    }

    // From now on, the new instance only.
    let before = events(&old_log);
    let p = pod("pz");
    drop(a.run_pod_sandbox(&p).await.unwrap().guard);
    env.runtime.add_pod(p.clone());
    let out = a.create_container(&p, &ctr("pz", "cz")).await.unwrap();
    assert_eq!(out.adjustment.env.len(), 1);
    assert_eq!(out.adjustment.env[0].value, "new");
    assert_eq!(
        events(&old_log),
        before,
        "the superseded instance got an event"
    );
    drop(out);
    a.stop().await;
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_event_reaches_exactly_one_instance(plan in plan()) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(run_case(plan));
    }
}
