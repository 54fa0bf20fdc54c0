//! `linux.resources`: memory, CPU, hugepages, unified, device rules, pids,
//! block I/O class and RDT class.

use nri_api::api;
use oci_spec::runtime::{
    LinuxCpu, LinuxDeviceCgroup, LinuxDeviceType, LinuxHugepageLimit, LinuxIntelRdt, LinuxMemory,
    LinuxPids, Spec,
};

use crate::util::{self, non_empty};
use crate::{Applier, BLOCKIO_CLASS_ANNOTATION, Error, Unresolved};

/// Merges `r` into the spec: every field that is set in `r` replaces the
/// spec's value; unset fields keep theirs.
pub(crate) fn resources(
    applier: &Applier,
    spec: &mut Spec,
    r: &api::LinuxResources,
) -> Result<(), Error> {
    memory(spec, r.memory.as_ref());
    cpu(spec, r.cpu.as_ref());
    hugepages(spec, &r.hugepage_limits)?;
    unified(spec, &r.unified);
    device_rules(spec, &r.devices)?;
    pids(spec, r.pids.as_ref());
    blockio_class(applier, spec, r.blockio_class.as_ref())?;
    rdt_class(applier, spec, r.rdt_class.as_ref())?;
    Ok(())
}

fn memory(spec: &mut Spec, m: Option<&api::LinuxMemory>) {
    let Some(m) = m else { return };
    let v64 = |o: &Option<api::OptionalInt64>| o.as_ref().map(|w| w.value);
    let limit = v64(&m.limit);
    // Upstream's generator sets swap = limit with the limit (no extra swap)
    // unless a swap value is given too.
    let swap = v64(&m.swap).or(limit);
    let fields_set = limit.is_some()
        || swap.is_some()
        || m.reservation.is_some()
        || m.kernel.is_some()
        || m.kernel_tcp.is_some()
        || m.swappiness.is_some()
        || m.disable_oom_killer.is_some()
        || m.use_hierarchy.is_some();
    if !fields_set {
        return;
    }
    let mem = util::resources(spec)
        .memory_mut()
        .get_or_insert_with(LinuxMemory::default);
    if let Some(v) = limit {
        mem.set_limit(Some(v));
    }
    if let Some(v) = swap {
        mem.set_swap(Some(v));
    }
    if let Some(v) = v64(&m.reservation) {
        mem.set_reservation(Some(v));
    }
    if let Some(v) = v64(&m.kernel) {
        mem.set_kernel(Some(v));
    }
    if let Some(v) = v64(&m.kernel_tcp) {
        mem.set_kernel_tcp(Some(v));
    }
    if let Some(v) = &m.swappiness {
        mem.set_swappiness(Some(v.value));
    }
    if let Some(v) = &m.disable_oom_killer {
        mem.set_disable_oom_killer(Some(v.value));
    }
    if let Some(v) = &m.use_hierarchy {
        mem.set_use_hierarchy(Some(v.value));
    }
}

fn cpu(spec: &mut Spec, c: Option<&api::LinuxCpu>) {
    let Some(c) = c else { return };
    let fields_set = c.shares.is_some()
        || c.quota.is_some()
        || c.period.is_some()
        || c.realtime_runtime.is_some()
        || c.realtime_period.is_some()
        || !c.cpus.is_empty()
        || !c.mems.is_empty();
    if !fields_set {
        return;
    }
    let cpu = util::resources(spec)
        .cpu_mut()
        .get_or_insert_with(LinuxCpu::default);
    if let Some(v) = &c.shares {
        cpu.set_shares(Some(v.value));
    }
    if let Some(v) = &c.quota {
        cpu.set_quota(Some(v.value));
    }
    if let Some(v) = &c.period {
        cpu.set_period(Some(v.value));
    }
    if let Some(v) = &c.realtime_runtime {
        cpu.set_realtime_runtime(Some(v.value));
    }
    if let Some(v) = &c.realtime_period {
        cpu.set_realtime_period(Some(v.value));
    }
    if let Some(v) = non_empty(&c.cpus) {
        cpu.set_cpus(Some(v));
    }
    if let Some(v) = non_empty(&c.mems) {
        cpu.set_mems(Some(v));
    }
}

/// Adds or replaces (by page size) hugepage limits.
fn hugepages(spec: &mut Spec, limits: &[api::HugepageLimit]) -> Result<(), Error> {
    if limits.is_empty() {
        return Ok(());
    }
    let mut new = Vec::with_capacity(limits.len());
    for l in limits {
        if l.page_size.is_empty() {
            return Err(Error::MissingField {
                field: "resources.hugepage_limits",
                what: "page size",
            });
        }
        let limit = i64::try_from(l.limit).map_err(|_| Error::OutOfRange {
            field: "resources.hugepage_limits.limit",
            value: l.limit.to_string(),
            reason: "oci-spec stores hugepage limits as i64",
        })?;
        let mut o = LinuxHugepageLimit::default();
        o.set_page_size(l.page_size.clone()).set_limit(limit);
        new.push(o);
    }
    let res = util::resources(spec);
    let mut list = res.hugepage_limits().clone().unwrap_or_default();
    for o in new {
        match list.iter_mut().find(|e| e.page_size() == o.page_size()) {
            Some(slot) => *slot = o,
            None => list.push(o),
        }
    }
    res.set_hugepage_limits(Some(list));
    Ok(())
}

