//! Runtime side under plugins that register wrongly: a duplicate name,
//! out-of-range indices and bad names, invalid event masks, an
//! undecodable Configure answer. Each is refused naming the plugin, and
//! the plugins already registered are unaffected.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::bad_plugin::*;
use common::*;
use nri_api::method;

// --------------------------------------------------------- registration

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn duplicate_registration_is_refused_and_the_first_plugin_is_unaffected() {
    let guard = no_panics();
    let env = Env::new();
    // Upgrades without a gap off for it: a second instance is refused
    // (with them on, it would take over; see nri-runtime's tests/upgrade.rs).
    let no_upgrades = nri_runtime::PluginPolicy::default().with_supersede(false);
    let builder = env.builder().plugin_policy("bad", no_upgrades);
    let (a, mut good, mut first) = setup(&env, builder, || annotate("first", "yes")).await;

    // Same name and index on a second connection.
    let mut second = RawPlugin::connect(&env.socket, RawOpts::default(), |_, _| None).await;
    let err = second.register("bad", "10").await.unwrap_err();
    assert!(
        err.message.contains("10-bad") && err.message.contains("already"),
        "{err:?}"
    );
    second.wait_closed().await;
    // Same connection registering twice.
    let again = first.register("bad", "10").await;
    assert!(
        again.is_err(),
        "second RegisterPlugin on one connection: {again:?}"
    );
    // Another name on the first connection: no identity switch either.
    let switch = first.register("other", "20").await;
    assert!(switch.is_err(), "{switch:?}");

    let out = a
        .create_container(&pod("p"), &ctr("p", "c1"))
        .await
        .unwrap();
    assert_eq!(out.adjustment.annotations.get("first").unwrap(), "yes");
    assert_eq!(good.next().await.1, "c1");
    let names: Vec<String> = a.plugins().iter().map(|p| p.id.to_string()).collect();
    assert_eq!(names, ["10-bad", "99-good"]);
    good.stop().await;
    a.stop().await;
    guard.check();
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn out_of_range_indices_and_bad_names_are_refused() {
    let guard = no_panics();
    let (logs, _sub) = LogCapture::install();
    let env = Env::new();
    let (a, mut good) = env.start_with_good(env.builder()).await;
    for (idx, name) in [
        ("100", "x"),
        ("a1", "x"),
        ("", "x"),
        ("1", "x"),
        ("-1", "x"),
        ("１２", "x"),
        ("10", ""),
        ("10", "../etc"),
        ("10", "a b"),
    ] {
        let mut raw = RawPlugin::connect(&env.socket, RawOpts::default(), |_, _| None).await;
        let err = raw.register(name, idx).await.unwrap_err();
        assert_eq!(
            err.code(),
            nri_ttrpc::Code::InvalidArgument,
            "{idx:?} {name:?}: {err:?}"
        );
        raw.wait_closed().await;
        let refusal = logs.lines_with(&[
            "refusing a message from an NRI peer",
            "kind=\"registration\"",
            &format!("index {idx:?}, name {name:?}"),
        ]);
        assert!(!refusal.is_empty(), "{idx:?} {name:?}: {}", logs.text());
    }
    assert_eq!(a.plugins().len(), 1);
    good.still_serves(&a, "c1").await;
    good.stop().await;
    a.stop().await;
    guard.check();
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn invalid_event_masks_are_refused_with_an_error_naming_plugin_and_bits() {
    let guard = no_panics();
    let (logs, _sub) = LogCapture::install();
    let env = Env::new();
    let (a, mut good) = env.start_with_good(env.builder()).await;
    for (i, mask) in [1 << 20, -1, i32::MIN, 1 << 14].into_iter().enumerate() {
        let name = format!("mask{i}");
        let mut raw = RawPlugin::connect(&env.socket, RawOpts { events: mask }, |_, _| None).await;
        // Registration itself is answered before Configure.
        raw.register(&name, "10").await.unwrap();
        raw.wait_closed().await;
        let lines = logs.lines_with(&[&format!("10-{name}"), "unknown events"]);
        assert!(!lines.is_empty(), "mask {mask:#x}: {}", logs.text());
        assert_eq!(a.plugins().len(), 1);
    }
    good.still_serves(&a, "c1").await;
    good.stop().await;
    a.stop().await;
    guard.check();
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn undecodable_configure_answer_fails_registration_only() {
    let guard = no_panics();
    let env = Env::new();
    let (a, mut good) = env.start_with_good(env.builder()).await;
    let mut raw = RawPlugin::connect(&env.socket, RawOpts::default(), |m, _| {
        (m == method::CONFIGURE).then(|| Act::Reply(vec![0x08, 0xff, 0xff]))
    })
    .await;
    raw.register("confused", "10").await.unwrap();
    raw.wait_closed().await;
    assert_eq!(a.plugins().len(), 1);
    good.still_serves(&a, "c1").await;
    good.stop().await;
    a.stop().await;
    guard.check();
}
