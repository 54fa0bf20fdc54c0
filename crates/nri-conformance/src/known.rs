//! Known discrepancies: where a runtime release breaks a clause of our
//! contract on purpose or by a known bug, with the explanation printed in
//! the report.

use crate::check::Clause;

/// One known way a runtime release departs from the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownDiscrepancy {
    /// Runtime name as it reports itself in Configure (`containerd`).
    pub runtime: &'static str,
    /// Version prefixes it applies to (`v2.1.`, `v2.3.`).
    pub versions: &'static [&'static str],
    /// The clause.
    pub clause: Clause,
    /// The violation code.
    pub code: &'static str,
    /// Whether it shows in every run (`false`) or only when a race is hit
    /// (`true`): a test asserts the non-intermittent ones are always found.
    pub intermittent: bool,
    /// Why.
    pub explanation: &'static str,
}

const CONTAINERD_2_1: &[&str] = &["v2.1."];
const CONTAINERD_2_3: &[&str] = &["v2.3."];
const CONTAINERD_ALL: &[&str] = &["v2.1.", "v2.3."];

/// The known discrepancies, per runtime version.
pub const KNOWN_DISCREPANCIES: &[KnownDiscrepancy] = &[KnownDiscrepancy {
    runtime: "containerd",
    versions: CONTAINERD_ALL,
    clause: Clause::RequestTimeout,
    code: "disconnected-on-first-timeout",
    intermittent: false,
    explanation: "containerd's NRI adaptation treats a deadline-exceeded call as fatal: it \
                      closes the plugin's connection on the first late answer and continues the \
                      request without it (upstream's documented behaviour); our contract fails \
                      only that event and counts strikes",
}];

/// Version prefixes are listed per release line; keep these names used.
const _: (&[&str], &[&str]) = (CONTAINERD_2_1, CONTAINERD_2_3);

/// The known discrepancy of `runtime` `version` for (`clause`, `code`), if any.
pub fn known_discrepancy(
    runtime: &str,
    version: &str,
    clause: Clause,
    code: &str,
) -> Option<&'static KnownDiscrepancy> {
    KNOWN_DISCREPANCIES.iter().find(|k| {
        k.runtime == runtime
            && k.clause == clause
            && k.code == code
            && k.versions.iter().any(|p| version.starts_with(p))
    })
}

/// All known discrepancies of `runtime` `version`.
pub fn known_for(runtime: &str, version: &str) -> Vec<&'static KnownDiscrepancy> {
    KNOWN_DISCREPANCIES
        .iter()
        .filter(|k| k.runtime == runtime && k.versions.iter().any(|p| version.starts_with(p)))
        .collect()
}
