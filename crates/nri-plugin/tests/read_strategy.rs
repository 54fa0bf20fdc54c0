//! A plugin's connection spins for the runtime's requests, and asks for
//! wake hints, only once `Configure` has said that the runtime is ours
//! (`NRI_version` tagged `+nri-rs`, as `nri-runtime` sends it); under
//! any other runtime (the Go runtime sends its plain module version) it
//! stays plain. `crates/nri-plugin/tests/go_runtime.rs` checks the same
//! under the real Go runtime.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::time::Duration;

use common::*;
use nri_plugin::Builder;

/// Runs a plugin with `budget` against a fake runtime that reports
/// `nri_version` in Configure; returns whether the plugin spins and
/// whether the runtime's end saw it ask for wake hints.
async fn run_with(nri_version: &str, budget: Duration) -> (bool, bool) {
    let rt = FakeRuntime::new();
    let (rec, _calls) = Recorder::new();
    let stub = Builder::new(rec)
        .name("test")
        .index("10")
        .socket_path(&rt.path)
        .spin_budget(budget)
        .build()
        .unwrap();
    let handle = stub.handle();
    assert_eq!(handle.spins(), None, "nothing chosen before a connection");
    let driver = async {
        let conn = rt.accept(Register::Accept).await;
        conn.registered().await;
        conn.configure(configure_req(nri_version)).await.unwrap();
        let spins = read_strategy_chosen(&handle).await;
        // A round trip after the choice: an announcement written with it
        // went out before the answer and has been read by then.
        conn.sync(vec![], vec![]).await.unwrap();
        let asked = conn.mux.peer_accepts_wake_hints();
        handle.stop();
        (spins, asked)
    };
    let (res, out) = tokio::join!(stub.run(), driver);
    res.unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spins_and_takes_hints_only_under_our_runtime() {
    let ours = nri_api::nri_rs_runtime_version();
    let budget = Duration::from_micros(100);
    assert_eq!(run_with(&ours, budget).await, (true, true));
    // What the Go runtime sends (v0.12.x and older, or nothing).
    for go in ["v0.12.5", "v0.12.2", ""] {
        assert_eq!(run_with(go, budget).await, (false, false), "{go:?}");
    }
    // A zero budget turns it off under our runtime too.
    assert_eq!(run_with(&ours, Duration::ZERO).await, (false, false));
}
