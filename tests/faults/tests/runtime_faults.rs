//! Runtime side under faulty and hostile plugins: a real `Adaptation`, one
//! well-behaved SDK plugin (`99-good`, last in order) and one bad plugin
//! (a raw wire-level peer or a Go plugin, index `10`, called first).
//!
//! For every fault: the good plugin keeps getting events and its adjustment
//! keeps reaching the runtime, the request gets the outcome the bad
//! plugin's failure policy says, the error names the plugin and the cause,
//! and nothing panics (panic hook counting every panic, also in tasks).
//! Timeouts run on paused tokio time; nothing sleeps to synchronise.
//!
//! This file: a Go plugin killed mid-request, timeouts and hangs,
//! reconnect loops. The other runtime-side fault classes have files of
//! their own: `runtime_garbage.rs`, `runtime_registration.rs`,
//! `runtime_adjustments.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::time::Duration;

use common::bad_plugin::*;
use common::*;
use nri_api::api::{self, Event};
use nri_api::method;
use nri_runtime::{Error, ErrorClass, FailurePolicy, PluginFailure};
use prost::Message;
use tokio::io::{AsyncBufReadExt, BufReader};

// ------------------------------------------------------------ Go plugin

#[tokio::test(flavor = "current_thread")]
async fn go_plugin_killed_mid_request_is_reported_and_others_keep_serving() {
    let guard = no_panics();
    let Some(bin) = nri_test_support::go_peer("nri-go-plugin") else {
        return;
    };
    let env = Env::new();
    // The default policy: fail.
    let (a, mut good) = env.start_with_good(env.builder()).await;
    let mut go = tokio::process::Command::new(bin)
        .args(["--socket"])
        .arg(&env.socket)
        .args([
            "--name",
            "victim",
            "--idx",
            "10",
            "--events",
            "createcontainer,startcontainer",
            "--delay-event",
            "CreateContainer=60s",
        ])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(go.stdout.take().unwrap()).lines();
    env.probe.active(2).await;

    let (p, c1) = (pod("p"), ctr("p", "c1"));
    let create = a.create_container(&p, &c1);
    tokio::pin!(create);
    // Wait (while driving the request) until Go prints that it got the
    // CreateContainer, then SIGKILL it while it sleeps on it.
    loop {
        tokio::select! {
            r = &mut create => panic!("finished before the kill: {r:?}"),
            l = lines.next_line() => {
                let l = l.unwrap().expect("go plugin output");
                if l.contains("\"CreateContainer\"") { break; }
            }
        }
    }
    go.start_kill().unwrap();
    let out = tokio::time::timeout(WAIT, create)
        .await
        .expect("request bounded after the kill")
        .expect("policy fail: a lost connection is reported, not fatal");
    assert_eq!(out.errors.len(), 1, "{:?}", out.errors);
    assert_eq!(out.errors[0].plugin, "10-victim");
    assert!(
        matches!(
            out.errors[0].failure,
            PluginFailure::Disconnected { .. } | PluginFailure::Timeout { .. }
        ),
        "{:?}",
        out.errors[0]
    );
    assert_eq!(
        out.errors[0].failure.class(),
        ErrorClass::Disconnected,
        "{}",
        out.errors[0]
    );
    // The good plugin (after the victim in order) still got the event.
    assert_eq!(out.adjustment.annotations.get(GOOD_KEY).unwrap(), "c1");
    assert_eq!(good.next().await, (Event::CreateContainer, "c1".into()));
    go.wait().await.unwrap();
    env.probe.active(1).await;
    assert_eq!(a.plugins().len(), 1);
    good.still_serves(&a, "c2").await;
    good.stop().await;
    a.stop().await;
    guard.check();
}

