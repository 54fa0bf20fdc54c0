//! Annotations, environment, args, hooks, rlimits, OOM score, I/O priority
//! and scheduler.

use std::collections::{BTreeMap, BTreeSet};

use nri_api::api;
use oci_spec::runtime::{
    Hook, IOPriorityClass, LinuxIOPriorityBuilder, LinuxSchedulerFlag, LinuxSchedulerPolicy,
    PosixRlimitBuilder, PosixRlimitType, Scheduler, Spec,
};

use crate::Error;
use crate::util::{self, non_empty_vec, parse_oci_enum, split_marker};

/// Removals first, then additions, so "-k" plus "k" ends with `k` set.
pub(crate) fn annotations(spec: &mut Spec, adj: &BTreeMap<String, String>) -> Result<(), Error> {
    if adj.is_empty() {
        return Ok(());
    }
    let mut removals = Vec::new();
    let mut additions = Vec::new();
    for (raw, value) in adj {
        let (key, removal) = split_marker("annotations", raw)?;
        if removal {
            removals.push(key);
        } else {
            additions.push((key, value));
        }
    }
    let map = spec.annotations_mut().get_or_insert_with(Default::default);
    for key in removals {
        map.remove(key);
    }
    for (key, value) in additions {
        map.insert(key.to_owned(), value.clone());
    }
    Ok(())
}

fn env_key(entry: &str) -> &str {
    entry.split_once('=').map_or(entry, |(k, _)| k)
}

/// Edits `process.env` in place: a set variable keeps the position of its
/// first existing occurrence (later duplicates are dropped), removed
/// variables are dropped, new variables are appended in adjustment order.
pub(crate) fn env(spec: &mut Spec, adj: &[api::KeyValue]) -> Result<(), Error> {
    if adj.is_empty() {
        return Ok(());
    }
    let mut removals = BTreeSet::new();
    // key -> value, last one wins; `order` keeps first-appearance order.
    let mut additions: BTreeMap<&str, &str> = BTreeMap::new();
    let mut order = Vec::new();
    for kv in adj {
        let (key, removal) = split_marker("env", &kv.key)?;
        if key.contains('=') {
            return Err(Error::InvalidKey {
                field: "env",
                key: kv.key.clone(),
                reason: "contains '='",
            });
        }
        if removal {
            removals.insert(key);
        } else if additions.insert(key, &kv.value).is_none() {
            order.push(key);
        }
    }

    let process = util::process(spec);
    let old = process.env().clone().unwrap_or_default();
    let mut placed = BTreeSet::new();
    let mut new = Vec::with_capacity(old.len() + order.len());
    for entry in old {
        let key = env_key(&entry);
        if let Some(value) = additions.get(key) {
            if placed.insert(key.to_owned()) {
                new.push(format!("{key}={value}"));
            }
        } else if !removals.contains(key) {
            new.push(entry);
        }
    }
    for key in order {
        if !placed.contains(key) {
            if let Some(value) = additions.get(key) {
                new.push(format!("{key}={value}"));
            }
        }
    }
    process.set_env(Some(new));
    Ok(())
}

/// Replaces `process.args`. A leading "" (NRI's "override" marker) is
/// dropped; an empty list (or only the marker) changes nothing.
pub(crate) fn args(spec: &mut Spec, adj: &[String]) {
    let args = match adj.split_first() {
        Some((first, rest)) if first.is_empty() => rest,
        _ => adj,
    };
    if args.is_empty() {
        return;
    }
    util::process(spec).set_args(Some(args.to_vec()));
}

fn hook(field: &'static str, h: &api::Hook) -> Result<Hook, Error> {
    if h.path.is_empty() {
        return Err(Error::MissingField {
            field,
            what: "hook path",
        });
    }
    let mut o = Hook::default();
    o.set_path(h.path.clone().into())
        .set_args(non_empty_vec(&h.args))
        .set_env(non_empty_vec(&h.env))
        .set_timeout(h.timeout.as_ref().map(|t| t.value));
    Ok(o)
}

