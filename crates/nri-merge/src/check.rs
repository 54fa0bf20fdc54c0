//! Structural checks of one plugin's answer before it is merged.
//!
//! These catch answers no runtime can apply (a mount without a destination,
//! an environment variable without a name, a memory limit of -5 bytes) and
//! turn them into an error naming the plugin, instead of passing them on to
//! the runtime's OCI layer where the failure would no longer say whose it
//! was. Policy (what a plugin may change at all) is the validators' job, not
//! this module's.

use nri_api::api::{
    ContainerAdjustment, ContainerUpdate, LinuxContainerAdjustment, LinuxResources, OptionalInt64,
};

use crate::error::Error;
use crate::plugin::PluginId;

/// The marker that turns a key into a removal (`"-key"`).
const REMOVAL_PREFIX: char = '-';

/// The smallest meaningful value of a signed limit: -1 means "unlimited"
/// in the OCI runtime spec; anything lower is not a limit.
const UNLIMITED: i64 = -1;

/// Checks one plugin's container adjustment.
pub(crate) fn check_adjustment(plugin: &PluginId, a: &ContainerAdjustment) -> Result<(), Error> {
    adjustment_problem(a).map_or(Ok(()), |reason| {
        Err(Error::InvalidAdjustment {
            plugin: plugin.to_string(),
            reason,
        })
    })
}

/// Checks one plugin's update of another container (or of the target of an
/// UpdateContainer request).
pub(crate) fn check_update(plugin: &PluginId, u: &ContainerUpdate) -> Result<(), Error> {
    let problem = u
        .linux
        .as_ref()
        .and_then(|l| l.resources.as_ref())
        .and_then(resources_problem);
    problem.map_or(Ok(()), |reason| {
        Err(Error::InvalidUpdate {
            plugin: plugin.to_string(),
            container: u.container_id.clone(),
            reason,
        })
    })
}

/// A key, with its removal marker stripped, must name something; `noun`
/// is what the key is ("name", "destination", "path", ...).
fn key_problem(what: &str, noun: &str, key: &str) -> Option<String> {
    let name = key.strip_prefix(REMOVAL_PREFIX).unwrap_or(key);
    if name.is_empty() {
        return Some(format!("{what} with an empty {noun} ({key:?})"));
    }
    if name.contains('\0') {
        return Some(format!("{what} {key:?} contains a NUL byte"));
    }
    None
}

fn adjustment_problem(a: &ContainerAdjustment) -> Option<String> {
    for k in a.annotations.keys() {
        if let Some(p) = key_problem("annotation", "name", k) {
            return Some(p);
        }
    }
    for m in &a.mounts {
        if let Some(p) = key_problem("mount", "destination", &m.destination) {
            return Some(p);
        }
    }
    for e in &a.env {
        if let Some(p) = key_problem("environment variable", "name", &e.key) {
            return Some(p);
        }
        if e.key.contains('=') {
            return Some(format!(
                "environment variable name {:?} contains '='",
                e.key
            ));
        }
    }
    if let Some(h) = &a.hooks {
        let all = h
            .prestart
            .iter()
            .chain(&h.create_runtime)
            .chain(&h.create_container)
            .chain(&h.start_container)
            .chain(&h.poststart)
            .chain(&h.poststop);
        for hook in all {
            if hook.path.is_empty() {
                return Some("OCI hook without a path".into());
            }
        }
    }
    if let Some(l) = &a.linux
        && let Some(p) = linux_problem(l)
    {
        return Some(p);
    }
    for r in &a.rlimits {
        if r.r#type.is_empty() {
            return Some("rlimit without a type".into());
        }
        if r.soft > r.hard {
            return Some(format!(
                "rlimit {}: soft limit {} above hard limit {}",
                r.r#type, r.soft, r.hard
            ));
        }
    }
    for d in &a.cdi_devices {
        if d.name.is_empty() {
            return Some("CDI device without a name".into());
        }
    }
    None
}

fn linux_problem(l: &LinuxContainerAdjustment) -> Option<String> {
    for d in &l.devices {
        if let Some(p) = key_problem("device", "path", &d.path) {
            return Some(p);
        }
    }
    for n in &l.namespaces {
        if let Some(p) = key_problem("namespace", "type", &n.r#type) {
            return Some(p);
        }
    }
    for k in l.sysctl.keys() {
        if let Some(p) = key_problem("sysctl", "name", k) {
            return Some(p);
        }
    }
    for k in l.net_devices.keys() {
        if let Some(p) = key_problem("network device", "host interface name", k) {
            return Some(p);
        }
    }
    l.resources.as_ref().and_then(resources_problem)
}

fn limit_problem(what: &str, v: Option<&OptionalInt64>) -> Option<String> {
    match v {
        Some(OptionalInt64 { value }) if *value < UNLIMITED => Some(format!(
            "{what} {value} is negative (only -1, unlimited, is allowed)"
        )),
        _ => None,
    }
}

