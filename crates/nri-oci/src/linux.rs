//! Namespaces, sysctl, net devices, RDT, memory policy and cgroups path.

use std::collections::BTreeMap;

use nri_api::api;
use oci_spec::runtime::{
    LinuxIntelRdt, LinuxMemoryPolicy, LinuxNamespace, LinuxNamespaceType, LinuxNetDevice,
    MemoryPolicyFlagType, MemoryPolicyModeType, Spec,
};

use crate::Error;
use crate::util::{self, non_empty, non_empty_vec, split_marker};

/// Sets `linux.cgroupsPath` (an empty path changes nothing).
pub(crate) fn cgroups_path(spec: &mut Spec, path: &str) {
    if !path.is_empty() {
        util::linux(spec).set_cgroups_path(Some(path.into()));
    }
}

/// The namespace type names of the OCI runtime spec (the only ones
/// upstream's generator accepts).
fn namespace_type(raw: &str, key: &str) -> Result<LinuxNamespaceType, Error> {
    Ok(match key {
        "pid" => LinuxNamespaceType::Pid,
        "network" => LinuxNamespaceType::Network,
        "mount" => LinuxNamespaceType::Mount,
        "ipc" => LinuxNamespaceType::Ipc,
        "uts" => LinuxNamespaceType::Uts,
        "user" => LinuxNamespaceType::User,
        "cgroup" => LinuxNamespaceType::Cgroup,
        "time" => LinuxNamespaceType::Time,
        _ => {
            return Err(Error::UnknownValue {
                field: "linux.namespaces.type",
                value: raw.to_owned(),
            });
        }
    })
}

/// Removes namespaces whose type is marked ("-network"), then adds new ones
/// or replaces the path of an existing one of the same type (in place).
pub(crate) fn namespaces(spec: &mut Spec, adj: &[api::LinuxNamespace]) -> Result<(), Error> {
    if adj.is_empty() {
        return Ok(());
    }
    let mut removals = Vec::new();
    let mut additions: Vec<(LinuxNamespaceType, &str)> = Vec::new();
    for n in adj {
        let (key, removal) = split_marker("linux.namespaces.type", &n.r#type)?;
        let typ = namespace_type(&n.r#type, key)?;
        if removal {
            removals.push(typ);
        } else {
            additions.retain(|(t, _)| *t != typ);
            additions.push((typ, &n.path));
        }
    }
    let linux = util::linux(spec);
    let mut list = linux.namespaces().clone().unwrap_or_default();
    list.retain(|ns| !removals.contains(&ns.typ()));
    for (typ, path) in additions {
        let path = non_empty(path).map(Into::into);
        match list.iter_mut().find(|ns| ns.typ() == typ) {
            Some(slot) => {
                slot.set_path(path);
            }
            None => {
                let mut ns = LinuxNamespace::default();
                ns.set_typ(typ).set_path(path);
                list.push(ns);
            }
        }
    }
    linux.set_namespaces(Some(list));
    Ok(())
}

/// Removals ("-key") first, then additions.
pub(crate) fn sysctl(spec: &mut Spec, adj: &BTreeMap<String, String>) -> Result<(), Error> {
    if adj.is_empty() {
        return Ok(());
    }
    let mut removals = Vec::new();
    let mut additions = Vec::new();
    for (raw, value) in adj {
        let (key, removal) = split_marker("linux.sysctl", raw)?;
        if removal {
            removals.push(key);
        } else {
            additions.push((key, value));
        }
    }
    let map = util::linux(spec)
        .sysctl_mut()
        .get_or_insert_with(Default::default);
    for key in removals {
        map.remove(key);
    }
    for (key, value) in additions {
        map.insert(key.to_owned(), value.clone());
    }
    Ok(())
}

/// Removals ("-hostif") first, then additions, keyed by host interface.
pub(crate) fn net_devices(
    spec: &mut Spec,
    adj: &BTreeMap<String, api::LinuxNetDevice>,
) -> Result<(), Error> {
    if adj.is_empty() {
        return Ok(());
    }
    let mut removals = Vec::new();
    let mut additions = Vec::new();
    for (raw, dev) in adj {
        let (key, removal) = split_marker("linux.net_devices", raw)?;
        if removal {
            removals.push(key);
        } else {
            let mut o = LinuxNetDevice::default();
            o.set_name(non_empty(&dev.name));
            additions.push((key, o));
        }
    }
    let map = util::linux(spec)
        .net_devices_mut()
        .get_or_insert_with(Default::default);
    for key in removals {
        map.remove(key);
    }
    for (key, dev) in additions {
        map.insert(key.to_owned(), dev);
    }
    Ok(())
}

/// `remove` drops `linux.intelRdt`; then each set field is stored.
pub(crate) fn rdt(spec: &mut Spec, adj: Option<&api::LinuxRdt>) {
    let Some(r) = adj else { return };
    let linux = util::linux(spec);
    if r.remove {
        linux.set_intel_rdt(None);
    }
    if r.clos_id.is_none() && r.schemata.is_none() && r.enable_monitoring.is_none() {
        return;
    }
    let rdt = linux
        .intel_rdt_mut()
        .get_or_insert_with(LinuxIntelRdt::default);
    if let Some(v) = &r.clos_id {
        rdt.set_clos_id(Some(v.value.clone()));
    }
    if let Some(v) = &r.schemata {
        rdt.set_schemata(Some(v.value.clone()));
    }
    if let Some(v) = &r.enable_monitoring {
        rdt.set_enable_monitoring(Some(v.value));
    }
}

/// Replaces `linux.memoryPolicy`.
pub(crate) fn memory_policy(
    spec: &mut Spec,
    adj: Option<&api::LinuxMemoryPolicy>,
) -> Result<(), Error> {
    use api::{MpolFlag as F, MpolMode as M};
    let Some(p) = adj else { return Ok(()) };
    let mode = M::try_from(p.mode).map_err(|_| Error::UnknownEnum {
        field: "linux.memory_policy.mode",
        value: p.mode,
    })?;
    let mode = match mode {
        M::MpolDefault => MemoryPolicyModeType::MpolDefault,
        M::MpolPreferred => MemoryPolicyModeType::MpolPreferred,
        M::MpolBind => MemoryPolicyModeType::MpolBind,
        M::MpolInterleave => MemoryPolicyModeType::MpolInterleave,
        M::MpolLocal => MemoryPolicyModeType::MpolLocal,
        M::MpolPreferredMany => MemoryPolicyModeType::MpolPreferredMany,
        M::MpolWeightedInterleave => MemoryPolicyModeType::MpolWeightedInterleave,
    };
    let mut flags = Vec::with_capacity(p.flags.len());
    for raw in &p.flags {
        let f = F::try_from(*raw).map_err(|_| Error::UnknownEnum {
            field: "linux.memory_policy.flags",
            value: *raw,
        })?;
        flags.push(match f {
            F::MpolFStaticNodes => MemoryPolicyFlagType::MpolFStaticNodes,
            F::MpolFRelativeNodes => MemoryPolicyFlagType::MpolFRelativeNodes,
            F::MpolFNumaBalancing => MemoryPolicyFlagType::MpolFNumaBalancing,
        });
    }
    let mut o = LinuxMemoryPolicy::default();
    o.set_mode(mode)
        .set_nodes(non_empty(&p.nodes))
        .set_flags(non_empty_vec(&flags));
    util::linux(spec).set_memory_policy(Some(o));
    Ok(())
}
