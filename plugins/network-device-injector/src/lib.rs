//! The network device injector sample plugin: moves host network interfaces
//! into a pod's network namespace, as named in a pod annotation.
//!
//! It reads the same annotation and YAML value as upstream's
//! `plugins/network-device-injector` (see the README). Where upstream moves
//! the interfaces itself with netlink at `RunPodSandbox`, this plugin asks
//! the runtime to do it: it adds the interfaces as Linux net devices
//! (`ContainerAdjustment.linux.net_devices`, OCI `linux.netDevices`) to the
//! first container created in the pod, which joins the pod's network
//! namespace. The interfaces then stay in that namespace for the life of the
//! pod.
//!
//! [`NetDeviceInjector`] is the [`Plugin`]; [`parse_netdevices`] and
//! [`pod_netdevices`] are the annotation parsing, usable on their own.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard, PoisonError};

use nri_plugin::api::{
    Container, ContainerAdjustment, CreateContainerResponse, LinuxNetDevice, PodSandbox,
};
use nri_plugin::{
    ConfigureInfo, EventMask, HandlerResult, NriVersion, Plugin, SyncChunk, SyncKind,
};
use nri_sample_common::fence::{ConfigError, Current, Refused};
use nri_sample_common::goyaml::{Field, MAX_EXCERPT_BYTES, Shape, excerpt};
use nri_sample_common::{AnnotationError, Source, Strict, StrictError, decode_annotation};
use serde::{Deserialize, Serialize};

mod fence;
pub use fence::Fence;

/// The annotation key upstream's code reads (with `/pod` or bare).
pub const NETDEVICE_KEY: &str = "netdevice.noderesource.dev";
/// The deprecated key upstream still reads (with `/pod` or bare).
pub const OLD_NETDEVICE_KEY: &str = "netdevices.nri.containerd.io";
/// The plural key upstream's README and sample pod use; upstream's code
/// does not read it, so neither does this plugin (it warns, and refuses
/// the pod in strict mode, when a pod carries only this spelling).
pub const README_NETDEVICE_KEY: &str = "netdevices.noderesource.dev";

