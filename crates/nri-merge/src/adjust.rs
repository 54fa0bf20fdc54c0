//! Merging one plugin's adjustment of the container being created: the
//! walk over its fields, claiming each for the plugin, with removals before
//! additions (see the crate docs for the canonical form).

use std::collections::BTreeMap;

use nri_api::api::{
    Container, ContainerAdjustment, Field, Hook, Hooks, LinuxContainer, LinuxContainerAdjustment,
    LinuxRdt, LinuxResources,
};

use crate::error::Error;
use crate::owners::{Ownership, mark_removal, split_removal};
use crate::resources::{Targets, merge_resources};

fn linux(c: &mut Container) -> &mut LinuxContainer {
    c.linux.get_or_insert_with(LinuxContainer::default)
}

fn adj_linux(a: &mut ContainerAdjustment) -> &mut LinuxContainerAdjustment {
    a.linux
        .get_or_insert_with(LinuxContainerAdjustment::default)
}

fn env_key(e: &str) -> &str {
    e.split_once('=').map_or(e, |(k, _)| k)
}

/// How a removal marker in a keyed list takes ownership.
#[derive(Clone, Copy)]
enum Removal {
    /// Unconditionally (`Ownership::clear`): may override another plugin.
    Clear,
    /// With a conflict check (`Ownership::claim_removal`).
    Claim,
}

struct Ctx<'a> {
    owners: &'a mut Ownership,
    id: &'a str,
    plugin: &'a str,
}

impl Ctx<'_> {
    /// Merges a list whose entries are keyed (`key`) and may carry a removal
    /// marker. Removals are processed before additions; the merged list keeps
    /// at most one entry per key (the last word: addition or marker).
    fn keyed_list<T: Clone>(
        &mut self,
        field: Field,
        removal: Removal,
        src: &[T],
        key: impl Fn(&T) -> &str,
        merged: &mut Vec<T>,
        mut reflect: impl FnMut(&str, Option<&T>),
    ) -> Result<(), Error> {
        let same_key = |x: &T, k: &str| split_removal(key(x)).0 == k;
        for d in src.iter().filter(|d| split_removal(key(d)).1) {
            let k = split_removal(key(d)).0;
            match removal {
                Removal::Clear => self.owners.clear(self.id, field, Some(k), self.plugin),
                Removal::Claim => {
                    self.owners
                        .claim_removal(self.id, field, Some(k), self.plugin)?;
                }
            }
            merged.retain(|x| !same_key(x, k));
            merged.push(d.clone());
            reflect(k, None);
        }
        for a in src.iter().filter(|a| !split_removal(key(a)).1) {
            let k = key(a);
            self.owners.claim(self.id, field, Some(k), self.plugin)?;
            merged.retain(|x| !same_key(x, k));
            merged.push(a.clone());
            reflect(k, Some(a));
        }
        Ok(())
    }

    /// Merges a map whose keys may carry a removal marker (`"-key"`).
    /// Removals first; the merged map never holds both `"-k"` and `"k"`.
    fn keyed_map<V: Clone + Default>(
        &mut self,
        field: Field,
        src: &BTreeMap<String, V>,
        container: &mut BTreeMap<String, V>,
        merged: &mut BTreeMap<String, V>,
    ) -> Result<(), Error> {
        for (marked, _) in src.iter().filter(|(k, _)| split_removal(k).1) {
            let k = split_removal(marked).0;
            self.owners.clear(self.id, field, Some(k), self.plugin);
            container.remove(k);
            merged.remove(k);
            merged.insert(marked.clone(), V::default());
        }
        for (k, v) in src.iter().filter(|(k, _)| !split_removal(k).1) {
            self.owners.claim(self.id, field, Some(k), self.plugin)?;
            container.insert(k.clone(), v.clone());
            merged.remove(&mark_removal(k));
            merged.insert(k.clone(), v.clone());
        }
        Ok(())
    }

    fn simple<T: Clone>(
        &mut self,
        field: Field,
        src: &Option<T>,
        container: &mut Option<T>,
        merged: &mut Option<T>,
    ) -> Result<(), Error> {
        if let Some(v) = src {
            self.owners.claim(self.id, field, None, self.plugin)?;
            *container = Some(v.clone());
            *merged = Some(v.clone());
        }
        Ok(())
    }
}

fn has_hooks(h: &Hooks) -> bool {
    !(h.prestart.is_empty()
        && h.create_runtime.is_empty()
        && h.create_container.is_empty()
        && h.start_container.is_empty()
        && h.poststart.is_empty()
        && h.poststop.is_empty())
}

fn append_hooks(dst: &mut Hooks, src: &Hooks) {
    let lists: [(&mut Vec<Hook>, &Vec<Hook>); 6] = [
        (&mut dst.prestart, &src.prestart),
        (&mut dst.create_runtime, &src.create_runtime),
        (&mut dst.create_container, &src.create_container),
        (&mut dst.start_container, &src.start_container),
        (&mut dst.poststart, &src.poststart),
        (&mut dst.poststop, &src.poststop),
    ];
    for (d, s) in lists {
        d.extend(s.iter().cloned());
    }
}

