//! Device nodes (`linux.devices`) and their cgroup allow rules.

use std::path::Path;

use nri_api::api;
use oci_spec::runtime::{LinuxDevice, LinuxDeviceCgroup, LinuxDeviceType, Spec};

use crate::Error;
use crate::util::{self, split_marker};

fn device_type(raw: &str) -> Result<LinuxDeviceType, Error> {
    match raw {
        "c" => Ok(LinuxDeviceType::C),
        "b" => Ok(LinuxDeviceType::B),
        "u" => Ok(LinuxDeviceType::U),
        "p" => Ok(LinuxDeviceType::P),
        _ => Err(Error::UnknownValue {
            field: "linux.devices.type",
            value: raw.to_owned(),
        }),
    }
}

/// The device cgroup type that governs a device node: the cgroup device
/// controller only knows "b" and "c" ("u" is an unbuffered character
/// device; FIFOs are not under cgroup control).
fn cgroup_type(t: LinuxDeviceType) -> Option<LinuxDeviceType> {
    match t {
        LinuxDeviceType::B => Some(LinuxDeviceType::B),
        LinuxDeviceType::C | LinuxDeviceType::U => Some(LinuxDeviceType::C),
        LinuxDeviceType::A | LinuxDeviceType::P => None,
    }
}

/// The allow rule for a device node. Access is "rw", plus "m" for block
/// devices: this is what upstream's generator produces for every device
/// (its file-mode check can never drop "r" or "w").
fn allow_rule(d: &LinuxDevice) -> Option<LinuxDeviceCgroup> {
    let typ = cgroup_type(d.typ())?;
    let access = if typ == LinuxDeviceType::B {
        "rwm"
    } else {
        "rw"
    };
    let mut r = LinuxDeviceCgroup::default();
    r.set_allow(true)
        .set_typ(Some(typ))
        .set_major(Some(d.major()))
        .set_minor(Some(d.minor()))
        .set_access(Some(access.to_owned()));
    Some(r)
}

fn same_node(rule: &LinuxDeviceCgroup, typ: LinuxDeviceType, major: i64, minor: i64) -> bool {
    rule.allow()
        && rule.typ() == Some(typ)
        && rule.major() == Some(major)
        && rule.minor() == Some(minor)
}

/// Removes marked devices (and the exact allow rules that were granted for
/// them, unless another remaining device node needs the same rule), then
/// adds or replaces (by path) new devices together with an allow rule.
pub(crate) fn devices(spec: &mut Spec, adj: &[api::LinuxDevice]) -> Result<(), Error> {
    if adj.is_empty() {
        return Ok(());
    }
    let mut removals = Vec::new();
    let mut additions = Vec::new();
    for d in adj {
        let (path, removal) = split_marker("linux.devices.path", &d.path)?;
        if removal {
            removals.push(path);
            continue;
        }
        let mut o = LinuxDevice::default();
        o.set_path(path.into())
            .set_typ(device_type(&d.r#type)?)
            .set_major(d.major)
            .set_minor(d.minor)
            .set_file_mode(d.file_mode.as_ref().map(|m| m.value))
            .set_uid(d.uid.as_ref().map(|v| v.value))
            .set_gid(d.gid.as_ref().map(|v| v.value));
        additions.push(o);
    }

    let linux = util::linux(spec);
    let mut list = linux.devices().clone().unwrap_or_default();
    let mut dropped = Vec::new();
    list.retain(|d| {
        let gone = removals.iter().any(|p| d.path() == Path::new(p));
        if gone {
            dropped.push((d.typ(), d.major(), d.minor()));
        }
        !gone
    });
    let mut rules = Vec::new();
    for add in additions {
        rules.extend(allow_rule(&add));
        match list.iter_mut().find(|d| d.path() == add.path()) {
            Some(slot) => {
                dropped.push((slot.typ(), slot.major(), slot.minor()));
                *slot = add;
            }
            None => list.push(add),
        }
    }

    let still_needed = |typ: LinuxDeviceType, major: i64, minor: i64| {
        list.iter()
            .any(|d| cgroup_type(d.typ()) == Some(typ) && d.major() == major && d.minor() == minor)
    };
    let mut stale = Vec::new();
    for (typ, major, minor) in dropped {
        if let Some(ct) = cgroup_type(typ) {
            if !still_needed(ct, major, minor) {
                stale.push((ct, major, minor));
            }
        }
    }
    linux.set_devices(Some(list));

    let res = util::resources(spec);
    let mut cg = res.devices().clone().unwrap_or_default();
    cg.retain(|r| !stale.iter().any(|(t, ma, mi)| same_node(r, *t, *ma, *mi)));
    for r in rules {
        if !cg.contains(&r) {
            cg.push(r);
        }
    }
    res.set_devices(Some(cg));
    Ok(())
}
