//! Shared helpers of the merge and validate tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use nri_api::api::{
    Container, ContainerAdjustment, LinuxContainer, LinuxDevice, LinuxNamespace, LinuxNetDevice,
    Mount, PodSandbox,
};
use nri_merge::CreateResult;
use nri_merge::PluginId;

pub const CTR: &str = "ctr0";

pub fn pid(s: &str) -> PluginId {
    PluginId::parse(s).unwrap()
}

pub fn pod() -> PodSandbox {
    PodSandbox {
        id: "pod0".into(),
        name: "pod0".into(),
        namespace: "default".into(),
        ..Default::default()
    }
}

pub fn mount(dest: &str, src: &str) -> Mount {
    Mount {
        destination: dest.into(),
        source: src.into(),
        r#type: "bind".into(),
        options: vec!["ro".into()],
    }
}

pub fn device(path: &str, major: i64) -> LinuxDevice {
    LinuxDevice {
        path: path.into(),
        r#type: "c".into(),
        major,
        minor: 1,
        ..Default::default()
    }
}

pub fn ns(t: &str, path: &str) -> LinuxNamespace {
    LinuxNamespace {
        r#type: t.into(),
        path: path.into(),
    }
}

/// A container that already has one of everything removable.
pub fn ctr() -> Container {
    Container {
        id: CTR.into(),
        pod_sandbox_id: "pod0".into(),
        name: "ctr0".into(),
        annotations: BTreeMap::from([("old-ann".into(), "v".into())]),
        args: vec!["sleep".into(), "1".into()],
        env: vec!["OLD=1".into(), "PATH=/bin".into()],
        mounts: vec![mount("/old", "/host/old")],
        linux: Some(LinuxContainer {
            devices: vec![device("/dev/old", 1)],
            namespaces: vec![ns("network", "/proc/1/ns/net"), ns("ipc", "")],
            sysctl: BTreeMap::from([("net.old".into(), "1".into())]),
            net_devices: BTreeMap::from([(
                "eth-old".into(),
                LinuxNetDevice {
                    name: "old0".into(),
                },
            )]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn result() -> CreateResult {
    CreateResult::new(pod(), ctr())
}

pub fn adj(f: impl FnOnce(&mut ContainerAdjustment)) -> ContainerAdjustment {
    let mut a = ContainerAdjustment::default();
    f(&mut a);
    a
}

/// Applies an adjustment only.
pub fn apply(
    r: &mut CreateResult,
    plugin: &str,
    a: ContainerAdjustment,
) -> Result<(), nri_merge::Error> {
    r.apply(&pid(plugin), Some(a), Vec::new(), Vec::new())
}

pub fn linux(a: &ContainerAdjustment) -> &nri_api::api::LinuxContainerAdjustment {
    a.linux.as_ref().expect("merged adjustment has linux")
}

pub fn clinux(c: &Container) -> &LinuxContainer {
    c.linux.as_ref().expect("container has linux")
}
