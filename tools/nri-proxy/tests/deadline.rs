//! Budgets: the proxy answers its runtime within the runtime's request
//! timeout (from Configure) minus the safety margin, whatever the plugins
//! behind it do; a slow plugin fails its own call (a strike behind the
//! proxy), and the proxy keeps its registration upstream. Paused time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use nri_runtime::Adaptation;
use tokio::time::Instant;

/// Connects `10-hang` (adds HANG=1 after an hour) and `20-fast` (adds
/// FAST=1) behind the proxy, and waits until the proxy has both and the
/// upstream runtime has the proxy.
async fn hang_and_fast(env: &Env, proxy: &Running, up: &Adaptation) -> Behind {
    let mut behind = Behind::default();
    behind.connect(
        &env.proxy_socket,
        "10",
        "hang",
        TestPlugin::adding("HANG", "1").slow(Duration::from_secs(3600)),
    );
    behind.connect(
        &env.proxy_socket,
        "20",
        "fast",
        TestPlugin::adding("FAST", "1"),
    );
    until("two plugins", || {
        proxy.proxy.adaptation().plugins().len() == 2
    })
    .await;
    until("the proxy upstream", || up.plugins().len() == 1).await;
    behind
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_hanging_plugin_costs_its_own_call_and_the_proxy_answers_in_time() {
    let env = Env::new();
    // The runtime gives every plugin 2 s; the proxy keeps 250 ms.
    let up = env.upstream(Duration::from_secs(2)).await;
    // Behind the proxy the plugins' own timeout (5 s) is longer than the
    // budget: the budget cuts the hanging plugin's call.
    let proxy = Running::start(env.config("request-timeout: 5s\n", "")).await;
    proxy.wait_serving(&env.proxy_socket).await;
    let behind = hang_and_fast(&env, &proxy, &up).await;

    let t0 = Instant::now();
    let out = up
        .create_container(&pod("p"), &ctr("p", "c"))
        .await
        .unwrap();
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(1750) && took < Duration::from_secs(2),
        "answered within the runtime's timeout minus the margin: {took:?}"
    );
    assert!(
        out.errors.is_empty(),
        "upstream saw no failure: {:?}",
        out.errors
    );
    // The fast plugin came after the deadline: not called, no strike.
    assert!(env_of(&out.adjustment).is_empty());
    let up_plugins = up.plugins();
    assert_eq!(up_plugins[0].strikes, 0, "the proxy has no strike upstream");
    let strikes: Vec<(String, u32)> = proxy
        .proxy
        .adaptation()
        .plugins()
        .iter()
        .map(|p| (p.id.to_string(), p.strikes))
        .collect();
    assert_eq!(
        strikes,
        [("10-hang".to_owned(), 1), ("20-fast".to_owned(), 0)]
    );
    // The strike is in the proxy's metrics, per plugin.
    assert_eq!(
        metric(
            &proxy.proxy,
            r#"nri_plugin_strikes_total{plugin="10-hang",operation="CreateContainer"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(
            &proxy.proxy,
            r#"nri_plugin_consecutive_strikes{plugin="10-hang"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(
            &proxy.proxy,
            r#"nri_plugin_consecutive_strikes{plugin="20-fast"}"#
        ),
        Some(0.0),
        "no strike: the gauge is at 0 from the plugin's connection on"
    );

    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_plugin_timeout_under_the_budget_leaves_time_for_the_others() {
    let env = Env::new();
    let up = env.upstream(Duration::from_secs(2)).await;
    let proxy = Running::start(env.config(
        "plugins:\n  hang:\n    request-timeout: 500ms\n",
        "  safety-margin: 100ms\n",
    ))
    .await;
    proxy.wait_serving(&env.proxy_socket).await;
    let behind = hang_and_fast(&env, &proxy, &up).await;

    let t0 = Instant::now();
    let out = up
        .create_container(&pod("p"), &ctr("p", "c"))
        .await
        .unwrap();
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_millis(600),
        "{took:?}"
    );
    assert_eq!(env_of(&out.adjustment), ["FAST=1"]);

    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_required_plugin_that_hangs_fails_the_request_in_time_naming_it() {
    let env = Env::new();
    let up = env.upstream(Duration::from_secs(2)).await;
    let proxy = Running::start(env.config(
        "request-timeout: 5s\nplugins:\n  guard: { policy: required }\n",
        "",
    ))
    .await;
    proxy.wait_serving(&env.proxy_socket).await;
    let mut behind = Behind::default();
    behind.connect(
        &env.proxy_socket,
        "10",
        "guard",
        TestPlugin::adding("G", "1").slow(Duration::from_secs(3600)),
    );
    until("the guard", || {
        proxy.proxy.adaptation().plugins().len() == 1
    })
    .await;
    until("the proxy upstream", || up.plugins().len() == 1).await;

    let t0 = Instant::now();
    let err = up
        .create_container(&pod("p"), &ctr("p", "c"))
        .await
        .unwrap_err()
        .to_string();
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert!(
        err.contains("10-guard") && err.contains("no answer within"),
        "{err}"
    );
    assert_eq!(
        up.plugins()[0].strikes,
        0,
        "an error answer is not a strike"
    );

    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}
