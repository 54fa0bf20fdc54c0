//! The containers the runtime knows (which bound the updates one message
//! of a plugin may carry: at most the known containers plus
//! `PeerLimits::extra_updates`) follow what the runtime has: a
//! RemoveContainer during a plugin's listing is not undone by that
//! listing, and a creation the runtime gave up on (its guard dropped, the
//! container never stored, no RemoveContainer) is forgotten at the next
//! listing.
//!
//! The set is observed through that bound, with `extra_updates` 0: a
//! plugin's UpdateContainers of `n` updates is refused as too many
//! exactly when fewer than `n` containers are known.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use nri_api::api::{
    ContainerUpdate, LinuxContainerUpdate, LinuxMemory, LinuxResources, OptionalInt64,
    UpdateContainersRequest,
};
use nri_runtime::{BoxFuture, CallbackError, PeerLimits, RuntimeCallbacks, Snapshot};
use tokio::sync::Notify;

/// FakeRuntime whose listing, once `hold` is set, takes its snapshot and
/// then waits for `release` before returning it.
#[derive(Default)]
struct HeldListing {
    inner: FakeRuntime,
    hold: Mutex<bool>,
    taken: Notify,
    release: Notify,
}

impl RuntimeCallbacks for HeldListing {
    fn list_pods_and_containers(&self) -> BoxFuture<'_, Result<Snapshot, CallbackError>> {
        Box::pin(async move {
            let snapshot = self.inner.list_pods_and_containers().await?;
            if *self.hold.lock().unwrap() {
                let released = self.release.notified();
                self.taken.notify_one();
                released.await;
            }
            Ok(snapshot)
        })
    }
    fn update_containers(
        &self,
        updates: Vec<ContainerUpdate>,
    ) -> BoxFuture<'_, Result<Vec<ContainerUpdate>, CallbackError>> {
        self.inner.update_containers(updates)
    }
}

fn limits() -> PeerLimits {
    let mut l = PeerLimits::default();
    l.extra_updates = 0;
    l
}

/// `n` memory updates of containers `x0`...
fn updates(n: usize) -> UpdateContainersRequest {
    let update = (0..n)
        .map(|i| ContainerUpdate {
            container_id: format!("x{i}"),
            linux: Some(LinuxContainerUpdate {
                resources: Some(LinuxResources {
                    memory: Some(LinuxMemory {
                        limit: Some(OptionalInt64 { value: 1 << 30 }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            }),
            ignore_failure: true,
        })
        .collect();
    UpdateContainersRequest {
        update,
        evict: Vec::new(),
    }
}

/// How many containers the runtime knows, as seen by the plugin `conn`:
/// the largest `n` up to 8 for which `n` updates are not refused as too
/// many.
async fn known(conn: &Connected) -> usize {
    let mut n = 0;
    while n < 8 {
        match conn.update_containers(updates(n + 1)).await {
            Err(nri_ttrpc::Error::Status { message, .. }) if message.contains("allowed") => break,
            _ => n += 1,
        }
    }
    n
}

/// A container removed while a registering plugin's listing is under
/// way (the listing has it) is not known afterwards.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_removal_during_a_listing_is_not_undone_by_it() {
    let env = TestEnv::new();
    let rt = Arc::new(HeldListing::default());
    let a = env
        .builder()
        .peer_limits(limits())
        .build(rt.clone())
        .unwrap();
    a.start().await.unwrap();
    rt.inner.add_pod(pod("p"));
    let created = a.create_container(&pod("p"), &ctr("p", "c")).await.unwrap();
    rt.inner.add_container(ctr("p", "c"));
    drop(created.guard);
    let probe = FakePlugin::new("10", "probe")
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    assert_eq!(known(&probe).await, 1);
    // A second plugin registers; its listing has c, and c is removed
    // before the listing returns.
    *rt.hold.lock().unwrap() = true;
    let taken = rt.taken.notified();
    let _late = FakePlugin::new("20", "late")
        .connect(&env.socket)
        .await
        .unwrap();
    taken.await;
    rt.inner.containers.lock().unwrap().clear();
    a.remove_container(&pod("p"), &ctr("p", "c")).await.unwrap();
    rt.release.notify_one();
    wait_active(&a, 2).await;
    assert_eq!(known(&probe).await, 0, "c was removed");
    a.stop().await;
}

/// A creation the runtime gave up on (guard dropped, never stored, no
/// RemoveContainer) is forgotten at the next listing.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_creation_the_runtime_gave_up_on_is_forgotten_at_the_next_listing() {
    let env = TestEnv::new();
    let a = env.start(env.builder().peer_limits(limits())).await;
    env.runtime.add_pod(pod("p"));
    for (id, store) in [("kept", true), ("abandoned", false)] {
        let created = a.create_container(&pod("p"), &ctr("p", id)).await.unwrap();
        if store {
            env.runtime.add_container(ctr("p", id));
        }
        drop(created.guard);
    }
    let probe = FakePlugin::new("10", "probe")
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    assert_eq!(
        known(&probe).await,
        1,
        "the listing for the plugin's Synchronize has only the stored container"
    );
    a.stop().await;
}

/// Removals keep the set small: 50 containers created and removed leave
/// none known.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn created_and_removed_containers_are_not_known() {
    let env = TestEnv::new();
    let a = env.start(env.builder().peer_limits(limits())).await;
    let probe = FakePlugin::new("10", "probe")
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    for k in 0..50 {
        let c = ctr("p", &format!("c{k}"));
        let created = a.create_container(&pod("p"), &c).await.unwrap();
        drop(created.guard);
        if k == 0 {
            assert_eq!(known(&probe).await, 1);
        }
        a.remove_container(&pod("p"), &c).await.unwrap();
    }
    assert_eq!(known(&probe).await, 0);
    a.stop().await;
}

/// A listing asked for while a RemoveContainer is still being delivered
/// (the runtime still has the container: it forgets it after the event,
/// as containerd does) does not bring it back once the removal is done.
/// (The removal was noted at the start of the event only, before the
/// listing was asked for, and the listing added the container back: it
/// stayed known for good.)
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_listing_during_a_removal_in_flight_does_not_bring_it_back() {
    let env = TestEnv::new();
    let a = Arc::new(env.start(env.builder().peer_limits(limits())).await);
    env.runtime.add_pod(pod("p"));
    let created = a.create_container(&pod("p"), &ctr("p", "c")).await.unwrap();
    env.runtime.add_container(ctr("p", "c"));
    drop(created.guard);
    let gate = Gate::new();
    let probe = FakePlugin::new("10", "probe")
        .hold("RemoveContainer", &gate)
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    assert_eq!(known(&probe).await, 1);
    // The removal waits at the probe's answer; meanwhile a plugin
    // registers, and its listing has c.
    let removal = tokio::spawn({
        let a = a.clone();
        async move { a.remove_container(&pod("p"), &ctr("p", "c")).await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    let _late = FakePlugin::new("20", "late")
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 2).await;
    gate.open();
    removal.await.unwrap().unwrap();
    env.runtime.containers.lock().unwrap().clear();
    assert_eq!(known(&probe).await, 0, "c was removed");
    a.stop().await;
}
