//! Encodings checked against literal bytes (as Go's deterministic marshal
//! produces them).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use nri_api::api::{
    CompoundFieldOwners, ConfigureResponse, ContainerAdjustment, FieldOwners, LinuxContainer,
    OptionalInt, PodSandbox, RegisterPluginRequest,
};
use prost::Message;

#[test]
fn configure_response_events_is_field_2() {
    let msg = ConfigureResponse {
        events: 0x3FFF,
        failure_policy: None,
    };
    assert_eq!(msg.encode_to_vec(), [0x10, 0xff, 0x7f]);
    assert_eq!(ConfigureResponse::default().encode_to_vec(), [] as [u8; 0]);
}

/// v0.12.4's plugin-declared failure policy is field 3, a message whose two
/// bools are fields 1 and 2. An empty policy (both false) is still present on
/// the wire, which is how a runtime tells it from an absent one.
#[test]
fn configure_response_failure_policy_is_field_3() {
    use nri_api::api::FailurePolicy;
    let msg = ConfigureResponse {
        events: 0x9,
        failure_policy: Some(FailurePolicy {
            fail_request: true,
            keep_connected: true,
        }),
    };
    assert_eq!(
        msg.encode_to_vec(),
        [0x10, 0x09, 0x1a, 0x04, 0x08, 0x01, 0x10, 0x01]
    );
    let empty = ConfigureResponse {
        events: 0,
        failure_policy: Some(FailurePolicy::default()),
    };
    assert_eq!(empty.encode_to_vec(), [0x1a, 0x00]);
    let decoded = ConfigureResponse::decode(&[0x1a, 0x00][..]).unwrap();
    assert_eq!(decoded.failure_policy, Some(FailurePolicy::default()));
    assert_eq!(
        ConfigureResponse::decode(&[][..]).unwrap().failure_policy,
        None
    );
}

#[test]
fn register_plugin_request() {
    let msg = RegisterPluginRequest {
        plugin_name: "logger".into(),
        plugin_idx: "10".into(),
        nri_version: "v0.12.2".into(),
    };
    let mut want = vec![0x0a, 6];
    want.extend_from_slice(b"logger");
    want.extend_from_slice(&[0x12, 2]);
    want.extend_from_slice(b"10");
    want.extend_from_slice(&[0x1a, 7]);
    want.extend_from_slice(b"v0.12.2");
    assert_eq!(msg.encode_to_vec(), want);
    assert_eq!(RegisterPluginRequest::decode(want.as_slice()).unwrap(), msg);
}

#[test]
fn map_entries_sorted_by_key() {
    // Inserted in any order, maps encode in key order: a, b.
    let mut labels = BTreeMap::new();
    labels.insert("b".to_string(), "2".to_string());
    labels.insert("a".to_string(), "1".to_string());
    let pod = PodSandbox {
        labels,
        ..Default::default()
    };
    let entry = |k: u8, v: u8| [0x2a, 6, 0x0a, 1, k, 0x12, 1, v];
    let mut want = entry(b'a', b'1').to_vec();
    want.extend_from_slice(&entry(b'b', b'2'));
    assert_eq!(pod.encode_to_vec(), want);
}

#[test]
fn container_adjustment_starts_at_field_2() {
    let mut adj = ContainerAdjustment::default();
    adj.annotations.insert("k".into(), "v".into());
    adj.args = vec!["x".into()];
    assert_eq!(
        adj.encode_to_vec(),
        [0x12, 6, 0x0a, 1, b'k', 0x12, 1, b'v', 0x4a, 1, b'x']
    );
}

#[test]
fn int32_map_keys_and_negative_values() {
    let mut compound = BTreeMap::new();
    let mut owners = BTreeMap::new();
    owners.insert("FOO".to_string(), "10-a".to_string());
    compound.insert(6, CompoundFieldOwners { owners });
    let mut simple = BTreeMap::new();
    simple.insert(29, "10-a".to_string());
    simple.insert(8, "05-b".to_string());
    let fo = FieldOwners { simple, compound };
    let bytes = fo.encode_to_vec();
    // simple: key 8 before key 29.
    assert_eq!(
        &bytes[..10],
        &[0x0a, 8, 0x08, 8, 0x12, 4, b'0', b'5', b'-', b'b']
    );
    assert_eq!(FieldOwners::decode(bytes.as_slice()).unwrap(), fo);

    // A negative int64 wrapper value is a 10-byte varint, as in Go.
    let lc = LinuxContainer {
        oom_score_adj: Some(OptionalInt::from(-1000)),
        ..Default::default()
    };
    assert_eq!(
        lc.encode_to_vec(),
        [
            0x22, 11, 0x08, 0x98, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01
        ]
    );
}

/// Go always writes both key and value of a map entry, even when one is
/// empty; prost leaves empty ones out. Both forms decode to the same message,
/// but the bytes differ (see the crate docs).
#[test]
fn map_entries_with_empty_values_decode_either_way() {
    let mut labels = BTreeMap::new();
    labels.insert("a".to_string(), String::new());
    let pod = PodSandbox {
        labels,
        ..Default::default()
    };
    let go_form = [0x2a, 5, 0x0a, 1, b'a', 0x12, 0];
    let prost_form = [0x2a, 3, 0x0a, 1, b'a'];
    assert_eq!(pod.encode_to_vec(), prost_form);
    assert_eq!(PodSandbox::decode(&go_form[..]).unwrap(), pod);
    assert_eq!(PodSandbox::decode(&prost_form[..]).unwrap(), pod);
}
