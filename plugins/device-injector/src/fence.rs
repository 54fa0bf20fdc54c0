//! The device-injector's allow-list: the `allow` section of its
//! configuration (see README.md, "Security"). Every list is optional; an
//! absent list leaves its setting as upstream has it (anything a pod
//! annotates is injected).

use nri_sample_common::fence::{
    ALLOW_KEY, ConfigError, Glob, Globs, PrefixKind, Prefixes, Refused, check_namespace,
    read_config,
};
use nri_sample_common::goyaml::{Field, Shape};
use serde::Deserialize;

use crate::inject::{Device, MountSpec, NetDevice, Request};
use crate::mount_fence::MountFence;
use crate::rules::{
    MAX_MAJOR, MAX_MINOR, absolute_without_dot_dot, sysctl_entry_can_be_namespaced,
    sysctl_namespace, valid_cdi_name, valid_ifname,
};

/// One entry of `allow.devices`, as written.
#[derive(Debug, Deserialize, Default, Clone, PartialEq, Eq)]
#[serde(default)]
struct RawDeviceRule {
    path: String,
    r#type: String,
    major: String,
    minor: String,
}

/// The `allow` section as written (absent keys `None`).
#[derive(Debug, Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct RawAllow {
    namespaces: Option<Vec<String>>,
    devices: Option<Vec<RawDeviceRule>>,
    mount_sources: Option<Vec<String>>,
    mount_types: Option<Vec<String>>,
    mount_options: Option<Vec<String>>,
    cdi_devices: Option<Vec<String>>,
    sysctls: Option<Vec<String>>,
    network_devices: Option<Vec<String>>,
    io_priority_classes: Option<Vec<String>>,
    scheduling_policies: Option<Vec<String>>,
}

/// The configuration as the Go type it would be (numbers for strings are
/// taken as their text, as `sigs.k8s.io/yaml` does).
const CONFIG: Shape = Shape::Struct(&[
    Field::new("strict", Shape::Bool),
    Field::new(
        "allow",
        Shape::Struct(&[
            Field::new("namespaces", Shape::Seq(&Shape::Str)),
            Field::new(
                "devices",
                Shape::Seq(&Shape::Struct(&[
                    Field::new("path", Shape::Str),
                    Field::new("type", Shape::Str),
                    Field::new("major", Shape::Str),
                    Field::new("minor", Shape::Str),
                ])),
            ),
            Field::new("mountSources", Shape::Seq(&Shape::Str)),
            Field::new("mountTypes", Shape::Seq(&Shape::Str)),
            Field::new("mountOptions", Shape::Seq(&Shape::Str)),
            Field::new("cdiDevices", Shape::Seq(&Shape::Str)),
            Field::new("sysctls", Shape::Seq(&Shape::Str)),
            Field::new("networkDevices", Shape::Seq(&Shape::Str)),
            Field::new("ioPriorityClasses", Shape::Seq(&Shape::Str)),
            Field::new("schedulingPolicies", Shape::Seq(&Shape::Str)),
        ]),
    ),
]);

/// An inclusive range of device numbers; `None` bounds: any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Range(Option<(i64, i64)>);

impl Range {
    fn parse(key: &str, s: &str) -> Result<Range, ConfigError> {
        let bad = || ConfigError::Value {
            key: key.to_owned(),
            reason: format!("{s:?} is not a number, a range like 0-15, or *"),
        };
        let s = s.trim();
        if s.is_empty() || s == "*" {
            return Ok(Range(None));
        }
        let (lo, hi) = s.split_once('-').unwrap_or((s, s));
        let lo: i64 = lo.trim().parse().map_err(|_| bad())?;
        let hi: i64 = hi.trim().parse().map_err(|_| bad())?;
        if lo > hi {
            return Err(bad());
        }
        Ok(Range(Some((lo, hi))))
    }

    fn contains(self, n: i64) -> bool {
        self.0.is_none_or(|(lo, hi)| (lo..=hi).contains(&n))
    }
}

/// One device rule: every part it sets must match.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DeviceRule {
    path: Option<Glob>,
    r#type: Option<String>,
    major: Range,
    minor: Range,
}

