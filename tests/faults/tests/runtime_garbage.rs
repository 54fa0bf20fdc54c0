//! Runtime side under plugins that send garbage: random bytes before and
//! after registration, oversized and misaddressed multiplexer frames,
//! undecodable envelopes and payloads, answers for unknown streams. Each
//! ends only the offending connection (or is dropped), names the peer,
//! and the good plugin keeps serving (the set-up every runtime-side fault
//! test shares is in `common/bad_plugin.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::bad_plugin::*;
use common::*;
use nri_api::api::Event;
use nri_runtime::{Error, ErrorClass, FailurePolicy};
use nri_ttrpc::codec::MessageType;
use tokio::io::AsyncWriteExt;

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
    let (a, mut good) = env.start_with_good(env.builder()).await;
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
