//! The runtime's callbacks (`RuntimeCallbacks`) run within deadlines, and
//! what a synchronizing plugin makes the runtime queue is bounded, so a
//! hostile (hung) callback costs one plugin's registration or one
//! request, never unbounded memory or a plugin stuck synchronizing:
//!
//! - the listing for a plugin's Synchronize gets the plugin's request
//!   timeout: a listing that hangs fails the registration
//!   (`RegistrationFailure::ListTimeout`) and the plugin is closed;
//! - `update_containers` and `evict_containers` get the request timeout of
//!   the plugin whose updates they apply: a plugin's UpdateContainers is
//!   answered with an error then;
//! - a synchronizing plugin's backlog holds at most
//!   `PeerLimits::max_sync_backlog` events: one more closes the plugin
//!   (it may reconnect and synchronize again).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use nri_api::EventMask;
use nri_api::api::{
    ContainerEviction, ContainerUpdate, Event, LinuxContainerUpdate, LinuxMemory, LinuxResources,
    OptionalInt64, UpdateContainersRequest,
};
use nri_runtime::{BoxFuture, CallbackError, PeerLimits, RuntimeCallbacks, Snapshot};
use tokio::time::Instant;

const TIMEOUT: Duration = Duration::from_secs(2);

/// A runtime whose callbacks hang (never return) while their flag is set.
#[derive(Default)]
struct Hostile {
    inner: FakeRuntime,
    hang_list: AtomicBool,
    hang_updates: AtomicBool,
    /// Listings asked for.
    lists: AtomicUsize,
}

async fn hang_if(flag: &AtomicBool) {
    if flag.load(Ordering::Relaxed) {
        std::future::pending::<()>().await;
    }
}

impl RuntimeCallbacks for Hostile {
    fn list_pods_and_containers(&self) -> BoxFuture<'_, Result<Snapshot, CallbackError>> {
        Box::pin(async move {
            self.lists.fetch_add(1, Ordering::Relaxed);
            hang_if(&self.hang_list).await;
            self.inner.list_pods_and_containers().await
        })
    }
    fn update_containers(
        &self,
        updates: Vec<ContainerUpdate>,
    ) -> BoxFuture<'_, Result<Vec<ContainerUpdate>, CallbackError>> {
        Box::pin(async move {
            hang_if(&self.hang_updates).await;
            self.inner.update_containers(updates).await
        })
    }
    fn evict_containers(
        &self,
        evictions: Vec<ContainerEviction>,
    ) -> BoxFuture<'_, Result<(), CallbackError>> {
        Box::pin(async move {
            hang_if(&self.hang_updates).await;
            self.inner.evict_containers(evictions).await
        })
    }
}

async fn start(env: &TestEnv, rt: &Arc<Hostile>, limits: PeerLimits) -> nri_runtime::Adaptation {
    let a = env
        .builder()
        .request_timeout(TIMEOUT)
        .peer_limits(limits)
        .build(rt.clone())
        .unwrap();
    a.start().await.unwrap();
    a
}

async fn closed_within(conn: &Connected, d: Duration) -> bool {
    tokio::time::timeout(d, conn.mux.closed()).await.is_ok()
}

/// A listing that never returns: the plugin's registration fails at its
/// request timeout and its connection is closed; events meanwhile are
/// not held up, and later plugins register once the listing works again.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_hung_listing_fails_the_registration_at_the_plugin_timeout() {
    let env = TestEnv::new();
    let rt = Arc::new(Hostile::default());
    let a = start(&env, &rt, PeerLimits::default()).await;
    rt.hang_list.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    let stuck = FakePlugin::new("10", "stuck")
        .events(EventMask::EMPTY.with(Event::StartContainer))
        .connect(&env.socket)
        .await
        .unwrap();
    for k in 0..20 {
        let c = ctr("p", &format!("c{k}"));
        a.start_container(&pod("p"), &c).await.unwrap();
    }
    assert!(
        t0.elapsed() < Duration::from_millis(100),
        "events are not held up"
    );
    assert!(
        closed_within(&stuck, 10 * TIMEOUT).await,
        "the plugin is closed"
    );
    assert!(
        t0.elapsed() <= TIMEOUT + Duration::from_millis(100),
        "{:?}",
        t0.elapsed()
    );
    assert!(a.plugins().is_empty());
    assert!(
        stuck
            .plugin
            .received()
            .iter()
            .all(|r| r.method == "Configure"),
        "nothing but Configure reached it: {:?}",
        stuck.plugin.received()
    );
    rt.hang_list.store(false, Ordering::Relaxed);
    let _ok = FakePlugin::new("10", "stuck")
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    a.stop().await;
}

