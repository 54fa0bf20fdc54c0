//! One seed, one schedule: the set-up and the steps drawn from the
//! checker's own generator ([`Rng`]), following a shadow model of the
//! pods and containers so that most steps apply when they run.

use nri_api::EventMask;
use nri_api::api::Event;

use crate::rng::Rng;
use crate::schedule::{
    Fault, Hook, Mode, Peer, PluginSpec, Policy, Preload, Schedule, Setup, Step,
};

/// How large the generated schedules are.
#[derive(Debug, Clone, Copy)]
pub struct Size {
    /// Fewest steps.
    pub min_steps: usize,
    /// Most steps.
    pub max_steps: usize,
}

impl Default for Size {
    fn default() -> Self {
        Size {
            min_steps: 20,
            max_steps: 90,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum G {
    Created,
    Running,
    Stopped,
    Removed,
}

/// The generator's idea of the objects (what the steps will do if they
/// all succeed).
struct Shadow {
    /// Pods: `Running` = ready, `Stopped`, `Removed`.
    pods: Vec<G>,
    /// Containers: their pod and state.
    ctrs: Vec<(u32, G)>,
    /// Whether each plugin was started.
    running: Vec<bool>,
}

impl Shadow {
    fn pods_in(&self, s: G) -> Vec<u32> {
        (0..self.pods.len() as u32)
            .filter(|p| self.pods[*p as usize] == s)
            .collect()
    }
    fn ctrs_in(&self, states: &[G]) -> Vec<u32> {
        (0..self.ctrs.len() as u32)
            .filter(|c| states.contains(&self.ctrs[*c as usize].1))
            .collect()
    }
}

/// The version of the generator: what a seed means. Each version keeps
/// every schedule of the versions before it but for what it adds (a
/// regression entry names the version its seed was found with).
///
/// 1. SDK plugins only.
/// 2. Raw wire peers, some answering like a plugin before NRI v0.12.
/// 3. WebAssembly plugins.
/// 4. Scenarios between the random steps (`scenarios.rs`).
/// 5. Proxy mode: in one run of four, the upstream runtime's Configure
///    tells a request timeout of zero (runtime-mode schedules are those of
///    version 4).
/// 6. WebAssembly plugins commit faults: each (in runs without the large
///    node) gets a fault program compiled into its guest
///    (`wasm_program.rs`).
pub const GENERATOR: u32 = 6;

/// Salt of the stream of version 4's scenarios.
const SCENARIO_STREAM: u64 = 0x7363_656e_6172_696f;

/// Salt of the stream of version 5's upstream settings.
const UPSTREAM_STREAM: u64 = 0x7570_7374_7265_616d;

/// Salt of the stream of version 6's WebAssembly fault programs.
const WASM_STREAM: u64 = 0x7761_736d_6661_756c;

/// The schedule of `seed` in `mode` (the latest generator).
pub fn schedule(seed: u64, mode: Mode, size: Size) -> Schedule {
    schedule_with(seed, mode, size, GENERATOR)
}

/// The schedule of `seed` in `mode` as generator version `generator` made
/// it.
pub fn schedule_with(seed: u64, mode: Mode, size: Size, generator: u32) -> Schedule {
    let mut rng = Rng::new(seed);
    let mut setup = setup(&mut rng, seed, mode, generator);
    let mut sh = Shadow {
        pods: vec![G::Running; setup.preload.pods as usize],
        ctrs: Vec::new(),
        running: vec![false; setup.plugins.len()],
    };
    for p in 0..setup.preload.pods {
        for k in 0..setup.preload.containers_per_pod {
            let st = if k % 2 == 0 { G::Running } else { G::Created };
            sh.ctrs.push((p, st));
        }
    }
    let mut steps = Vec::new();
    // Most plugins are there from the start; the others register later.
    for i in 0..setup.plugins.len() {
        if rng.chance(70) {
            steps.push(Step::Connect { plugin: i });
            sh.running[i] = true;
        }
    }
    if rng.chance(60) {
        for i in 0..setup.plugins.len() {
            if sh.running[i] {
                steps.push(Step::WaitActive { plugin: i });
            }
        }
    }
    let n = rng.range(size.min_steps as u64, size.max_steps as u64) as usize;
    // Version 4's scenarios come from a stream of their own and do not
    // count toward the random steps.
    let mut scenarios = Rng::new(seed ^ SCENARIO_STREAM);
    let mut ids = crate::scenarios::Ids::default();
    let mut inserted = 0;
    while steps.len() - inserted < n {
        if let Some(s) = step(&mut rng, &setup, &mut sh) {
            steps.push(s);
        }
        if generator >= 4 {
            let extra = crate::scenarios::scenario(&mut scenarios, &setup, &mut ids);
            inserted += extra.len();
            steps.extend(extra);
        }
    }
    let mut finale_us = *rng.pick(&[0, 10, 100, 1_000, 10_000, 100_000]);
    if generator >= 4 && scenarios.chance(50) {
        // A few scheduler turns: the stop lands inside the registration.
        finale_us = scenarios.range(0, 40);
    }
    // Set after the steps were drawn (they do not depend on it).
    if generator >= 5 && mode == Mode::Proxy && Rng::new(seed ^ UPSTREAM_STREAM).chance(25) {
        // A runtime that does not tell its request timeout times its
        // plugins with NRI's default.
        setup.configure_timeout_zero = true;
        setup.deadline_ms = Some(2000);
    }
    if generator >= 6 && !setup.preload.is_large() {
        // Logging the large node's Synchronize takes a guest seconds (its
        // plugin keeps the long timeout of `env::WASM_TIMEOUT`, and no
        // faults, there).
        let mut programs = Rng::new(seed ^ WASM_STREAM);
        for p in setup.plugins.iter_mut().filter(|p| p.peer == Peer::Wasm) {
            p.wasm_faults = crate::wasm_program::draw(&mut programs, p, &steps);
        }
    }
    Schedule {
        seed,
        generator,
        setup,
        steps,
        finale_us,
    }
}

fn setup(rng: &mut Rng, seed: u64, mode: Mode, generator: u32) -> Setup {
    let timeout_ms = *rng.pick(&[500, 1000, 2000]);
    let deadline_ms = match mode {
        Mode::Runtime if rng.chance(35) => None,
        Mode::Runtime => Some(timeout_ms * rng.range(1, 4) - rng.below(timeout_ms / 2)),
        Mode::Proxy => Some(*rng.pick(&[1000, 2000, 2000, 4000])),
    };
    let preload = if rng.chance(10) {
        // Over the 4 MiB message cap: a split Synchronize.
        Preload {
            pods: 40,
            containers_per_pod: 5,
            pad: 22_000,
        }
    } else {
        Preload {
            pods: rng.range(0, 3) as u32,
            containers_per_pod: rng.range(0, 2) as u32,
            pad: rng.range(0, 200) as u32,
        }
    };
    let n = rng.range(1, 4) as usize;
    let mut indices: Vec<u64> = Vec::new();
    while indices.len() < n {
        let i = rng.range(1, 98);
        if !indices.contains(&i) {
            indices.push(i);
        }
    }
    let echo = if rng.chance(40) {
        Some(rng.index(n))
    } else {
        None
    };
    // Settings added after the first version draw from a stream of their
    // own, so that the schedules of earlier seeds stay what they were (the
    // regression list names seeds).
    let mut later = Rng::new(seed ^ LATER_STREAM);
    let plugins = (0..n)
        .map(|k| plugin(rng, &mut later, generator, (indices[k], k), echo == Some(k)))
        .collect();
    Setup {
        mode,
        timeout_ms,
        strikes: rng.range(1, 3) as u32,
        grace_ms: if rng.chance(70) {
            0
        } else {
            *rng.pick(&[500, 3000])
        },
        deadline_ms,
        configure_timeout_zero: false,
        // Behind the proxy the runtime is containerd or CRI-O, which both
        // tell NRI of a creation they give up (its StopContainer and
        // RemoveContainer); the draw stays so that the stream does.
        undo: rng.chance(80) || mode == Mode::Proxy,
        preload,
        plugins,
    }
}

/// Salt of the stream of later settings.
const LATER_STREAM: u64 = 0x6c61_7465_7273_7472;

fn plugin(
    rng: &mut Rng,
    later: &mut Rng,
    generator: u32,
    (index, k): (u64, usize),
    echo: bool,
) -> PluginSpec {
    let mut events = EventMask::EMPTY;
    for e in Event::ALL_EVENTS {
        let p = if e == Event::ValidateContainerAdjustment {
            25
        } else {
            70
        };
        if rng.chance(p) {
            events.set(e);
        }
    }
    if events.is_empty() {
        events.set(Event::StartContainer);
    }
    if echo {
        events.set(Event::UpdateContainer);
    }
    let policy = [
        Policy::Default,
        Policy::Ignore,
        Policy::Fail,
        Policy::Required,
    ][rng.weighted(&[3, 2, 2, 2])];
    let streaming = rng.chance(30);
    let legacy = later.chance(50);
    let (raw, wasm) = (later.chance(30), later.chance(15));
    let peer = match generator {
        3.. if wasm => Peer::Wasm,
        2.. if raw => Peer::Raw,
        _ => Peer::Sdk,
    };
    PluginSpec {
        index: format!("{index:02}"),
        name: format!("obs{k}"),
        peer,
        policy,
        events,
        echo,
        streaming: peer == Peer::Sdk && streaming,
        reconnect: rng.chance(75),
        legacy: peer == Peer::Raw && legacy,
        wasm_faults: Vec::new(),
    }
}

/// Kinds of step, with their weights.
const KINDS: &[(&str, u32)] = &[
    ("run-pod", 8),
    ("create", 11),
    ("start", 8),
    ("update", 5),
    ("stop", 4),
    ("exit", 3),
    ("remove", 4),
    ("update-pod", 2),
    ("stop-pod", 2),
    ("remove-pod", 2),
    ("settle", 5),
    ("advance", 4),
    ("connect", 3),
    ("wait-active", 2),
    ("cut", 2),
    ("stop-plugin", 1),
    ("fault", 7),
    ("unsolicited", 2),
    ("slow-listing", 1),
    ("upstream-cut", 1),
    ("upstream-restart", 1),
];

/// One step, or `None` when the kind drawn does not apply now.
fn step(rng: &mut Rng, setup: &Setup, sh: &mut Shadow) -> Option<Step> {
    let weights: Vec<u32> = KINDS.iter().map(|(_, w)| *w).collect();
    let kind = KINDS[rng.weighted(&weights)].0;
    let bg = rng.chance(30);
    match kind {
        "run-pod" => {
            sh.pods.push(G::Running);
            Some(Step::RunPod {
                pod: sh.pods.len() as u32 - 1,
                bg,
            })
        }
        "create" => {
            let pod = *pick(rng, &sh.pods_in(G::Running))?;
            let abandon = rng.chance(5);
            sh.ctrs
                .push((pod, if abandon { G::Removed } else { G::Created }));
            Some(Step::Create {
                ctr: sh.ctrs.len() as u32 - 1,
                pod,
                abandon,
                bg,
            })
        }
        "start" => ctr_step(rng, sh, &[G::Created], G::Running, |ctr| Step::Start {
            ctr,
            bg,
        }),
        "update" => {
            let mem_mib = 64 * rng.range(1, 64) as u32;
            let c = *pick(rng, &sh.ctrs_in(&[G::Created, G::Running]))?;
            Some(Step::Update {
                ctr: c,
                mem_mib,
                bg,
            })
        }
        "stop" => ctr_step(rng, sh, &[G::Running], G::Stopped, |ctr| Step::Stop {
            ctr,
            bg,
        }),
        "exit" => {
            let after_ms = *rng.pick(&[0, 5, 50, 500, 3000]);
            ctr_step(rng, sh, &[G::Running], G::Stopped, |ctr| Step::Exit {
                ctr,
                after_ms,
            })
        }
        "remove" => ctr_step(rng, sh, &[G::Created, G::Stopped], G::Removed, |ctr| {
            Step::Remove { ctr, bg }
        }),
        _ => pod_or_plugin_step(kind, rng, setup, sh, bg),
    }
}

fn pick<'a, T>(rng: &mut Rng, items: &'a [T]) -> Option<&'a T> {
    if items.is_empty() {
        None
    } else {
        Some(rng.pick(items))
    }
}

fn ctr_step(
    rng: &mut Rng,
    sh: &mut Shadow,
    from: &[G],
    to: G,
    make: impl FnOnce(u32) -> Step,
) -> Option<Step> {
    let c = *pick(rng, &sh.ctrs_in(from))?;
    sh.ctrs[c as usize].1 = to;
    Some(make(c))
}

fn pod_or_plugin_step(
    kind: &str,
    rng: &mut Rng,
    setup: &Setup,
    sh: &mut Shadow,
    bg: bool,
) -> Option<Step> {
    let plugins = setup.plugins.len();
    match kind {
        "update-pod" => {
            let pod = *pick(rng, &sh.pods_in(G::Running))?;
            Some(Step::UpdatePod { pod, bg })
        }
        "stop-pod" => {
            let pod = *pick(rng, &sh.pods_in(G::Running))?;
            sh.pods[pod as usize] = G::Stopped;
            for c in sh
                .ctrs
                .iter_mut()
                .filter(|c| c.0 == pod && c.1 == G::Running)
            {
                c.1 = G::Stopped;
            }
            Some(Step::StopPod { pod, bg })
        }
        "remove-pod" => {
            let pod = *pick(rng, &sh.pods_in(G::Stopped))?;
            sh.pods[pod as usize] = G::Removed;
            for c in sh.ctrs.iter_mut().filter(|c| c.0 == pod) {
                c.1 = G::Removed;
            }
            Some(Step::RemovePod { pod, bg })
        }
        "settle" => Some(Step::Settle),
        "advance" => Some(Step::Advance {
            ms: *rng.pick(&[1, 10, 100, 1000, 5000]),
        }),
        "connect" => {
            let off: Vec<usize> = (0..plugins).filter(|i| !sh.running[*i]).collect();
            let plugin = *pick(rng, &off)?;
            sh.running[plugin] = true;
            Some(Step::Connect { plugin })
        }
        "wait-active" => Some(Step::WaitActive {
            plugin: rng.index(plugins),
        }),
        "cut" => Some(Step::Cut {
            plugin: rng.index(plugins),
        }),
        "stop-plugin" => {
            let plugin = rng.index(plugins);
            sh.running[plugin] = false;
            Some(Step::StopPlugin { plugin })
        }
        "fault" => Some(fault(rng, setup)),
        "unsolicited" => {
            let ctr = *pick(rng, &sh.ctrs_in(&[G::Created, G::Running, G::Removed]))?;
            Some(Step::Unsolicited {
                plugin: rng.index(plugins),
                ctr,
            })
        }
        "slow-listing" => Some(Step::SlowListing {
            ms: *rng.pick(&[0, 5, 200, 3000]),
        }),
        "upstream-cut" if setup.mode == Mode::Proxy => Some(Step::UpstreamCut),
        "upstream-restart" if setup.mode == Mode::Proxy => {
            // What the runtime has when it comes back is drawn when the
            // step runs (from this seed), against the truth of that moment.
            Some(Step::UpstreamRestart {
                seed: rng.next_u64() % 1_000_000,
            })
        }
        _ => None,
    }
}

fn fault(rng: &mut Rng, setup: &Setup) -> Step {
    let plugin = rng.index(setup.plugins.len());
    let spec = &setup.plugins[plugin];
    let hook = if rng.chance(15) {
        Hook::Synchronize
    } else {
        let subscribed: Vec<Event> = spec.events.iter().collect();
        match pick(rng, &subscribed) {
            Some(e) if rng.chance(85) => Hook::Event(*e),
            _ => Hook::Event(*rng.pick(&Event::ALL_EVENTS)),
        }
    };
    let t = setup.timeout_ms;
    let fault = match rng.weighted(&[50, 15, 25, 10]) {
        0 => Fault::Delay(*rng.pick(&[t / 10, t / 2, t - 1, t + 1, 2 * t])),
        1 => Fault::Hang,
        2 => Fault::Error,
        _ => Fault::Crash,
    };
    Step::Fault {
        plugin,
        hook,
        fault,
        times: rng.range(1, 3) as u32,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A later version changes what it adds (the peers, the scenarios)
    /// and nothing else.
    #[test]
    fn a_later_generator_keeps_the_earlier_schedules() {
        for seed in 0..50 {
            for mode in [Mode::Runtime, Mode::Proxy] {
                let v1 = schedule_with(seed, mode, Size::default(), 1);
                let mut v3 = schedule_with(seed, mode, Size::default(), 3);
                let v4 = schedule_with(seed, mode, Size::default(), 4);
                let mut v5 = schedule_with(seed, mode, Size::default(), 5);
                assert_eq!(v1.steps, v3.steps);
                assert_eq!(v3.setup, v4.setup);
                let mut rest = v4.steps.iter();
                let kept = v3.steps.iter().all(|s| rest.any(|t| t == s));
                assert!(kept, "seed {seed}: version 4 lost a step of version 3");
                assert_eq!((&v4.steps, v4.finale_us), (&v5.steps, v5.finale_us));
                if v5.setup.configure_timeout_zero {
                    assert_eq!(mode, Mode::Proxy);
                    v5.setup.configure_timeout_zero = false;
                    v5.setup.deadline_ms = v4.setup.deadline_ms;
                }
                assert_eq!(v4.setup, v5.setup, "seed {seed}");
                let mut v6 = schedule_with(seed, mode, Size::default(), 6);
                assert_eq!((&v5.steps, v5.finale_us), (&v6.steps, v6.finale_us));
                for p in &mut v6.setup.plugins {
                    assert!(p.wasm_faults.is_empty() || p.peer == Peer::Wasm);
                    p.wasm_faults.clear();
                }
                let v5 = schedule_with(seed, mode, Size::default(), 5);
                assert_eq!(v5.setup, v6.setup, "seed {seed}");
                assert!(v1.setup.plugins.iter().all(|p| p.peer == Peer::Sdk));
                for p in &mut v3.setup.plugins {
                    p.streaming = p.streaming || p.peer != Peer::Sdk && v1_streaming(&v1, p);
                    p.peer = Peer::Sdk;
                    p.legacy = false;
                }
                assert_eq!(v1.setup, v3.setup, "seed {seed}");
            }
        }
    }

    /// Version 5 reaches the Configure without a request timeout in a
    /// quarter of the proxy runs, never in runtime mode.
    #[test]
    fn version_5_tells_no_timeout_to_some_proxies() {
        let zero = |mode| {
            (0..100)
                .filter(|s| {
                    schedule_with(*s, mode, Size::default(), 5)
                        .setup
                        .configure_timeout_zero
                })
                .count()
        };
        assert_eq!(zero(Mode::Runtime), 0);
        assert!(
            (10..=40).contains(&zero(Mode::Proxy)),
            "{}",
            zero(Mode::Proxy)
        );
    }

    /// Version 6 gives most WebAssembly plugins of runs without the large
    /// node a fault program, on objects of the schedule's steps.
    #[test]
    fn version_6_gives_webassembly_plugins_faults() {
        let (mut wasm, mut with) = (0, 0);
        for seed in 0..200 {
            let s = schedule_with(seed, Mode::Runtime, Size::default(), 6);
            for p in s.setup.plugins.iter().filter(|p| p.peer == Peer::Wasm) {
                wasm += 1;
                with += usize::from(!p.wasm_faults.is_empty());
                assert!(p.wasm_faults.is_empty() || !s.setup.preload.is_large());
                for f in &p.wasm_faults {
                    assert!(p.subscribed(f.event), "seed {seed}: {f:?}");
                    assert!((1..=2).contains(&f.times));
                }
            }
        }
        assert!(wasm > 20, "{wasm}");
        assert!(with * 2 > wasm, "{with} of {wasm}");
    }

    fn v1_streaming(v1: &Schedule, p: &PluginSpec) -> bool {
        (v1.setup.plugins.iter()).any(|q| q.name == p.name && q.streaming)
    }

    #[test]
    fn a_seed_is_one_schedule_and_its_text_reads_back() {
        for seed in 0..50 {
            let a = schedule(seed, Mode::Runtime, Size::default());
            let b = schedule(seed, Mode::Runtime, Size::default());
            assert_eq!(a, b);
            let back = crate::text::parse(&a.to_string()).unwrap();
            assert_eq!(a, back, "{a}");
            let p = schedule(seed, Mode::Proxy, Size::default());
            assert_eq!(crate::text::parse(&p.to_string()).unwrap(), p);
        }
    }
}