/// Merges one plugin's adjustment `a` of container `id`: claims every
/// field it changes for `plugin` in `owners`, merges it into `adjust` (the
/// merged adjustment) and writes it into `container`. Order of fields as
/// upstream (annotations, mounts, env, args, hooks, linux..., rlimits,
/// CDI), which decides which conflict is reported first. On error the
/// three may be partly changed.
pub(crate) fn merge_adjustment(
    owners: &mut Ownership,
    adjust: &mut ContainerAdjustment,
    container: &mut Container,
    id: &str,
    plugin: &str,
    a: &ContainerAdjustment,
) -> Result<(), Error> {
    let mut cx = Ctx { owners, id, plugin };

    if !a.annotations.is_empty() {
        cx.keyed_map(
            Field::Annotations,
            &a.annotations,
            &mut container.annotations,
            &mut adjust.annotations,
        )?;
    }

    let c_mounts = &mut container.mounts;
    cx.keyed_list(
        Field::Mounts,
        Removal::Clear,
        &a.mounts,
        |m| m.destination.as_str(),
        &mut adjust.mounts,
        |k, m| {
            c_mounts.retain(|x| x.destination != k);
            c_mounts.extend(m.cloned());
        },
    )?;

    let c_env = &mut container.env;
    cx.keyed_list(
        Field::Env,
        Removal::Clear,
        &a.env,
        |e| e.key.as_str(),
        &mut adjust.env,
        |k, e| {
            c_env.retain(|x| env_key(x) != k);
            if let Some(e) = e {
                // `KEY=value`, without `format!`'s machinery (one per
                // variable a plugin sets, on every CreateContainer).
                let mut kv = String::with_capacity(k.len() + 1 + e.value.len());
                kv.push_str(k);
                kv.push('=');
                kv.push_str(&e.value);
                c_env.push(kv);
            }
        },
    )?;

    if let Some((first, rest)) = a.args.split_first() {
        // A leading "" means: replace the arguments, overriding an
        // earlier plugin's (upstream's UpdateArgs form).
        let args = if first.is_empty() {
            cx.owners.clear(id, Field::Args, None, plugin);
            rest
        } else {
            a.args.as_slice()
        };
        cx.owners.claim(id, Field::Args, None, plugin)?;
        container.args = args.to_vec();
        adjust.args = args.to_vec();
    }

    if let Some(h) = a.hooks.as_ref().filter(|h| has_hooks(h)) {
        append_hooks(adjust.hooks.get_or_insert_with(Hooks::default), h);
        append_hooks(container.hooks.get_or_insert_with(Hooks::default), h);
        cx.owners.add_hooks(id, plugin);
    }

    if let Some(l) = a.linux.as_ref() {
        adjust_linux(&mut cx, l, linux(container), adjust)?;
    }

    let c_rlimits = &mut container.rlimits;
    for r in &a.rlimits {
        cx.owners
            .claim(id, Field::Rlimits, Some(&r.r#type), plugin)?;
        c_rlimits.retain(|x| x.r#type != r.r#type);
        c_rlimits.push(r.clone());
        adjust.rlimits.retain(|x| x.r#type != r.r#type);
        adjust.rlimits.push(r.clone());
    }

    for d in &a.cdi_devices {
        cx.owners
            .claim(id, Field::CdiDevices, Some(&d.name), plugin)?;
        adjust.cdi_devices.push(d.clone());
        // Unlike upstream, later plugins see injected CDI devices.
        container.cdi_devices.push(d.clone());
    }
    Ok(())
}

/// The Linux part of an adjustment, in upstream's order of fields.
fn adjust_linux(
    cx: &mut Ctx<'_>,
    l: &LinuxContainerAdjustment,
    cl: &mut LinuxContainer,
    adjust: &mut ContainerAdjustment,
) -> Result<(), Error> {
    adjust_linux_resources(cx, l, cl, adjust)?;
    adjust_linux_isolation(cx, l, cl, adjust)
}

/// Devices, cgroup resources and path, OOM score, I/O priority, seccomp.
fn adjust_linux_resources(
    cx: &mut Ctx<'_>,
    l: &LinuxContainerAdjustment,
    cl: &mut LinuxContainer,
    adjust: &mut ContainerAdjustment,
) -> Result<(), Error> {
    if !l.devices.is_empty() {
        let c_devices = &mut cl.devices;
        cx.keyed_list(
            Field::Devices,
            Removal::Clear,
            &l.devices,
            |d| d.path.as_str(),
            &mut adj_linux(adjust).devices,
            |k, d| {
                c_devices.retain(|x| x.path != k);
                c_devices.extend(d.cloned());
            },
        )?;
    }

    if let Some(r) = l
        .resources
        .as_ref()
        .filter(|r| **r != LinuxResources::default())
    {
        let (id, plugin) = (cx.id, cx.plugin);
        let owners = &mut *cx.owners;
        merge_resources(
            &mut |field, key| owners.claim(id, field, key, plugin),
            r,
            Targets {
                targets: vec![
                    cl.resources.get_or_insert_with(LinuxResources::default),
                    adj_linux(adjust)
                        .resources
                        .get_or_insert_with(LinuxResources::default),
                ],
                devices: true,
            },
        )?;
    }

    if !l.cgroups_path.is_empty() {
        cx.owners
            .claim(cx.id, Field::CgroupsPath, None, cx.plugin)?;
        cl.cgroups_path = l.cgroups_path.clone();
        adj_linux(adjust).cgroups_path = l.cgroups_path.clone();
    }

    if l.oom_score_adj.is_some() {
        cx.simple(
            Field::OomScoreAdj,
            &l.oom_score_adj,
            &mut cl.oom_score_adj,
            &mut adj_linux(adjust).oom_score_adj,
        )?;
    }
    if l.io_priority.is_some() {
        cx.simple(
            Field::IoPriority,
            &l.io_priority,
            &mut cl.io_priority,
            &mut adj_linux(adjust).io_priority,
        )?;
    }
    if l.seccomp_policy.is_some() {
        cx.simple(
            Field::SeccompPolicy,
            &l.seccomp_policy,
            &mut cl.seccomp_policy,
            &mut adj_linux(adjust).seccomp_policy,
        )?;
    }
    Ok(())
}

/// Namespaces, sysctls, network devices, scheduler, RDT, memory policy.
fn adjust_linux_isolation(
    cx: &mut Ctx<'_>,
    l: &LinuxContainerAdjustment,
    cl: &mut LinuxContainer,
    adjust: &mut ContainerAdjustment,
) -> Result<(), Error> {
    if !l.namespaces.is_empty() {
        // Removing a namespace conflicts like setting one (upstream
        // claims for both): a plugin cannot silently undo another
        // plugin's namespace.
        let c_ns = &mut cl.namespaces;
        cx.keyed_list(
            Field::Namespace,
            Removal::Claim,
            &l.namespaces,
            |n| n.r#type.as_str(),
            &mut adj_linux(adjust).namespaces,
            |k, n| {
                c_ns.retain(|x| x.r#type != k);
                c_ns.extend(n.cloned());
            },
        )?;
    }

    if !l.sysctl.is_empty() {
        cx.keyed_map(
            Field::Sysctl,
            &l.sysctl,
            &mut cl.sysctl,
            &mut adj_linux(adjust).sysctl,
        )?;
    }
    if !l.net_devices.is_empty() {
        cx.keyed_map(
            Field::LinuxNetDevices,
            &l.net_devices,
            &mut cl.net_devices,
            &mut adj_linux(adjust).net_devices,
        )?;
    }

    if l.scheduler.is_some() {
        cx.simple(
            Field::LinuxSched,
            &l.scheduler,
            &mut cl.scheduler,
            &mut adj_linux(adjust).scheduler,
        )?;
    }

    if let Some(rdt) = l.rdt.as_ref() {
        adjust_rdt(cx, rdt, cl, adj_linux(adjust))?;
    }

    if let Some(mp) = l.memory_policy.as_ref() {
        // The container message has no memory policy to reflect it in.
        cx.owners
            .claim(cx.id, Field::MemoryPolicy, None, cx.plugin)?;
        adj_linux(adjust).memory_policy = Some(mp.clone());
    }
    Ok(())
}

fn adjust_rdt(
    cx: &mut Ctx<'_>,
    rdt: &LinuxRdt,
    cl: &mut LinuxContainer,
    al: &mut LinuxContainerAdjustment,
) -> Result<(), Error> {
    if rdt.remove {
        for f in [
            Field::RdtClosId,
            Field::RdtSchemata,
            Field::RdtEnableMonitoring,
        ] {
            cx.owners.clear(cx.id, f, None, cx.plugin);
        }
        al.rdt = Some(LinuxRdt {
            remove: true,
            ..LinuxRdt::default()
        });
        cl.rdt = None;
    }
    if let Some(v) = rdt.clos_id.as_ref() {
        cx.owners.claim(cx.id, Field::RdtClosId, None, cx.plugin)?;
        let r = al.rdt.get_or_insert_with(LinuxRdt::default);
        r.clos_id = Some(v.clone());
        r.remove = false;
        cl.rdt.get_or_insert_with(LinuxRdt::default).clos_id = Some(v.clone());
    }
    if let Some(v) = rdt.schemata.as_ref() {
        cx.owners
            .claim(cx.id, Field::RdtSchemata, None, cx.plugin)?;
        let r = al.rdt.get_or_insert_with(LinuxRdt::default);
        r.schemata = Some(v.clone());
        r.remove = false;
        cl.rdt.get_or_insert_with(LinuxRdt::default).schemata = Some(v.clone());
    }
    if let Some(v) = rdt.enable_monitoring.as_ref() {
        cx.owners
            .claim(cx.id, Field::RdtEnableMonitoring, None, cx.plugin)?;
        let r = al.rdt.get_or_insert_with(LinuxRdt::default);
        r.enable_monitoring = Some(*v);
        r.remove = false;
        cl.rdt
            .get_or_insert_with(LinuxRdt::default)
            .enable_monitoring = Some(*v);
    }
    Ok(())
}
