//! The `nri_plugin_identity` series of the Prometheus sink follows the
//! plugins: set when a plugin is admitted, kept while an instance of it
//! is connected (a newer instance taking over from an older one), removed
//! when none is left or the runtime stops.
#![cfg(feature = "prometheus")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use nri_api::{Capability, CapabilitySet};
use nri_runtime::{Grant, InstanceState, PrometheusMetrics};
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;

/// The `nri_plugin_identity` lines of the registry's exposition.
fn identity_lines(reg: &Registry) -> Vec<String> {
    let mut out = String::new();
    encode(&mut out, reg).unwrap();
    out.lines()
        .filter(|l| l.starts_with("nri_plugin_identity{"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn the_identity_series_goes_with_the_plugin() {
    let env = TestEnv::new();
    let mut reg = Registry::default();
    let metrics = Arc::new(PrometheusMetrics::new(&mut reg));
    let grant = Grant::new(["logger", "other"])
        .role("observer")
        .allow(CapabilitySet::of(&[Capability::AdjustAnnotations]));
    let b = env.builder().metrics(metrics).grant(grant);
    let a = env.start(b).await;

    let logger = FakePlugin::new("10", "logger")
        .connect(&env.socket)
        .await
        .unwrap();
    let other = FakePlugin::new("20", "other")
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 2).await;
    let lines = identity_lines(&reg);
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("plugin=\"10-logger\"") && l.contains("grant=\"grant #0 (role")),
        "{lines:#?}"
    );

    // A newer instance of the logger takes over: still one series per
    // plugin.
    let newer = FakePlugin::new("10", "logger")
        .connect(&env.socket)
        .await
        .unwrap();
    let superseded = eventually(Duration::from_secs(10), || {
        a.plugins()
            .iter()
            .any(|p| p.state == InstanceState::Superseded)
    })
    .await;
    assert!(superseded, "{:?}", a.plugins());
    assert_eq!(identity_lines(&reg).len(), 2, "{:#?}", identity_lines(&reg));

    // The older instance goes: the logger is still there, and so is its
    // series.
    logger.crash();
    wait_active_exact(&a, 2).await;
    let lines = identity_lines(&reg);
    assert!(
        lines.iter().any(|l| l.contains("plugin=\"10-logger\"")),
        "{lines:#?}"
    );

    // The last instance goes: its series with it; the other's stays.
    newer.crash();
    let gone = eventually(Duration::from_secs(10), || {
        identity_lines(&reg)
            .iter()
            .all(|l| !l.contains("plugin=\"10-logger\""))
    })
    .await;
    assert!(gone, "{:#?}", identity_lines(&reg));
    let left = identity_lines(&reg);
    assert_eq!(left.len(), 1, "{left:#?}");
    assert!(left[0].contains("plugin=\"20-other\""), "{left:#?}");

    // The runtime stops: no series is left.
    a.stop().await;
    assert_eq!(identity_lines(&reg), Vec::<String>::new());
    drop(other);
}
