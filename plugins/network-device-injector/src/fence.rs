//! The network-device-injector's allow-list: the `allow` section of its
//! configuration (see README.md, "Security"). Absent lists leave the
//! plugin as upstream's: any host interface a pod annotates is moved.

use nri_sample_common::fence::{
    ALLOW_KEY, ConfigError, Globs, Refused, check_namespace, read_config,
};
use nri_sample_common::goyaml::{Field, Shape};
use serde::Deserialize;

use crate::NetDevice;

/// The `allow` section as written (absent keys `None`).
#[derive(Debug, Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct RawAllow {
    namespaces: Option<Vec<String>>,
    network_devices: Option<Vec<String>>,
}

const CONFIG: Shape = Shape::Struct(&[
    Field::new("strict", Shape::Bool),
    Field::new(
        "allow",
        Shape::Struct(&[
            Field::new("namespaces", Shape::Seq(&Shape::Str)),
            Field::new("networkDevices", Shape::Seq(&Shape::Str)),
        ]),
    ),
]);

/// The allow-list in force. The default allows everything (upstream).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fence {
    namespaces: Globs,
    network_devices: Globs,
}

impl Fence {
    /// Reads the configuration: `strict` (when given) and the fence.
    ///
    /// # Errors
    ///
    /// [`ConfigError`]: not YAML, or an unknown key or a bad value in
    /// `allow`.
    pub fn configure(text: &str) -> Result<(Option<bool>, Fence), ConfigError> {
        let cfg = read_config::<RawAllow>(text, &CONFIG)?;
        Ok((
            cfg.strict,
            Fence {
                namespaces: Globs::new(cfg.allow.namespaces),
                network_devices: Globs::new(cfg.allow.network_devices),
            },
        ))
    }

    /// Checks the namespace of pod `namespace/name`, which has the
    /// annotation `key` (before it is decoded).
    ///
    /// # Errors
    ///
    /// [`Refused`] when the namespace is not listed.
    pub fn check_namespace(&self, namespace: &str, name: &str, key: &str) -> Result<(), Refused> {
        check_namespace(&self.namespaces, namespace, name, key)
    }

