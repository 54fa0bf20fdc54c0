//! WebAssembly plugins from the plugin directory, with guests written in
//! WAT: a WASM plugin is one more plugin for ordering, merging, owners and
//! the failure policy; a guest that traps, exits, runs away, allocates
//! without bound or breaks the ABI fails that call under its policy and is
//! closed, and the other plugins carry on.
#![cfg(feature = "wasm")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod wasm_util;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use nri_api::EventMask;
use nri_api::api::{ContainerAdjustment, CreateContainerResponse, Event, KeyValue};
use nri_runtime::wasm::{WasmError, WasmLimits, check_module};
use nri_runtime::{
    Adaptation, Builder, Error, ErrorClass, FailurePolicy, PluginFailure, PluginOrigin,
    PluginPolicy,
};
use wasm_util::{Wat, Work};

const CREATE: &str = "plugin_create_container";

fn create_events() -> EventMask {
    let mut m = EventMask::EMPTY;
    m.set(Event::RunPodSandbox);
    m.set(Event::CreateContainer);
    m
}

/// A guest whose CreateContainer sets env `key=value`.
fn setter(key: &str, value: &str) -> Wat {
    let resp = CreateContainerResponse {
        adjust: Some(ContainerAdjustment {
            env: vec![KeyValue {
                key: key.into(),
                value: value.into(),
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    Wat::new(create_events()).answer(CREATE, &resp)
}

fn builder(env: &TestEnv) -> Builder {
    env.builder().disable_connections(true)
}

async fn start(env: &TestEnv, guests: &[(&str, Wat)], b: Builder) -> Adaptation {
    let dir = env.dir.path().join("plugins");
    for (id, w) in guests {
        w.install(&dir, id);
    }
    env.start(b).await
}

fn env_of(out: &ContainerAdjustment) -> Vec<(String, String)> {
    out.env
        .iter()
        .map(|kv| (kv.key.clone(), kv.value.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn wasm_plugin_is_loaded_configured_and_adjusts() {
    let env = TestEnv::new();
    let a = start(&env, &[("10-wat", setter("WASM", "1"))], builder(&env)).await;
    let plugins = a.plugins();
    assert_eq!(plugins.len(), 1);
    assert_eq!(plugins[0].id.to_string(), "10-wat");
    assert_eq!(plugins[0].origin, PluginOrigin::Wasm);
    assert_eq!(plugins[0].events, create_events());
    a.run_pod_sandbox(&pod("p")).await.unwrap();
    let out = a.create_container(&pod("p"), &ctr("p", "c")).await.unwrap();
    assert_eq!(env_of(&out.adjustment), [("WASM".into(), "1".into())]);
    assert!(out.errors.is_empty());
    // An event it did not subscribe to is not delivered (its export would
    // answer, but nothing must reach it): the plugin is still there.
    a.start_container(&pod("p"), &ctr("p", "c")).await.unwrap();
    assert_eq!(a.plugins().len(), 1);
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_wasm_plugins_setting_one_field_conflict_by_name() {
    let env = TestEnv::new();
    let a = start(
        &env,
        &[("10-a", setter("K", "a")), ("20-b", setter("K", "b"))],
        builder(&env),
    )
    .await;
    let err = a
        .create_container(&pod("p"), &ctr("p", "c"))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("10-a") && text.contains("20-b"), "{text}");
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn error_string_fails_the_event_and_keeps_the_plugin() {
    let env = TestEnv::new();
    let guest = Wat::new(create_events()).error(CREATE, "no containers today");
    let a = start(&env, &[("10-refuser", guest)], builder(&env)).await;
    for _ in 0..2 {
        let err = a
            .create_container(&pod("p"), &ctr("p", "c"))
            .await
            .unwrap_err();
        match err {
            Error::PluginFailed { plugin, cause, .. } => {
                assert_eq!(plugin, "10-refuser");
                assert_eq!(
                    cause,
                    PluginFailure::Status {
                        code: 2,
                        message: "no containers today".into()
                    }
                );
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(a.plugins().len(), 1, "an error answer does not close it");
    a.stop().await;
}

/// The policy of `bad` in [`hostile`]: ignore its failures, time its
/// requests out after `timeout`.
fn bad_timeout(b: Builder, timeout: Duration) -> Builder {
    b.plugin_policy(
        "bad",
        PluginPolicy::new(FailurePolicy::Ignore).with_request_timeout(timeout),
    )
}

/// Starts `10-bad` (policy ignore, with `bad_policy` applied) beside
/// `20-good`, calls CreateContainer once, and returns the failure of
/// `10-bad`; checks that 20-good's change was applied, that 10-bad is
/// closed, and that the next creation only involves 20-good.
async fn hostile(bad: Wat, b: impl FnOnce(Builder) -> Builder) -> PluginFailure {
    hostile_timed(bad, b).await.0
}

/// [`hostile`], also returning how long the first CreateContainer took.
async fn hostile_timed(bad: Wat, b: impl FnOnce(Builder) -> Builder) -> (PluginFailure, Duration) {
    let env = TestEnv::new();
    let policy = PluginPolicy::new(FailurePolicy::Ignore);
    let builder = b(builder(&env).plugin_policy("bad", policy));
    let a = start(
        &env,
        &[("10-bad", bad), ("20-good", setter("GOOD", "yes"))],
        builder,
    )
    .await;
    assert_eq!(a.plugins().len(), 2, "both loaded");
    let started = Instant::now();
    let out = a
        .create_container(&pod("p"), &ctr("p", "first"))
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(env_of(&out.adjustment), [("GOOD".into(), "yes".into())]);
    assert_eq!(out.errors.len(), 1, "{:?}", out.errors);
    assert_eq!(out.errors[0].plugin, "10-bad");
    let failure = out.errors[0].failure.clone();
    wait_active_exact(&a, 1).await;
    assert_eq!(a.plugins()[0].id.to_string(), "20-good");
    // Once its supervisor has dropped it (a moment after it closed), the
    // closed plugin is no longer called at all.
    let mut clean = false;
    for i in 0..200 {
        let out = a
            .create_container(&pod("p"), &ctr("p", &format!("c{i}")))
            .await
            .unwrap();
        assert_eq!(env_of(&out.adjustment), [("GOOD".into(), "yes".into())]);
        if out.errors.is_empty() {
            clean = true;
            break;
        }
        assert!(
            matches!(&out.errors[0].failure, PluginFailure::Disconnected { .. }),
            "{:?}",
            out.errors
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(clean, "the closed plugin was never dropped");
    a.stop().await;
    (failure, took)
}

#[tokio::test(flavor = "multi_thread")]
async fn trap_closes_the_plugin() {
    let f = hostile(
        Wat::new(create_events()).with_body(CREATE, "unreachable"),
        |b| b,
    )
    .await;
    match f {
        PluginFailure::Disconnected { reason } => assert!(reason.contains("trap"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn proc_exit_closes_the_plugin() {
    let guest = Wat::new(create_events())
        .import(r#"(import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))"#)
        .with_body(CREATE, "(call $exit (i32.const 3)) i64.const 0");
    match hostile(guest, |b| b).await {
        PluginFailure::Disconnected { reason } => {
            assert!(reason.contains("exited with status 3"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn runaway_loop_hits_the_timeout() {
    let guest = Wat::new(create_events()).work(CREATE, Work::Forever);
    let started = Instant::now();
    let f = hostile(guest, |b| bad_timeout(b, Duration::from_millis(300))).await;
    assert_eq!(
        f,
        PluginFailure::Timeout {
            timeout: Duration::from_millis(300)
        }
    );
    assert!(started.elapsed() < Duration::from_secs(20));
}

/// A guest that sleeps in `poll_oneoff` past its request's deadline, then
/// would answer, has timed out: the sleep is cut at the deadline and the
/// call fails as a timeout (in the metrics too), within about the
/// timeout; the plugin is closed and, under policy ignore, the next
/// creations go on without it.
#[tokio::test(flavor = "multi_thread")]
async fn sleeping_past_the_deadline_is_a_timeout() {
    let timeout = Duration::from_millis(300);
    let guest = Wat::new(create_events()).work(CREATE, Work::Sleep(Duration::from_secs(60)));
    let m = Arc::new(Recording::default());
    let (f, took) = hostile_timed(guest, |b| bad_timeout(b, timeout).metrics(m.clone())).await;
    assert_eq!(f, PluginFailure::Timeout { timeout });
    assert!(took >= timeout, "answered before the deadline: {took:?}");
    assert!(took < Duration::from_secs(3), "answered late: {took:?}");
    // The timed-out call, then at most the creations that found the
    // plugin closed before its supervisor dropped it (see `hostile_timed`).
    let calls = m.results("10-bad", "CreateContainer");
    assert_eq!(calls.first(), Some(&Err(ErrorClass::Timeout)), "{calls:?}");
    assert!(
        calls[1..]
            .iter()
            .all(|c| *c == Err(ErrorClass::Disconnected)),
        "{calls:?}"
    );
}

/// Under policy required, a guest whose sleep reaches the deadline fails
/// the creation with a timeout; closed, it is then missing, which fails
/// the next creations.
#[tokio::test(flavor = "multi_thread")]
async fn sleeping_past_the_deadline_fails_a_required_plugin() {
    let timeout = Duration::from_millis(300);
    let env = TestEnv::new();
    let policy = PluginPolicy::new(FailurePolicy::Required).with_request_timeout(timeout);
    let guest = Wat::new(create_events()).work(CREATE, Work::Sleep(Duration::from_secs(60)));
    let a = start(
        &env,
        &[("10-bad", guest)],
        builder(&env).plugin_policy("bad", policy),
    )
    .await;
    let err = a
        .create_container(&pod("p"), &ctr("p", "first"))
        .await
        .unwrap_err();
    match err {
        Error::PluginFailed { plugin, cause, .. } => {
            assert_eq!(plugin, "10-bad");
            assert_eq!(cause, PluginFailure::Timeout { timeout });
        }
        other => panic!("{other:?}"),
    }
    wait_active_exact(&a, 0).await;
    let err = a
        .create_container(&pod("p"), &ctr("p", "second"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::RequiredPluginMissing { plugin, .. } if plugin.contains("bad")),
        "{err:?}"
    );
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pointer_outside_memory_is_refused() {
    let v = wasm_util::packed(0xffff_0000, 16, false);
    let guest = Wat::new(create_events()).with_body(CREATE, &format!("i64.const {v}"));
    match hostile(guest, |b| b).await {
        PluginFailure::InvalidResponse { message } => {
            assert!(message.contains("outside the guest's"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn huge_size_is_refused() {
    let v = wasm_util::packed(1024, 0x7fff_ffff, false);
    let guest = Wat::new(create_events()).with_body(CREATE, &format!("i64.const {v}"));
    match hostile(guest, |b| b).await {
        PluginFailure::InvalidResponse { message } => {
            assert!(message.contains("over the limit"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn unbounded_allocation_stops_at_the_memory_cap() {
    let guest = Wat::new(create_events()).with_body(
        CREATE,
        "(loop (br_if 0 (i32.ne (memory.grow (i32.const 1)) (i32.const -1)))) i64.const 0",
    );
    let f = hostile(guest, |b| {
        b.wasm_limits(WasmLimits::default().with_max_memory(1 << 20))
    })
    .await;
    match f {
        PluginFailure::Disconnected { reason } => assert!(reason.contains("trap"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_import_is_refused_and_the_others_start() {
    let bad = Wat::new(create_events()).import(r#"(import "env" "bogus" (func (param i32)))"#);
    assert_eq!(
        check_module(&bad.wasm(), &WasmLimits::default(), Duration::from_secs(5)),
        Err(WasmError::MissingImport {
            module: "env".into(),
            name: "bogus".into()
        })
    );
    let env = TestEnv::new();
    let a = start(
        &env,
        &[("10-bad", bad), ("20-good", setter("GOOD", "yes"))],
        builder(&env),
    )
    .await;
    let ids: Vec<_> = a.plugins().iter().map(|p| p.id.to_string()).collect();
    assert_eq!(ids, ["20-good"]);
    let out = a.create_container(&pod("p"), &ctr("p", "c")).await.unwrap();
    assert_eq!(env_of(&out.adjustment), [("GOOD".into(), "yes".into())]);
    a.stop().await;
}

#[test]
fn modules_breaking_the_abi_are_refused_at_load() {
    let limits = WasmLimits::default();
    let t = Duration::from_secs(5);
    let w = Wat::new(create_events());
    assert_eq!(check_module(&w.wasm(), &limits, t), Ok(()));
    assert_eq!(
        check_module(&w.clone().omit("plugin_state_change").wasm(), &limits, t),
        Err(WasmError::MissingExport {
            name: "plugin_state_change".into()
        })
    );
    assert_eq!(
        check_module(&w.clone().omit("malloc").wasm(), &limits, t),
        Err(WasmError::MissingExport {
            name: "malloc".into()
        })
    );
    assert_eq!(
        check_module(&w.clone().api_version(2).wasm(), &limits, t),
        Err(WasmError::ApiVersion {
            found: 2,
            expected: 1
        })
    );
    // An unknown WASI function is linked to an ENOSYS stub, not refused.
    let enosys = w.clone().import(
        r#"(import "wasi_snapshot_preview1" "path_open" (func (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))"#,
    );
    assert_eq!(check_module(&enosys.wasm(), &limits, t), Ok(()));
    // An initializer that runs away is stopped at the deadline.
    let init = w
        .clone()
        .field(r#"(func (export "_initialize") (loop (br 0)))"#);
    let err = check_module(&init.wasm(), &limits, Duration::from_millis(200)).unwrap_err();
    assert!(matches!(err, WasmError::Instantiate { .. }), "{err:?}");
    // Initial memory (one 64 KiB page) over the cap: counted before it
    // is compiled.
    let small = WasmLimits::default().with_max_memory(1 << 15);
    let err = check_module(&w.wasm(), &small, t).unwrap_err();
    assert_eq!(
        err,
        WasmError::OverLimit {
            resource: "bytes of initial memory".into(),
            found: 1 << 16,
            max: 1 << 15
        }
    );
    assert!(matches!(
        check_module(b"\0asm\x01\0\0\0garbage", &limits, t),
        Err(WasmError::Compile { .. })
    ));
}
