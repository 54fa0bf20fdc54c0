//! The shortest schedule that still fails: delta debugging (ddmin) over
//! the steps, keeping a removal when the run still breaks the same
//! invariant the same way (same invariant and kind), then simpler
//! settings (no preloaded objects, steps in the foreground).

use std::time::{Duration, Instant};

use crate::check::run_guarded;
use crate::invariants::Violation;
use crate::run::Options;
use crate::schedule::{Preload, Schedule, Step};

/// How much shrinking may cost.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Most runs.
    pub runs: usize,
    /// Most wall time.
    pub time: Duration,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            runs: 300,
            time: Duration::from_secs(300),
        }
    }
}

struct Shrinker<'a> {
    key: (u8, &'static str),
    opts: &'a Options,
    budget: Budget,
    runs: usize,
    start: Instant,
}

impl Shrinker<'_> {
    fn exhausted(&self) -> bool {
        self.runs >= self.budget.runs || self.start.elapsed() >= self.budget.time
    }

    /// Whether `s` still fails the same way.
    fn fails(&mut self, s: &Schedule) -> bool {
        if self.exhausted() {
            return false;
        }
        self.runs += 1;
        let r = run_guarded(s, self.opts);
        r.violations.iter().any(|v| v.key() == self.key)
    }
}

/// The shortest variant of `s` (within `budget`) that still breaks
/// `target`'s invariant the same way; how many runs it took.
pub fn shrink(
    s: &Schedule,
    target: &Violation,
    opts: &Options,
    budget: Budget,
) -> (Schedule, usize) {
    let mut sh = Shrinker {
        key: target.key(),
        opts,
        budget,
        runs: 0,
        start: Instant::now(),
    };
    let mut best = s.clone();
    best.steps = ddmin(&mut sh, &best, best.steps.clone());
    simplify(&mut sh, &mut best);
    (best, sh.runs)
}

fn with_steps(s: &Schedule, steps: Vec<Step>) -> Schedule {
    Schedule { steps, ..s.clone() }
}

fn ddmin(sh: &mut Shrinker<'_>, s: &Schedule, mut steps: Vec<Step>) -> Vec<Step> {
    let mut n = 2usize;
    while steps.len() >= 2 && !sh.exhausted() {
        let chunk = steps.len().div_ceil(n);
        let mut reduced = None;
        for i in 0..n {
            let (lo, hi) = (i * chunk, ((i + 1) * chunk).min(steps.len()));
            if lo >= hi {
                continue;
            }
            let mut cand = steps[..lo].to_vec();
            cand.extend_from_slice(&steps[hi..]);
            if sh.fails(&with_steps(s, cand.clone())) {
                reduced = Some(cand);
                break;
            }
        }
        if let Some(cand) = reduced {
            steps = cand;
            n = (n - 1).max(2);
        } else {
            if n >= steps.len() {
                break;
            }
            n = (n * 2).min(steps.len());
        }
    }
    if steps.len() == 1 && sh.fails(&with_steps(s, Vec::new())) {
        steps.clear();
    }
    steps
}

/// Simpler settings, each kept if the run still fails.
fn simplify(sh: &mut Shrinker<'_>, best: &mut Schedule) {
    if best.setup.preload != Preload::default() {
        let mut c = best.clone();
        c.setup.preload = Preload::default();
        if sh.fails(&c) {
            *best = c;
        }
    }
    for i in 0..best.steps.len() {
        if !best.steps[i].is_background() {
            continue;
        }
        let mut c = best.clone();
        c.steps[i] = foreground(&c.steps[i]);
        if sh.fails(&c) {
            *best = c;
        }
    }
}

fn foreground(s: &Step) -> Step {
    let mut s = s.clone();
    match &mut s {
        Step::RunPod { bg, .. }
        | Step::Create { bg, .. }
        | Step::Start { bg, .. }
        | Step::Update { bg, .. }
        | Step::Stop { bg, .. }
        | Step::Remove { bg, .. }
        | Step::UpdatePod { bg, .. }
        | Step::StopPod { bg, .. }
        | Step::RemovePod { bg, .. } => *bg = false,
        _ => {}
    }
    s
}
