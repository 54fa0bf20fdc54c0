//! The answer of a plugin to an UpdateContainer deferred by its
//! synchronization (delivered after its Synchronize, long after the
//! runtime applied the event's result) never undoes a newer update of the
//! same container: the container ends with the resources of the last
//! update the runtime made, whatever the interleaving.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use nri_api::EventMask;
use nri_api::api::{
    Container, ContainerUpdate, Event, LinuxContainerUpdate, LinuxCpu, LinuxMemory, LinuxResources,
    OptionalInt64, OptionalUInt64, PodSandbox, UpdateContainerResponse,
};
use nri_runtime::{Adaptation, BoxFuture, CallbackError, RuntimeCallbacks, Snapshot};
use proptest::prelude::*;

const GIB: i64 = 1 << 30;

/// A runtime that keeps each container's memory limit: updates are
/// applied in the order they come, whether the runtime applies an event's
/// result or a plugin's update arrives through the callback.
#[derive(Default)]
struct Store {
    memory: Mutex<BTreeMap<String, i64>>,
}

impl Store {
    fn apply(&self, updates: &[ContainerUpdate]) {
        let mut m = self.memory.lock().unwrap();
        for u in updates {
            let limit = u
                .linux
                .as_ref()
                .and_then(|l| l.resources.as_ref())
                .and_then(|r| r.memory.as_ref())
                .and_then(|m| m.limit.as_ref());
            if let Some(l) = limit {
                m.insert(u.container_id.clone(), l.value);
            }
        }
    }

    fn memory_of(&self, id: &str) -> Option<i64> {
        self.memory.lock().unwrap().get(id).copied()
    }
}

impl RuntimeCallbacks for Store {
    fn list_pods_and_containers(&self) -> BoxFuture<'_, Result<Snapshot, CallbackError>> {
        Box::pin(async move {
            let m = self.memory.lock().unwrap();
            let containers = m.keys().map(|id| ctr("p", id)).collect();
            Ok(Snapshot::new(vec![pod("p")], containers))
        })
    }
    fn update_containers(
        &self,
        updates: Vec<ContainerUpdate>,
    ) -> BoxFuture<'_, Result<Vec<ContainerUpdate>, CallbackError>> {
        Box::pin(async move {
            self.apply(&updates);
            Ok(Vec::new())
        })
    }
}

fn memory(limit: i64) -> LinuxResources {
    LinuxResources {
        memory: Some(LinuxMemory {
            limit: Some(OptionalInt64 { value: limit }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The update a plugin answers for the container it is asked about: the
/// requested resources, with CPU shares of its own.
fn restated(c: &Container, requested: &LinuxResources) -> ContainerUpdate {
    let mut r = requested.clone();
    r.cpu = Some(LinuxCpu {
        shares: Some(OptionalUInt64 { value: 512 }),
        ..Default::default()
    });
    ContainerUpdate {
        container_id: c.id.clone(),
        linux: Some(LinuxContainerUpdate { resources: Some(r) }),
        ignore_failure: false,
    }
}

/// A plugin taking UpdateContainer, whose Synchronize waits for `gate`,
/// answering each UpdateContainer for which `answers` says so with the
/// container's update (the requested memory, CPU shares of its own).
fn plugin(gate: &Gate, answers: impl Fn(i64) -> bool + Send + Sync + 'static) -> FakePlugin {
    FakePlugin::new("20", "late")
        .events(EventMask::EMPTY.with(Event::UpdateContainer))
        .hold("Synchronize", gate)
        .on_update(move |req| {
            let (Some(c), Some(r)) = (&req.container, &req.linux_resources) else {
                return UpdateContainerResponse::default();
            };
            let limit = r.memory.as_ref().and_then(|m| m.limit.as_ref());
            match limit {
                Some(l) if answers(l.value) => UpdateContainerResponse {
                    update: vec![restated(c, r)],
                    evict: vec![],
                },
                _ => UpdateContainerResponse::default(),
            }
        })
}

/// The runtime's UpdateContainer of `id` to `limit`: the event, then its
/// result applied.
async fn update(a: &Adaptation, store: &Store, id: &str, limit: i64) {
    let p: PodSandbox = pod("p");
    let out = a
        .update_container(&p, &ctr("p", id), Some(memory(limit)))
        .await
        .unwrap();
    store.apply(&out.updates);
}

async fn start(store: &Arc<Store>, socket: &std::path::Path, dir: &std::path::Path) -> Adaptation {
    let a = Adaptation::builder("fake-runtime", "v1")
        .socket_path(socket)
        .plugin_dir(dir.join("plugins"))
        .request_timeout(Duration::from_secs(2))
        .build(store.clone())
        .unwrap();
    a.start().await.unwrap();
    a
}

/// UpdateContainer(c, 1G) then (c, 2G) while a plugin synchronizes; the
/// plugin answers the first with c's update (it restates the resources
/// it was given, as a plugin that sets something of its own does) and
/// not the second. The first answer arrives after the runtime applied
/// 2 GiB: it must not take c back to 1 GiB.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_deferred_answer_does_not_undo_a_newer_update() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    let store = Arc::new(Store::default());
    store.memory.lock().unwrap().insert("c".into(), GIB / 2);
    let a = start(&store, &socket, dir.path()).await;
    let gate = Gate::new();
    let late = plugin(&gate, |limit| limit == GIB);
    let _l = late.clone().connect(&socket).await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || {
            late.received().iter().any(|r| r.method == "Synchronize")
        })
        .await
    );
    update(&a, &store, "c", GIB).await;
    update(&a, &store, "c", 2 * GIB).await;
    assert_eq!(store.memory_of("c"), Some(2 * GIB));
    gate.open();
    wait_active(&a, 1).await;
    assert_eq!(
        events_of(&late.received()),
        ["UpdateContainer", "UpdateContainer"]
    );
    assert_eq!(
        store.memory_of("c"),
        Some(2 * GIB),
        "the last update the runtime made stands"
    );
    a.stop().await;
}

/// An answer to a deferred UpdateContainer that no newer update of its
/// container followed is applied (the plugin's changes are not lost).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_deferred_answer_without_a_newer_update_is_applied() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    let store = Arc::new(Store::default());
    let a = start(&store, &socket, dir.path()).await;
    let gate = Gate::new();
    let late = plugin(&gate, |limit| limit == 3 * GIB);
    let _l = late.clone().connect(&socket).await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || {
            late.received().iter().any(|r| r.method == "Synchronize")
        })
        .await
    );
    update(&a, &store, "c", GIB).await;
    update(&a, &store, "d", 3 * GIB).await;
    // The plugin's own change to d, applied by the runtime: 4 GiB.
    store.memory.lock().unwrap().insert("d".into(), 4 * GIB);
    gate.open();
    wait_active(&a, 1).await;
    // Its answer restates 3 GiB for d: no newer update of d, so it is
    // applied as the plugin answered it.
    assert_eq!(store.memory_of("d"), Some(3 * GIB));
    assert_eq!(store.memory_of("c"), Some(GIB));
    a.stop().await;
}

