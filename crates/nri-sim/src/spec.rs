//! OCI specs of simulated containers and readable diffs between them.

use std::collections::BTreeMap;

use nri_api::api::{Container, ContainerAdjustment, KeyValue, LinuxContainerAdjustment};
use nri_oci::{Applier, Unresolved};
use oci_spec::runtime::Spec;
use serde::Serialize;
use serde_json::Value;

/// The applier the simulator uses: unresolved CDI devices and block I/O
/// classes are recorded as annotations (there is no CDI registry here).
pub fn applier() -> Applier {
    Applier::builder()
        .unresolved_cdi(Unresolved::Annotate)
        .unresolved_blockio_class(Unresolved::Annotate)
        .build()
}

/// The spec a runtime would build for `ctr` before NRI: oci-spec's default
/// spec with the container's args, env, annotations, mounts and resources.
pub fn base_spec(ctr: &Container) -> Result<Spec, nri_oci::Error> {
    let mut spec = Spec::default();
    let adj = ContainerAdjustment {
        annotations: ctr.annotations.clone(),
        mounts: ctr.mounts.clone(),
        env: ctr
            .env
            .iter()
            .map(|e| {
                let (k, v) = e.split_once('=').unwrap_or((e, ""));
                KeyValue {
                    key: k.to_owned(),
                    value: v.to_owned(),
                }
            })
            .collect(),
        args: ctr.args.clone(),
        linux: ctr.linux.as_ref().map(|l| LinuxContainerAdjustment {
            resources: l.resources.clone(),
            ..Default::default()
        }),
        ..Default::default()
    };
    applier().apply_adjustment(&mut spec, &adj)?;
    Ok(spec)
}

/// One line of a spec diff. Values are JSON values (a string, a number, a
/// whole object such as a mount); saved outcomes of the first format held
/// them as text, which [`DiffLine::text`] compares equal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum DiffLine {
    /// Present only in the new spec.
    Added {
        /// JSON path (`process.env`, `mounts[/data]`).
        path: String,
        /// The value.
        value: Value,
    },
    /// Present only in the old spec.
    Removed {
        /// JSON path.
        path: String,
        /// The value.
        value: Value,
    },
    /// Changed value.
    Changed {
        /// JSON path.
        path: String,
        /// Old value.
        old: Value,
        /// New value.
        new: Value,
    },
}

impl DiffLine {
    /// The line as text (`+ path: value`, values as compact JSON, strings
    /// without quotes), the same for a value and its JSON text.
    pub fn text(&self) -> String {
        self.to_string()
    }
}

/// A value as diff lines show it: strings without quotes, anything else
/// as compact JSON (a string holding JSON text reads the same).
pub fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The differences between two specs. Lists of strings (env, args) are
/// compared as sets of entries; lists of objects are keyed by
/// `destination`, `path`, `type`, `hostPath` or `name` when they have one;
/// an object present on one side only is one line (compact JSON).
pub fn diff(old: &Spec, new: &Spec) -> Vec<DiffLine> {
    let a = nri_oci::spec_json(old).unwrap_or(Value::Null);
    let b = nri_oci::spec_json(new).unwrap_or(Value::Null);
    let mut out = Vec::new();
    diff_value("", Some(&a), Some(&b), &mut out);
    out
}

const KEYS: [&str; 5] = ["destination", "path", "type", "hostPath", "name"];

fn join(prefix: &str, k: &str) -> String {
    if prefix.is_empty() {
        k.to_owned()
    } else {
        format!("{prefix}.{k}")
    }
}

fn is_scalar_list(v: &[Value]) -> bool {
    v.iter().all(|i| !i.is_object() && !i.is_array())
}

/// List elements keyed by their identifying field (or position).
fn keyed(items: &[Value]) -> Vec<(String, &Value)> {
    items
        .iter()
        .enumerate()
        .map(|(n, i)| {
            let id = KEYS
                .iter()
                .find_map(|k| i.get(k).and_then(Value::as_str))
                .map(str::to_owned)
                .unwrap_or_else(|| n.to_string());
            (id, i)
        })
        .collect()
}

