//! Upgrades without a gap (docs/runtime/upgrades.md): a second instance of
//! a connected plugin (same index and name) takes over from it. Each case
//! is provoked deterministically (gates in the plugins' handlers, paused
//! time); the generated interleavings are in tests/upgrade_interleavings.rs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use nri_api::api::{
    ContainerAdjustment, CreateContainerResponse, KeyValue, UpdateContainersRequest,
    ValidateContainerAdjustmentResponse,
};
use nri_runtime::{Adaptation, FailurePolicy, InstanceState, PluginPolicy};

const WAIT: Duration = Duration::from_secs(30);

/// A plugin `10-up` whose adjustment says which instance (`tag`) made it,
/// logging to a log of its own.
fn instance(tag: &'static str) -> (FakePlugin, Arc<Mutex<Vec<Received>>>) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let p = FakePlugin::new("10", "up")
        .log_to(log.clone())
        .on_create(move |_| by(tag));
    (p, log)
}

fn by(tag: &str) -> CreateContainerResponse {
    CreateContainerResponse {
        adjust: Some(ContainerAdjustment {
            env: vec![KeyValue {
                key: "BY".into(),
                value: tag.into(),
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The value of `BY` in a creation's adjustment.
fn adjusted_by(out: &nri_runtime::CreateContainerOutcome) -> Vec<String> {
    (out.adjustment.env.iter())
        .filter(|kv| kv.key == "BY")
        .map(|kv| kv.value.clone())
        .collect()
}

/// What instance logs: (method, object) pairs, Configure and Synchronize
/// left out.
fn events(log: &Mutex<Vec<Received>>) -> Vec<(String, String)> {
    (log.lock().unwrap().iter())
        .filter(|r| r.event.is_some())
        .map(|r| {
            let id = r.container.clone().or(r.pod.clone()).unwrap_or_default();
            (r.method.clone(), id)
        })
        .collect()
}

fn synced_containers(log: &Mutex<Vec<Received>>) -> Vec<String> {
    (log.lock().unwrap().iter())
        .flat_map(|r| r.sync_containers.clone())
        .collect()
}

fn required(env: &TestEnv) -> nri_runtime::Builder {
    env.builder()
        .plugin_policy("up", PluginPolicy::new(FailurePolicy::Required))
}

/// The instances of `10-up` and their states, in instance order.
fn states(a: &Adaptation) -> Vec<(u64, InstanceState)> {
    (a.plugins().into_iter())
        .filter(|p| p.id.name() == "up")
        .map(|p| (p.instance, p.state))
        .collect()
}

async fn wait_states(a: &Adaptation, want: &[InstanceState]) {
    let ok = eventually(WAIT, || {
        states(a).iter().map(|(_, s)| *s).collect::<Vec<_>>() == want
    })
    .await;
    assert!(ok, "instances {:?}, wanted {want:?}", states(a));
}

/// Creates pod `p` with container `c` and stores both (as a runtime
/// does); returns who adjusted the container.
async fn create(a: &Adaptation, env: &TestEnv, p: &str, c: &str) -> Vec<String> {
    let pod = pod(p);
    let run = a.run_pod_sandbox(&pod).await.unwrap();
    env.runtime.add_pod(pod.clone());
    drop(run.guard);
    let ctr = ctr(p, c);
    let out = a.create_container(&pod, &ctr).await.unwrap();
    env.runtime.add_container(ctr);
    adjusted_by(&out)
}

/// Connects a new instance whose Synchronize is held at `gate`, once it
/// has its Synchronize.
async fn new_instance_held_at_sync(
    env: &TestEnv,
    gate: &Gate,
) -> (Connected, Arc<Mutex<Vec<Received>>>) {
    let (new, new_log) = instance("new");
    let new = new
        .hold("Synchronize", gate)
        .connect(&env.socket)
        .await
        .unwrap();
    assert!(
        eventually(WAIT, || (new_log.lock().unwrap().iter())
            .any(|r| r.method == "Synchronize"))
        .await
    );
    (new, new_log)
}

/// Runs pod `p1` (stored, as a runtime does), then creates its container
/// `c1`, in a task; the task returns who adjusted the container.
fn spawn_p1_c1(a: &Adaptation, env: &TestEnv) -> tokio::task::JoinHandle<Vec<String>> {
    let (a, env_rt) = (a.clone(), env.runtime.clone());
    tokio::spawn(async move {
        let p = pod("p1");
        let run = a.run_pod_sandbox(&p).await.unwrap();
        env_rt.add_pod(p.clone());
        drop(run.guard);
        let c = ctr("p1", "c1");
        let out = a.create_container(&p, &c).await.unwrap();
        adjusted_by(&out)
    })
}

#[tokio::test(start_paused = true)]
async fn a_new_instance_takes_over_and_the_old_one_is_left_alone_and_dropped() {
    let env = TestEnv::new();
    let a = env.start(required(&env)).await;
    let (old, old_log) = instance("old");
    let old = old.connect(&env.socket).await.unwrap();
    wait_states(&a, &[InstanceState::Active]).await;
    assert_eq!(create(&a, &env, "p0", "c0").await, ["old"]);

    let (new, new_log) = instance("new");
    let _new = new.connect(&env.socket).await.unwrap();
    wait_states(&a, &[InstanceState::Superseded, InstanceState::Active]).await;
    let s = states(&a);
    assert!(
        s[1].0 > s[0].0,
        "the newer connection has the higher instance: {s:?}"
    );
    // The new one was synchronized with what the old one saw.
    assert_eq!(synced_containers(&new_log), ["c0"]);

    // Every later event goes to the new instance only.
    let before = events(&old_log);
    assert_eq!(create(&a, &env, "p1", "c1").await, ["new"]);
    assert_eq!(events(&old_log), before, "the old instance got an event");
    let got = events(&new_log);
    assert!(
        got.contains(&("RunPodSandbox".into(), "p1".into())),
        "{got:?}"
    );
    assert!(
        got.contains(&("CreateContainer".into(), "c1".into())),
        "{got:?}"
    );
    assert!(
        !got.iter().any(|(_, id)| id == "c0" || id == "p0"),
        "{got:?}"
    );

    // The old instance got nothing more, not even Shutdown (as upstream).
    assert!(
        !(old_log.lock().unwrap().iter()).any(|r| r.method == "Shutdown"),
        "the superseded instance got Shutdown"
    );
    // The superseded instance is dropped when it disconnects.
    old.crash();
    wait_states(&a, &[InstanceState::Active]).await;
    a.stop().await;
}

/// An event in flight to the old instance when the new one starts
/// synchronizing stays the old one's (its answer counts), and the new
/// instance's Synchronize, which waits for it, lists the container.
#[tokio::test(start_paused = true)]
async fn an_event_in_flight_to_the_old_instance_is_its_own_and_in_the_new_sync() {
    let env = TestEnv::new();
    let a = env.start(required(&env)).await;
    let gate = Gate::new();
    let (old, old_log) = instance("old");
    let _old = old
        .hold("CreateContainer", &gate)
        .connect(&env.socket)
        .await
        .unwrap();
    wait_states(&a, &[InstanceState::Active]).await;
    let p0 = pod("p0");
    drop(a.run_pod_sandbox(&p0).await.unwrap().guard);
    env.runtime.add_pod(p0.clone());
    let creation = {
        let (a, rt, p0) = (a.clone(), env.runtime.clone(), p0.clone());
        tokio::spawn(async move {
            let c = ctr("p0", "c0");
            let out = a.create_container(&p0, &c).await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
            rt.add_container(c);
            adjusted_by(&out)
        })
    };
    assert!(
        eventually(WAIT, || events(&old_log)
            .iter()
            .any(|(m, _)| m == "CreateContainer"))
        .await
    );
    let (new, new_log) = instance("new");
    let _new = new.connect(&env.socket).await.unwrap();
    // The new instance waits for the old one's creation before listing.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(synced_containers(&new_log).is_empty());
    assert_eq!(
        states(&a).len(),
        1,
        "superseded only; the new one is not active yet"
    );
    gate.open();
    assert_eq!(creation.await.unwrap(), ["old"]);
    wait_states(&a, &[InstanceState::Superseded, InstanceState::Active]).await;
    assert_eq!(synced_containers(&new_log), ["c0"]);
    assert!(
        !events(&new_log).iter().any(|(m, _)| m == "CreateContainer"),
        "the new instance got the old one's creation as an event"
    );
    a.stop().await;
}

/// While the new instance synchronizes, a required plugin is not absent:
/// a pod is created (the new instance gets it after its Synchronize), a
/// container creation waits for the new instance's answer.
#[tokio::test(start_paused = true)]
async fn a_required_plugin_is_never_absent_during_the_handover() {
    let env = TestEnv::new();
    let a = env.start(required(&env)).await;
    let (old, old_log) = instance("old");
    let _old = old.connect(&env.socket).await.unwrap();
    wait_states(&a, &[InstanceState::Active]).await;
    let gate = Gate::new();
    let (_new, new_log) = new_instance_held_at_sync(&env, &gate).await;
    let creation = spawn_p1_c1(&a, &env);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !creation.is_finished(),
        "the creation did not wait for the new instance"
    );
    gate.open();
    assert_eq!(creation.await.unwrap(), ["new"]);
    // Validation too: the new instance validates what it adjusted.
    assert_eq!(
        events(&new_log),
        [
            ("RunPodSandbox".to_owned(), "p1".to_owned()),
            ("CreateContainer".to_owned(), "c1".to_owned()),
            ("ValidateContainerAdjustment".to_owned(), "c1".to_owned())
        ]
    );
    assert!(events(&old_log).is_empty(), "{:?}", events(&old_log));
    a.stop().await;
}

/// A new instance that fails before it is active hands back: the old one
/// is active again and gets, in order, what happened meanwhile (and
/// answers the creation that waited).
#[tokio::test(start_paused = true)]
async fn a_new_instance_failing_before_it_is_active_hands_back_to_the_old_one() {
    let env = TestEnv::new();
    let a = env.start(required(&env)).await;
    let (old, old_log) = instance("old");
    let _old = old.connect(&env.socket).await.unwrap();
    wait_states(&a, &[InstanceState::Active]).await;
    let gate = Gate::new();
    let (new, new_log) = new_instance_held_at_sync(&env, &gate).await;
    let creation = spawn_p1_c1(&a, &env);
    tokio::time::sleep(Duration::from_millis(100)).await;
    new.crash();
    assert_eq!(creation.await.unwrap(), ["old"]);
    wait_states(&a, &[InstanceState::Active]).await;
    // The creation is validated by the instance active when its
    // validation starts: the old one, taken back.
    assert_eq!(
        events(&old_log),
        [
            ("RunPodSandbox".to_owned(), "p1".to_owned()),
            ("CreateContainer".to_owned(), "c1".to_owned()),
            ("ValidateContainerAdjustment".to_owned(), "c1".to_owned())
        ]
    );
    assert!(events(&new_log).is_empty());
    assert_eq!(create(&a, &env, "p2", "c2").await, ["old"]);
    a.stop().await;
}

/// One upgrade at a time: a third instance is refused while a second is
/// taking over; with `supersede: false` the second is refused.
#[tokio::test(start_paused = true)]
async fn a_third_instance_is_refused_during_a_handover() {
    let env = TestEnv::new();
    let a = env.start(required(&env)).await;
    let (old, _) = instance("old");
    let _old = old.connect(&env.socket).await.unwrap();
    wait_states(&a, &[InstanceState::Active]).await;
    let gate = Gate::new();
    let (new, _) = instance("new");
    let _new = new
        .hold("Synchronize", &gate)
        .connect(&env.socket)
        .await
        .unwrap();
    let (third, _) = instance("third");
    let err = third.connect(&env.socket).await.err().expect("refused");
    assert!(err.to_string().contains("already taking over"), "{err}");
    gate.open();
    wait_states(&a, &[InstanceState::Superseded, InstanceState::Active]).await;
    a.stop().await;
}

/// The new instance starts without the old one's strikes; the old one may
/// no longer change containers.
#[tokio::test(start_paused = true)]
async fn strikes_do_not_carry_over_and_a_superseded_instance_cannot_update() {
    let env = TestEnv::new();
    let a = env
        .start(
            env.builder().plugin_policy(
                "up",
                PluginPolicy::new(FailurePolicy::Ignore)
                    .with_request_timeout(Duration::from_millis(100))
                    .with_strike_limit(5),
            ),
        )
        .await;
    let (old, _) = instance("old");
    let old = old
        .events("CreateContainer".parse().unwrap())
        .delay("CreateContainer", Duration::from_secs(1))
        .connect(&env.socket)
        .await
        .unwrap();
    wait_states(&a, &[InstanceState::Active]).await;
    create(&a, &env, "p0", "c0").await;
    create(&a, &env, "p1", "c1").await;
    assert_eq!(a.plugins()[0].strikes, 2);
    let (new, _) = instance("new");
    let _new = new.connect(&env.socket).await.unwrap();
    wait_states(&a, &[InstanceState::Superseded, InstanceState::Active]).await;
    let infos = a.plugins();
    assert_eq!(infos[1].state, InstanceState::Active);
    assert_eq!(infos[1].strikes, 0, "{infos:?}");
    let err = old
        .update_containers(UpdateContainersRequest::default())
        .await
        .expect_err("refused");
    assert!(err.to_string().contains("superseded"), "{err}");
    a.stop().await;
}

/// A validator's new instance validates the creations that start while it
/// synchronizes (once it is through); the old one no longer does.
#[tokio::test(start_paused = true)]
async fn a_validator_is_upgraded_without_unvalidated_creations() {
    let env = TestEnv::new();
    let a = env.start(required(&env)).await;
    let validators = "ValidateContainerAdjustment".parse().unwrap();
    let reject = |tag: &'static str| {
        move |_: &nri_api::api::ValidateContainerAdjustmentRequest| {
            ValidateContainerAdjustmentResponse {
                reject: true,
                reason: format!("rejected by {tag}"),
            }
        }
    };
    let old_log = Arc::new(Mutex::new(Vec::new()));
    let _old = FakePlugin::new("10", "up")
        .events(validators)
        .log_to(old_log.clone())
        .on_validate(reject("old"))
        .connect(&env.socket)
        .await
        .unwrap();
    wait_states(&a, &[InstanceState::Active]).await;
    let gate = Gate::new();
    let new_log = Arc::new(Mutex::new(Vec::new()));
    let _new = FakePlugin::new("10", "up")
        .events(validators)
        .log_to(new_log.clone())
        .on_validate(reject("new"))
        .hold("Synchronize", &gate)
        .connect(&env.socket)
        .await
        .unwrap();
    assert!(
        eventually(WAIT, || (new_log.lock().unwrap().iter())
            .any(|r| r.method == "Synchronize"))
        .await
    );
    let creation = {
        let a = a.clone();
        tokio::spawn(async move { a.create_container(&pod("p1"), &ctr("p1", "c1")).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    gate.open();
    let err = creation.await.unwrap().expect_err("validated and rejected");
    assert!(err.to_string().contains("rejected by new"), "{err}");
    assert!(events(&old_log).is_empty());
    a.stop().await;
}

/// Metrics name the instance: each state change of each instance.
#[tokio::test(start_paused = true)]
async fn metrics_follow_each_instance() {
    #[derive(Default)]
    struct Instances(Mutex<Vec<(String, u64, String)>>);
    impl nri_runtime::Metrics for Instances {
        fn plugin_instance(&self, plugin: &str, instance: u64, state: &str) {
            let e = (plugin.to_owned(), instance, state.to_owned());
            self.0.lock().unwrap().push(e);
        }
    }
    let env = TestEnv::new();
    let m = Arc::new(Instances::default());
    let a = env.start(required(&env).metrics(m.clone())).await;
    let (old, _) = instance("old");
    let old = old.connect(&env.socket).await.unwrap();
    wait_states(&a, &[InstanceState::Active]).await;
    let (new, _) = instance("new");
    let _new = new.connect(&env.socket).await.unwrap();
    wait_states(&a, &[InstanceState::Superseded, InstanceState::Active]).await;
    old.crash();
    wait_states(&a, &[InstanceState::Active]).await;
    let (o, n) = {
        let s = states(&a);
        (s[0].0 - 1, s[0].0)
    };
    let seen: Vec<_> =
        m.0.lock()
            .unwrap()
            .iter()
            .map(|(_, i, s)| (*i, s.clone()))
            .collect();
    let want = [(o, "active"), (o, "superseded"), (n, "active"), (o, "gone")];
    let want: Vec<_> = want.iter().map(|(i, s)| (*i, (*s).to_owned())).collect();
    assert_eq!(seen, want);
    a.stop().await;
}