/// Why an annotation was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The value is not a YAML list of devices (upstream refuses it too).
    #[error("invalid network device annotation {key:?}: {reason}")]
    InvalidAnnotation {
        /// The annotation key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// A device's address does not parse (upstream refuses it too).
    #[error("invalid network device annotation {key:?}: device #{index}: {reason}")]
    InvalidDevice {
        /// The annotation key.
        key: String,
        /// Position in the list (0-based).
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// Input upstream ignores, refused in strict mode.
    #[error(transparent)]
    Strict(#[from] StrictError),
    /// The runtime's NRI version has no net device adjustment: it would
    /// drop the devices silently.
    #[error(
        "runtime {runtime} (NRI {version}) cannot move network devices {devices:?} into pods: NRI v0.11 or later needed"
    )]
    Unsupported {
        /// Runtime name and version.
        runtime: String,
        /// Its NRI version.
        version: NriVersion,
        /// The interfaces asked for.
        devices: Vec<String>,
    },
    /// The pod runs in the host network namespace.
    #[error("pod {pod:?} uses the host network: cannot inject network devices {devices:?}")]
    HostNetwork {
        /// The pod (`namespace/name`).
        pod: String,
        /// The interfaces asked for.
        devices: Vec<String>,
    },
    /// Outside the operator's allow-list (`allow` in the configuration).
    #[error(transparent)]
    Refused(#[from] Refused),
    /// The configuration cannot be read (the plugin does not register).
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// One annotated network device (upstream's YAML fields; see
/// `netdevice(7)`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NetDevice {
    /// Interface name on the host (mandatory).
    pub name: String,
    /// Interface name inside the pod (default: `name`).
    pub new_name: String,
    /// Address (checked as upstream does; applied by neither).
    pub address: String,
    /// Prefix length of `address` (default 32 for IPv4, 128 for IPv6; not
    /// checked or applied, as upstream).
    pub prefix: i64,
    /// MTU (not checked or applied, as upstream).
    pub mtu: i64,
}

/// The Go type of the annotation (`[]netdevice`), for decoding it as
/// upstream's `sigs.k8s.io/yaml` does.
const DEVICES: Shape = Shape::Seq(&Shape::Struct(&[
    Field::new("name", Shape::Str),
    Field::new("new_name", Shape::Str),
    Field::new("address", Shape::Str),
    Field::new("prefix", Shape::Int(64)),
    Field::new("mtu", Shape::Int(64)),
]));

impl NetDevice {
    /// The interface name inside the pod.
    pub fn pod_name(&self) -> &str {
        if self.new_name.is_empty() {
            &self.name
        } else {
            &self.new_name
        }
    }
}

/// The annotation of `annotations` that applies, in upstream's order:
/// `netdevice.noderesource.dev/pod`, `netdevices.nri.containerd.io/pod`,
/// `netdevice.noderesource.dev`, `netdevices.nri.containerd.io`. The plural
/// [`README_NETDEVICE_KEY`] is not one of them.
pub fn effective_annotation(annotations: &BTreeMap<String, String>) -> Option<(String, &str)> {
    [
        format!("{NETDEVICE_KEY}/pod"),
        format!("{OLD_NETDEVICE_KEY}/pod"),
        NETDEVICE_KEY.to_owned(),
        OLD_NETDEVICE_KEY.to_owned(),
    ]
    .into_iter()
    .find_map(|k| annotations.get(&k).map(|v| (k, v.as_str())))
}

/// The plural key of `annotations`, if the pod has one.
fn readme_annotation(annotations: &BTreeMap<String, String>) -> Option<(String, &str)> {
    [
        format!("{README_NETDEVICE_KEY}/pod"),
        README_NETDEVICE_KEY.to_owned(),
    ]
    .into_iter()
    .find_map(|k| annotations.get(&k).map(|v| (k, v.as_str())))
}

/// Whether `n` can be a Linux interface name.
fn valid_ifname(n: &str) -> bool {
    !n.is_empty() && n.len() <= 15 && !n.contains(['/', ' ', ':']) && n != "." && n != ".."
}

/// Parses an annotation value (`src` names the pod and key for messages)
/// as upstream does: a YAML list of devices decoded with
/// `sigs.k8s.io/yaml` rules (keys case-insensitive, unknown keys ignored,
/// numbers for strings taken as text). An empty value or `null` is no
/// device. Defaults `new_name` and `prefix`.
///
/// Upstream refuses a value that does not decode and an address that does
/// not parse; so does this. A device upstream fails to move without a
/// word (no or an invalid interface name, a host or pod name listed twice)
/// is dropped with a warning, or refused when `strict`.
///
/// # Errors
///
/// [`Error::InvalidAnnotation`], [`Error::InvalidDevice`], and
/// [`Error::Strict`] when `strict`.
pub fn parse_netdevices(src: &Source<'_>, strict: bool) -> Result<Vec<NetDevice>, Error> {
    let key = src.annotation;
    let devices: Vec<NetDevice> =
        decode_annotation(src, &DEVICES, &Vec::new(), strict).map_err(|e| match e {
            AnnotationError::Strict(s) => Error::Strict(s),
            other => Error::InvalidAnnotation {
                key: key.to_owned(),
                reason: match std::error::Error::source(&other) {
                    Some(inner) => inner.to_string(),
                    None => other.to_string(),
                },
            },
        })?;
    let mut hosts = BTreeSet::new();
    let mut pods = BTreeSet::new();
    let mut out = Vec::with_capacity(devices.len());
    // One warning for all the devices dropped (the first few named).
    let mut drops = src.drops(strict);
    for (index, mut d) in devices.into_iter().enumerate() {
        if !d.address.is_empty() {
            let ip: IpAddr = d.address.parse().map_err(|_| Error::InvalidDevice {
                key: key.to_owned(),
                index,
                reason: format!(
                    "error parsing address {:?}",
                    excerpt(&d.address, MAX_EXCERPT_BYTES)
                ),
            })?;
            if d.prefix == 0 {
                d.prefix = if ip.is_ipv4() { 32 } else { 128 };
            }
        }
        if d.new_name.is_empty() {
            d.new_name = d.name.clone();
        }
        let problem = if !valid_ifname(&d.name) {
            Some(format!(
                "device #{index}: invalid host interface name {:?}",
                excerpt(&d.name, MAX_EXCERPT_BYTES)
            ))
        } else if !valid_ifname(&d.new_name) {
            Some(format!(
                "device #{index}: invalid pod interface name {:?}",
                excerpt(&d.new_name, MAX_EXCERPT_BYTES)
            ))
        } else if hosts.contains(&d.name) {
            Some(format!(
                "device #{index}: host interface {:?} listed twice",
                d.name
            ))
        } else if pods.contains(&d.new_name) {
            Some(format!(
                "device #{index}: pod interface name {:?} used twice",
                d.new_name
            ))
        } else {
            None
        };
        if let Some(what) = problem {
            // Upstream's move of such a device fails and is not reported.
            drops.push(format!("{what}; not moved"))?;
            continue;
        }
        hosts.insert(d.name.clone());
        pods.insert(d.new_name.clone());
        out.push(d);
    }
    Ok(out)
}

/// The devices annotated on `pod` (empty without an annotation).
///
/// # Errors
///
/// A bad annotation ([`parse_netdevices`]), or [`Error::HostNetwork`] when
/// there are devices but the pod has no network namespace of its own.
pub fn pod_netdevices(pod: &PodSandbox, strict: bool) -> Result<Vec<NetDevice>, Error> {
    let Some((key, value)) = effective_annotation(&pod.annotations) else {
        if let Some((key, value)) = readme_annotation(&pod.annotations) {
            let src = Source {
                pod: &pod.name,
                container: "",
                annotation: &key,
                value,
            };
            src.dropped(
                strict,
                format!("annotation key not read by the Go plugin (use {NETDEVICE_KEY}/pod)"),
            )?;
        }
        return Ok(Vec::new());
    };
    let src = Source {
        pod: &pod.name,
        container: "",
        annotation: &key,
        value,
    };
    let devices = parse_netdevices(&src, strict)?;
    if !devices.is_empty() && pod_netns(pod).is_none() {
        return Err(Error::HostNetwork {
            pod: format!("{}/{}", pod.namespace, pod.name),
            devices: devices.iter().map(|d| d.name.clone()).collect(),
        });
    }
    Ok(devices)
}

/// The pod's network namespace path; `None` for a host-network pod.
pub fn pod_netns(pod: &PodSandbox) -> Option<&str> {
    pod.linux
        .as_ref()?
        .namespaces
        .iter()
        .find(|n| n.r#type == "network" && !n.path.is_empty())
        .map(|n| n.path.as_str())
}

/// The adjustment moving `devices` into a container.
pub fn adjustment(devices: &[NetDevice]) -> ContainerAdjustment {
    let mut adjust = ContainerAdjustment::default();
    for d in devices {
        adjust.add_linux_net_device(
            d.name.clone(),
            LinuxNetDevice {
                name: d.pod_name().to_owned(),
            },
        );
    }
    adjust
}

/// Per-pod state: whether a container of the pod already got the devices.
#[derive(Debug, Default)]
struct Pods {
    /// Pods (by id) in which a container that got the devices was created.
    done: BTreeSet<String>,
    /// Pods (by id) for which a container got the devices and its creation
    /// is not confirmed yet, with that container's id.
    pending: BTreeMap<String, String>,
}

/// The plugin. Subscribes to RunPodSandbox (checks the annotation early, so
/// a bad one fails the pod), CreateContainer (adds the devices to the first
/// container of the pod), PostCreateContainer (confirms it),
/// StopPodSandbox and RemovePodSandbox (forget the pod).
///
/// Build its stub with `SyncMode::Streaming`: it learns which pods already
/// have containers in `synchronize_chunk`, one message at a time.
#[derive(Debug)]
pub struct NetDeviceInjector {
    pods: Mutex<Pods>,
    /// The runtime, when its NRI version lacks net devices.
    unsupported: Mutex<Option<(String, NriVersion)>>,
    /// Strict mode (`-strict`, or `strict: true` in the configuration).
    strict: Strict,
    /// The operator's allow-list (`allow` in the configuration).
    fence: Current<Fence>,
    /// The `-config` file's text (used when the runtime passes none).
    config: String,
    /// The synchronization under way: pods (by id) with a container in
    /// the messages so far.
    syncing: Mutex<Option<BTreeSet<String>>>,
}

impl Default for NetDeviceInjector {
    fn default() -> Self {
        Self::with_strict(false)
    }
}

/// The first NRI version with net device adjustments.
pub const NET_DEVICES_SINCE: NriVersion = NriVersion::new(0, 11, 0);

impl NetDeviceInjector {
    /// A plugin with no state.
    pub fn new() -> Self {
        Self::default()
    }

    /// A plugin with no state, strict (`-strict`) or not.
    pub fn with_strict(strict: bool) -> Self {
        Self::with_config(strict, String::new())
    }

    /// A plugin with no state, strict (`-strict`) or not, with the
    /// `-config` text used when the runtime passes no configuration.
    pub fn with_config(strict: bool, config: String) -> Self {
        NetDeviceInjector {
            pods: Mutex::new(Pods::default()),
            unsupported: Mutex::new(None),
            strict: Strict::new(strict),
            fence: Current::default(),
            config,
            syncing: Mutex::new(None),
        }
    }

    /// Applies a configuration text: `strict` and the allow-list.
    ///
    /// # Errors
    ///
    /// [`Error::Config`]; the settings in force are kept.
    pub fn apply_config(&self, text: &str) -> Result<(), Error> {
        let (strict, fence) = Fence::configure(text)?;
        self.strict.set(strict);
        self.fence.set(fence);
        Ok(())
    }

    fn pods(&self) -> MutexGuard<'_, Pods> {
        self.pods.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The devices of `pod`, refused if the runtime cannot move them. The
    /// pod's namespace is checked against the fence before the annotation
    /// is decoded.
    fn devices(&self, pod: &PodSandbox) -> Result<Vec<NetDevice>, Error> {
        if let Some((key, value)) = effective_annotation(&pod.annotations) {
            if !value.trim().is_empty() {
                self.fence
                    .get()
                    .check_namespace(&pod.namespace, &pod.name, &key)?;
            }
        }
        let devices = pod_netdevices(pod, self.strict.get())?;
        if devices.is_empty() {
            return Ok(devices);
        }
        if let Some((key, _)) = effective_annotation(&pod.annotations) {
            self.fence
                .get()
                .check(&pod.namespace, &pod.name, &key, &devices)?;
        }
        let unsupported = self
            .unsupported
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        match unsupported {
            Some((runtime, version)) => Err(Error::Unsupported {
                runtime,
                version,
                devices: devices.iter().map(|d| d.name.clone()).collect(),
            }),
            None => Ok(devices),
        }
    }

    fn forget(&self, pod: &PodSandbox) {
        let mut p = self.pods();
        p.done.remove(&pod.id);
        p.pending.remove(&pod.id);
    }
}

#[nri_plugin::plugin]
impl Plugin for NetDeviceInjector {
    async fn configure(&self, info: &ConfigureInfo) -> HandlerResult<Option<EventMask>> {
        // The Go plugin takes no configuration; `strict` and `allow` are ours.
        let text = if info.config.trim().is_empty() {
            self.config.as_str()
        } else {
            info.config.as_str()
        };
        self.apply_config(text).map_err(|e| {
            tracing::error!(error = %e, "configuration refused");
            e
        })?;
        let version = info.runtime.nri_version.version;
        let unsupported = (version < NET_DEVICES_SINCE).then(|| {
            tracing::warn!(
                runtime = %info.runtime.name,
                runtime_version = %info.runtime.version,
                nri_version = %version,
                "this runtime cannot move network devices (NRI v0.11+ needed): pods asking for them will fail"
            );
            (format!("{} {}", info.runtime.name, info.runtime.version), version)
        });
        *self
            .unsupported
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = unsupported;
        Ok(None)
    }

    /// One message of the synchronization at a time (the plugin is built
    /// with `SyncMode::Streaming`): only the pod id of each container is
    /// kept, one container decoded at a time, never the runtime's state.
    async fn synchronize_chunk(
        &self,
        chunk: SyncChunk,
        _kind: SyncKind,
    ) -> HandlerResult<Vec<nri_plugin::api::ContainerUpdate>> {
        // A pod that already has containers had its first container created
        // (with or without us): never add the devices again.
        let mut with_containers = BTreeSet::new();
        for c in chunk.containers() {
            with_containers.insert(c?.pod_sandbox_id);
        }
        let mut syncing = self.syncing.lock().unwrap_or_else(PoisonError::into_inner);
        syncing
            .get_or_insert_with(BTreeSet::new)
            .append(&mut with_containers);
        if !chunk.more() {
            let done = syncing.take().unwrap_or_default();
            *self.pods() = Pods {
                done,
                pending: BTreeMap::new(),
            };
        }
        Ok(Vec::new())
    }

    fn disconnected(&self, _cause: &nri_plugin::Error) {
        // A synchronization cut short starts afresh on the next connection.
        *self.syncing.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    async fn run_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        let devices = self.devices(&pod)?;
        if !devices.is_empty() {
            tracing::info!(
                pod = %format!("{}/{}", pod.namespace, pod.name),
                devices = %nri_sample_common::listing(
                    devices.iter().map(|d| format!("{:?}->{:?}", d.name, d.pod_name()))
                ),
                "pod asks for network devices"
            );
        }
        Ok(())
    }

    async fn stop_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.forget(&pod);
        Ok(())
    }

    async fn remove_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.forget(&pod);
        Ok(())
    }

    async fn create_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        let devices = self.devices(&pod)?;
        if devices.is_empty() {
            return Ok(CreateContainerResponse::default());
        }
        {
            let mut p = self.pods();
            if p.done.contains(&pod.id) {
                tracing::debug!(pod = %pod.name, container = %ctr.name, "network devices already in the pod");
                return Ok(CreateContainerResponse::default());
            }
            if let Some(other) = p.pending.get(&pod.id) {
                // Containers of a pod are created one after the other: an
                // earlier creation that was never confirmed failed.
                tracing::debug!(pod = %pod.name, earlier = %other, "earlier creation not confirmed; retrying with this container");
            }
            p.pending.insert(pod.id.clone(), ctr.id.clone());
        }
        tracing::info!(
            pod = %format!("{}/{}", pod.namespace, pod.name),
            container = %ctr.name,
            devices = devices.len(),
            "moving network devices into the pod with this container"
        );
        Ok(CreateContainerResponse {
            adjust: Some(adjustment(&devices)),
            ..Default::default()
        })
    }

    async fn post_create_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        let mut p = self.pods();
        if p.pending.get(&pod.id) == Some(&ctr.id) {
            p.pending.remove(&pod.id);
            p.done.insert(pod.id);
        } else if !p.pending.contains_key(&pod.id)
            && !p.done.contains(&pod.id)
            && effective_annotation(&pod.annotations).is_some()
        {
            // Created while we were not watching its creation.
            p.done.insert(pod.id);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
