//! Checking a seed: generate its schedule, run it (on a thread of its own,
//! under a wall-clock limit: a run that spins instead of waiting would
//! never let paused time reach its own limits), shrink a failure, and
//! write the report a person reads.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use crate::generate::{Size, schedule};
use crate::invariants::Violation;
use crate::run::{Options, Report, run};
use crate::schedule::{Mode, Schedule};
use crate::shrink::{Budget, shrink};

/// Wall-clock time one run may take before it is reported stuck.
pub const WALL_LIMIT: Duration = Duration::from_secs(180);

/// Runs `s` on a thread of its own, within [`WALL_LIMIT`]. A run past the
/// limit is left running (its thread cannot be stopped from outside) and
/// reported as a violation.
pub fn run_guarded(s: &Schedule, opts: &Options) -> Report {
    let (tx, rx) = mpsc::channel();
    let (s2, o2) = (s.clone(), opts.clone());
    let spawned = std::thread::Builder::new()
        .name(format!("checker-seed-{}", s.seed))
        .spawn(move || {
            let _ = tx.send(run(&s2, &o2));
        });
    if let Err(e) = spawned {
        return Report {
            setup_error: Some(format!("cannot spawn the run's thread: {e}")),
            ..Report::default()
        };
    }
    match rx.recv_timeout(WALL_LIMIT) {
        Ok(r) => r,
        Err(mpsc::RecvTimeoutError::Timeout) => Report {
            violations: vec![Violation::new(
                0,
                "stuck-wall-clock",
                None,
                None,
                format!("the run did not end within {WALL_LIMIT:?} of wall-clock time"),
            )],
            ..Report::default()
        },
        Err(mpsc::RecvTimeoutError::Disconnected) => Report {
            violations: vec![Violation::new(
                0,
                "harness-panic",
                None,
                None,
                "the run's thread panicked (see its output)".into(),
            )],
            ..Report::default()
        },
    }
}

/// A seed that broke an invariant.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The seed.
    pub seed: u64,
    /// The mode.
    pub mode: Mode,
    /// What broke in the full run.
    pub violations: Vec<Violation>,
    /// The shortest schedule found that still breaks the first of them.
    pub shrunk: Schedule,
    /// What the shortest schedule breaks.
    pub shrunk_violations: Vec<Violation>,
    /// Runs spent shrinking.
    pub shrink_runs: usize,
}

/// The result of one seed.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Every invariant held.
    Pass(Report),
    /// A violation, shrunk.
    Fail(Box<Failure>, Report),
    /// The run could not be set up (not a finding).
    SetupError(String),
}

/// Runs seed `seed` in `mode`; shrinks a failure within `budget` (no
/// shrinking when `None`).
pub fn check_seed(
    seed: u64,
    mode: Mode,
    size: Size,
    opts: &Options,
    budget: Option<Budget>,
) -> Outcome {
    let s = schedule(seed, mode, size);
    check_schedule(&s, opts, budget)
}

/// Runs schedule `s`; shrinks a failure within `budget`.
pub fn check_schedule(s: &Schedule, opts: &Options, budget: Option<Budget>) -> Outcome {
    let report = run_guarded(s, opts);
    if let Some(e) = report.setup_error.clone() {
        return Outcome::SetupError(e);
    }
    let Some(first) = report.violations.first().cloned() else {
        return Outcome::Pass(report);
    };
    let (shrunk, shrink_runs) = match budget {
        Some(b) => shrink(s, &first, opts, b),
        None => (s.clone(), 0),
    };
    let shrunk_violations = if shrink_runs > 0 {
        run_guarded(&shrunk, opts).violations
    } else {
        report.violations.clone()
    };
    let f = Failure {
        seed: s.seed,
        mode: s.setup.mode,
        violations: report.violations.clone(),
        shrunk,
        shrunk_violations,
        shrink_runs,
    };
    Outcome::Fail(Box::new(f), report)
}

impl Failure {
    /// The report: seed, evidence, shortest schedule, how to replay.
    pub fn describe(&self, file: Option<&Path>) -> String {
        let mut s = String::new();
        let mode = self.mode.as_str();
        let _ = writeln!(s, "FAIL seed {} mode {mode}", self.seed);
        for v in self.violations.iter().take(20) {
            let _ = writeln!(s, "  {v}");
        }
        if self.violations.len() > 20 {
            let _ = writeln!(s, "  ... {} more", self.violations.len() - 20);
        }
        let n = self.shrunk.steps.len();
        let _ = writeln!(
            s,
            "shortest schedule that still fails ({n} steps, {} shrinking runs):",
            self.shrink_runs
        );
        let _ = write!(s, "{}", crate::text::numbered(&self.shrunk.steps));
        let _ = writeln!(s, "it breaks:");
        for v in self.shrunk_violations.iter().take(10) {
            let _ = writeln!(s, "  {v}");
        }
        let _ = writeln!(s, "replay:");
        let _ = writeln!(
            s,
            "  cargo run -p nri-checker --release -- replay --seed {} --mode {mode} --generator {}",
            self.seed, self.shrunk.generator
        );
        if let Some(f) = file {
            let _ = writeln!(
                s,
                "  cargo run -p nri-checker --release -- replay --file {}",
                f.display()
            );
        }
        s
    }

    /// Writes the shrunk schedule (and the report as comments) to `dir`;
    /// the file's path.
    pub fn write(&self, dir: &Path) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("seed-{}-{}.txt", self.seed, self.mode.as_str()));
        let mut text = String::new();
        for line in self.describe(None).lines() {
            let _ = writeln!(text, "# {line}");
        }
        let _ = write!(text, "{}", self.shrunk);
        std::fs::write(&path, text)?;
        Ok(path)
    }
}
