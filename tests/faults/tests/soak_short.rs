//! The short soak run for CI: the soak binary (`src/bin/soak.rs`) with 8
//! plugin processes, 20 000 events and 20 random restarts (SIGKILL +
//! relaunch, or disconnect + reconnect). It checks itself (no lost events
//! per plugin connection, stable plugins saw every event, no fd or tokio
//! task growth) and exits 1 on any problem; this test checks its report.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::Command;

#[test]
fn short_soak_loses_no_event_and_leaks_no_fd_or_task() {
    let out = Command::new(env!("CARGO_BIN_EXE_soak"))
        .args([
            "--plugins",
            "8",
            "--events",
            "20000",
            "--restarts",
            "20",
            "--seed",
            "7",
        ])
        // Memory is not judged here: it grows after restarts today (see the
        // ignored bug test below); fds, tasks and lost events are.
        .args([
            "--max-rss-growth-kib",
            "4194304",
            "--max-rss-kib",
            "4194304",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "soak failed:\n{stdout}\n{stderr}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON report");
    eprintln!("{report}");
    assert_eq!(report["problems"], serde_json::json!([]));
    assert_eq!(report["events"], 20000);
    let restarts = report["kills"].as_u64().unwrap() + report["reconnects"].as_u64().unwrap();
    assert!(restarts >= 15, "restarts happened: {report}");
    assert!(report["connections"].as_u64().unwrap() > 8);
    assert_eq!(report["fds"]["start"], report["fds"]["end"]);
    assert_eq!(report["tokio_tasks"]["start"], report["tokio_tasks"]["end"]);
}

/// BUG (reported, nri-runtime `registry.rs` / `connect.rs`): a plugin that
/// registers while events keep coming from several tasks never leaves the
/// "syncing" state: its deferred-delivery queue is drained one call at a
/// time while concurrent creations keep adding to it, so it is never empty
/// and `drain_or_activate` never activates the plugin. The queue (pod and
/// container per creation) grows by about 2.5 KiB per event for as long as
/// the load lasts (seen: 18 999 queued creations for `12-soak2g1` after
/// 20 000 events) and the plugin gets events only late, as deferred
/// notifications. Run with `--ignored` (release is faster:
/// `cargo test --release -p nri-fault-tests --test soak_short -- --ignored`).
#[test]
#[ignore = "BUG: nri-runtime memory grows per event after a plugin reconnect (reported)"]
fn bug_runtime_memory_is_flat_after_a_plugin_reconnect() {
    let out = Command::new(env!("CARGO_BIN_EXE_soak"))
        .args(["--plugins", "3", "--stable", "2", "--events", "60000"])
        .args(["--restarts", "1", "--restart-kind", "reconnect"])
        .args(["--max-rss-growth-kib", "8192"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
}
