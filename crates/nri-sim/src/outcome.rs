//! The outcome of a run, without timings: which plugins registered for
//! which events, whether each step and event succeeded (and which plugins
//! failed), and each container's final OCI spec (as its changes to the
//! spec the runtime built for the container, which depends only on the
//! scenario). Two runs of a scenario
//! with plugins that behave the same have equal outcomes, so an outcome
//! saved from one plugin build (a golden file) can be compared with a run
//! of another (`nri sim --outcome`, `--golden`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::Record;
use crate::spec::DiffLine;

/// Version of the [`Outcome`] format, in its `schema` field. Raised when a
/// field changes meaning or goes away.
pub const OUTCOME_SCHEMA: u32 = 1;

/// A plugin at the end of the start-up or its last registration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginOutcome {
    /// It registered.
    pub registered: bool,
    /// The events it subscribed to.
    #[serde(default)]
    pub events: Vec<String>,
}

/// One event of a step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventOutcome {
    /// Event name.
    pub event: String,
    /// `pod` or `pod/container`.
    pub target: String,
    /// The runtime let the request proceed.
    pub ok: bool,
    /// Plugins that failed it without failing the request (`NN-name`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugin_failures: Vec<String>,
}

/// One step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepOutcome {
    /// Step number (`3`, `3.2` in a parallel group).
    pub step: String,
    /// Its label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Action and target (`create p/c`).
    pub action: String,
    /// All its events succeeded.
    pub ok: bool,
    /// Its events.
    #[serde(default)]
    pub events: Vec<EventOutcome>,
}

impl StepOutcome {
    /// Its label, else its number: how differences name it.
    pub fn key(&self) -> String {
        format!("step:{}", self.label.as_deref().unwrap_or(&self.step))
    }
}

/// What a run did, without timings (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// [`OUTCOME_SCHEMA`].
    pub schema: u32,
    /// Scenario name.
    pub scenario: String,
    /// Plugins by `NN-name`.
    pub plugins: BTreeMap<String, PluginOutcome>,
    /// Steps in order.
    pub steps: Vec<StepOutcome>,
    /// Final OCI spec of each container (`pod/container`), as its changes to
    /// the unadjusted spec (paths as in `nri sim` output).
    pub specs: BTreeMap<String, Vec<DiffLine>>,
}

/// A saved outcome with where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Golden {
    /// What produced it (e.g. the upstream repository, commit and plugin).
    pub source: String,
    /// The command that produced it.
    pub command: String,
    /// The outcome.
    pub outcome: Outcome,
}

/// One difference between two outcomes, named by what differs:
/// `plugin:NN-name`, `step:LABEL` (or `step:NUMBER`), `spec:pod/container`
/// or `scenario`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// What differs.
    pub key: String,
    /// How (expected, then found).
    pub detail: String,
}

impl Outcome {
    /// The outcome of a run's records.
    pub fn from_records(records: &[Record]) -> Outcome {
        let mut o = Outcome {
            schema: OUTCOME_SCHEMA,
            scenario: String::new(),
            plugins: BTreeMap::new(),
            steps: Vec::new(),
            specs: BTreeMap::new(),
        };
        for r in records {
            match r {
                Record::Start { scenario, .. } => o.scenario.clone_from(scenario),
                Record::PluginRegistered { plugin, events, .. } => {
                    o.plugins.insert(
                        plugin.clone(),
                        PluginOutcome {
                            registered: true,
                            events: events.clone(),
                        },
                    );
                }
                Record::PluginFailed { plugin, .. } => {
                    o.plugins.insert(
                        plugin.clone(),
                        PluginOutcome {
                            registered: false,
                            events: Vec::new(),
                        },
                    );
                }
                Record::Step {
                    index,
                    label,
                    action,
                    target,
                } => o.steps.push(StepOutcome {
                    step: index.clone(),
                    label: label.clone(),
                    action: format!("{action} {target}"),
                    ok: true,
                    events: Vec::new(),
                }),
                Record::Event(e) => {
                    if let Some(s) = o.steps.last_mut() {
                        s.events.push(EventOutcome {
                            event: e.event.clone(),
                            target: e.target.clone(),
                            ok: e.ok,
                            plugin_failures: e
                                .plugin_failures
                                .iter()
                                .map(|f| f.plugin.clone())
                                .collect(),
                        });
                    }
                }
                Record::StepEnd { index, ok, .. } => {
                    if let Some(s) = o.steps.iter_mut().rev().find(|s| &s.step == index) {
                        s.ok = *ok;
                    }
                }
                Record::Spec {
                    container, diff, ..
                } => {
                    o.specs.insert(container.clone(), diff.clone());
                }
                _ => {}
            }
        }
        o
    }

