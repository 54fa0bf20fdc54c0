//! Generated interleavings of a plugin's registration with the lifecycle
//! of pods and containers (creations whose guards the runtime holds for a
//! while, starts, stops, removals), on paused time: whatever the
//! interleaving, and whatever the plugin subscribes to,
//!
//! - the plugin never gets an event about a container (Start, Stop,
//!   Update, Post*) before it has seen the container, in its Synchronize
//!   or as a CreateContainer, when the container's creation began before
//!   the plugin connected (upstream has such a container in the
//!   snapshot);
//! - it never gets an event about a container after its RemoveContainer;
//! - it sees no pod or container twice, and every one that began before it
//!   connected, or whose creation event it takes, and that still exists
//!   at the end;
//! - as a validator that takes RunPodSandbox, it validates a container only
//!   once it has seen the container's pod.
//!
//! 64 cases of up to 40 steps, about 3 s in all.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use common::*;
use nri_api::EventMask;
use nri_api::api::Event;
use nri_runtime::{Adaptation, CreationGuard};
use proptest::prelude::*;

const PODS: u8 = 3;
const PER_POD: u8 = 2;

/// One step of a generated history.
#[derive(Debug, Clone)]
enum Op {
    RunPod(u8),
    StorePod(u8),
    Create(u8, u8),
    StoreContainer(u8, u8),
    Start(u8, u8),
    Stop(u8, u8),
    Update(u8, u8),
    Remove(u8, u8),
    /// The plugin connects (once).
    Connect,
    /// Paused time advances this many milliseconds (the plugin's slow
    /// Synchronize may be answered meanwhile, guards' waits run out).
    Advance(u16),
    /// The test lets the runtime's tasks run this many times.
    Yield(u8),
}

fn op() -> impl Strategy<Value = Op> {
    let pod = 0..PODS;
    let c = || (0..PODS, 0..PER_POD);
    prop_oneof![
        2 => pod.clone().prop_map(Op::RunPod),
        2 => pod.prop_map(Op::StorePod),
        3 => c().prop_map(|(p, k)| Op::Create(p, k)),
        3 => c().prop_map(|(p, k)| Op::StoreContainer(p, k)),
        2 => c().prop_map(|(p, k)| Op::Start(p, k)),
        1 => c().prop_map(|(p, k)| Op::Stop(p, k)),
        1 => c().prop_map(|(p, k)| Op::Update(p, k)),
        1 => c().prop_map(|(p, k)| Op::Remove(p, k)),
        2 => Just(Op::Connect),
        1 => (10u16..1500).prop_map(Op::Advance),
        3 => (1u8..6).prop_map(Op::Yield),
    ]
}

/// How long the plugin takes to answer its Synchronize: under its 2 s
/// request timeout, so that a creation waiting for it as a late plugin
/// gets its answer (steps run while it synchronizes).
fn sync_delay() -> impl Strategy<Value = Option<Duration>> {
    prop_oneof![
        Just(None),
        Just(Some(Duration::from_millis(20))),
        Just(Some(Duration::from_millis(300))),
        Just(Some(Duration::from_millis(1000))),
    ]
}

/// What the plugin subscribes to.
fn mask() -> impl Strategy<Value = EventMask> {
    let all = EventMask::ALL;
    let without = |e: Event| {
        let mut m = EventMask::ALL;
        m.clear(e);
        m
    };
    prop_oneof![
        Just(all),
        Just(without(Event::CreateContainer)),
        Just(without(Event::RunPodSandbox)),
        Just(
            EventMask::EMPTY
                .with(Event::StartContainer)
                .with(Event::StopContainer)
                .with(Event::RemoveContainer)
        ),
        Just(
            EventMask::EMPTY
                .with(Event::RunPodSandbox)
                .with(Event::ValidateContainerAdjustment)
        ),
    ]
}

#[derive(Default)]
enum Obj {
    #[default]
    None,
    Pending(CreationGuard),
    Stored {
        started: bool,
        stopped: bool,
    },
    Removed,
}

/// A stored object, neither started nor stopped.
const STORED: Obj = Obj::Stored {
    started: false,
    stopped: false,
};

