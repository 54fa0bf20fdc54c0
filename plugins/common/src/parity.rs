//! The parity suite (feature `testing`): run a sample plugin through its
//! `nri sim` scenario and compare the outcome with the golden outcome of the
//! upstream Go plugin, saved in `tests/parity/golden.json` beside the
//! scenario (`tests/parity/scenario.yaml`).
//!
//! A difference fails the test unless the plugin's README lists it in its
//! "Differences from the Go plugin" section, by the difference's key in
//! backquotes: `` `step:LABEL` ``, `` `spec:POD/CONTAINER` `` or
//! `` `plugin:NN-name` ``. A listed key that no longer differs fails too,
//! so the README stays true.
//!
//! These helpers panic on failure: they are for tests only.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use nri_sim::Outcome;
use nri_sim::outcome::{Difference, OUTCOME_SCHEMA};
use nri_sim::{Golden, Scenario};

/// One plugin's parity check.
pub struct Case<'a> {
    /// The scenario's plugin name (`--plugin-path NAME=...`).
    pub plugin: &'a str,
    /// Our plugin binary.
    pub binary: &'a str,
    /// The plugin crate's directory (`CARGO_MANIFEST_DIR`).
    pub crate_dir: &'a str,
    /// Makes run-dependent values comparable (applied to both outcomes),
    /// e.g. a process id in an annotation.
    pub normalize: fn(&mut Outcome),
}

/// No normalization.
pub fn as_is(_: &mut Outcome) {}

/// Replaces the digits after each `prefix` in `outcome` by `N` (for values
/// that carry a process id, such as the logger's `logger-pid-<pid>`).
pub fn mask_numbers_after(outcome: &mut Outcome, prefix: &str) {
    let text = serde_json::to_string(&*outcome).unwrap();
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(i) = rest.find(prefix) {
        let (head, tail) = rest.split_at(i + prefix.len());
        out.push_str(head);
        let digits = tail.len() - tail.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits > 0 {
            out.push('N');
        }
        rest = &tail[digits..];
    }
    out.push_str(rest);
    *outcome = serde_json::from_str(&out).unwrap();
}

/// Runs `scenario` with `plugin` at `binary` (every scenario plugin named
/// `plugin` or whose `path` is `plugin`, so one binary can run as several
/// instances with different configurations); returns the outcome.
pub fn run(scenario: &Path, plugin: &str, binary: &Path) -> Outcome {
    let text = std::fs::read_to_string(scenario).unwrap();
    let dir = scenario.parent().unwrap_or(Path::new("."));
    let sc = Scenario::parse(&scenario.display().to_string(), dir, &text).unwrap();
    let mut plugin_paths = BTreeMap::from([(plugin.to_owned(), binary.to_owned())]);
    for p in sc.plugins.iter().map(|sp| &sp.value) {
        if p.path.as_deref() == Some(plugin) {
            plugin_paths.insert(p.name.clone(), binary.to_owned());
        }
    }
    let opts = nri_sim::Options {
        plugin_paths,
        ..Default::default()
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut rec = nri_sim::Collect::default();
    rt.block_on(nri_sim::run(&sc, &opts, &mut rec)).unwrap();
    Outcome::from_records(&rec.0)
}

/// Whether the step labelled `label` of `outcome` succeeded.
///
/// # Panics
///
/// When there is no such step.
pub fn step_ok(outcome: &Outcome, label: &str) -> bool {
    outcome
        .steps
        .iter()
        .find(|s| s.label.as_deref() == Some(label))
        .unwrap_or_else(|| panic!("no step labelled {label:?}"))
        .ok
}

/// The final spec changes of container `pod/container` as text, one line
/// per change (empty when unchanged or never created).
pub fn spec_text(outcome: &Outcome, container: &str) -> String {
    outcome
        .specs
        .get(container)
        .map(|lines| {
            lines
                .iter()
                .map(nri_sim::spec::DiffLine::text)
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// The difference keys listed in a README's "Differences from the Go
/// plugin" section (which must exist).
pub fn listed_differences(readme: &str) -> Vec<String> {
    let start = readme
        .find("## Differences from the Go plugin")
        .expect("the README has a `## Differences from the Go plugin` section");
    let body = &readme[start..];
    let end = body[3..].find("\n## ").map_or(body.len(), |i| i + 3);
    body[..end]
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| {
            ["step:", "spec:", "plugin:"]
                .iter()
                .any(|p| t.starts_with(p) && t.len() > p.len() && !t.contains(char::is_whitespace))
        })
        .map(str::to_owned)
        .collect()
}

/// Runs the case and compares (see the module docs).
///
/// # Panics
///
/// On a difference not listed in the README, a listed one that is gone, a
/// golden of another format, or a run that cannot start.
pub fn check(case: &Case<'_>) {
    let dir = PathBuf::from(case.crate_dir);
    let golden_path = dir.join("tests/parity/golden.json");
    let golden: Golden =
        serde_json::from_str(&std::fs::read_to_string(&golden_path).unwrap()).unwrap();
    assert_eq!(
        golden.outcome.schema,
        OUTCOME_SCHEMA,
        "{} was saved in outcome format {}; this build writes {OUTCOME_SCHEMA}: convert it",
        golden_path.display(),
        golden.outcome.schema
    );
    let mut expected = golden.outcome;
    let mut ours = run(
        &dir.join("tests/parity/scenario.yaml"),
        case.plugin,
        Path::new(case.binary),
    );
    (case.normalize)(&mut expected);
    (case.normalize)(&mut ours);
    let listed = listed_differences(&std::fs::read_to_string(dir.join("README.md")).unwrap());
    let diffs = ours.differences(&expected);
    let unexplained: Vec<&Difference> = diffs.iter().filter(|d| !listed.contains(&d.key)).collect();
    let stale: Vec<&String> = listed
        .iter()
        .filter(|k| !diffs.iter().any(|d| &&d.key == k))
        .collect();
    let text = |ds: &[&Difference]| {
        ds.iter()
            .map(|d| format!("  {}: {}", d.key, d.detail))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        unexplained.is_empty(),
        "{} differs from the Go plugin ({}) where its README does not say so:\n{}",
        case.plugin,
        golden.source,
        text(&unexplained)
    );
    assert!(
        stale.is_empty(),
        "{}'s README lists differences from the Go plugin that are gone: {stale:?}",
        case.plugin
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readme_keys() {
        let readme = "# x\n\n## Differences from the Go plugin\n\n- `step:a-b` and `spec:p/c`: why.\n- `-strict` is ours; `plugin:10-x` too. `step: no`\n\n## Next\n\n`step:other`\n";
        assert_eq!(
            listed_differences(readme),
            ["step:a-b", "spec:p/c", "plugin:10-x"]
        );
    }
}