impl DeviceRule {
    fn parse(i: usize, raw: &RawDeviceRule) -> Result<DeviceRule, ConfigError> {
        let key = |f: &str| format!("{ALLOW_KEY}.devices[{i}].{f}");
        let t = raw.r#type.trim();
        if !matches!(t, "*" | "c" | "b" | "u" | "p") {
            return Err(ConfigError::Value {
                key: key("type"),
                reason: format!(
                    "{t:?} is not c, b, u, p or * (a rule names its type; * allows any)"
                ),
            });
        }
        if raw.major.trim().is_empty() {
            return Err(ConfigError::Value {
                key: key("major"),
                reason: "a rule names its major numbers (a number, a range like 0-15, or * for any): the numbers decide which device a pod reaches".into(),
            });
        }
        let rule = DeviceRule {
            path: (!raw.path.is_empty()).then(|| Glob::new(raw.path.clone())),
            r#type: (t != "*").then(|| t.to_owned()),
            major: Range::parse(&key("major"), &raw.major)?,
            minor: Range::parse(&key("minor"), &raw.minor)?,
        };
        Ok(rule)
    }

    fn matches(&self, d: &Device) -> bool {
        self.path.as_ref().is_none_or(|g| g.matches(&d.path))
            && self.r#type.as_ref().is_none_or(|t| *t == d.r#type)
            && self.major.contains(d.major)
            && self.minor.contains(d.minor)
    }
}

/// The allow-list in force. The default allows everything (upstream).
#[derive(Debug, Clone, Default)]
pub struct Fence {
    namespaces: Globs,
    devices: Option<Vec<DeviceRule>>,
    devices_written: String,
    mounts: MountFence,
    cdi_devices: Globs,
    sysctls: Prefixes,
    network_devices: Globs,
    io_priority_classes: Globs,
    scheduling_policies: Globs,
}