fn pod_id(p: u8) -> String {
    format!("p{p}")
}

fn ctr_id(p: u8, k: u8) -> String {
    format!("c{p}{k}")
}

/// The runtime's side of a history: the adaptation, its pods and
/// containers, and which of them began before the plugin connected.
struct World {
    env: TestEnv,
    a: Adaptation,
    pods: HashMap<u8, Obj>,
    ctrs: HashMap<(u8, u8), Obj>,
    began_before: HashSet<String>,
    connected: Option<Connected>,
}

impl World {
    async fn step(&mut self, op: &Op, plugin: &FakePlugin) {
        match *op {
            Op::RunPod(p) if matches!(self.pods.get(&p), None | Some(Obj::None)) => {
                self.began(&pod_id(p));
                let run = self.a.run_pod_sandbox(&pod(&pod_id(p))).await.unwrap();
                self.pods.insert(p, Obj::Pending(run.guard));
            }
            Op::StorePod(p) if matches!(self.pods.get(&p), Some(Obj::Pending(_))) => {
                // The runtime stores the pod, then releases its guard.
                self.env.runtime.add_pod(pod(&pod_id(p)));
                if let Some(Obj::Pending(guard)) = self.pods.insert(p, STORED) {
                    guard.release();
                }
            }
            Op::Create(p, k)
                if matches!(self.pods.get(&p), Some(Obj::Stored { .. }))
                    && matches!(self.ctrs.get(&(p, k)), None | Some(Obj::None)) =>
            {
                let id = ctr_id(p, k);
                self.began(&id);
                let c = ctr(&pod_id(p), &id);
                let out = self.a.create_container(&pod(&pod_id(p)), &c).await;
                let out = out.expect("no plugin refuses a creation here");
                self.ctrs.insert((p, k), Obj::Pending(out.guard));
            }
            Op::StoreContainer(p, k) if matches!(self.ctrs.get(&(p, k)), Some(Obj::Pending(_))) => {
                self.env
                    .runtime
                    .add_container(ctr(&pod_id(p), &ctr_id(p, k)));
                if let Some(Obj::Pending(guard)) = self.ctrs.insert((p, k), STORED) {
                    guard.release();
                }
            }
            Op::Start(p, k) | Op::Stop(p, k) | Op::Update(p, k) | Op::Remove(p, k) => {
                self.change(op, p, k).await;
            }
            Op::Connect if self.connected.is_none() => {
                let conn = plugin.clone().connect(&self.env.socket).await.unwrap();
                self.connected = Some(conn);
            }
            Op::Advance(ms) => tokio::time::sleep(Duration::from_millis(ms.into())).await,
            Op::Yield(n) => {
                for _ in 0..n {
                    tokio::task::yield_now().await;
                }
            }
            _ => {}
        }
    }

    fn began(&mut self, id: &str) {
        if self.connected.is_none() {
            self.began_before.insert(id.to_owned());
        }
    }

    /// Start, Stop, Update or Remove of a stored container.
    async fn change(&mut self, op: &Op, p: u8, k: u8) {
        let Some(Obj::Stored { started, stopped }) = self.ctrs.get(&(p, k)) else {
            return;
        };
        let (started, stopped) = (*started, *stopped);
        let (pd, c) = (pod(&pod_id(p)), ctr(&pod_id(p), &ctr_id(p, k)));
        let next = match op {
            Op::Start(..) if !started => {
                self.a.start_container(&pd, &c).await.unwrap();
                Obj::Stored {
                    started: true,
                    stopped,
                }
            }
            Op::Stop(..) if started && !stopped => {
                self.a.stop_container(&pd, &c).await.unwrap();
                Obj::Stored {
                    started,
                    stopped: true,
                }
            }
            Op::Update(..) if !stopped => {
                self.a.update_container(&pd, &c, None).await.unwrap();
                return;
            }
            Op::Remove(..) => {
                let id = ctr_id(p, k);
                self.env
                    .runtime
                    .containers
                    .lock()
                    .unwrap()
                    .retain(|x| x.id != id);
                self.a.remove_container(&pd, &c).await.unwrap();
                Obj::Removed
            }
            _ => return,
        };
        self.ctrs.insert((p, k), next);
    }