/// Adds or replaces unified (cgroup v2) entries. NRI has no removal marker
/// for these.
fn unified(spec: &mut Spec, u: &std::collections::BTreeMap<String, String>) {
    if u.is_empty() {
        return;
    }
    let map = util::resources(spec)
        .unified_mut()
        .get_or_insert_with(Default::default);
    for (k, v) in u {
        map.insert(k.clone(), v.clone());
    }
}

/// Appends device cgroup rules (an identical rule is not added twice).
fn device_rules(spec: &mut Spec, rules: &[api::LinuxDeviceCgroup]) -> Result<(), Error> {
    if rules.is_empty() {
        return Ok(());
    }
    let mut new = Vec::with_capacity(rules.len());
    for r in rules {
        let typ = match r.r#type.as_str() {
            "" => None,
            "a" => Some(LinuxDeviceType::A),
            "b" => Some(LinuxDeviceType::B),
            "c" => Some(LinuxDeviceType::C),
            other => {
                return Err(Error::UnknownValue {
                    field: "resources.devices.type",
                    value: other.to_owned(),
                });
            }
        };
        if !r.access.chars().all(|c| matches!(c, 'r' | 'w' | 'm')) {
            return Err(Error::UnknownValue {
                field: "resources.devices.access",
                value: r.access.clone(),
            });
        }
        let mut o = LinuxDeviceCgroup::default();
        o.set_allow(r.allow)
            .set_typ(typ)
            .set_major(r.major.as_ref().map(|v| v.value))
            .set_minor(r.minor.as_ref().map(|v| v.value))
            .set_access(non_empty(&r.access));
        new.push(o);
    }
    let res = util::resources(spec);
    let list = res.devices_mut().get_or_insert_with(Vec::new);
    for o in new {
        if !list.contains(&o) {
            list.push(o);
        }
    }
    Ok(())
}

/// Sets the pids limit. A negative limit means "unlimited"; oci-spec 0.10
/// has no absent limit, so it is written as -1.
fn pids(spec: &mut Spec, p: Option<&api::LinuxPids>) {
    let Some(p) = p else { return };
    let mut o = LinuxPids::default();
    o.set_limit(p.limit.max(-1));
    util::resources(spec).set_pids(Some(o));
}

fn blockio_class(
    applier: &Applier,
    spec: &mut Spec,
    class: Option<&api::OptionalString>,
) -> Result<(), Error> {
    let Some(class) = class.map(|c| c.value.as_str()) else {
        return Ok(());
    };
    if class.is_empty() {
        util::resources(spec).set_block_io(None);
        return Ok(());
    }
    if let Some(resolver) = &applier.blockio {
        let io = resolver
            .resolve(class)
            .map_err(|source| Error::BlockIoClass {
                class: class.to_owned(),
                source,
            })?;
        util::resources(spec).set_block_io(Some(io));
        return Ok(());
    }
    match applier.unresolved_blockio {
        Unresolved::Error => Err(Error::BlockIoClassUnresolved {
            class: class.to_owned(),
        }),
        Unresolved::Ignore => {
            tracing::warn!(class, "no block I/O class resolver, class ignored");
            Ok(())
        }
        Unresolved::Annotate => {
            spec.annotations_mut()
                .get_or_insert_with(Default::default)
                .insert(BLOCKIO_CLASS_ANNOTATION.to_owned(), class.to_owned());
            Ok(())
        }
    }
}

/// Without a resolver the class name is the CLOS id (`linux.intelRdt.closID`),
/// the resctrl group the runtime puts the container in; other RDT settings
/// are kept. With a resolver, its result replaces `linux.intelRdt`. An empty
/// class removes `linux.intelRdt`.
fn rdt_class(
    applier: &Applier,
    spec: &mut Spec,
    class: Option<&api::OptionalString>,
) -> Result<(), Error> {
    let Some(class) = class.map(|c| c.value.as_str()) else {
        return Ok(());
    };
    let linux = util::linux(spec);
    if class.is_empty() {
        linux.set_intel_rdt(None);
        return Ok(());
    }
    if let Some(resolver) = &applier.rdt {
        let rdt = resolver.resolve(class).map_err(|source| Error::RdtClass {
            class: class.to_owned(),
            source,
        })?;
        linux.set_intel_rdt(Some(rdt));
        return Ok(());
    }
    linux
        .intel_rdt_mut()
        .get_or_insert_with(LinuxIntelRdt::default)
        .set_clos_id(Some(class.to_owned()));
    Ok(())
}
