//! The [`Report`]: one [`ClauseResult`] per clause, the runtime's identity
//! and the raw records; [`print_table`] renders it as a pass/fail table.

use std::collections::BTreeMap;
use std::io::{self, Write};

use serde::Serialize;

use crate::check::{Clause, Violation};
use crate::known::known_discrepancy;
use crate::record::Record;

/// Outcome of one clause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum Status {
    /// The runtime keeps the clause.
    Pass,
    /// The runtime breaks the clause in a way not recorded as known.
    Fail,
    /// The runtime breaks the clause in a known, explained way only
    /// (see [`KNOWN_DISCREPANCIES`](crate::KNOWN_DISCREPANCIES)).
    Discrepancy,
    /// Not checked in this run (passive mode, or not asked for).
    Skipped,
    /// Information only (the dialect).
    Info,
}

impl Status {
    /// Upper-case name as printed.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::Discrepancy => "DISCREPANCY",
            Status::Skipped => "SKIPPED",
            Status::Info => "INFO",
        }
    }
}

/// One kind of breach of a clause (violations grouped by code).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Stable code, e.g. `StopContainer-after-StopContainer`.
    pub code: String,
    /// How many times it happened.
    pub count: usize,
    /// The first occurrence.
    pub example: String,
    /// Why it happens, when it is a known discrepancy of this runtime.
    pub explanation: Option<String>,
}

/// The result of one clause.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClauseResult {
    /// Which clause.
    pub clause: Clause,
    /// Outcome.
    pub status: Status,
    /// One line: what was checked, or why it was skipped, or the detected value.
    pub summary: String,
    /// The breaches found, grouped by code.
    pub findings: Vec<Finding>,
}

impl ClauseResult {
    /// A clause that was not checked.
    pub fn skipped(clause: Clause, why: impl Into<String>) -> Self {
        ClauseResult {
            clause,
            status: Status::Skipped,
            summary: why.into(),
            findings: Vec::new(),
        }
    }

    /// Classifies `violations` of `clause` for runtime `runtime` version
    /// `version`: none -> PASS; all known -> DISCREPANCY; else FAIL.
    pub fn classify(
        clause: Clause,
        summary: impl Into<String>,
        violations: Vec<Violation>,
        runtime: &str,
        version: &str,
    ) -> Self {
        let mut grouped: BTreeMap<String, (usize, String)> = BTreeMap::new();
        for v in violations {
            grouped
                .entry(v.code)
                .and_modify(|e| e.0 += 1)
                .or_insert((1, v.message));
        }
        let findings: Vec<Finding> = grouped
            .into_iter()
            .map(|(code, (count, example))| Finding {
                explanation: known_discrepancy(runtime, version, clause, &code)
                    .map(|k| k.explanation.to_owned()),
                code,
                count,
                example,
            })
            .collect();
        let status = if findings.is_empty() {
            Status::Pass
        } else if findings.iter().all(|f| f.explanation.is_some()) {
            Status::Discrepancy
        } else {
            Status::Fail
        };
        ClauseResult {
            clause,
            status,
            summary: summary.into(),
            findings,
        }
    }
}

/// The runtime the checker registered with.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RuntimeSummary {
    /// Runtime name (`containerd`).
    pub name: String,
    /// Runtime version (`v2.3.7`).
    pub version: String,
    /// Its NRI version (`v0.12.0`).
    pub nri_version: String,
    /// How the NRI version was found (`Reported`, `Inferred`, `Assumed`).
    pub nri_version_origin: String,
    /// `dedicated-rpcs` (NRI >= v0.12) or `state-change` (older).
    pub dialect: String,
    /// Its request timeout (ms).
    pub request_timeout_ms: u64,
}

/// Everything one conformance run found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The runtime.
    pub runtime: RuntimeSummary,
    /// `cri` (driven through crictl) or `passive`.
    pub mode: String,
    /// Wall time of the run (ms).
    pub duration_ms: u64,
    /// One result per clause, in [`Clause::ALL`] order.
    pub clauses: Vec<ClauseResult>,
    /// Everything every recording instance saw, in arrival order.
    pub records: Vec<Record>,
}

impl Report {
    /// Whether no clause failed (PASS, DISCREPANCY, SKIPPED and INFO are all fine).
    pub fn ok(&self) -> bool {
        self.clauses.iter().all(|c| c.status != Status::Fail)
    }

    /// The result of `clause`.
    pub fn clause(&self, clause: Clause) -> Option<&ClauseResult> {
        self.clauses.iter().find(|c| c.clause == clause)
    }

    /// The (clause, code) of every finding, i.e. every discrepancy or failure.
    pub fn finding_codes(&self) -> Vec<(Clause, String)> {
        self.clauses
            .iter()
            .flat_map(|c| c.findings.iter().map(|f| (c.clause, f.code.clone())))
            .collect()
    }
}

/// Prints `report` as a table: one row per clause (status, clause, summary),
/// then one indented line per finding (code, count, example, and the
/// explanation of a known discrepancy).
///
/// # Errors
///
/// Errors of `out`.
pub fn print_table(report: &Report, out: &mut impl Write) -> io::Result<()> {
    let rt = &report.runtime;
    writeln!(
        out,
        "runtime: {} {} (NRI {}, {}; dialect {}; request timeout {} ms); mode {}; {:.1} s",
        rt.name,
        rt.version,
        rt.nri_version,
        rt.nri_version_origin.to_lowercase(),
        rt.dialect,
        rt.request_timeout_ms,
        report.mode,
        report.duration_ms as f64 / 1000.0
    )?;
    let w = Clause::ALL.iter().map(|c| c.id().len()).max().unwrap_or(10);
    writeln!(out, "{:<11}  {:<w$}  DETAIL", "STATUS", "CLAUSE")?;
    for c in &report.clauses {
        writeln!(
            out,
            "{:<11}  {:<w$}  {}",
            c.status.as_str(),
            c.clause.id(),
            c.summary
        )?;
        for f in &c.findings {
            let tag = if f.explanation.is_some() {
                "known"
            } else {
                "NEW"
            };
            writeln!(
                out,
                "{:<11}  {:<w$}    - [{tag}] {} x{}: {}",
                "", "", f.code, f.count, f.example
            )?;
            if let Some(e) = &f.explanation {
                writeln!(out, "{:<11}  {:<w$}      why: {e}", "", "")?;
            }
        }
    }
    let fails = report
        .clauses
        .iter()
        .filter(|c| c.status == Status::Fail)
        .count();
    let disc = report
        .clauses
        .iter()
        .filter(|c| c.status == Status::Discrepancy)
        .count();
    writeln!(
        out,
        "result: {} ({fails} failed, {disc} with known discrepancies)",
        if fails == 0 { "OK" } else { "FAILED" }
    )
}
