//! A WebAssembly plugin's call under tokio's paused clock (as tests of a
//! runtime, and the fault-schedule checker, run): a call whose event's
//! deadline is shorter than the plugin's timeout, and whose guest works
//! past its first slice of fuel (on a blocking thread), waits for the
//! guest on tokio's clock. The guest's own deadline is on the wall clock
//! (it bounds real work); the caller's wait is not, and the two clocks
//! part under paused time: here tokio's is an hour ahead.
#![cfg(feature = "wasm")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod wasm_util;

use std::time::Duration;

use common::*;
use nri_api::EventMask;
use nri_api::api::Event;
use wasm_util::{Wat, Work};

const CREATE: &str = "plugin_create_container";
const START: &str = "plugin_start_container";

/// A guest whose CreateContainer sleeps 200 ms in `poll_oneoff` (on a
/// blocking thread, as any call past its first slice of fuel), then sets
/// env `K=v`.
fn guest() -> Wat {
    Wat::env_setter().work(CREATE, Work::Sleep(Duration::from_millis(200)))
}

/// The event's deadline (10 s) cuts the plugin's timeout (1 min) short;
/// the guest answers in 200 ms of real time. With tokio's clock an
/// hour ahead of the wall clock, the call must still get the answer (it
/// was taken for timed out at once: the caller's wait was the guest's
/// wall-clock instant read on tokio's clock, an hour in its past).
#[test]
fn a_call_cut_short_by_the_deadline_waits_on_tokio_time() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let env = TestEnv::new();
        guest().install(&env.dir.path().join("plugins"), "10-wat");
        let b = env
            .builder()
            .disable_connections(true)
            .request_timeout(Duration::from_secs(60));
        let a = env.start(b).await;
        assert_eq!(a.plugins().len(), 1);
        tokio::time::sleep(Duration::from_secs(3600)).await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let out = a
            .with_deadline(deadline)
            .create_container(&pod("p"), &ctr("p", "c"))
            .await
            .expect("the guest answered within the deadline");
        let env_of: Vec<_> = (out.adjustment.env.iter())
            .map(|kv| (kv.key.as_str(), kv.value.as_str()))
            .collect();
        assert_eq!(env_of, [("K", "v")]);
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        a.stop().await;
    });
}

/// A call cut short by the event's deadline whose guest runs past the
/// plugin's own timeout is a strike (a limit of one: closed for good),
/// whichever clock is ahead: when the caller's wait outlasts the guest
/// (paused time stands still while the guest runs on a blocking thread),
/// the caller gets the guest's own timeout and counts it. (It took the
/// call's shorter timeout, "cut short", for no strike, and the plugin was
/// re-instantiated with none.)
#[test]
fn a_cut_call_that_runs_past_its_own_timeout_is_a_strike_on_paused_time() {
    for tokio_ahead in [true, false] {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let env = TestEnv::new();
            // StartContainer: a creation would reach the new instance again
            // (after the fact: a creation whose guard is held is never
            // stored).
            let mut events = EventMask::EMPTY;
            events.set(Event::StartContainer);
            let guest = Wat::new(events).work(START, Work::Sleep(Duration::from_secs(60)));
            guest.install(&env.dir.path().join("plugins"), "10-wat");
            let b = env
                .builder()
                .disable_connections(true)
                .request_timeout(Duration::from_millis(300))
                .strike_limit(1);
            let a = env.start(b).await;
            assert_eq!(a.plugins().len(), 1);
            if tokio_ahead {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            } else {
                // The wall clock ahead of tokio's, which stands still.
                std::thread::sleep(Duration::from_millis(500));
            }
            let deadline = tokio::time::Instant::now() + Duration::from_millis(100);
            let out = a
                .with_deadline(deadline)
                .start_container(&pod("p"), &ctr("p", "c1"))
                .await
                .unwrap();
            assert_eq!(out.errors.len(), 1, "{:?}", out.errors);
            // Far past every backoff of a re-instantiation.
            tokio::time::sleep(Duration::from_secs(600)).await;
            assert!(
                a.plugins().is_empty(),
                "tokio ahead: {tokio_ahead}: re-instantiated past its strike limit"
            );
            a.stop().await;
        });
    }
}

/// A re-instantiation whose instance runs out of time in its start (here
/// on a creation it gets after the fact: the test holds the creation's
/// guard, so it is never stored and every new instance gets it) adds that
/// timeout to the strikes carried over: at the limit the plugin is closed
/// for good. (The failed attempt's
/// strikes were dropped: it was made again forever, one timeout of a
/// blocking thread each time.)
#[test]
fn timeouts_during_re_instantiation_reach_the_strike_limit() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let _log = common::log_capture::log();
        let env = TestEnv::new();
        let mut events = EventMask::EMPTY;
        events.set(Event::CreateContainer);
        let guest = Wat::new(events).work(CREATE, Work::Sleep(Duration::from_secs(60)));
        guest.install(&env.dir.path().join("plugins"), "10-again");
        let b = env
            .builder()
            .disable_connections(true)
            .request_timeout(Duration::from_millis(100))
            .strike_limit(2);
        let a = env.start(b).await;
        assert_eq!(a.plugins().len(), 1);
        let out = a
            .create_container(&pod("p"), &ctr("p", "c1"))
            .await
            .unwrap();
        assert_eq!(out.errors.len(), 1, "{:?}", out.errors);
        let line = "reached its strike limit; closed for good plugin=10-again";
        tokio::time::timeout(Duration::from_secs(120), common::log_capture::logged(line))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "never closed for good:\n{}",
                    common::log_capture::log().text()
                )
            });
        a.stop().await;
    });
}