    /// Stores what is pending, connects the plugin if it has not, and
    /// waits until it is active with its backlog delivered.
    async fn settle(&mut self, plugin: &FakePlugin) {
        for p in 0..PODS {
            if matches!(self.pods.get(&p), Some(Obj::Pending(_))) {
                self.step(&Op::StorePod(p), plugin).await;
            }
            for k in 0..PER_POD {
                if matches!(self.ctrs.get(&(p, k)), Some(Obj::Pending(_))) {
                    self.step(&Op::StoreContainer(p, k), plugin).await;
                }
            }
        }
        self.step(&Op::Connect, plugin).await;
        wait_active(&self.a, 1).await;
    }
}

/// Checks what the plugin saw (see the module documentation).
fn check(w: &World, plugin: &FakePlugin, mask: EventMask) -> Result<(), String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut removed: HashSet<String> = HashSet::new();
    for r in plugin.received() {
        for id in r.sync_pods.iter().chain(&r.sync_containers) {
            *seen.entry(id.clone()).or_default() += 1;
        }
        let Some(ev) = r.event else { continue };
        let c = r.container.clone().unwrap_or_default();
        match ev {
            Event::RunPodSandbox => *seen.entry(r.pod.clone().unwrap()).or_default() += 1,
            Event::CreateContainer => *seen.entry(c).or_default() += 1,
            Event::ValidateContainerAdjustment => {
                let p = r.pod.clone().unwrap();
                if mask.contains(Event::RunPodSandbox) && !seen.contains_key(&p) {
                    return Err(format!("validated {c} of pod {p} before seeing the pod"));
                }
            }
            Event::RemoveContainer => {
                removed.insert(c);
            }
            _ if !c.is_empty() => {
                if removed.contains(&c) {
                    return Err(format!("{ev:?} of {c} after its RemoveContainer"));
                }
                let must_know =
                    w.began_before.contains(&c) || mask.contains(Event::CreateContainer);
                if must_know && !seen.contains_key(&c) {
                    return Err(format!("{ev:?} of {c}, which it never saw"));
                }
            }
            _ => {}
        }
    }
    if let Some((id, n)) = seen.iter().find(|(_, n)| **n > 1) {
        return Err(format!("{id} seen {n} times"));
    }
    let existing = (w.pods.iter())
        .filter(|(_, o)| matches!(o, Obj::Stored { .. }))
        .map(|(p, _)| (pod_id(*p), Event::RunPodSandbox))
        .chain(
            (w.ctrs.iter())
                .filter(|(_, o)| matches!(o, Obj::Stored { .. }))
                .map(|((p, k), _)| (ctr_id(*p, *k), Event::CreateContainer)),
        );
    for (id, creation) in existing {
        let must = w.began_before.contains(&id) || mask.contains(creation);
        if must && !seen.contains_key(&id) {
            return Err(format!("{id} exists and was never seen"));
        }
    }
    Ok(())
}

fn run(ops: &[Op], mask: EventMask, sync_delay: Option<Duration>) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async move {
        let env = TestEnv::new();
        let a = env.start(env.builder()).await;
        let mut plugin = FakePlugin::new("10", "p").events(mask);
        if let Some(d) = sync_delay {
            plugin = plugin.delay("Synchronize", d);
        }
        let mut w = World {
            env,
            a,
            pods: HashMap::new(),
            ctrs: HashMap::new(),
            began_before: HashSet::new(),
            connected: None,
        };
        for op in ops {
            w.step(op, &plugin).await;
        }
        w.settle(&plugin).await;
        let res = check(&w, &plugin, mask);
        w.a.stop().await;
        res
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_registration_interleaved_with_the_lifecycle_sees_a_consistent_world(
        ops in proptest::collection::vec(op(), 0..40),
        mask in mask(),
        sync_delay in sync_delay(),
    ) {
        let res = run(&ops, mask, sync_delay);
        prop_assert!(res.is_ok(), "{}", res.unwrap_err());
    }
}
