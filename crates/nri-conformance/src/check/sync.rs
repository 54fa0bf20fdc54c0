//! Synchronize: what a plugin registering during creations saw.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Violation, of, short};
use crate::record::{EventKind, Record, RecordKind};

/// Sync exactly once: each expected pod (ids) and container (ids) is seen by
/// the instance exactly once, either in its Synchronize or as its
/// RunPodSandbox / CreateContainer event. Codes: `not-synchronized`,
/// `pod-lost`, `pod-duplicated`, `container-lost`, `container-duplicated`.
pub fn check_sync_exactly_once(
    records: &[Record],
    instance: &str,
    pods: &[String],
    containers: &[String],
) -> Vec<Violation> {
    let mut out = Vec::new();
    if !of(records, instance).any(|r| matches!(r.kind, RecordKind::Synchronized { .. })) {
        out.push(Violation::new(
            "not-synchronized",
            format!("instance {instance} never synchronized"),
        ));
        return out;
    }
    let mut count: BTreeMap<&str, (u32, u32)> = BTreeMap::new(); // (sync, events)
    for r in of(records, instance) {
        match &r.kind {
            RecordKind::Synchronized {
                pods: p,
                containers: c,
            } => {
                for id in p.iter().map(|p| &p.id).chain(c.iter().map(|c| &c.id)) {
                    count.entry(id).or_default().0 += 1;
                }
            }
            RecordKind::Event {
                event: EventKind::RunPodSandbox,
                pod,
                container: None,
            } => count.entry(&pod.id).or_default().1 += 1,
            RecordKind::Event {
                event: EventKind::CreateContainer,
                container: Some(c),
                ..
            } => count.entry(&c.id).or_default().1 += 1,
            _ => {}
        }
    }
    for (what, ids) in [("pod", pods), ("container", containers)] {
        for id in ids {
            let (s, e) = count.get(id.as_str()).copied().unwrap_or((0, 0));
            if s + e == 0 {
                out.push(Violation::new(
                    format!("{what}-lost"),
                    format!(
                        "{instance}: {what} {} neither in Synchronize nor as an event",
                        short(id)
                    ),
                ));
            } else if s + e > 1 {
                out.push(Violation::new(
                    format!("{what}-duplicated"),
                    format!(
                        "{instance}: {what} {} seen {} times ({s} in Synchronize, {e} as events)",
                        short(id),
                        s + e
                    ),
                ));
            }
        }
    }
    out
}

/// What happened around a plugin that held its Synchronize open while
/// containers were created.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SyncHoldOutcome {
    /// The holding instance.
    pub instance: String,
    /// The runtime's request timeout (ms).
    pub request_timeout_ms: u64,
    /// How long the instance held Synchronize (ms).
    pub hold_ms: u64,
    /// Whether Synchronize reached the instance (and was held).
    pub held: bool,
    /// Containers (ids) whose creation was asked for during the hold.
    pub containers: Vec<String>,
    /// Errors of creations asked for during the hold.
    pub create_errors: Vec<String>,
    /// How long each of those creations took (ms).
    pub create_ms: Vec<u64>,
    /// When the runtime closed the instance's connection, in ms after the
    /// hold began (`None`: it kept the plugin).
    pub dropped_after_ms: Option<u64>,
}

fn hold_common(records: &[Record], o: &SyncHoldOutcome, out: &mut Vec<Violation>) -> bool {
    for e in &o.create_errors {
        out.push(Violation::new(
            "create-failed-during-sync",
            format!("a creation during {}'s Synchronize failed: {e}", o.instance),
        ));
    }
    if !o.held {
        out.push(Violation::new(
            "not-synchronized",
            format!("instance {} never got Synchronize", o.instance),
        ));
        return false;
    }
    if o.dropped_after_ms.is_none() {
        out.extend(check_sync_exactly_once(
            records,
            &o.instance,
            &[],
            &o.containers,
        ));
    }
    true
}

/// Sync held: a plugin holding Synchronize open for less than the request
/// timeout stays registered and sees every container created meanwhile
/// exactly once (in Synchronize or as CreateContainer); the creations work.
/// Codes: `not-synchronized`, `dropped-within-request-timeout`,
/// `container-lost`, `container-duplicated`, `create-failed-during-sync`.
pub fn check_sync_held(records: &[Record], o: &SyncHoldOutcome) -> Vec<Violation> {
    let mut out = Vec::new();
    if hold_common(records, o, &mut out)
        && let Some(ms) = o.dropped_after_ms
    {
        out.push(Violation::new(
            "dropped-within-request-timeout",
            format!(
                "{} answered Synchronize after {} ms (request timeout {} ms) and was dropped \
                 {ms} ms after it got Synchronize",
                o.instance, o.hold_ms, o.request_timeout_ms
            ),
        ));
    }
    out
}

/// How much earlier than the request timeout a drop may be seen (the
/// runtime's timer and ours start at slightly different moments).
const DROP_SLACK_MS: u64 = 200;

/// Sync late: a plugin answering Synchronize after the request timeout is
/// either dropped at (not before) the timeout, which is not a lost container,
/// or kept, and then it sees every container created meanwhile exactly once;
/// the creations work either way. Codes: `not-synchronized`,
/// `dropped-before-request-timeout`, `container-lost`, `container-duplicated`,
/// `create-failed-during-sync`.
pub fn check_sync_late(records: &[Record], o: &SyncHoldOutcome) -> Vec<Violation> {
    let mut out = Vec::new();
    if hold_common(records, o, &mut out)
        && let Some(ms) = o.dropped_after_ms
        && ms + DROP_SLACK_MS < o.request_timeout_ms
    {
        out.push(Violation::new(
            "dropped-before-request-timeout",
            format!(
                "{} was dropped {ms} ms into its Synchronize, before the request timeout of {} ms",
                o.instance, o.request_timeout_ms
            ),
        ));
    }
    out
}