fn resources_problem(r: &LinuxResources) -> Option<String> {
    if let Some(m) = &r.memory {
        let limits = [
            ("memory limit", m.limit.as_ref()),
            ("memory reservation", m.reservation.as_ref()),
            ("memory+swap limit", m.swap.as_ref()),
            ("kernel memory limit", m.kernel.as_ref()),
            ("kernel TCP memory limit", m.kernel_tcp.as_ref()),
        ];
        for (what, v) in limits {
            if let Some(p) = limit_problem(what, v) {
                return Some(p);
            }
        }
    }
    if let Some(c) = &r.cpu
        && let Some(p) = limit_problem("CPU quota", c.quota.as_ref())
    {
        return Some(p);
    }
    for h in &r.hugepage_limits {
        if h.page_size.is_empty() {
            return Some("hugepage limit without a page size".into());
        }
    }
    for k in r.unified.keys() {
        if let Some(p) = key_problem("unified cgroup setting", "name", k) {
            return Some(p);
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use nri_api::api::{
        CdiDevice, Hook, Hooks, KeyValue, LinuxCpu, LinuxDevice, LinuxMemory, Mount, PosixRlimit,
    };

    use super::*;

    fn id() -> PluginId {
        PluginId::new("10", "bad").unwrap()
    }

    fn reason(a: ContainerAdjustment) -> String {
        match check_adjustment(&id(), &a) {
            Err(Error::InvalidAdjustment { plugin, reason }) => {
                assert_eq!(plugin, "10-bad");
                reason
            }
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn well_formed_adjustments_pass() {
        let a = ContainerAdjustment {
            mounts: vec![
                Mount {
                    destination: "/data".into(),
                    ..Default::default()
                },
                Mount {
                    destination: "-/old".into(),
                    ..Default::default()
                },
            ],
            env: vec![KeyValue {
                key: "-GONE".into(),
                value: String::new(),
            }],
            rlimits: vec![PosixRlimit {
                r#type: "RLIMIT_NOFILE".into(),
                hard: 10,
                soft: 10,
            }],
            ..Default::default()
        };
        check_adjustment(&id(), &a).unwrap();
        let unlimited = LinuxResources {
            memory: Some(LinuxMemory {
                limit: Some(OptionalInt64 { value: -1 }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let u = ContainerUpdate {
            container_id: "c1".into(),
            linux: Some(nri_api::api::LinuxContainerUpdate {
                resources: Some(unlimited),
            }),
            ignore_failure: false,
        };
        check_update(&id(), &u).unwrap();
    }

    #[test]
    fn malformed_adjustments_are_refused_with_the_reason() {
        let r = reason(ContainerAdjustment {
            mounts: vec![Mount::default()],
            ..Default::default()
        });
        assert!(r.contains("mount with an empty destination"), "{r}");
        let r = reason(ContainerAdjustment {
            mounts: vec![Mount {
                destination: "-".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        assert!(r.contains("empty destination"), "{r}");
        let r = reason(ContainerAdjustment {
            env: vec![KeyValue {
                key: String::new(),
                value: "x".into(),
            }],
            ..Default::default()
        });
        assert!(r.contains("environment variable with an empty name"), "{r}");
        let r = reason(ContainerAdjustment {
            env: vec![KeyValue {
                key: "A=B".into(),
                value: "x".into(),
            }],
            ..Default::default()
        });
        assert!(r.contains("contains '='"), "{r}");
        let r = reason(ContainerAdjustment {
            hooks: Some(Hooks {
                prestart: vec![Hook::default()],
                ..Default::default()
            }),
            ..Default::default()
        });
        assert!(r.contains("hook without a path"), "{r}");
        let r = reason(ContainerAdjustment {
            rlimits: vec![PosixRlimit {
                r#type: "RLIMIT_NOFILE".into(),
                hard: 1,
                soft: 2,
            }],
            ..Default::default()
        });
        assert!(r.contains("soft limit 2 above hard limit 1"), "{r}");
        let r = reason(ContainerAdjustment {
            cdi_devices: vec![CdiDevice::default()],
            ..Default::default()
        });
        assert!(r.contains("CDI device"), "{r}");
        let r = reason(ContainerAdjustment {
            linux: Some(LinuxContainerAdjustment {
                devices: vec![LinuxDevice::default()],
                ..Default::default()
            }),
            ..Default::default()
        });
        assert!(r.contains("device with an empty path"), "{r}");
        let r = reason(ContainerAdjustment {
            linux: Some(LinuxContainerAdjustment {
                resources: Some(LinuxResources {
                    cpu: Some(LinuxCpu {
                        quota: Some(OptionalInt64 { value: i64::MIN }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert!(r.contains("CPU quota"), "{r}");
    }

    #[test]
    fn negative_update_limits_are_refused_naming_the_container() {
        let u = ContainerUpdate {
            container_id: "c9".into(),
            linux: Some(nri_api::api::LinuxContainerUpdate {
                resources: Some(LinuxResources {
                    memory: Some(LinuxMemory {
                        limit: Some(OptionalInt64 { value: -5 }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            }),
            ignore_failure: false,
        };
        match check_update(&id(), &u) {
            Err(Error::InvalidUpdate {
                plugin,
                container,
                reason,
            }) => {
                assert_eq!((plugin.as_str(), container.as_str()), ("10-bad", "c9"));
                assert!(reason.contains("memory limit -5"), "{reason}");
            }
            other => panic!("not refused: {other:?}"),
        }
    }
}
