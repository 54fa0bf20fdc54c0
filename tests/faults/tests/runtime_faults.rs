//! Runtime side under faulty and hostile plugins: a real `Adaptation`, one
//! well-behaved SDK plugin (`99-good`, last in order) and one bad plugin
//! (a raw wire-level peer or a Go plugin, index `10`, called first).
//!
//! For every fault: the good plugin keeps getting events and its adjustment
//! keeps reaching the runtime, the request gets the outcome the bad
//! plugin's failure policy says, the error names the plugin and the cause,
//! and nothing panics (panic hook counting every panic, also in tasks).
//! Timeouts run on paused tokio time; nothing sleeps to synchronise.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::time::Duration;

use common::*;
use nri_api::api::{
    self, ContainerAdjustment, CreateContainerResponse, Event, KeyValue, LinuxContainerAdjustment,
    LinuxCpu, LinuxMemory, LinuxResources, Mount, OptionalInt64, OptionalUInt64,
};
use nri_api::method;
use nri_runtime::{Error, ErrorClass, FailurePolicy, PluginFailure};
use nri_ttrpc::codec::MessageType;
use prost::Message;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const BAD: &str = "10-bad";

/// A named way for the bad plugin to answer.
type Case = (&'static str, fn() -> Act);

fn annotate(key: &str, value: &str) -> Act {
    let mut adjust = ContainerAdjustment::default();
    adjust.annotations.insert(key.into(), value.into());
    Act::ok(&CreateContainerResponse {
        adjust: Some(adjust),
        ..Default::default()
    })
}

/// A runtime with `policy` for `bad`, the good plugin and a raw bad plugin
/// (`10-bad`) acting as `on_create` says for CreateContainer.
async fn setup(
    env: &Env,
    builder: nri_runtime::Builder,
    on_create: impl Fn() -> Act + Send + Sync + 'static,
) -> (nri_runtime::Adaptation, GoodPlugin, RawPlugin) {
    let a = env.start(builder).await;
    let good = GoodPlugin::start(&env.socket);
    env.probe.active(1).await;
    let mut raw = RawPlugin::connect(&env.socket, RawOpts::default(), move |m, _| {
        (m == method::CREATE_CONTAINER).then(&on_create)
    })
    .await;
    raw.register("bad", "10").await.expect("registration");
    env.probe.active(2).await;
    (a, good, raw)
}

/// Asserts that `errors` holds exactly one error, of `BAD`, of this class.
fn one_error_of_bad(errors: &[nri_runtime::PluginError], class: ErrorClass) {
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].plugin, BAD);
    assert_eq!(errors[0].event, Event::CreateContainer);
    assert_eq!(errors[0].failure.class(), class, "{:?}", errors[0]);
    let text = errors[0].to_string();
    assert!(
        text.contains(BAD) && text.contains("CreateContainer"),
        "{text}"
    );
}

// ------------------------------------------------------------ Go plugin