/// One UpdateContainer of a generated history.
#[derive(Debug, Clone)]
struct Step {
    container: u8,
    /// GiB.
    limit: i64,
    /// Made before the plugin's Synchronize is released (deferred for it),
    /// or after (direct, once its backlog is delivered).
    during_sync: bool,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(
        (0u8..3, 1i64..8, any::<bool>()).prop_map(|(container, limit, during_sync)| Step {
            container,
            limit,
            during_sync,
        }),
        1..12,
    )
}

/// Runs a history: the updates made during the plugin's sync first (in
/// their order), then the rest; the plugin answers the updates whose
/// limit is in `answered`. Returns the store and the last limit asked
/// for each container.
fn run(steps: &[Step], answered: HashSet<i64>) -> (BTreeMap<String, i64>, BTreeMap<String, i64>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async move {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("nri.sock");
        let store = Arc::new(Store::default());
        let a = start(&store, &socket, dir.path()).await;
        let gate = Gate::new();
        let late = plugin(&gate, move |limit| answered.contains(&(limit / GIB)));
        let _l = late.clone().connect(&socket).await.unwrap();
        assert!(
            eventually(Duration::from_secs(5), || {
                late.received().iter().any(|r| r.method == "Synchronize")
            })
            .await
        );
        let mut last = BTreeMap::new();
        let (during, after): (Vec<_>, Vec<_>) = steps.iter().partition(|s| s.during_sync);
        for s in during {
            let id = format!("c{}", s.container);
            update(&a, &store, &id, s.limit * GIB).await;
            last.insert(id, s.limit * GIB);
        }
        gate.open();
        for s in after {
            let id = format!("c{}", s.container);
            update(&a, &store, &id, s.limit * GIB).await;
            last.insert(id, s.limit * GIB);
        }
        wait_active(&a, 1).await;
        // Everything deferred has been delivered once an event reaches
        // the plugin directly.
        update(&a, &store, "sentinel", GIB).await;
        a.stop().await;
        let mut m = store.memory.lock().unwrap().clone();
        m.remove("sentinel");
        (m, last)
    })
}

proptest! {
    // About 10 ms a case (paused time).
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Whatever the updates made while a plugin synchronizes and after,
    /// and whichever of them the plugin answers, every container ends
    /// with the last limit the runtime asked for.
    #[test]
    fn the_last_update_stands(steps in steps(), answered in proptest::collection::hash_set(1i64..8, 0..8)) {
        let (store, last) = run(&steps, answered);
        prop_assert_eq!(store, last);
    }
}