/// `update_containers` never returns: a plugin's UpdateContainers gets an
/// error at the plugin's request timeout, and so does an eviction.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_hung_update_callback_fails_the_request_at_the_plugin_timeout() {
    let env = TestEnv::new();
    let rt = Arc::new(Hostile::default());
    let a = start(&env, &rt, PeerLimits::default()).await;
    let conn = FakePlugin::new("10", "updater")
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    rt.hang_updates.store(true, Ordering::Relaxed);
    let update = ContainerUpdate {
        container_id: "c".into(),
        linux: Some(LinuxContainerUpdate {
            resources: Some(LinuxResources {
                memory: Some(LinuxMemory {
                    limit: Some(OptionalInt64 { value: 1 << 30 }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }),
        ignore_failure: false,
    };
    let eviction = ContainerEviction {
        container_id: "c".into(),
        reason: "test".into(),
    };
    for req in [
        UpdateContainersRequest {
            update: vec![update],
            evict: vec![],
        },
        UpdateContainersRequest {
            update: vec![],
            evict: vec![eviction],
        },
    ] {
        let t0 = Instant::now();
        // The client's own timeout is 5 s: the answer comes before.
        let err = conn.update_containers(req).await.unwrap_err();
        let took = t0.elapsed();
        assert!(
            took >= TIMEOUT && took < TIMEOUT + Duration::from_millis(100),
            "answered at the plugin's timeout: {took:?} ({err})"
        );
        assert!(err.to_string().contains("no answer within"), "{err}");
    }
    a.stop().await;
}

/// A synchronizing plugin whose listing hangs, and more events than its
/// backlog may hold: the plugin is closed when the backlog overflows, at
/// once, not at its timeout.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_backlog_over_its_bound_closes_the_plugin() {
    let env = TestEnv::new();
    let rt = Arc::new(Hostile::default());
    let mut limits = PeerLimits::default();
    limits.max_sync_backlog = 8;
    let refusals = Arc::new(Refusals::default());
    let a = env
        .builder()
        .request_timeout(TIMEOUT)
        .peer_limits(limits)
        .metrics(refusals.clone())
        .build(rt.clone())
        .unwrap();
    a.start().await.unwrap();
    rt.hang_list.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    let flooded = FakePlugin::new("10", "flooded")
        .events(EventMask::EMPTY.with(Event::StartContainer))
        .connect(&env.socket)
        .await
        .unwrap();
    // Synchronizing: waiting for the listing.
    assert!(
        eventually(Duration::from_millis(100), || {
            rt.lists.load(Ordering::Relaxed) > 0
        })
        .await
    );
    for k in 0..8 {
        let c = ctr("p", &format!("c{k}"));
        a.start_container(&pod("p"), &c).await.unwrap();
    }
    assert!(!closed_within(&flooded, Duration::from_millis(10)).await);
    a.start_container(&pod("p"), &ctr("p", "c8")).await.unwrap();
    assert!(
        closed_within(&flooded, Duration::from_millis(10)).await,
        "closed when the ninth event would be queued"
    );
    assert!(t0.elapsed() < TIMEOUT, "{:?}", t0.elapsed());
    assert_eq!(
        *refusals.0.lock().unwrap(),
        [("10-flooded".to_owned(), "sync_backlog".to_owned())]
    );
    a.stop().await;
}

/// Metrics that record the refusals.
#[derive(Default)]
struct Refusals(std::sync::Mutex<Vec<(String, String)>>);

impl nri_runtime::Metrics for Refusals {
    fn peer_refused(&self, peer: &str, reason: &str) {
        let r = (peer.to_owned(), reason.to_owned());
        self.0.lock().unwrap().push(r);
    }
}

/// The grants' pod check of an answer that changes another container
/// lists the runtime's containers within the plugin's request timeout: a
/// listing that never returns refuses the answer then (the grant cannot
/// be shown to allow it), and the creation does not wait for ever.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_hung_listing_for_a_grants_pod_check_refuses_the_answer_at_the_plugin_timeout() {
    use nri_api::api::{CreateContainerResponse, LinuxPids};
    use nri_api::{Capability, CapabilitySet};
    use nri_runtime::{Error, Grant, PluginFailure, PodSelector};

    let env = TestEnv::new();
    let rt = Arc::new(Hostile::default());
    rt.inner.add_pod(pod("p"));
    rt.inner.add_container(ctr("p", "other"));
    let mut allow = CapabilitySet::of(&[Capability::AdjustLinuxPidLimit]);
    allow.insert(Capability::UpdateContainers);
    let grant = Grant::new(["tuner"])
        .allow(allow)
        .pods(PodSelector::namespaces([pod("p").namespace]));
    let a = env
        .builder()
        .request_timeout(TIMEOUT)
        .grant(grant)
        .build(rt.clone())
        .unwrap();
    a.start().await.unwrap();
    let _conn = FakePlugin::new("10", "tuner")
        .on_create(|_| {
            let mut u = ContainerUpdate::new("other");
            u.linux_resources_mut().pids = Some(LinuxPids { limit: 64 });
            CreateContainerResponse {
                update: vec![u],
                ..Default::default()
            }
        })
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    rt.hang_list.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    let created = tokio::time::timeout(10 * TIMEOUT, a.create_container(&pod("p"), &ctr("p", "c")))
        .await
        .expect("the creation is answered");
    let elapsed = t0.elapsed();
    match created {
        Err(Error::PluginFailed {
            cause: PluginFailure::NotGranted { field, reason },
            ..
        }) => {
            assert_eq!(field, "pod");
            assert!(
                reason.contains(&format!("took longer than {TIMEOUT:?}")),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(
        elapsed >= TIMEOUT && elapsed <= TIMEOUT + Duration::from_millis(100),
        "{elapsed:?}"
    );
    assert!(rt.inner.updates.lock().unwrap().is_empty());
    a.stop().await;
}