/// Appends hooks per phase, in adjustment order.
pub(crate) fn hooks(spec: &mut Spec, adj: Option<&api::Hooks>) -> Result<(), Error> {
    let Some(adj) = adj else { return Ok(()) };
    let phases: [(&'static str, &Vec<api::Hook>); 6] = [
        ("hooks.prestart", &adj.prestart),
        ("hooks.create_runtime", &adj.create_runtime),
        ("hooks.create_container", &adj.create_container),
        ("hooks.start_container", &adj.start_container),
        ("hooks.poststart", &adj.poststart),
        ("hooks.poststop", &adj.poststop),
    ];
    // Convert everything first so a bad hook leaves no partial phase behind.
    let mut converted = Vec::with_capacity(6);
    for (field, list) in phases {
        converted.push(
            list.iter()
                .map(|h| hook(field, h))
                .collect::<Result<Vec<_>, _>>()?,
        );
    }
    if converted.iter().all(Vec::is_empty) {
        return Ok(());
    }
    let hooks = util::hooks(spec);
    let mut it = converted.into_iter();
    let mut append = |slot: &mut Option<Vec<Hook>>| {
        let new = it.next().unwrap_or_default();
        if !new.is_empty() {
            slot.get_or_insert_with(Vec::new).extend(new);
        }
    };
    append(hooks.prestart_mut());
    append(hooks.create_runtime_mut());
    append(hooks.create_container_mut());
    append(hooks.start_container_mut());
    append(hooks.poststart_mut());
    append(hooks.poststop_mut());
    Ok(())
}

/// Sets rlimits, replacing an existing entry of the same type in place
/// (the runtime spec forbids duplicate types).
pub(crate) fn rlimits(spec: &mut Spec, adj: &[api::PosixRlimit]) -> Result<(), Error> {
    if adj.is_empty() {
        return Ok(());
    }
    let mut new = Vec::with_capacity(adj.len());
    for l in adj {
        let typ: PosixRlimitType = parse_oci_enum("rlimits.type", &l.r#type)?;
        let o = PosixRlimitBuilder::default()
            .typ(typ)
            .hard(l.hard)
            .soft(l.soft)
            .build()
            .map_err(|source| Error::Oci {
                field: "rlimits",
                source,
            })?;
        new.push(o);
    }
    let process = util::process(spec);
    let mut list = process.rlimits().clone().unwrap_or_default();
    for o in new {
        match list.iter_mut().find(|e| e.typ() == o.typ()) {
            Some(slot) => *slot = o,
            None => list.push(o),
        }
    }
    process.set_rlimits(Some(list));
    Ok(())
}

/// Sets `process.oomScoreAdj` (kernel range -1000..=1000).
pub(crate) fn oom_score_adj(spec: &mut Spec, adj: Option<&api::OptionalInt>) -> Result<(), Error> {
    let Some(v) = adj else { return Ok(()) };
    let score = i32::try_from(v.value)
        .ok()
        .filter(|s| (-1000..=1000).contains(s))
        .ok_or_else(|| Error::OutOfRange {
            field: "linux.oom_score_adj",
            value: v.value.to_string(),
            reason: "must be within -1000..=1000",
        })?;
    util::process(spec).set_oom_score_adj(Some(score));
    Ok(())
}

/// Sets `process.ioPriority`; class NONE removes it (as upstream does).
pub(crate) fn io_priority(
    spec: &mut Spec,
    adj: Option<&api::LinuxIoPriority>,
) -> Result<(), Error> {
    let Some(p) = adj else { return Ok(()) };
    let class = api::IoPrioClass::try_from(p.class).map_err(|_| Error::UnknownEnum {
        field: "linux.io_priority.class",
        value: p.class,
    })?;
    let class = match class {
        api::IoPrioClass::IoprioClassNone => {
            util::process(spec).set_io_priority(None);
            return Ok(());
        }
        api::IoPrioClass::IoprioClassRt => IOPriorityClass::IoprioClassRt,
        api::IoPrioClass::IoprioClassBe => IOPriorityClass::IoprioClassBe,
        api::IoPrioClass::IoprioClassIdle => IOPriorityClass::IoprioClassIdle,
    };
    let o = LinuxIOPriorityBuilder::default()
        .class(class)
        .priority(i64::from(p.priority))
        .build()
        .map_err(|source| Error::Oci {
            field: "linux.io_priority",
            source,
        })?;
    util::process(spec).set_io_priority(Some(o));
    Ok(())
}

fn sched_flag(raw: i32) -> Result<LinuxSchedulerFlag, Error> {
    use api::LinuxSchedulerFlag as F;
    const FIELD: &str = "linux.scheduler.flags";
    let flag = F::try_from(raw).map_err(|_| Error::UnknownEnum {
        field: FIELD,
        value: raw,
    })?;
    Ok(match flag {
        // oci-spec 0.10 serializes these two with misspelled names;
        // `spec_json` writes the right ones.
        F::SchedFlagResetOnFork => LinuxSchedulerFlag::SchedResetOnFork,
        F::SchedFlagDlOverrun => LinuxSchedulerFlag::SchedFlagDLOverrun,
        F::SchedFlagReclaim => LinuxSchedulerFlag::SchedFlagReclaim,
        F::SchedFlagKeepPolicy => LinuxSchedulerFlag::SchedFlagKeepPolicy,
        F::SchedFlagKeepParams => LinuxSchedulerFlag::SchedFlagKeepParams,
        F::SchedFlagUtilClampMin => LinuxSchedulerFlag::SchedFlagUtilClampMin,
        F::SchedFlagUtilClampMax => LinuxSchedulerFlag::SchedFlagUtilClampMax,
    })
}

/// Replaces `process.scheduler`; policy SCHED_NONE removes it (as upstream
/// does). Zero values are omitted, as Go's `omitempty` does.
pub(crate) fn scheduler(spec: &mut Spec, adj: Option<&api::LinuxScheduler>) -> Result<(), Error> {
    use api::LinuxSchedulerPolicy as P;
    let Some(s) = adj else { return Ok(()) };
    let policy = P::try_from(s.policy).map_err(|_| Error::UnknownEnum {
        field: "linux.scheduler.policy",
        value: s.policy,
    })?;
    let policy = match policy {
        P::SchedNone => {
            util::process(spec).set_scheduler(None);
            return Ok(());
        }
        P::SchedOther => LinuxSchedulerPolicy::SchedOther,
        P::SchedFifo => LinuxSchedulerPolicy::SchedFifo,
        P::SchedRr => LinuxSchedulerPolicy::SchedRr,
        P::SchedBatch => LinuxSchedulerPolicy::SchedBatch,
        P::SchedIso => LinuxSchedulerPolicy::SchedIso,
        P::SchedIdle => LinuxSchedulerPolicy::SchedIdle,
        P::SchedDeadline => LinuxSchedulerPolicy::SchedDeadline,
    };
    let flags = s
        .flags
        .iter()
        .map(|f| sched_flag(*f))
        .collect::<Result<Vec<_>, _>>()?;
    let nz32 = |v: i32| (v != 0).then_some(v);
    let nz64 = |v: u64| (v != 0).then_some(v);
    let mut o = Scheduler::default();
    o.set_policy(policy)
        .set_nice(nz32(s.nice))
        .set_priority(nz32(s.priority))
        .set_flags(non_empty_vec(&flags))
        .set_runtime(nz64(s.runtime))
        .set_deadline(nz64(s.deadline))
        .set_period(nz64(s.period));
    util::process(spec).set_scheduler(Some(o));
    Ok(())
}