// ------------------------------------------------------- timeouts, hangs

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn silent_plugin_times_out_per_policy_and_is_dropped_after_strikes() {
    let guard = no_panics();
    let env = Env::new();
    let b = env
        .builder()
        .request_timeout(Duration::from_secs(2))
        .strike_limit(2)
        .failure_policy("bad", FailurePolicy::Ignore);
    let (a, mut good, raw) = setup(&env, b, || Act::Hang).await;
    for (i, c) in ["c1", "c2"].into_iter().enumerate() {
        let t0 = tokio::time::Instant::now();
        let out = a.create_container(&pod("p"), &ctr("p", c)).await.unwrap();
        assert!(t0.elapsed() <= Duration::from_secs(2) + Duration::from_millis(50));
        one_error_of_bad(&out.errors, ErrorClass::Timeout);
        assert!(
            out.errors[0].to_string().contains("no answer within 2s"),
            "{}",
            out.errors[0]
        );
        // Same request: the good plugin, after the silent one, adjusted.
        assert_eq!(out.adjustment.annotations.get(GOOD_KEY).unwrap(), c);
        assert_eq!(good.next().await, (Event::CreateContainer, c.into()));
        if i == 0 {
            assert_eq!(a.plugins().len(), 2, "not dropped on the first miss");
        }
    }
    // Second strike: the runtime closes the connection.
    raw.wait_closed().await;
    env.probe.active(1).await;
    good.still_serves(&a, "c3").await;
    good.stop().await;
    a.stop().await;
    guard.check();
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn slow_plugin_just_under_and_just_over_the_timeout() {
    let guard = no_panics();
    let env = Env::new();
    let b = env
        .builder()
        .request_timeout(Duration::from_secs(2))
        .strike_limit(0)
        .failure_policy("bad", FailurePolicy::Required);
    // Container ids choose the delay: "under-*" 1999 ms, "over-*" 2001 ms.
    let (a, mut good) = env.start_with_good(b).await;
    let mut raw = RawPlugin::connect(&env.socket, RawOpts::default(), |m, payload| {
        if m != method::CREATE_CONTAINER {
            return None;
        }
        let req = api::CreateContainerRequest::decode(payload.clone()).unwrap();
        let id = req.container.unwrap().id;
        let ms = if id.starts_with("under") { 1999 } else { 2001 };
        Some(Act::Delay(
            Duration::from_millis(ms),
            Box::new(annotate("slow", &id)),
        ))
    })
    .await;
    raw.register("bad", "10").await.unwrap();
    env.probe.active(2).await;

    let out = a
        .create_container(&pod("p"), &ctr("p", "under-1"))
        .await
        .expect("answer 1 ms before the deadline is taken");
    assert!(out.errors.is_empty());
    assert_eq!(out.adjustment.annotations.get("slow").unwrap(), "under-1");
    assert_eq!(good.next().await.1, "under-1");

    let err = a
        .create_container(&pod("p"), &ctr("p", "over-1"))
        .await
        .expect_err("policy required: a timeout fails the request");
    match &err {
        Error::PluginFailed {
            plugin,
            event,
            cause: PluginFailure::Timeout { timeout },
        } => {
            assert_eq!(plugin, BAD);
            assert_eq!(event, "CreateContainer");
            assert_eq!(*timeout, Duration::from_secs(2));
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains(BAD), "{err}");
    // The late answer for "over-1" arrives during the next call: it must be
    // dropped, not taken as the answer to "under-2".
    let out = a
        .create_container(&pod("p"), &ctr("p", "under-2"))
        .await
        .unwrap();
    assert_eq!(out.adjustment.annotations.get("slow").unwrap(), "under-2");
    assert_eq!(a.plugins().len(), 2, "strike limit 0: never dropped");
    assert_eq!(good.next().await.1, "under-2");
    good.stop().await;
    a.stop().await;
    guard.check();
}

// ----------------------------------------------------------- reconnects

#[tokio::test(flavor = "current_thread")]
async fn plugin_closing_and_reconnecting_in_a_loop() {
    let guard = no_panics();
    let env = Env::new();
    let (a, mut good) = env.start_with_good(env.builder()).await;
    for i in 0..40 {
        let mut raw = RawPlugin::connect(&env.socket, RawOpts::default(), |_, _| None).await;
        raw.register("flappy", "10").await.unwrap();
        env.probe.active(2).await;
        let id = format!("c{i}");
        let out = a.create_container(&pod("p"), &ctr("p", &id)).await.unwrap();
        assert!(out.errors.is_empty());
        assert_eq!(good.next().await, (Event::CreateContainer, id));
        assert!(raw.seen().contains(&method::CREATE_CONTAINER.to_owned()));
        if i % 2 == 1 {
            // Half of the time a clean close: write side shut down first.
            raw.shutdown().await;
        }
        drop(raw);
        env.probe.active(1).await;
        // The name is free again at once (the next iteration registers it).
    }
    assert_eq!(a.plugins().len(), 1);
    good.still_serves(&a, "last").await;
    good.stop().await;
    a.stop().await;
    guard.check();
}