/// Reads the configuration: `strict` (when given) and the fence.
///
/// # Errors
///
/// [`ConfigError`]: not YAML, an unknown key or a bad value in `allow`.
pub fn configure(text: &str) -> Result<(Option<bool>, Fence), ConfigError> {
    let cfg = read_config::<RawAllow>(text, &CONFIG)?;
    let a = cfg.allow;
    let devices = match &a.devices {
        None => None,
        Some(list) => Some(
            list.iter()
                .enumerate()
                .map(|(i, r)| DeviceRule::parse(i, r))
                .collect::<Result<Vec<_>, _>>()?,
        ),
    };
    let devices_written = a
        .devices
        .iter()
        .flatten()
        .map(|r| {
            format!(
                "{{path: {:?}, type: {:?}, major: {:?}, minor: {:?}}}",
                r.path, r.r#type, r.major, r.minor
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let fence = Fence {
        namespaces: Globs::new(a.namespaces),
        devices,
        devices_written: format!("[{devices_written}]"),
        mounts: MountFence::new(a.mount_sources, a.mount_types, a.mount_options)?,
        cdi_devices: Globs::new(a.cdi_devices),
        sysctls: sysctls(a.sysctls)?,
        network_devices: Globs::new(a.network_devices),
        io_priority_classes: Globs::new(a.io_priority_classes),
        scheduling_policies: Globs::new(a.scheduling_policies),
    };
    Ok((cfg.strict, fence))
}

/// `allow.sysctls`: every entry must be able to allow a sysctl of the
/// pod's own namespaces (one of the node's would change the node).
fn sysctls(list: Option<Vec<String>>) -> Result<Prefixes, ConfigError> {
    for (i, e) in list.iter().flatten().enumerate() {
        if !sysctl_entry_can_be_namespaced(e) {
            return Err(ConfigError::Value {
                key: format!("{ALLOW_KEY}.sysctls[{i}]"),
                reason: format!(
                    "{e:?} allows no namespaced sysctl (net.*, kernel.shm*, kernel.msg*, kernel.sem, fs.mqueue.*, kernel.hostname, kernel.domainname): a sysctl of the node cannot be allowed"
                ),
            });
        }
    }
    Prefixes::new(&format!("{ALLOW_KEY}.sysctls"), list, PrefixKind::Sysctl)
}

impl Fence {
    fn refuse(r: &Request<'_>, annotation: &str, value: String, rule: String) -> Refused {
        Refused::new(
            format!("{}/{}", r.namespace, r.pod),
            annotation,
            value,
            rule,
        )
    }

    /// The pod's namespace, before anything of `annotation` is injected.
    pub(crate) fn pod(&self, r: &Request<'_>, annotation: &str) -> Result<(), Refused> {
        check_namespace(&self.namespaces, r.namespace, r.pod, annotation)
    }

    pub(crate) fn device(&self, r: &Request<'_>, key: &str, d: &Device) -> Result<(), Refused> {
        let Some(rules) = &self.devices else {
            return Ok(());
        };
        let value = || format!("device {:?} ({} {}:{})", d.path, d.r#type, d.major, d.minor);
        if let Some(why) = malformed_device(d) {
            return Err(Self::refuse(r, key, value(), why.into()));
        }
        if rules.iter().any(|rule| rule.matches(d)) {
            return Ok(());
        }
        Err(Self::refuse(
            r,
            key,
            value(),
            format!("{ALLOW_KEY}.devices {}", self.devices_written),
        ))
    }

    pub(crate) fn mount(&self, r: &Request<'_>, key: &str, m: &MountSpec) -> Result<(), Refused> {
        self.mounts
            .check(m)
            .map_err(|o| Self::refuse(r, key, o.value, o.rule))
    }

    pub(crate) fn cdi_device(&self, r: &Request<'_>, key: &str, name: &str) -> Result<(), Refused> {
        if self.cdi_devices.is_set() && !valid_cdi_name(name) {
            return Err(Self::refuse(
                r,
                key,
                format!("CDI device {name:?}"),
                "a fully qualified CDI device name (vendor.com/class=name)".into(),
            ));
        }
        if self.cdi_devices.allows(name) {
            return Ok(());
        }
        Err(Self::refuse(
            r,
            key,
            format!("CDI device {name:?}"),
            format!("{ALLOW_KEY}.cdiDevices {}", self.cdi_devices.describe()),
        ))
    }

    pub(crate) fn sysctl(&self, r: &Request<'_>, key: &str, name: &str) -> Result<(), Refused> {
        if self.sysctls.is_set() {
            let why = match sysctl_namespace(name) {
                None => Some("a sysctl of the pod's own namespaces (net.*, kernel.shm*, kernel.msg*, kernel.sem, fs.mqueue.*, kernel.hostname, kernel.domainname)".to_owned()),
                Some(ns) if !r.has_namespace(ns) => Some(format!(
                    "a pod with its own {ns} namespace (this one shares the node's)"
                )),
                Some(_) => None,
            };
            if let Some(why) = why {
                return Err(Self::refuse(r, key, format!("sysctl {name:?}"), why));
            }
        }
        if self.sysctls.allows(name) {
            return Ok(());
        }
        Err(Self::refuse(
            r,
            key,
            format!("sysctl {name:?}"),
            format!("{ALLOW_KEY}.sysctls {}", self.sysctls.describe()),
        ))
    }

    pub(crate) fn net_device(
        &self,
        r: &Request<'_>,
        key: &str,
        d: &NetDevice,
    ) -> Result<(), Refused> {
        if self.network_devices.is_set() && !(valid_ifname(&d.host_if) && valid_ifname(&d.name)) {
            return Err(Self::refuse(
                r,
                key,
                format!("network device {:?} -> {:?}", d.host_if, d.name),
                "interface names of 1 to 15 bytes without /, : or white space".into(),
            ));
        }
        if self.network_devices.allows(&d.host_if) {
            return Ok(());
        }
        Err(Self::refuse(
            r,
            key,
            format!("host interface {:?}", d.host_if),
            format!(
                "{ALLOW_KEY}.networkDevices {}",
                self.network_devices.describe()
            ),
        ))
    }

    pub(crate) fn io_class(&self, r: &Request<'_>, key: &str, class: &str) -> Result<(), Refused> {
        if self.io_priority_classes.allows(class) {
            return Ok(());
        }
        Err(Self::refuse(
            r,
            key,
            format!("I/O priority class {class:?}"),
            format!(
                "{ALLOW_KEY}.ioPriorityClasses {}",
                self.io_priority_classes.describe()
            ),
        ))
    }

    pub(crate) fn policy(&self, r: &Request<'_>, key: &str, policy: &str) -> Result<(), Refused> {
        if self.scheduling_policies.allows(policy) {
            return Ok(());
        }
        Err(Self::refuse(
            r,
            key,
            format!("scheduling policy {policy:?}"),
            format!(
                "{ALLOW_KEY}.schedulingPolicies {}",
                self.scheduling_policies.describe()
            ),
        ))
    }
}

/// Why a device is refused by any device fence, whatever its rules: what
/// the runtime would make of it is not what a rule can describe (a
/// wildcard type or number in the device cgroup, numbers the kernel
/// truncates, a path that leaves the pattern's tree, file-type or set-id
/// bits in the mode).
fn malformed_device(d: &Device) -> Option<&'static str> {
    if !matches!(d.r#type.as_str(), "c" | "b" | "u" | "p") {
        return Some("a device type of c, b, u or p");
    }
    if !(0..=MAX_MAJOR).contains(&d.major) || !(0..=MAX_MINOR).contains(&d.minor) {
        return Some("device numbers the kernel has (major 0-4095, minor 0-1048575)");
    }
    if !absolute_without_dot_dot(&d.path) {
        return Some("an absolute device path without `..` or control characters");
    }
    if d.file_mode & !0o777 != 0 {
        return Some("a file mode of permission bits only (at most 0777)");
    }
    None
}

#[cfg(test)]
#[path = "fence_tests.rs"]
mod tests;
