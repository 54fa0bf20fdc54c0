//! The prometheus-client metrics sink (cargo feature `prometheus`).
#![cfg(feature = "prometheus")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use nri_runtime::{ErrorClass, Metrics, PrometheusMetrics};
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;

#[test]
fn exports_every_metric() {
    let mut reg = Registry::default();
    let m = PrometheusMetrics::new(&mut reg);
    m.plugin_invocation("10-a", "CreateContainer", Ok(()));
    m.plugin_invocation("10-a", "CreateContainer", Err(ErrorClass::Timeout));
    m.plugin_latency("10-a", "CreateContainer", Duration::from_millis(3));
    m.plugin_adjustments("10-a", "CreateContainer", 2, 1, 1);
    m.plugin_conflict("10-a", "CreateContainer");
    m.plugin_strikes("10-a", "CreateContainer", 1);
    m.plugin_strikes("10-a", "StopContainer", 2);
    m.plugin_strikes("20-b", "CreateContainer", 1);
    m.plugin_strikes("20-b", "CreateContainer", 0);
    m.active_plugins(3);
    let mut out = String::new();
    encode(&mut out, &reg).unwrap();
    for needle in [
        r#"nri_plugin_invocations_total{plugin="10-a",operation="CreateContainer",status="error",error="timeout"} 1"#,
        "nri_plugin_latency_seconds_count",
        r#"nri_plugin_adjustments_total{plugin="10-a",operation="CreateContainer",type="adjust"} 2"#,
        "nri_plugin_conflicts_total",
        "nri_active_plugins 3",
        r#"nri_plugin_strikes_total{plugin="10-a",operation="StopContainer"} 1"#,
        r#"nri_plugin_strikes_total{plugin="20-b",operation="CreateContainer"} 1"#,
        r#"nri_plugin_consecutive_strikes{plugin="10-a"} 2"#,
        r#"nri_plugin_consecutive_strikes{plugin="20-b"} 0"#,
    ] {
        assert!(out.contains(needle), "missing {needle} in\n{out}");
    }
}
