//! With the `serde` feature, messages convert to and from JSON.
#![cfg(feature = "serde")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use nri_api::api::{ConfigureRequest, ContainerAdjustment};

#[test]
fn json_round_trip_and_defaults() {
    let mut adj = ContainerAdjustment::default();
    adj.annotations.insert("a".into(), "b".into());
    let json = serde_json::to_string(&adj).unwrap();
    let back: ContainerAdjustment = serde_json::from_str(&json).unwrap();
    assert_eq!(back, adj);

    // Missing fields take their defaults.
    let req: ConfigureRequest = serde_json::from_str(r#"{"runtime_name":"containerd"}"#).unwrap();
    assert_eq!(req.runtime_name, "containerd");
    assert_eq!(req.request_timeout, 0);
}