fn diff_value(path: &str, a: Option<&Value>, b: Option<&Value>, out: &mut Vec<DiffLine>) {
    let empty = Value::Array(Vec::new());
    // A list of objects on one side only: one line per element.
    let (a, b) = match (a, b) {
        (None | Some(Value::Null), Some(Value::Array(y))) if !is_scalar_list(y) => {
            (Some(&empty), b)
        }
        (Some(Value::Array(x)), None | Some(Value::Null)) if !is_scalar_list(x) => {
            (a, Some(&empty))
        }
        other => other,
    };
    match (a, b) {
        (None | Some(Value::Null), None | Some(Value::Null)) => {}
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                diff_value(&join(path, k), x.get(k), y.get(k), out);
            }
        }
        (Some(Value::Array(x)), Some(Value::Array(y)))
            if is_scalar_list(x) && is_scalar_list(y) =>
        {
            for v in x.iter().filter(|v| !y.contains(v)) {
                out.push(DiffLine::Removed {
                    path: path.to_owned(),
                    value: v.clone(),
                });
            }
            for v in y.iter().filter(|v| !x.contains(v)) {
                out.push(DiffLine::Added {
                    path: path.to_owned(),
                    value: v.clone(),
                });
            }
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) => {
            let kx = keyed(x);
            let ky = keyed(y);
            for (id, v) in &kx {
                let other = ky.iter().find(|(i, _)| i == id).map(|(_, w)| *w);
                diff_value(&format!("{path}[{id}]"), Some(v), other, out);
            }
            for (id, w) in &ky {
                if !kx.iter().any(|(i, _)| i == id) {
                    diff_value(&format!("{path}[{id}]"), None, Some(w), out);
                }
            }
        }
        (Some(v), None | Some(Value::Null)) => out.push(DiffLine::Removed {
            path: path.to_owned(),
            value: v.clone(),
        }),
        (None | Some(Value::Null), Some(w)) => out.push(DiffLine::Added {
            path: path.to_owned(),
            value: w.clone(),
        }),
        (Some(v), Some(w)) => {
            if v != w {
                out.push(DiffLine::Changed {
                    path: path.to_owned(),
                    old: v.clone(),
                    new: w.clone(),
                });
            }
        }
    }
}

impl std::fmt::Display for DiffLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DiffLine::Added { path, value } => write!(f, "+ {path}: {}", show(value)),
            DiffLine::Removed { path, value } => write!(f, "- {path}: {}", show(value)),
            DiffLine::Changed { path, old, new } => {
                write!(f, "~ {path}: {} -> {}", show(old), show(new))
            }
        }
    }
}

/// Environment of a spec as a map.
pub fn env_of(spec: &Spec) -> BTreeMap<String, String> {
    spec.process()
        .as_ref()
        .and_then(|p| p.env().clone())
        .unwrap_or_default()
        .iter()
        .map(|e| {
            let (k, v) = e.split_once('=').unwrap_or((e, ""));
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn base_spec_carries_the_container() {
        let ctr = Container {
            args: vec!["sleep".into(), "1".into()],
            env: vec!["A=1".into()],
            ..Default::default()
        };
        let spec = base_spec(&ctr).unwrap();
        assert_eq!(env_of(&spec).get("A").map(String::as_str), Some("1"));
    }

    #[test]
    fn diff_shows_added_env_and_changed_values() {
        let base = base_spec(&Container::default()).unwrap();
        let mut new = base.clone();
        let mut adj = ContainerAdjustment::default();
        adj.add_env("GREETING", "hello");
        adj.add_annotation("x", "y");
        adj.add_rlimit("RLIMIT_NOFILE", 20, 10);
        applier().apply_adjustment(&mut new, &adj).unwrap();
        let d = diff(&base, &new);
        assert!(
            d.contains(&DiffLine::Added {
                path: "process.env".into(),
                value: "GREETING=hello".into()
            }),
            "{d:?}"
        );
        // Values are JSON values, not JSON text.
        assert!(
            d.iter().any(|l| matches!(l, DiffLine::Changed { path, old: Value::Number(_), new: Value::Number(_) } if path == "process.rlimits[RLIMIT_NOFILE].soft")),
            "{d:?}"
        );
        assert!(
            d.iter()
                .any(|l| matches!(l, DiffLine::Added { path, .. } if path == "annotations.x")),
            "{d:?}"
        );
        assert!(d.iter().any(|l| matches!(l, DiffLine::Changed { path, .. } if path.starts_with("process.rlimits[RLIMIT_NOFILE]"))), "{d:?}");
        assert!(diff(&base, &base).is_empty());
    }

    #[test]
    fn scheduler_flags_are_written_with_their_oci_names() {
        use nri_api::api::{LinuxScheduler, LinuxSchedulerFlag, LinuxSchedulerPolicy};
        let base = base_spec(&Container::default()).unwrap();
        let mut new = base.clone();
        let adj = ContainerAdjustment {
            linux: Some(LinuxContainerAdjustment {
                scheduler: Some(LinuxScheduler {
                    policy: LinuxSchedulerPolicy::SchedFifo as i32,
                    priority: 5,
                    flags: vec![LinuxSchedulerFlag::SchedFlagResetOnFork as i32],
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        applier().apply_adjustment(&mut new, &adj).unwrap();
        let d = diff(&base, &new);
        let line = DiffLine::Added {
            path: "process.scheduler".into(),
            value: serde_json::json!({"flags": ["SCHED_FLAG_RESET_ON_FORK"], "policy": "SCHED_FIFO", "priority": 5}),
        };
        assert!(d.contains(&line), "{d:?}");
        assert_eq!(
            line.text(),
            r#"+ process.scheduler: {"flags":["SCHED_FLAG_RESET_ON_FORK"],"policy":"SCHED_FIFO","priority":5}"#
        );
    }
}
