//! `linux.namespaces`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use nri_api::api;
use nri_oci::Error;
use serde_json::json;

fn ns(typ: &str, path: &str) -> api::LinuxNamespace {
    api::LinuxNamespace {
        r#type: typ.into(),
        path: path.into(),
    }
}

fn adj(list: Vec<api::LinuxNamespace>) -> api::ContainerAdjustment {
    linux(api::LinuxContainerAdjustment {
        namespaces: list,
        ..Default::default()
    })
}

#[test]
fn add_replace_and_remove() {
    let spec = adjusted(&adj(vec![
        ns("network", "/var/run/netns/pod1"),
        ns("user", ""),
        ns("time", ""),
        ns("-ipc", ""),
        ns("-user", ""), // removal first, then the addition above: present
    ]));
    assert_eq!(
        json(&spec)["linux"]["namespaces"],
        json!([
            {"type": "pid"},
            {"type": "network", "path": "/var/run/netns/pod1"},
            {"type": "uts"},
            {"type": "mount"},
            {"type": "cgroup"},
            {"type": "user"},
            {"type": "time"},
        ])
    );
    snap!("add_replace_and_remove", json(&spec)["linux"]["namespaces"]);
}

#[test]
fn replace_with_empty_path_makes_a_new_namespace() {
    let mut spec = adjusted(&adj(vec![ns("network", "/var/run/netns/pod1")]));
    applier()
        .apply_adjustment(&mut spec, &adj(vec![ns("network", "")]))
        .unwrap();
    assert_eq!(
        json(&spec)["linux"]["namespaces"][1],
        json!({"type": "network"})
    );
}

#[test]
fn removing_absent_namespace_is_noop() {
    let spec = adjusted(&adj(vec![ns("-time", "")]));
    assert_eq!(spec, base_spec());
}

#[test]
fn unknown_or_abbreviated_type_is_rejected() {
    for bad in ["net", "mnt", "-net", "bogus", "NETWORK"] {
        let mut spec = base_spec();
        let err = applier()
            .apply_adjustment(
                &mut spec,
                &adj(vec![ns("pid", "/proc/1/ns/pid"), ns(bad, "")]),
            )
            .unwrap_err();
        assert!(
            matches!(&err, Error::UnknownValue { field: "linux.namespaces.type", value } if value == bad),
            "{bad}: {err:?}"
        );
        assert_eq!(spec, base_spec());
    }
    let err = applier()
        .apply_adjustment(&mut base_spec(), &adj(vec![ns("-", "")]))
        .unwrap_err();
    assert!(matches!(
        err,
        Error::InvalidKey {
            field: "linux.namespaces.type",
            ..
        }
    ));
}
