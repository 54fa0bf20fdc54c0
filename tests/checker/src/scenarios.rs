//! Generator version 4: short sequences of steps put between the random
//! ones, each aiming at a moment the contract is about and that random
//! steps reach rarely: a plugin registering again (slowly) while objects
//! are created, updated or validated; a hung call of a plugin that has
//! just come back; an upstream cut while a delivery is under way. They use
//! pods and containers of their own (ids from [`FIRST_ID`]), so the random
//! steps around them are those of version 3.

use nri_api::api::Event;

use crate::rng::Rng;
use crate::schedule::{Fault, Hook, Mode, Setup, Step};

/// First id of the scenarios' pods and containers.
pub const FIRST_ID: u32 = 50_000;

/// Ids for the scenarios' objects.
pub struct Ids(u32);

impl Default for Ids {
    fn default() -> Self {
        Ids(FIRST_ID)
    }
}

impl Ids {
    fn next(&mut self) -> u32 {
        self.0 += 1;
        self.0
    }
}

/// A scenario, or nothing (most of the time).
pub fn scenario(rng: &mut Rng, setup: &Setup, ids: &mut Ids) -> Vec<Step> {
    if !rng.chance(8) || setup.plugins.is_empty() {
        return Vec::new();
    }
    let slot = rng.index(setup.plugins.len());
    let t = setup.timeout_ms;
    match rng.weighted(&[3, 3, 2, 2, 2]) {
        0 => registers_during_creations(rng, slot, t, ids),
        1 => validator_comes_back(setup, rng, t, ids),
        2 => echo_comes_back(setup, t, ids),
        3 => hung_after_coming_back(slot, t, ids),
        _ if setup.mode == Mode::Proxy => cut_during_delivery(slot, t, ids),
        _ => registers_during_creations(rng, slot, t, ids),
    }
}

fn slow_sync(plugin: usize, t: u64) -> Step {
    Step::Fault {
        plugin,
        hook: Hook::Synchronize,
        fault: Fault::Delay(t / 2),
        times: 1,
    }
}

/// A pod and a container of the scenario's own, created in the
/// background.
fn objects(ids: &mut Ids, out: &mut Vec<Step>) -> (u32, u32) {
    let (pod, ctr) = (ids.next(), ids.next());
    out.push(Step::RunPod { pod, bg: true });
    out.push(Step::Create {
        ctr,
        pod,
        abandon: false,
        bg: true,
    });
    (pod, ctr)
}

/// The plugin comes back with a slow Synchronize while pods and
/// containers are created (in flight at its registration, and during its
/// sync).
fn registers_during_creations(rng: &mut Rng, slot: usize, t: u64, ids: &mut Ids) -> Vec<Step> {
    let mut out = vec![slow_sync(slot, t), Step::Cut { plugin: slot }];
    for _ in 0..rng.range(1, 3) {
        let (_, ctr) = objects(ids, &mut out);
        out.push(Step::Start { ctr, bg: true });
    }
    out.push(Step::Advance { ms: 1 });
    out.push(Step::Settle);
    out
}

/// A validator comes back while a pod and its container are created: its
/// backlog (the pod) must reach it before it validates the container.
fn validator_comes_back(setup: &Setup, rng: &mut Rng, t: u64, ids: &mut Ids) -> Vec<Step> {
    let validators: Vec<usize> = (0..setup.plugins.len())
        .filter(|i| setup.plugins[*i].subscribed(Event::ValidateContainerAdjustment))
        .collect();
    let Some(&slot) = validators.get(rng.index(validators.len().max(1))) else {
        return Vec::new();
    };
    let mut out = vec![slow_sync(slot, t), Step::Cut { plugin: slot }];
    let (pod, _) = objects(ids, &mut out);
    out.push(Step::Create {
        ctr: ids.next(),
        pod,
        abandon: false,
        bg: true,
    });
    out.push(Step::Settle);
    out
}

/// The echo plugin comes back while a container is updated twice, its
/// answer to the first update slow: the second update must win.
fn echo_comes_back(setup: &Setup, t: u64, ids: &mut Ids) -> Vec<Step> {
    let Some(slot) = setup.plugins.iter().position(|p| p.echo) else {
        return Vec::new();
    };
    let (pod, ctr) = (ids.next(), ids.next());
    vec![
        Step::RunPod { pod, bg: false },
        Step::Create {
            ctr,
            pod,
            abandon: false,
            bg: false,
        },
        Step::Start { ctr, bg: false },
        slow_sync(slot, t),
        Step::Fault {
            plugin: slot,
            hook: Hook::Event(Event::UpdateContainer),
            fault: Fault::Delay(t + 1),
            times: 1,
        },
        Step::Cut { plugin: slot },
        Step::Update {
            ctr,
            mem_mib: 1024,
            bg: true,
        },
        Step::Advance { ms: t / 2 + 1 },
        Step::Update {
            ctr,
            mem_mib: 2048,
            bg: true,
        },
        Step::Settle,
    ]
}

/// The plugin comes back and hangs on the creation that waited for it
/// (it is a late plugin of that CreateContainer): one timeout, one strike.
fn hung_after_coming_back(slot: usize, t: u64, ids: &mut Ids) -> Vec<Step> {
    let pod = ids.next();
    vec![
        Step::RunPod { pod, bg: false },
        slow_sync(slot, t),
        Step::Fault {
            plugin: slot,
            hook: Hook::Event(Event::CreateContainer),
            fault: Fault::Hang,
            times: 1,
        },
        Step::Cut { plugin: slot },
        Step::Advance { ms: 1 },
        Step::Create {
            ctr: ids.next(),
            pod,
            abandon: false,
            bg: true,
        },
        Step::Settle,
    ]
}

/// Proxy mode: the upstream connection drops while a plugin behind the
/// proxy is slow on a creation (the delivery is cut short).
fn cut_during_delivery(slot: usize, t: u64, ids: &mut Ids) -> Vec<Step> {
    let mut out = vec![Step::Fault {
        plugin: slot,
        hook: Hook::Event(Event::CreateContainer),
        fault: Fault::Delay(t / 2),
        times: 1,
    }];
    let (_, ctr) = objects(ids, &mut out);
    out.push(Step::Advance { ms: t / 4 });
    out.push(Step::UpstreamCut);
    out.push(Step::Remove { ctr, bg: true });
    out.push(Step::Settle);
    out
}
