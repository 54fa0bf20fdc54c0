//! Invariant 4 for WebAssembly plugins, whose faults are their programs'
//! (`wasm_program.rs`). The runtime discards a guest's instance at any
//! timeout (its own, not one the event's deadline cut short) or trap, and
//! makes a new one after a backoff, configured and synchronized again (a
//! new instance in the records, its Configure ending the one before); its
//! strikes carry over, and at the strike limit the plugin is closed for
//! good. So:
//!
//! - an instance that ended after events, neither trapped nor shut down,
//!   had an answer that may have been late (a delay, a hang);
//! - a plugin not active at quiescence had at least its strike limit of
//!   such answers, over all its instances (it is not started again: the
//!   runtime re-instantiates it, or has closed it for good);
//! - runtime mode: a plugin that never delayed, hung or trapped is never
//!   reported timed out. A guest's work takes no paused time (its calls
//!   run on the executor or on tokio's blocking pool, which holds paused
//!   time still), so its answers are on time for every deadline.

use crate::invariants::{Evidence, Violation};
use crate::model::Request;
use crate::observe::{Instance, Seen};
use crate::schedule::{Fault, Mode, Peer};
use nri_runtime::ErrorClass;

fn late(f: &Option<Fault>) -> bool {
    matches!(f, Some(Fault::Delay(_) | Fault::Hang))
}

/// The faults of every instance of a slot.
fn faults(insts: &[Instance]) -> impl Iterator<Item = Fault> + '_ {
    insts
        .iter()
        .flat_map(|i| i.records.iter())
        .filter_map(|r| match &r.seen {
            Seen::Event { fault, .. } => *fault,
            _ => None,
        })
}

/// The checks above, for every WebAssembly plugin of the run.
pub fn check(ev: &Evidence<'_>, requests: &[Request]) -> Vec<Violation> {
    let mut out = Vec::new();
    for (slot, insts) in ev.instances.iter().enumerate() {
        let spec = &ev.setup.plugins[slot];
        if spec.peer != Peer::Wasm {
            continue;
        }
        let name = spec.full_name();
        for (k, inst) in insts.iter().enumerate() {
            if let Some(events) = discarded_healthy(inst) {
                let detail = format!(
                    "the runtime discarded instance {k} after {events} events, none of them answered late nor trapped on"
                );
                out.push(Violation::new(
                    4,
                    "instance-discarded",
                    Some(name.clone()),
                    None,
                    detail,
                ));
            }
        }
        let late_answers = faults(insts).filter(|f| late(&Some(*f))).count();
        if !ev.active[slot] && (late_answers as u32) < ev.setup.strikes {
            let detail = format!(
                "not active at quiescence after {late_answers} answers that may have been late, the strike limit is {}",
                ev.setup.strikes
            );
            out.push(Violation::new(
                4,
                "struck-out-early",
                Some(name.clone()),
                None,
                detail,
            ));
        }
        let provoked = faults(insts).any(|f| !matches!(f, Fault::Error));
        if ev.setup.mode == Mode::Runtime && !provoked {
            out.extend(timeouts(&name, requests));
        }
    }
    out
}

/// Events of an instance that ended (a new one was configured) though
/// neither a trap (a crash fault, recorded as a cut) nor the runtime's
/// Shutdown ended it, after events none of which the guest may have
/// answered late: how many.
fn discarded_healthy(inst: &Instance) -> Option<usize> {
    let mut events = 0;
    for r in &inst.records {
        match &r.seen {
            Seen::Event { fault, .. } if late(fault) => return None,
            Seen::Event { .. } => events += 1,
            Seen::Cut | Seen::Shutdown => return None,
            Seen::Lost => return (events > 0).then_some(events),
            Seen::Sync { .. } => {}
        }
    }
    None
}

/// The requests that reported plugin `name` timed out, or failed by its
/// timeout.
fn timeouts(name: &str, requests: &[Request]) -> Vec<Violation> {
    let mut out = Vec::new();
    for r in requests {
        let reported = (r.reported.iter()).any(|(p, c)| p == name && *c == ErrorClass::Timeout);
        let failed =
            r.failed_by.as_deref() == Some(name) && r.failed_class == Some(ErrorClass::Timeout);
        if reported || failed {
            out.push(Violation::new(
                4,
                "timeout-unprovoked",
                Some(name.to_owned()),
                Some(r.object.clone()),
                format!(
                    "{} reported the plugin timed out, though it never delayed, hung or trapped",
                    r.event
                ),
            ));
        }
    }
    out
}