    /// Checks the devices annotated through `key` on pod `namespace/name`.
    ///
    /// # Errors
    ///
    /// [`Refused`]: the pod's namespace is not listed, or a host interface
    /// is not.
    pub fn check(
        &self,
        namespace: &str,
        name: &str,
        key: &str,
        devices: &[NetDevice],
    ) -> Result<(), Refused> {
        if devices.is_empty() {
            return Ok(());
        }
        check_namespace(&self.namespaces, namespace, name, key)?;
        match devices
            .iter()
            .find(|d| !self.network_devices.allows(&d.name))
        {
            None => Ok(()),
            Some(d) => Err(Refused::new(
                format!("{namespace}/{name}"),
                key,
                format!("host interface {:?}", d.name),
                format!(
                    "{ALLOW_KEY}.networkDevices {}",
                    self.network_devices.describe()
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use nri_plugin::Plugin;
    use nri_plugin::api::{
        Container, CreateContainerResponse, LinuxNamespace, LinuxPodSandbox, PodSandbox,
    };

    use crate::{NETDEVICE_KEY, NetDeviceInjector};

    const FENCED: &str = "allow:\n  namespaces: [net-lab]\n  networkDevices: [\"sriov-*\", eth9]\n";

    fn pod(namespace: &str, value: &str) -> PodSandbox {
        PodSandbox {
            id: format!("id-{namespace}"),
            name: "p".into(),
            namespace: namespace.into(),
            annotations: [(format!("{NETDEVICE_KEY}/pod"), value.to_owned())].into(),
            linux: Some(LinuxPodSandbox {
                namespaces: vec![LinuxNamespace {
                    r#type: "network".into(),
                    path: "/var/run/netns/x".into(),
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn ctr() -> Container {
        Container {
            id: "c".into(),
            name: "c".into(),
            ..Default::default()
        }
    }

    fn moved(r: &CreateContainerResponse) -> Vec<String> {
        r.adjust
            .as_ref()
            .and_then(|a| a.linux.as_ref())
            .map(|l| {
                let mut k: Vec<String> = l.net_devices.keys().cloned().collect();
                k.sort();
                k
            })
            .unwrap_or_default()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn allowed_interfaces_are_moved() {
        let p = NetDeviceInjector::new();
        p.apply_config(FENCED).unwrap();
        let pd = pod(
            "net-lab",
            "[{name: sriov-vf1}, {name: eth9, new_name: net1}]",
        );
        p.run_pod_sandbox(pd.clone()).await.unwrap();
        let r = p.create_container(pd, ctr()).await.unwrap();
        assert_eq!(moved(&r), ["eth9", "sriov-vf1"]);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn other_interfaces_and_namespaces_fail_the_pod() {
        let p = NetDeviceInjector::new();
        p.apply_config(FENCED).unwrap();
        let cases = [
            (
                "net-lab",
                "[{name: sriov-vf1}, {name: eth0}]",
                "host interface \"eth0\" is not allowed by allow.networkDevices [sriov-*, eth9]",
            ),
            (
                "default",
                "[{name: sriov-vf1}]",
                "namespace \"default\" is not allowed by allow.namespaces [net-lab]",
            ),
        ];
        for (ns, value, why) in cases {
            let pd = pod(ns, value);
            let e = p.run_pod_sandbox(pd.clone()).await.unwrap_err().to_string();
            let want = format!("pod {ns}/p: annotation \"netdevice.noderesource.dev/pod\": {why}");
            assert!(e.contains(&want), "{e}");
            // Creating a container of such a pod fails too.
            assert!(p.create_container(pd, ctr()).await.is_err());
        }
        // A pod without the annotation is not affected.
        let mut plain = pod("default", "");
        plain.annotations.clear();
        p.run_pod_sandbox(plain).await.unwrap();
    }

    /// The namespace is checked before the annotation is decoded.
    #[tokio::test(flavor = "current_thread")]
    async fn the_namespace_is_checked_before_decoding() {
        let p = NetDeviceInjector::new();
        p.apply_config(FENCED).unwrap();
        for v in ["- [", "[]", "{name: eth0}", "- {name: [x]}"] {
            let e = p.run_pod_sandbox(pod("default", v)).await.unwrap_err();
            assert!(
                e.to_string()
                    .contains("namespace \"default\" is not allowed"),
                "{v}: {e}"
            );
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn without_an_allow_list_any_interface_moves() {
        let p = NetDeviceInjector::new();
        p.apply_config("strict: false").unwrap();
        let pd = pod("default", "[{name: eth0}]");
        p.run_pod_sandbox(pd.clone()).await.unwrap();
        assert_eq!(
            moved(&p.create_container(pd, ctr()).await.unwrap()),
            ["eth0"]
        );
    }

    /// The example of the DaemonSet's ConfigMap
    /// (deploy/network-device-injector).
    #[test]
    fn the_deploy_example_is_a_valid_fence() {
        let cm = include_str!("../../../deploy/network-device-injector/configmap.yaml");
        let doc = nri_sample_common::parse_yaml(cm).unwrap();
        let p = NetDeviceInjector::new();
        p.apply_config(doc["data"]["config.yaml"].as_str().unwrap())
            .unwrap();
        let f = p.fence.get();
        let dev = |n: &str| {
            vec![crate::NetDevice {
                name: n.into(),
                ..Default::default()
            }]
        };
        assert!(f.check("net-lab", "p", "k", &dev("sriov-vf0")).is_ok());
        assert!(f.check("net-lab", "p", "k", &dev("eth0")).is_err());
        assert!(f.check("default", "p", "k", &dev("sriov-vf0")).is_err());
    }

    #[test]
    fn a_bad_allow_list_is_refused_and_the_old_one_kept() {
        let p = NetDeviceInjector::new();
        p.apply_config(FENCED).unwrap();
        assert!(p.apply_config("allow: {interfaces: [eth0]}").is_err());
        assert!(p.apply_config("allow: {networkDevices: eth0}").is_err());
        assert!(p.fence.get().network_devices.is_set());
    }
}
