//! The StateChange fall-back of a plugin that answers UNIMPLEMENTED to a
//! dedicated event RPC is part of the same call: it gets what is left of
//! the call's time, not a fresh request timeout (as upstream, where both
//! calls share one context).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use nri_runtime::PluginFailure;
use tokio::time::Instant;

const TIMEOUT: Duration = Duration::from_secs(2);

/// A plugin that takes 1.5 s to answer UNIMPLEMENTED and 1.5 s more to
/// answer the StateChange: the event ends at the 2 s timeout, reported
/// as a timeout, instead of after 3 s with a success.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_state_change_fallback_gets_what_is_left_of_the_timeout() {
    let env = TestEnv::new();
    let a = env
        .start(env.builder().request_timeout(TIMEOUT).strike_limit(0))
        .await;
    let old = FakePlugin::new("10", "old")
        .legacy()
        .unimplemented_after(Duration::from_millis(1500))
        .delay("StartContainer", Duration::from_millis(1500));
    let _o = old.clone().connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    let t0 = Instant::now();
    let r = a.start_container(&pod("p"), &ctr("p", "c")).await.unwrap();
    let took = t0.elapsed();
    assert!(
        took >= TIMEOUT && took < TIMEOUT + Duration::from_millis(50),
        "the fall-back ends with the call's timeout: {took:?}"
    );
    assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
    assert!(
        matches!(r.errors[0].failure, PluginFailure::Timeout { .. }),
        "{:?}",
        r.errors[0]
    );
    assert_eq!(a.plugins()[0].strikes, 1);
    // The plugin is in the StateChange dialect now: the next event gets
    // the whole timeout for its StateChange.
    let t0 = Instant::now();
    let r = a.start_container(&pod("p"), &ctr("p", "c2")).await.unwrap();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert!(t0.elapsed() >= Duration::from_millis(1500));
    assert!(a.plugins()[0].legacy_dialect);
    a.stop().await;
}
