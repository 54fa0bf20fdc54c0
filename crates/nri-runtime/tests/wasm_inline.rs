//! Where a WebAssembly plugin's call runs: a call the guest answers within
//! its first slice of fuel runs on the caller's task and needs no blocking
//! thread; a longer call, or one that sleeps in `poll_oneoff`, goes on on
//! a blocking thread and still completes, on a current-thread runtime as
//! on a multi-thread one.
#![cfg(feature = "wasm")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod wasm_util;

use std::time::Duration;

use common::*;
use nri_api::api::ContainerAdjustment;
use nri_test_support::eventually;
use wasm_util::{LONG_WORK, Wat, Work};

const CREATE: &str = "plugin_create_container";

/// A guest whose CreateContainer does `work`, then sets env `K=v`.
fn guest(work: Option<Work>) -> Wat {
    let w = Wat::env_setter();
    match work {
        Some(work) => w.work(CREATE, work),
        None => w,
    }
}

const MINUTE: Duration = Duration::from_secs(60);

fn env_of(out: &ContainerAdjustment) -> Vec<(String, String)> {
    out.env
        .iter()
        .map(|kv| (kv.key.clone(), kv.value.clone()))
        .collect()
}

/// A current-thread runtime with one blocking thread.
fn one_blocking_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(1)
        .build()
        .unwrap()
}

/// Starts a runtime with `guest` as its only plugin, `10-wat`, requests
/// timing out after `timeout`.
async fn start(env: &TestEnv, guest: Wat, timeout: Duration) -> nri_runtime::Adaptation {
    guest.install(&env.dir.path().join("plugins"), "10-wat");
    let b = env
        .builder()
        .disable_connections(true)
        .request_timeout(timeout);
    let a = env.start(b).await;
    assert_eq!(a.plugins().len(), 1);
    a
}

/// With the only blocking thread held, a call the guest answers at once
/// still completes: it runs on the caller's task.
#[test]
fn a_short_call_needs_no_blocking_thread() {
    one_blocking_thread().block_on(async {
        let env = TestEnv::new();
        let a = start(&env, guest(None), MINUTE).await;
        let (release, held) = std::sync::mpsc::channel::<()>();
        let (taken, on_taken) = tokio::sync::oneshot::channel();
        let hold = tokio::task::spawn_blocking(move || {
            let _ = taken.send(());
            let _ = held.recv();
        });
        on_taken.await.unwrap();
        for _ in 0..3 {
            let out = a.create_container(&pod("p"), &ctr("p", "c")).await.unwrap();
            assert_eq!(env_of(&out.adjustment), [("K".into(), "v".into())]);
        }
        release.send(()).unwrap();
        hold.await.unwrap();
        a.stop().await;
    });
}

/// A call over the inline fuel goes on on a blocking thread and answers,
/// on both kinds of runtime.
#[test]
fn a_long_call_completes_off_the_executor() {
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for rt in [one_blocking_thread(), multi] {
        rt.block_on(async {
            let env = TestEnv::new();
            let a = start(&env, guest(Some(LONG_WORK)), MINUTE).await;
            for _ in 0..3 {
                let out = a.create_container(&pod("p"), &ctr("p", "c")).await.unwrap();
                assert_eq!(env_of(&out.adjustment), [("K".into(), "v".into())]);
            }
            a.stop().await;
        });
    }
}

/// A guest sleeping in `poll_oneoff` sleeps on a blocking thread: the
/// only thread of a current-thread runtime stays free to run other tasks
/// (here the one that sees the sleep before the call's deadline ends it).
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
#[test]
fn a_guest_sleep_leaves_the_executor_free() {
    one_blocking_thread().block_on(async {
        let env = TestEnv::new();
        let guest = guest(Some(Work::Sleep(MINUTE)));
        let a = std::sync::Arc::new(start(&env, guest, Duration::from_secs(3)).await);
        let call = tokio::spawn({
            let a = a.clone();
            async move { a.create_container(&pod("p"), &ctr("p", "c")).await }
        });
        // Polling on this (only) executor thread while the guest sleeps is
        // itself the proof that the sleep does not hold the executor.
        assert!(
            eventually(Duration::from_secs(20), wasm_util::a_thread_sleeps).await,
            "the guest never slept"
        );
        assert!(!call.is_finished());
        // The sleep ends at the call's deadline.
        tokio::time::timeout(Duration::from_secs(20), call)
            .await
            .expect("the call ended at its deadline")
            .unwrap()
            .ok();
        a.stop().await;
    });
}
