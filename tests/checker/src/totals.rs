//! The total at the end of a run of many seeds: how many ran in each mode,
//! how many failed, the failures by class (invariant and kind, with the
//! first seeds that showed each), set-up errors, and the wall time.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::check::Outcome;
use crate::schedule::Mode;

/// How many seeds of a class [`Totals`] names.
const SEEDS_SHOWN: usize = 8;

/// Counts per mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Seeds run.
    pub ran: u64,
    /// Seeds that broke an invariant.
    pub failed: u64,
    /// Seeds whose run could not be set up (not findings).
    pub setup_errors: u64,
}

/// The seeds of one class of failure.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Class {
    /// Runs that showed it.
    pub runs: u64,
    /// The first of them (`mode seed`).
    pub seeds: Vec<String>,
}

/// What a run of many seeds found, for its closing line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    /// Runtime mode.
    pub runtime: Counts,
    /// Proxy mode.
    pub proxy: Counts,
    /// Failures by class: `invariant/kind` (a run counts once per class it
    /// showed).
    pub classes: BTreeMap<String, Class>,
    /// Wall time of the whole run.
    pub wall: Duration,
    /// First and one past the last seed started.
    pub seeds: (u64, u64),
}

impl Totals {
    /// Counts one seed's outcome.
    pub fn add(&mut self, seed: u64, mode: Mode, outcome: &Outcome) {
        let c = match mode {
            Mode::Runtime => &mut self.runtime,
            Mode::Proxy => &mut self.proxy,
        };
        c.ran += 1;
        let classes: std::collections::BTreeSet<String> = match outcome {
            Outcome::Pass(_) => return,
            Outcome::SetupError(_) => {
                c.setup_errors += 1;
                return;
            }
            Outcome::Fail(f, _) => {
                c.failed += 1;
                (f.violations.iter())
                    .map(|v| format!("{}/{}", v.invariant, v.kind))
                    .collect()
            }
        };
        for k in classes {
            let class = self.classes.entry(k).or_default();
            class.runs += 1;
            if class.seeds.len() < SEEDS_SHOWN {
                class.seeds.push(format!("{} {seed}", mode.as_str()));
            }
        }
    }

    /// Seeds run, in every mode.
    pub fn ran(&self) -> u64 {
        self.runtime.ran + self.proxy.ran
    }

    /// Seeds that failed, in every mode.
    pub fn failed(&self) -> u64 {
        self.runtime.failed + self.proxy.failed
    }

    /// Whether every seed passed (set-up errors count as not passing).
    pub fn clean(&self) -> bool {
        self.failed() == 0 && self.runtime.setup_errors + self.proxy.setup_errors == 0
    }
}

impl fmt::Display for Totals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (start, end) = self.seeds;
        let secs = self.wall.as_secs_f64();
        let per_run = secs / self.ran().max(1) as f64;
        writeln!(
            f,
            "total: {} runs (seeds {start}..{end}), {} failed, {secs:.1} s wall time ({per_run:.2} s a run)",
            self.ran(),
            self.failed()
        )?;
        for (name, c) in [("runtime", self.runtime), ("proxy", self.proxy)] {
            if c.ran > 0 {
                writeln!(
                    f,
                    "  {name:<8} {} runs, {} failed, {} set-up errors",
                    c.ran, c.failed, c.setup_errors
                )?;
            }
        }
        if !self.classes.is_empty() {
            writeln!(
                f,
                "  failures by class (invariant/kind: runs, first seeds):"
            )?;
        }
        for (k, c) in &self.classes {
            let more = if c.runs as usize > c.seeds.len() {
                ", ..."
            } else {
                ""
            };
            writeln!(f, "    {k:<28} {:>4}  {}{more}", c.runs, c.seeds.join(", "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Failure;
    use crate::generate::{Size, schedule};
    use crate::invariants::Violation;
    use crate::run::Report;

    fn fail(seed: u64, mode: Mode, kinds: &[(u8, &'static str)]) -> Outcome {
        let violations: Vec<Violation> = (kinds.iter())
            .map(|(i, k)| Violation::new(*i, k, None, None, String::new()))
            .collect();
        let f = Failure {
            seed,
            mode,
            violations: violations.clone(),
            shrunk: schedule(seed, mode, Size::default()),
            shrunk_violations: violations,
            shrink_runs: 0,
        };
        Outcome::Fail(Box::new(f), Report::default())
    }

    /// Each failing run counts once per class, per mode, with its seed.
    #[test]
    fn failures_are_counted_by_class_and_mode() {
        let mut t = Totals::default();
        t.add(0, Mode::Runtime, &Outcome::Pass(Report::default()));
        t.add(
            1,
            Mode::Runtime,
            &fail(1, Mode::Runtime, &[(2, "lost"), (2, "lost")]),
        );
        t.add(
            1,
            Mode::Proxy,
            &fail(1, Mode::Proxy, &[(2, "lost"), (1, "created-twice")]),
        );
        t.add(2, Mode::Proxy, &Outcome::SetupError("no socket".into()));
        assert_eq!(t.ran(), 4);
        assert_eq!(t.failed(), 2);
        assert!(!t.clean());
        assert_eq!(t.proxy.setup_errors, 1);
        let lost = &t.classes["2/lost"];
        assert_eq!(lost.runs, 2);
        assert_eq!(lost.seeds, ["runtime 1", "proxy 1"]);
        assert_eq!(t.classes["1/created-twice"].runs, 1);
        let text = t.to_string();
        assert!(text.contains("total: 4 runs"), "{text}");
        assert!(text.contains("2/lost"), "{text}");
        assert!(text.contains("runtime 1, proxy 1"), "{text}");
    }
}
