//! A plugin's own failure policy (`ConfigureResponse.failure_policy`, NRI
//! v0.12.4): honoured where the operator's configuration says nothing for
//! that plugin; an explicit entry wins; a plugin cannot make itself
//! required; an absent declaration is not an empty one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use nri_runtime::{Error, FailurePolicy, PluginFailure, PluginPolicy};

/// Subscribed to CreateContainer only (a successful call of another
/// event would reset the strikes), which hangs.
fn slow_create(p: FakePlugin) -> FakePlugin {
    p.events(nri_api::EventMask::EMPTY.with(nri_api::api::Event::CreateContainer))
        .delay("CreateContainer", Duration::from_secs(60))
}

async fn create(a: &nri_runtime::Adaptation, c: &str) -> Result<Vec<PluginFailure>, Error> {
    a.create_container(&pod("p"), &ctr("p", c))
        .await
        .map(|o| o.errors.into_iter().map(|e| e.failure).collect())
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn fail_request_makes_a_timeout_fail_the_request() {
    let env = TestEnv::new();
    let a = env.start(env.builder().strike_limit(0)).await;
    let _c = slow_create(FakePlugin::new("10", "strict").declare_policy(true, false))
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    let info = &a.plugins()[0];
    assert_eq!(
        info.declared_policy,
        Some(nri_api::api::FailurePolicy {
            fail_request: true,
            keep_connected: false
        })
    );
    let err = create(&a, "c").await.unwrap_err();
    assert!(
        matches!(&err, Error::PluginFailed { plugin, cause: PluginFailure::Timeout { .. }, .. } if plugin == "10-strict"),
        "{err:?}"
    );
    a.stop().await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn without_a_declaration_a_timeout_is_skipped_under_the_default_policy() {
    let env = TestEnv::new();
    let a = env.start(env.builder().strike_limit(0)).await;
    let _c = slow_create(FakePlugin::new("10", "plain"))
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    assert_eq!(a.plugins()[0].declared_policy, None);
    let errs = create(&a, "c").await.unwrap();
    assert!(matches!(errs[..], [PluginFailure::Timeout { .. }]));
    a.stop().await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn keep_connected_keeps_a_plugin_that_times_out() {
    let env = TestEnv::new();
    let a = env.start(env.builder().strike_limit(2)).await;
    let _k = slow_create(FakePlugin::new("10", "keep").declare_policy(false, true))
        .connect(&env.socket)
        .await
        .unwrap();
    let _d = slow_create(FakePlugin::new("20", "drop").declare_policy(false, false))
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 2).await;
    let limits: Vec<_> = a.plugins().iter().map(|p| p.strike_limit).collect();
    assert_eq!(limits, [0, 2]);
    for i in 0..5 {
        create(&a, &format!("c{i}"))
            .await
            .expect("fail_request unset");
    }
    wait_active_exact(&a, 1).await;
    let left: Vec<_> = a.plugins().iter().map(|p| p.id.to_string()).collect();
    assert_eq!(
        left,
        ["10-keep"],
        "only the plugin without keep_connected was dropped"
    );
    assert_eq!(a.plugins()[0].strikes, 5);
    a.stop().await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn an_explicit_entry_of_the_operator_wins() {
    let env = TestEnv::new();
    let a = env
        .start(
            env.builder()
                .failure_policy("strict", FailurePolicy::Ignore)
                .plugin_policy("10-keep", PluginPolicy::default().with_strike_limit(1))
                // An entry that sets only a timeout says nothing about the
                // failure policy: the declaration applies.
                .plugin_policy(
                    "timed",
                    PluginPolicy::default().with_request_timeout(Duration::from_secs(1)),
                ),
        )
        .await;
    let _s = slow_create(FakePlugin::new("20", "strict").declare_policy(true, true))
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    let errs = create(&a, "c").await.expect("the entry says ignore");
    assert!(matches!(errs[..], [PluginFailure::Timeout { .. }]));
    let _s = slow_create(FakePlugin::new("10", "keep").declare_policy(false, true))
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 2).await;
    assert_eq!(
        a.plugins()[0].strike_limit,
        1,
        "the entry's strike limit wins"
    );
    assert_eq!(a.plugins()[1].strike_limit, 0, "keep_connected");
    a.stop().await;

    let env = TestEnv::new();
    let a = env
        .start(env.builder().plugin_policy(
            "timed",
            PluginPolicy::default().with_request_timeout(Duration::from_secs(1)),
        ))
        .await;
    let _t = slow_create(FakePlugin::new("30", "timed").declare_policy(true, false))
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    let t0 = tokio::time::Instant::now();
    let err = create(&a, "c").await.unwrap_err();
    assert!(
        t0.elapsed() < Duration::from_millis(1100),
        "the entry's timeout"
    );
    assert!(matches!(err, Error::PluginFailed { .. }), "{err:?}");
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_cannot_declare_itself_required() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let c = FakePlugin::new("10", "strict")
        .declare_policy(true, true)
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    c.crash();
    wait_active_exact(&a, 0).await;
    a.run_pod_sandbox(&pod("p")).await.expect("not required");
    a.create_container(&pod("p"), &ctr("p", "c"))
        .await
        .expect("not required");
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_empty_declaration_is_not_an_absent_one() {
    // The operator's default is `ignore`. A plugin that declares nothing
    // gets it; one that declares an empty policy asked for upstream's
    // rules, under which an error the plugin returns fails the request.
    let env = TestEnv::new();
    let a = env
        .start(
            env.builder()
                .default_policy(PluginPolicy::new(FailurePolicy::Ignore)),
        )
        .await;
    let _n = FakePlugin::new("10", "none")
        .fail("CreateContainer")
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    let errs = create(&a, "c1").await.expect("default ignore");
    assert_eq!(errs.len(), 1);
    let _e = FakePlugin::new("20", "empty")
        .fail("CreateContainer")
        .declare_policy(false, false)
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 2).await;
    let err = create(&a, "c2").await.unwrap_err();
    assert!(
        matches!(&err, Error::PluginFailed { plugin, .. } if plugin == "20-empty"),
        "{err:?}"
    );
    a.stop().await;
}