    /// What differs from `expected` (empty: the same outcome).
    pub fn differences(&self, expected: &Outcome) -> Vec<Difference> {
        let mut out = Vec::new();
        let mut push = |key: String, want: String, got: String| {
            out.push(Difference {
                key,
                detail: format!("expected {want}, found {got}"),
            });
        };
        if self.schema != expected.schema {
            push(
                "scenario".into(),
                format!("schema {}", expected.schema),
                format!("schema {}", self.schema),
            );
        }
        let show = |v: Option<&PluginOutcome>| match v {
            None => "absent".to_owned(),
            Some(p) if !p.registered => "not registered".to_owned(),
            Some(p) => format!("registered for {}", p.events.join(",")),
        };
        let ids: std::collections::BTreeSet<&String> =
            self.plugins.keys().chain(expected.plugins.keys()).collect();
        for id in ids {
            let (a, b) = (expected.plugins.get(id), self.plugins.get(id));
            if a != b {
                push(format!("plugin:{id}"), show(a), show(b));
            }
        }
        let n = self.steps.len().max(expected.steps.len());
        for i in 0..n {
            match (expected.steps.get(i), self.steps.get(i)) {
                (Some(a), Some(b)) if a == b => {}
                (Some(a), b) => push(a.key(), step_text(Some(a)), step_text(b)),
                (None, b) => push(
                    b.map_or_else(|| format!("step:{i}"), StepOutcome::key),
                    "no step".into(),
                    step_text(b),
                ),
            }
        }
        let names: std::collections::BTreeSet<&String> =
            self.specs.keys().chain(expected.specs.keys()).collect();
        // Diff lines compare as text: outcomes saved when values were
        // JSON text compare equal to the same values as JSON.
        let text = |x: &[DiffLine]| x.iter().map(DiffLine::text).collect::<Vec<_>>();
        for c in names {
            match (expected.specs.get(c), self.specs.get(c)) {
                (Some(a), Some(b)) if text(a) == text(b) => {}
                (Some(a), Some(b)) => {
                    let only = |x: &[DiffLine], y: &[DiffLine]| {
                        let y = text(y);
                        text(x)
                            .into_iter()
                            .filter(|l| !y.contains(l))
                            .collect::<Vec<_>>()
                            .join("; ")
                    };
                    push(
                        format!("spec:{c}"),
                        format!("[{}]", only(a, b)),
                        format!("[{}]", only(b, a)),
                    );
                }
                (a, b) => push(
                    format!("spec:{c}"),
                    if a.is_some() {
                        "a spec"
                    } else {
                        "no container"
                    }
                    .into(),
                    if b.is_some() {
                        "a spec"
                    } else {
                        "no container"
                    }
                    .into(),
                ),
            }
        }
        out
    }
}

fn step_text(s: Option<&StepOutcome>) -> String {
    let Some(s) = s else {
        return "no step".into();
    };
    let events: Vec<String> = s
        .events
        .iter()
        .map(|e| {
            let mut t = format!("{} {}", e.event, if e.ok { "ok" } else { "failed" });
            if !e.plugin_failures.is_empty() {
                t.push_str(&format!(" (failed in {})", e.plugin_failures.join(",")));
            }
            t
        })
        .collect();
    format!(
        "{} {} [{}]",
        s.action,
        if s.ok { "ok" } else { "failed" },
        events.join(", ")
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::report::{EventResult, PluginFailure};

    fn records(ok: bool, env: &str) -> Vec<Record> {
        vec![
            Record::Start {
                schema: crate::report::SCHEMA_VERSION,
                scenario: "s".into(),
                description: String::new(),
                file: "f".into(),
            },
            Record::PluginRegistered {
                plugin: "10-x".into(),
                events: vec!["CreateContainer".into()],
                ms: 1.0,
                calls: Vec::new(),
                synced: None,
            },
            Record::Step {
                index: "1".into(),
                label: Some("make".into()),
                action: "create".into(),
                target: "p/c".into(),
            },
            Record::Event(EventResult {
                event: "CreateContainer".into(),
                target: "p/c".into(),
                ok,
                error: None,
                ms: 3.0,
                calls: Vec::new(),
                plugin_failures: vec![PluginFailure {
                    plugin: "10-x".into(),
                    event: "CreateContainer".into(),
                    class: "plugin_error".into(),
                    message: "m".into(),
                }],
                changes: Vec::new(),
                updates: Vec::new(),
                evictions: Vec::new(),
            }),
            Record::StepEnd {
                index: "1".into(),
                ok,
                expected: None,
                calls: Vec::new(),
            },
            Record::Spec {
                container: "p/c".into(),
                diff: vec![DiffLine::Added {
                    path: "process.env".into(),
                    value: env.into(),
                }],
                spec: serde_json::json!({"process": {"env": [env]}}),
            },
        ]
    }

    #[test]
    fn same_runs_are_equal_and_differences_are_named() {
        let a = Outcome::from_records(&records(true, "A=1"));
        assert_eq!(a.steps[0].key(), "step:make");
        assert!(a.differences(&a).is_empty());
        let json = serde_json::to_string(&a).unwrap();
        let back: Outcome = serde_json::from_str(&json).unwrap();
        assert_eq!(back, a);
        let b = Outcome::from_records(&records(false, "A=2"));
        let keys: Vec<String> = b.differences(&a).into_iter().map(|d| d.key).collect();
        assert_eq!(keys, ["step:make", "spec:p/c"]);
    }

    #[test]
    fn outcomes_saved_with_values_as_json_text_still_compare_equal() {
        let mut new = Outcome::from_records(&records(true, "A=1"));
        new.specs.insert(
            "p/m".into(),
            vec![DiffLine::Added {
                path: "mounts[/data]".into(),
                value: serde_json::json!({"destination": "/data", "options": ["ro"]}),
            }],
        );
        let mut old = serde_json::to_value(&new).unwrap();
        old["specs"]["p/m"][0]["value"] =
            serde_json::Value::from(r#"{"destination":"/data","options":["ro"]}"#);
        let old: Outcome = serde_json::from_value(old).unwrap();
        assert_ne!(old, new, "stored differently");
        assert!(new.differences(&old).is_empty());
        let mut other = old.clone();
        other.specs.get_mut("p/m").unwrap()[0] = DiffLine::Added {
            path: "mounts[/data]".into(),
            value: serde_json::json!({"destination": "/data", "options": ["rw"]}),
        };
        assert_eq!(new.differences(&other).len(), 1);
    }
}
