//! The start-up grace (`startup-grace`: requests wait for a `required`
//! plugin that has not registered since start) ends at the event's
//! deadline: through the proxy, RunPodSandbox and CreateContainer are
//! answered within the runtime's request timeout however long the grace.
//! Paused time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use tokio::time::Instant;

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_long_startup_grace_does_not_outlast_the_runtimes_request_timeout() {
    let env = Env::new();
    let up = env.upstream(Duration::from_secs(2)).await;
    let proxy = Running::start(env.config(
        "startup-grace: 30s\nplugins:\n  guard: { policy: required }\n",
        "",
    ))
    .await;
    proxy.wait_serving(&env.proxy_socket).await;
    until("the proxy upstream", || up.plugins().len() == 1).await;

    let t0 = Instant::now();
    let err = up.run_pod_sandbox(&pod("p")).await.unwrap_err().to_string();
    let took = t0.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "answered after {took:?}: {err}"
    );
    assert!(err.contains("guard"), "{err}");
    assert_eq!(up.plugins()[0].strikes, 0, "answered, not timed out");

    let t0 = Instant::now();
    let err = up
        .create_container(&pod("p"), &ctr("p", "c"))
        .await
        .unwrap_err()
        .to_string();
    let took = t0.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "answered after {took:?}: {err}"
    );
    assert!(err.contains("guard"), "{err}");

    proxy.stop().await;
    up.stop().await;
}
