//! Shared fixtures: a realistic starting spec and snapshot helpers.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use nri_api::api;
use oci_spec::runtime::{
    LinuxCpu, LinuxDevice, LinuxDeviceCgroup, LinuxDeviceType, LinuxMemory, LinuxResources, Mount,
    Spec,
};

/// oci-spec's default spec (runc-like mounts, namespaces, masked paths),
/// with a few things a CRI runtime would add: env, a bind mount, an
/// annotation, a sysctl, a device with its allow rule and some resources.
/// Capabilities are dropped because oci-spec keeps them in a `HashSet`,
/// whose JSON order is not stable.
pub fn base_spec() -> Spec {
    let mut spec = Spec::default();
    spec.set_hostname(Some("nri-test".into()));
    let process = spec.process_mut().as_mut().unwrap();
    process.set_capabilities(None);
    process.set_args(Some(vec!["/app".into(), "--serve".into()]));
    let mut env = process.env().clone().unwrap();
    env.push("HOME=/root".into());
    env.push("LANG=C.UTF-8".into());
    process.set_env(Some(env));

    let mut hosts = Mount::default();
    hosts
        .set_destination("/etc/hosts".into())
        .set_typ(Some("bind".into()))
        .set_source(Some("/var/lib/pod/hosts".into()))
        .set_options(Some(vec!["rbind".into(), "ro".into()]));
    spec.mounts_mut().as_mut().unwrap().push(hosts);

    spec.set_annotations(Some(HashMap::from([(
        "io.kubernetes.cri.container-name".to_owned(),
        "app".to_owned(),
    )])));

    let linux = spec.linux_mut().as_mut().unwrap();
    linux.set_sysctl(Some(HashMap::from([(
        "net.ipv4.ip_unprivileged_port_start".to_owned(),
        "0".to_owned(),
    )])));
    let mut fuse = LinuxDevice::default();
    fuse.set_path("/dev/fuse".into())
        .set_typ(LinuxDeviceType::C)
        .set_major(10)
        .set_minor(229)
        .set_file_mode(Some(0o666));
    linux.set_devices(Some(vec![fuse]));

    let mut deny_all = LinuxDeviceCgroup::default();
    deny_all.set_allow(false).set_access(Some("rwm".into()));
    let mut fuse_rule = LinuxDeviceCgroup::default();
    fuse_rule
        .set_allow(true)
        .set_typ(Some(LinuxDeviceType::C))
        .set_major(Some(10))
        .set_minor(Some(229))
        .set_access(Some("rwm".into()));
    let mut memory = LinuxMemory::default();
    memory.set_limit(Some(256 << 20)).set_swap(Some(256 << 20));
    let mut cpu = LinuxCpu::default();
    cpu.set_shares(Some(1024))
        .set_quota(Some(100_000))
        .set_period(Some(100_000));
    let mut res = LinuxResources::default();
    res.set_devices(Some(vec![deny_all, fuse_rule]))
        .set_memory(Some(memory))
        .set_cpu(Some(cpu));
    linux.set_resources(Some(res));
    linux.set_cgroups_path(Some("/kubepods/pod1/ctr1".into()));
    spec
}

/// The spec as JSON, for assertions on fields by their OCI names.
pub fn json(spec: &Spec) -> serde_json::Value {
    nri_oci::spec_json(spec).unwrap()
}

/// Snapshot a spec as JSON with maps sorted (oci-spec uses `HashMap`s).
#[macro_export]
macro_rules! snap {
    ($name:expr, $spec:expr) => {{
        let mut settings = insta::Settings::clone_current();
        settings.set_sort_maps(true);
        settings.bind(|| insta::assert_json_snapshot!($name, $spec));
    }};
}

pub fn kv(key: &str, value: &str) -> api::KeyValue {
    api::KeyValue {
        key: key.into(),
        value: value.into(),
    }
}

pub fn mount(dest: &str, source: &str, options: &[&str]) -> api::Mount {
    api::Mount {
        destination: dest.into(),
        r#type: "bind".into(),
        source: source.into(),
        options: options.iter().map(|s| s.to_string()).collect(),
    }
}

pub fn remove_mount(dest: &str) -> api::Mount {
    api::Mount {
        destination: format!("-{dest}"),
        ..Default::default()
    }
}

pub fn linux(l: api::LinuxContainerAdjustment) -> api::ContainerAdjustment {
    api::ContainerAdjustment {
        linux: Some(l),
        ..Default::default()
    }
}

pub fn resources(r: api::LinuxResources) -> api::ContainerAdjustment {
    linux(api::LinuxContainerAdjustment {
        resources: Some(r),
        ..Default::default()
    })
}

pub fn applier() -> nri_oci::Applier {
    nri_oci::Applier::builder().build()
}

/// Apply and return the new spec.
pub fn adjusted(adj: &api::ContainerAdjustment) -> Spec {
    let mut spec = base_spec();
    applier().apply_adjustment(&mut spec, adj).unwrap();
    spec
}
