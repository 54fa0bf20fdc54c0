//! Wake hints: in a chain of calls, the runtime hints the next subscribed
//! plugin before it calls the current one, if that plugin announced that
//! it takes hints; never a plugin that did not (a Go plugin), never the
//! first one, never when spinning is off.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;

/// Hints each plugin has received.
fn hints(conns: &[Connected]) -> Vec<(String, u64)> {
    conns
        .iter()
        .map(|c| {
            (
                c.plugin.full_name(),
                c.mux.latency_stats().wake_hints_received,
            )
        })
        .collect()
}

fn named(v: &[(&str, u64)]) -> Vec<(String, u64)> {
    v.iter().map(|(n, k)| ((*n).to_owned(), *k)).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_next_subscribed_plugin_that_takes_hints_is_hinted() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let creates = "CreateContainer".parse().unwrap();
    let plugins = [
        FakePlugin::new("10", "first").wake_hints(),
        FakePlugin::new("20", "second").wake_hints(),
        // Not subscribed to CreateContainer: passed over.
        FakePlugin::new("25", "starts")
            .wake_hints()
            .events("StartContainer".parse().unwrap()),
        FakePlugin::new("30", "third").wake_hints().events(creates),
        // Did not announce (as a Go plugin): never sent a hint.
        FakePlugin::new("40", "go-like"),
        FakePlugin::new("50", "last").wake_hints(),
    ];
    let mut conns = Vec::new();
    for p in plugins {
        conns.push(p.connect(&env.socket).await.unwrap());
    }
    wait_active(&a, 6).await;

    let p = pod("p");
    a.create_container(&p, &ctr("p", "c1")).await.unwrap();
    assert_eq!(
        hints(&conns),
        named(&[
            ("10-first", 0),
            ("20-second", 1),
            ("25-starts", 0),
            ("30-third", 1),
            ("40-go-like", 0),
            ("50-last", 1),
        ])
    );
    // Every call of a chain, whatever the event: StartContainer goes to
    // all but 30-third.
    a.start_container(&p, &ctr("p", "c1")).await.unwrap();
    assert_eq!(
        hints(&conns),
        named(&[
            ("10-first", 0),
            ("20-second", 2),
            ("25-starts", 1),
            ("30-third", 1),
            ("40-go-like", 0),
            ("50-last", 2),
        ])
    );
    for c in &conns {
        let s = c.mux.stats();
        assert_eq!(s.dropped_frames, 0, "{}: {s:?}", c.plugin.full_name());
    }
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn no_hints_when_spinning_is_off() {
    let env = TestEnv::new();
    let a = env.start(env.builder().spin_budget(Duration::ZERO)).await;
    let mut conns = Vec::new();
    for (idx, name) in [("10", "a"), ("20", "b"), ("30", "c")] {
        let p = FakePlugin::new(idx, name).wake_hints();
        conns.push(p.connect(&env.socket).await.unwrap());
    }
    wait_active(&a, 3).await;
    let p = pod("p");
    a.create_container(&p, &ctr("p", "c1")).await.unwrap();
    a.start_container(&p, &ctr("p", "c1")).await.unwrap();
    assert_eq!(
        hints(&conns),
        named(&[("10-a", 0), ("20-b", 0), ("30-c", 0)])
    );
    a.stop().await;
}
