//! Property tests: encode then decode gives the same message, and encoding
//! is deterministic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use nri_api::api::{
    ConfigureRequest, Container, ContainerAdjustment, ContainerUpdate, Hook, Hooks, KeyValue,
    LinuxContainerAdjustment, LinuxContainerUpdate, LinuxMemory, LinuxNetDevice, LinuxResources,
    Mount, OptionalInt, OptionalInt64, OptionalString, PodSandbox, PosixRlimit,
    RegisterPluginRequest,
};
use proptest::prelude::*;
use prost::Message;

fn s() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9._/=-]{0,12}"
}

fn map() -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(s(), s(), 0..4)
}

fn resources() -> impl Strategy<Value = LinuxResources> {
    (prop::option::of(any::<i64>()), prop::option::of(s()), map()).prop_map(
        |(limit, class, unified)| LinuxResources {
            memory: limit.map(|l| LinuxMemory {
                limit: Some(OptionalInt64::from(l)),
                ..Default::default()
            }),
            blockio_class: class.map(OptionalString::from),
            unified,
            ..Default::default()
        },
    )
}

fn adjustment() -> impl Strategy<Value = ContainerAdjustment> {
    (
        map(),
        prop::collection::vec((s(), s()), 0..3),
        prop::collection::vec(s(), 0..3),
        prop::option::of(any::<i64>()),
        prop::collection::btree_map(s(), s(), 0..3),
        prop::option::of(resources()),
        prop::collection::vec((s(), any::<u64>(), any::<u64>()), 0..2),
    )
        .prop_map(
            |(annotations, env, args, oom, net, res, rl)| ContainerAdjustment {
                annotations,
                mounts: args
                    .iter()
                    .map(|a| Mount {
                        destination: a.clone(),
                        r#type: "bind".into(),
                        source: a.clone(),
                        options: vec!["ro".into()],
                    })
                    .collect(),
                env: env
                    .into_iter()
                    .map(|(key, value)| KeyValue { key, value })
                    .collect(),
                hooks: Some(Hooks {
                    poststop: vec![Hook {
                        path: "/bin/true".into(),
                        timeout: oom.map(OptionalInt::from),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                linux: Some(LinuxContainerAdjustment {
                    oom_score_adj: oom.map(OptionalInt::from),
                    net_devices: net
                        .into_iter()
                        .map(|(k, name)| (k, LinuxNetDevice { name }))
                        .collect(),
                    resources: res,
                    ..Default::default()
                }),
                rlimits: rl
                    .into_iter()
                    .map(|(r#type, hard, soft)| PosixRlimit { r#type, hard, soft })
                    .collect(),
                args,
                ..Default::default()
            },
        )
}

fn check<M: Message + Default + PartialEq + std::fmt::Debug>(msg: &M) {
    let bytes = msg.encode_to_vec();
    assert_eq!(bytes.len(), msg.encoded_len());
    let back = M::decode(bytes.as_slice()).unwrap();
    assert_eq!(&back, msg);
    assert_eq!(back.encode_to_vec(), bytes, "encoding is deterministic");
}

proptest! {
    #[test]
    fn register_plugin_request(name in s(), idx in "[0-9]{2}", v in s()) {
        check(&RegisterPluginRequest { plugin_name: name, plugin_idx: idx, nri_version: v });
    }

    #[test]
    fn configure_request(config in ".{0,40}", n in s(), v in s(), a in any::<i64>(), b in any::<i64>(), nv in s()) {
        check(&ConfigureRequest {
            config, runtime_name: n, runtime_version: v,
            registration_timeout: a, request_timeout: b, nri_version: nv,
        });
    }

    #[test]
    fn container_adjustment(adj in adjustment()) {
        check(&adj);
    }

    #[test]
    fn pod_and_container(id in s(), labels in map(), annotations in map(), pid in any::<u32>(),
                         exit in any::<i32>(), env in prop::collection::vec(s(), 0..4),
                         state in 0..5i32) {
        check(&PodSandbox { id: id.clone(), labels: labels.clone(), annotations: annotations.clone(),
                            pid, ips: env.clone(), ..Default::default() });
        check(&Container { id, labels, annotations, env, pid, exit_code: exit, state,
                           ..Default::default() });
    }

    #[test]
    fn container_update(id in s(), res in resources(), ignore in any::<bool>()) {
        check(&ContainerUpdate {
            container_id: id,
            linux: Some(LinuxContainerUpdate { resources: Some(res) }),
            ignore_failure: ignore,
        });
    }
}
