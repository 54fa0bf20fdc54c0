//! Mounts: add, replace by destination, remove, sort, propagation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use nri_api::api;
use serde_json::{Value, json};

fn mounts(m: Vec<api::Mount>) -> api::ContainerAdjustment {
    api::ContainerAdjustment {
        mounts: m,
        ..Default::default()
    }
}

fn destinations(spec: &oci_spec::runtime::Spec) -> Vec<String> {
    json(spec)["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["destination"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn add_mounts_sorted_like_upstream() {
    let spec = adjusted(&mounts(vec![
        mount("/data/cache/tmp", "/host/tmp", &["rbind", "rw"]),
        mount("/data", "/host/data", &["rbind", "ro"]),
    ]));
    // Fewer path separators first, then by destination; stable.
    assert_eq!(
        destinations(&spec),
        [
            "/data",
            "/dev",
            "/proc",
            "/sys",
            "/dev/mqueue",
            "/dev/pts",
            "/dev/shm",
            "/etc/hosts",
            "/data/cache/tmp",
            "/sys/fs/cgroup",
        ]
    );
    snap!("add_mounts_sorted_like_upstream", spec);
}

#[test]
fn addition_replaces_same_destination() {
    let spec = adjusted(&mounts(vec![mount(
        "/etc/hosts",
        "/elsewhere/hosts",
        &["rbind"],
    )]));
    let m: Vec<Value> = json(&spec)["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["destination"] == "/etc/hosts")
        .cloned()
        .collect();
    assert_eq!(
        m,
        [
            json!({"destination": "/etc/hosts", "type": "bind", "source": "/elsewhere/hosts", "options": ["rbind"]})
        ]
    );
}

#[test]
fn removal_by_destination_and_absent_removal_is_noop() {
    let spec = adjusted(&mounts(vec![
        remove_mount("/dev/mqueue"),
        remove_mount("/not/mounted"),
    ]));
    let d = destinations(&spec);
    assert!(!d.contains(&"/dev/mqueue".to_owned()));
    assert_eq!(d.len(), base_spec().mounts().as_ref().unwrap().len() - 1);
    snap!("removal_by_destination", spec);
}

#[test]
fn remove_then_add_same_destination_is_present() {
    // Addition listed before the marker: removals still go first.
    let spec = adjusted(&mounts(vec![
        mount("/etc/hosts", "/new/hosts", &["rbind", "ro"]),
        remove_mount("/etc/hosts"),
    ]));
    let hosts: Vec<Value> = json(&spec)["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["destination"] == "/etc/hosts")
        .cloned()
        .collect();
    assert_eq!(hosts.len(), 1);
    assert_eq!(hosts[0]["source"], "/new/hosts");
}

#[test]
fn later_addition_for_same_destination_wins() {
    let spec = adjusted(&mounts(vec![
        mount("/data", "/first", &[]),
        mount("/data", "/second", &[]),
    ]));
    let data: Vec<Value> = json(&spec)["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["destination"] == "/data")
        .cloned()
        .collect();
    assert_eq!(
        data,
        [json!({"destination": "/data", "type": "bind", "source": "/second"})]
    );
}

#[test]
fn rshared_and_rslave_set_rootfs_propagation() {
    let spec = adjusted(&mounts(vec![mount(
        "/shared",
        "/host/shared",
        &["rbind", "rslave"],
    )]));
    assert_eq!(json(&spec)["linux"]["rootfsPropagation"], "rslave");

    let spec = adjusted(&mounts(vec![
        mount("/a", "/host/a", &["rbind", "rslave"]),
        mount("/b", "/host/b", &["rbind", "rshared"]),
    ]));
    assert_eq!(json(&spec)["linux"]["rootfsPropagation"], "rshared");

    // rslave keeps an existing rshared root.
    let mut spec = base_spec();
    spec.linux_mut()
        .as_mut()
        .unwrap()
        .set_rootfs_propagation(Some("rshared".into()));
    applier()
        .apply_adjustment(
            &mut spec,
            &mounts(vec![mount("/s", "/host/s", &["rslave"])]),
        )
        .unwrap();
    assert_eq!(json(&spec)["linux"]["rootfsPropagation"], "rshared");

    // rprivate changes nothing.
    let spec = adjusted(&mounts(vec![mount("/p", "/host/p", &["rprivate"])]));
    assert_eq!(json(&spec)["linux"].get("rootfsPropagation"), None);
}

#[test]
fn mounts_created_when_missing() {
    let mut spec = base_spec();
    spec.set_mounts(None);
    applier()
        .apply_adjustment(
            &mut spec,
            &mounts(vec![remove_mount("/x"), mount("/y", "/h", &[])]),
        )
        .unwrap();
    assert_eq!(destinations(&spec), ["/y"]);
}