#[tokio::test(flavor = "current_thread")]
async fn go_plugin_killed_mid_request_is_reported_and_others_keep_serving() {
    let guard = no_panics();
    let Some(bin) = go_bin("nri-go-plugin") else {
        return;
    };
    let env = Env::new();
    let a = env.start(env.builder()).await; // default policy: fail
    let mut good = GoodPlugin::start(&env.socket);
    env.probe.active(1).await;
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
    let a = env.start(b).await;
    let mut good = GoodPlugin::start(&env.socket);
    env.probe.active(1).await;
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
    let a = env.start(env.builder()).await;
    let mut good = GoodPlugin::start(&env.socket);
    env.probe.active(1).await;
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

// -------------------------------------------------------------- garbage

/// Deterministic pseudo-random bytes.
fn noise(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 11) as u8
        })
        .collect()
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn garbage_before_registration_is_dropped_with_a_log_naming_the_peer() {
    let guard = no_panics();
    let (logs, _sub) = LogCapture::install();
    let env = Env::new();
    let a = env.start(env.builder()).await;
    let mut good = GoodPlugin::start(&env.socket);
    env.probe.active(1).await;
    for seed in 1..=8u32 {
        let mut s = tokio::net::UnixStream::connect(&env.socket).await.unwrap();
        let _ = s.write_all(&noise(16 * 1024, seed)).await;
        // The runtime ends the connection: at once for a fatal mux header,
        // after the registration timeout otherwise.
        let mut buf = [0u8; 64];
        let r = tokio::time::timeout(WAIT, tokio::io::AsyncReadExt::read(&mut s, &mut buf)).await;
        assert!(
            matches!(r, Ok(Ok(0) | Err(_))),
            "seed {seed}: connection still open: {r:?}"
        );
    }
    assert_eq!(a.plugins().len(), 1);
    good.still_serves(&a, "c1").await;
    let failed = logs.lines_with(&["NRI plugin connection failed"]);
    assert!(failed.len() >= 8, "{}", logs.text());
    assert!(failed.iter().all(|l| l.contains("peer=")), "{failed:?}");
    good.stop().await;
    a.stop().await;
    guard.check();
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn garbage_on_the_trunk_after_registration_drops_only_that_plugin() {
    let guard = no_panics();
    let env = Env::new();
    let b = env.builder().failure_policy("bad", FailurePolicy::Ignore);
    // A mux frame on connection 1 whose content is no ttRPC at all
    // (message type byte 0).
    let (a, mut good, raw) = setup(&env, b, || {
        let mut junk = noise(64, 7);
        junk[..10].copy_from_slice(&[0, 0, 0, 54, 0, 0, 0, 1, 0, 0]);
        Act::Trunk(mux_frame(1, &junk))
    })
    .await;
    let out = a
        .create_container(&pod("p"), &ctr("p", "c1"))
        .await
        .unwrap();
    assert_eq!(out.errors.len(), 1, "{:?}", out.errors);
    assert_eq!(out.errors[0].plugin, BAD);
    assert_eq!(out.adjustment.annotations.get(GOOD_KEY).unwrap(), "c1");
    assert_eq!(good.next().await.1, "c1");
    raw.wait_closed().await;
    env.probe.active(1).await;
    good.still_serves(&a, "c2").await;
    good.stop().await;
    a.stop().await;
    guard.check();
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn oversized_mux_frame_ends_that_connection_only() {
    let guard = no_panics();
    let env = Env::new();
    let b = env.builder().failure_policy("bad", FailurePolicy::Required);
    let (a, mut good, raw) = setup(&env, b, || {
        let mut hdr = Vec::new();
        hdr.extend_from_slice(&1u32.to_be_bytes());
        hdr.extend_from_slice(&((nri_mux::MAX_PAYLOAD as u32) + 1).to_be_bytes());
        hdr.extend_from_slice(&[0u8; 32]);
        Act::Trunk(hdr)
    })
    .await;
    let err = a
        .create_container(&pod("p"), &ctr("p", "c1"))
        .await
        .expect_err("required: a lost connection fails the request");
    match &err {
        Error::PluginFailed { plugin, cause, .. } => {
            assert_eq!(plugin, BAD);
            assert_eq!(cause.class(), ErrorClass::Disconnected, "{cause:?}");
        }
        other => panic!("{other:?}"),
    }
    raw.wait_closed().await;
    env.probe.active(1).await;
    // A required plugin that is gone fails creations; other events flow.
    assert!(matches!(
        a.create_container(&pod("p"), &ctr("p", "c2")).await,
        Err(Error::RequiredPluginMissing { .. })
    ));
    let rep = a.start_container(&pod("p"), &ctr("p", "c1")).await.unwrap();
    assert!(rep.errors.is_empty());
    assert_eq!(good.next().await, (Event::StartContainer, "c1".into()));
    good.stop().await;
    a.stop().await;
    guard.check();
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn frames_for_unknown_connection_ids_are_dropped_and_the_plugin_goes_on() {
    let guard = no_panics();
    let env = Env::new();
    let (a, mut good, raw) = setup(&env, env.builder(), || {
        Act::Seq(vec![
            Act::Trunk(mux_frame(7, b"not for anyone")),
            Act::Trunk(mux_frame(0, b"reserved id")),
            Act::Trunk(mux_frame(u32::MAX, &[0xff; 100])),
            annotate("bad", "ok"),
        ])
    })
    .await;
    for c in ["c1", "c2"] {
        let out = a.create_container(&pod("p"), &ctr("p", c)).await.unwrap();
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        assert_eq!(out.adjustment.annotations.get("bad").unwrap(), "ok");
        assert_eq!(out.adjustment.annotations.get(GOOD_KEY).unwrap(), c);
        assert_eq!(good.next().await.1, c);
    }
    assert!(!raw.is_closed());
    assert_eq!(a.plugins().len(), 2);
    good.stop().await;
    a.stop().await;
    guard.check();
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn undecodable_envelope_or_payload_is_an_invalid_response_naming_the_plugin() {
    let guard = no_panics();
    // 1. The ttRPC envelope is not a Response; 2. the envelope is fine,
    // its payload is no CreateContainerResponse; 3. the payload decodes but
    // is truncated in the middle of a field.
    let cases: Vec<Case> = vec![
        ("bad envelope", || Act::Envelope(vec![0xff; 24])),
        ("bad payload", || {
            Act::Reply(vec![0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f])
        }),
        ("truncated payload", || {
            let mut v = annotate_bytes();
            v.truncate(v.len() - 3);
            Act::Reply(v)
        }),
    ];
    for (what, act) in cases {
        let env = Env::new();
        let b = env.builder().failure_policy("bad", FailurePolicy::Fail);
        let (a, mut good, _raw) = setup(&env, b, act).await;
        let err = a
            .create_container(&pod("p"), &ctr("p", "c1"))
            .await
            .expect_err(what);
        match &err {
            Error::PluginFailed { plugin, cause, .. } => {
                assert_eq!(plugin, BAD, "{what}");
                assert!(
                    matches!(
                        cause.class(),
                        ErrorClass::InvalidResponse | ErrorClass::Disconnected
                    ),
                    "{what}: {cause:?}"
                );
            }
            other => panic!("{what}: {other:?}"),
        }
        assert!(err.to_string().contains(BAD), "{what}: {err}");
        // Policy fail stops later plugins for this request only.
        let rep = a.start_container(&pod("p"), &ctr("p", "c1")).await.unwrap();
        assert!(rep.errors.is_empty(), "{what}: {:?}", rep.errors);
        assert_eq!(good.next().await, (Event::StartContainer, "c1".into()));
        good.stop().await;
        a.stop().await;
    }
    guard.check();
}

fn annotate_bytes() -> Vec<u8> {
    match annotate("k", "a fairly long value") {
        Act::Reply(v) => v,
        _ => unreachable!(),
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn replies_for_unknown_stream_ids_are_dropped() {
    let guard = no_panics();
    let env = Env::new();
    let forged = |sid: u32| {
        let Act::Reply(p) = annotate("bad", &format!("forged-{sid}")) else {
            unreachable!()
        };
        Act::Trunk(ttrpc_frames(
            1,
            sid,
            MessageType::Response,
            &response_envelope(None, p),
        ))
    };
    let (a, mut good, _raw) = setup(&env, env.builder(), move || {
        Act::Seq(vec![
            forged(999),
            forged(2),
            forged(0),
            forged(u32::MAX),
            annotate("bad", "real"),
        ])
    })
    .await;
    for c in ["c1", "c2", "c3"] {
        let out = a.create_container(&pod("p"), &ctr("p", c)).await.unwrap();
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        assert_eq!(out.adjustment.annotations.get("bad").unwrap(), "real");
        assert_eq!(good.next().await.1, c);
    }
    assert_eq!(a.plugins().len(), 2);
    good.stop().await;
    a.stop().await;
    guard.check();
}

// --------------------------------------------------------- registration

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn duplicate_registration_is_refused_and_the_first_plugin_is_unaffected() {
    let guard = no_panics();
    let env = Env::new();
    let (a, mut good, mut first) = setup(&env, env.builder(), || annotate("first", "yes")).await;

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
    let a = env.start(env.builder()).await;
    let mut good = GoodPlugin::start(&env.socket);
    env.probe.active(1).await;
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
    let a = env.start(env.builder()).await;
    let mut good = GoodPlugin::start(&env.socket);
    env.probe.active(1).await;
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
    let a = env.start(env.builder()).await;
    let mut good = GoodPlugin::start(&env.socket);
    env.probe.active(1).await;
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

// ---------------------------------------------------- invalid adjustments

fn adjust(f: impl FnOnce(&mut ContainerAdjustment)) -> Act {
    let mut adj = ContainerAdjustment::default();
    f(&mut adj);
    Act::ok(&CreateContainerResponse {
        adjust: Some(adj),
        ..Default::default()
    })
}

fn resources(f: impl FnOnce(&mut LinuxResources)) -> impl FnOnce(&mut ContainerAdjustment) {
    move |adj| {
        let mut r = LinuxResources::default();
        f(&mut r);
        adj.linux = Some(LinuxContainerAdjustment {
            resources: Some(r),
            ..Default::default()
        });
    }
}

/// The outcome of one CreateContainer where `10-bad` answers `act`, under
/// policy `fail`; the good plugin must have been called unless the request
/// failed.
async fn create_with(act: fn() -> Act) -> Result<nri_runtime::CreateContainerOutcome, Error> {
    let env = Env::new();
    let (a, mut good, _raw) = setup(&env, env.builder(), act).await;
    let r = a.create_container(&pod("p"), &ctr("p", "c1")).await;
    if r.is_ok() {
        assert_eq!(good.next().await.1, "c1");
    }
    // Whatever happened, the runtime serves the next request.
    let rep = a.start_container(&pod("p"), &ctr("p", "c1")).await.unwrap();
    assert!(rep.errors.is_empty());
    good.stop().await;
    a.stop().await;
    r
}

fn mount_without_destination() -> Act {
    adjust(|a| {
        a.mounts.push(Mount {
            destination: String::new(),
            source: "/tmp".into(),
            r#type: "bind".into(),
            options: vec!["rbind".into()],
        })
    })
}

fn env_without_name() -> Act {
    adjust(|a| {
        a.env.push(KeyValue {
            key: String::new(),
            value: "v".into(),
        })
    })
}

/// Structurally invalid adjustments (a mount without destination, an env
/// entry without a name) are refused as an unusable answer naming the
/// plugin (`PluginFailure::InvalidResponse`; policy `fail` fails the
/// request), and the runtime keeps serving.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn invalid_adjustments_are_refused_naming_the_plugin() {
    let guard = no_panics();
    let cases: Vec<Case> = vec![
        ("mount without destination", mount_without_destination),
        ("env without name", env_without_name),
    ];
    for (what, act) in cases {
        match create_with(act).await {
            Err(Error::PluginFailed { plugin, cause, .. }) => {
                assert_eq!(plugin, BAD, "{what}");
                assert!(cause.to_string().contains("empty"), "{what}: {cause}");
            }
            other => panic!("{what}: not refused: {other:?}"),
        }
    }
    guard.check();
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn negative_resource_limits_are_refused_naming_the_plugin() {
    let guard = no_panics();
    let cases: Vec<Case> = vec![
        ("negative memory limit", || {
            adjust(resources(|r| {
                r.memory = Some(LinuxMemory {
                    limit: Some(OptionalInt64 { value: -5 }),
                    ..Default::default()
                })
            }))
        }),
        ("absurd cpu shares and quota", || {
            adjust(resources(|r| {
                r.cpu = Some(LinuxCpu {
                    shares: Some(OptionalUInt64 { value: u64::MAX }),
                    quota: Some(OptionalInt64 { value: i64::MIN }),
                    period: Some(OptionalUInt64 { value: 0 }),
                    ..Default::default()
                })
            }))
        }),
    ];
    // Negative limits are refused naming the plugin; huge values that are
    // well-formed (u64::MAX shares) are the kernel's to clamp or refuse.
    for (what, act) in cases {
        match create_with(act).await {
            Err(Error::PluginFailed { plugin, .. }) => assert_eq!(plugin, BAD, "{what}"),
            other => panic!("{what}: not refused: {other:?}"),
        }
    }
    guard.check();
}

/// Plugin `10-one` sets env `SHARED` and mount `/data`; plugin `20-two`
/// then, depending on the container: sets `SHARED` too (conflict naming
/// both), removes both (upstream's rule: a later plugin's removal wins
/// silently and is recorded as its own in the owners, so validators and
/// the audit trail see it), or removes and sets (upstream's documented
/// override: allowed, `20-two` wins).
#[tokio::test(flavor = "current_thread", start_paused = true)]
#[allow(clippy::too_many_lines)]
async fn conflicting_changes_fail_naming_both_and_removals_are_owned() {
    let guard = no_panics();
    let env = Env::new();
    let a = env.start(env.builder()).await;
    let mut good = GoodPlugin::start(&env.socket);
    env.probe.active(1).await;
    let mut one = RawPlugin::connect(&env.socket, RawOpts::default(), |m, _| {
        (m == method::CREATE_CONTAINER).then(|| {
            adjust(|a| {
                a.env.push(KeyValue {
                    key: "SHARED".into(),
                    value: "one".into(),
                });
                a.mounts.push(Mount {
                    destination: "/data".into(),
                    source: "/one".into(),
                    r#type: "bind".into(),
                    options: vec!["rbind".into()],
                });
            })
        })
    })
    .await;
    one.register("one", "10").await.unwrap();
    let mut two = RawPlugin::connect(&env.socket, RawOpts::default(), |m, payload| {
        if m != method::CREATE_CONTAINER {
            return None;
        }
        let req = api::CreateContainerRequest::decode(payload.clone()).unwrap();
        let id = req.container.unwrap().id;
        Some(adjust(|a| {
            if id.contains("remove") {
                a.env.push(KeyValue {
                    key: "-SHARED".into(),
                    value: String::new(),
                });
                a.mounts.push(Mount {
                    destination: "-/data".into(),
                    ..Default::default()
                });
            }
            if id.contains("set") {
                a.env.push(KeyValue {
                    key: "SHARED".into(),
                    value: "two".into(),
                });
            }
        }))
    })
    .await;
    two.register("two", "20").await.unwrap();
    env.probe.active(3).await;

    let err = a
        .create_container(&pod("p"), &ctr("p", "set"))
        .await
        .expect_err("two plugins setting one env var");
    let text = err.to_string();
    assert!(
        text.contains("10-one") && text.contains("20-two") && text.contains("SHARED"),
        "the conflict names both plugins and the key: {text}"
    );
    assert!(
        matches!(&err, Error::PluginFailed { plugin, cause, .. }
            if plugin == "20-two" && cause.class() == ErrorClass::Conflict),
        "{err:?}"
    );

    let out = a
        .create_container(&pod("p"), &ctr("p", "remove"))
        .await
        .expect("a pure removal of another plugin's change is upstream's rule");
    assert!(!out.adjustment.env.iter().any(|kv| kv.key == "SHARED"));
    assert!(
        !out.adjustment
            .mounts
            .iter()
            .any(|m| m.destination == "/data")
    );
    let owners = &out.owners.owners["remove"];
    let owner = |field: api::Field, key: &str| owners.compound[&(field as i32)].owners[key].clone();
    assert_eq!(owner(api::Field::Env, "SHARED"), "-20-two");
    assert_eq!(owner(api::Field::Mounts, "/data"), "-20-two");
    assert_eq!(good.next().await.1, "remove");

    let out = a
        .create_container(&pod("p"), &ctr("p", "remove-set"))
        .await
        .expect("remove then set is upstream's override rule");
    assert!(
        out.adjustment
            .env
            .iter()
            .any(|kv| kv.key == "SHARED" && kv.value == "two")
    );
    assert_eq!(good.next().await.1, "remove-set");
    good.still_serves(&a, "c2").await;
    good.stop().await;
    a.stop().await;
    guard.check();
}
