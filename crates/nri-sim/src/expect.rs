//! Checking a scenario's `expect` section against what happened.

use std::collections::BTreeMap;

use oci_spec::runtime::Spec;

use crate::report::{Change, Record, Reporter, Summary};
use crate::scenario::{Expectation, Scenario};
use crate::spec::env_of;

/// What the run left behind, for the checks.
pub(crate) struct View<'a> {
    /// pod/ctr -> final spec.
    pub specs: Vec<(String, Spec)>,
    /// pod/ctr -> changes at creation.
    pub owners: BTreeMap<String, Vec<Change>>,
    /// (plugin id, operation) -> calls.
    pub counts: BTreeMap<(String, String), u64>,
    /// Plugins that caused conflicts.
    pub conflicts: Vec<String>,
    /// Plugins registered at the end.
    pub registered: &'a [String],
    /// Step label -> succeeded.
    pub outcomes: &'a BTreeMap<String, bool>,
}

/// `10-env` matches `env` and `10-env`.
fn same_plugin(id: &str, name: &str) -> bool {
    id == name || id.split_once('-').is_some_and(|(_, n)| n == name)
}

/// Whether the scenario expects plugin `id` (`NN-name`) to be gone at the
/// end (`plugin: NAME` with `registered: false`), so its problems are not
/// unexpected.
pub(crate) fn expects_unregistered(sc: &Scenario, id: &str) -> bool {
    sc.expect.iter().any(|e| {
        e.value.registered == Some(false)
            && e.value
                .plugin
                .as_ref()
                .is_some_and(|p| same_plugin(id, &p.value))
    })
}

pub(crate) fn check_all(
    sc: &Scenario,
    view: &View<'_>,
    summary: &mut Summary,
    reporter: &mut dyn Reporter,
) {
    for e in &sc.expect {
        let at = sc.pos(&e.referenced).to_string();
        for (what, result) in check(&e.value, view) {
            let held = result.is_ok();
            if held {
                summary.expectations_held += 1;
            } else {
                summary.expectations_failed += 1;
            }
            reporter.report(&Record::Expectation {
                at: at.clone(),
                step: None,
                what,
                held,
                detail: result.err().unwrap_or_default(),
            });
        }
    }
}

type Outcome = (String, Result<(), String>);

fn check(e: &Expectation, v: &View<'_>) -> Vec<Outcome> {
    let mut out = Vec::new();
    if let Some(c) = &e.container {
        let name = &c.value;
        let Some((_, spec)) = v.specs.iter().find(|(n, _)| n == name) else {
            out.push((
                format!("container {name} was created"),
                Err("it was never created".into()),
            ));
            return out;
        };
        let env = env_of(spec);
        for (k, want) in &e.env {
            let got = env.get(k);
            out.push((
                format!("{name} has env {k}={want}"),
                match got {
                    Some(g) if g == want => Ok(()),
                    Some(g) => Err(format!("{k}={g}")),
                    None => Err(format!("{k} is not set")),
                },
            ));
        }
        for k in &e.env_absent {
            out.push((
                format!("{name} has no env {k}"),
                match env.get(k) {
                    Some(g) => Err(format!("{k}={g}")),
                    None => Ok(()),
                },
            ));
        }
        let ann = spec.annotations().clone().unwrap_or_default();
        for (k, want) in &e.annotations {
            out.push((
                format!("{name} has annotation {k}={want}"),
                match ann.get(k) {
                    Some(g) if g == want => Ok(()),
                    Some(g) => Err(format!("{k}={g}")),
                    None => Err(format!("annotation {k} is not set")),
                },
            ));
        }
        let mounts: Vec<String> = spec
            .mounts()
            .clone()
            .unwrap_or_default()
            .iter()
            .map(|m| m.destination().display().to_string())
            .collect();
        for m in &e.mounts {
            out.push((
                format!("{name} has a mount at {m}"),
                if mounts.contains(m) {
                    Ok(())
                } else {
                    Err(format!("mounts: {}", mounts.join(", ")))
                },
            ));
        }
        let devices: Vec<String> = spec
            .linux()
            .as_ref()
            .and_then(|l| l.devices().clone())
            .unwrap_or_default()
            .iter()
            .map(|d| d.path().display().to_string())
            .collect();
        for d in &e.devices {
            out.push((
                format!("{name} has device {d}"),
                if devices.contains(d) {
                    Ok(())
                } else if devices.is_empty() {
                    Err("no devices".into())
                } else {
                    Err(format!("devices: {}", devices.join(", ")))
                },
            ));
        }
        let rlimits: Vec<(String, u64, u64)> = spec
            .process()
            .as_ref()
            .and_then(|p| p.rlimits().clone())
            .unwrap_or_default()
            .iter()
            .map(|r| {
                let ty = serde_json::to_value(r.typ())
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default();
                (ty, r.soft(), r.hard())
            })
            .collect();
        for (ty, want) in &e.rlimits {
            let full = if ty.starts_with("RLIMIT_") {
                ty.clone()
            } else {
                format!("RLIMIT_{}", ty.to_ascii_uppercase())
            };
            let found = rlimits.iter().find(|r| r.0 == full);
            let text = format!(
                "{name} has rlimit {full}{}{}",
                want.soft.map(|s| format!(" soft={s}")).unwrap_or_default(),
                want.hard.map(|h| format!(" hard={h}")).unwrap_or_default()
            );
            out.push((
                text,
                match found {
                    None => Err(format!("{full} is not set")),
                    Some((_, s, h))
                        if want.soft.is_none_or(|w| w == *s)
                            && want.hard.is_none_or(|w| w == *h) =>
                    {
                        Ok(())
                    }
                    Some((_, s, h)) => Err(format!("soft={s} hard={h}")),
                },
            ));
        }
        let changes = v.owners.get(name).cloned().unwrap_or_default();
        for (field, plugin) in &e.owners {
            let (f, key) = field.split_once('/').unwrap_or((field, ""));
            let owner: Vec<&Change> = changes
                .iter()
                .filter(|c| c.field == f && c.key == key)
                .collect();
            out.push((
                format!("{name}: {field} is owned by {plugin}"),
                if owner.iter().any(|c| same_plugin(&c.plugin, plugin)) {
                    Ok(())
                } else if owner.is_empty() {
                    Err("no plugin changed it".into())
                } else {
                    Err(format!(
                        "owned by {}",
                        owner
                            .iter()
                            .map(|c| c.plugin.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                },
            ));
        }
    }
    if let Some(p) = &e.plugin {
        let name = &p.value;
        if let Some(reg) = e.registered {
            let is = v.registered.iter().any(|id| same_plugin(id, name));
            out.push((
                format!(
                    "plugin {name} is {}registered at the end",
                    if reg { "" } else { "not " }
                ),
                if is == reg {
                    Ok(())
                } else if is {
                    Err("it is registered".into())
                } else {
                    Err("it is not registered".into())
                },
            ));
        }
        if let Some(ev) = &e.event {
            let n: u64 = v
                .counts
                .iter()
                .filter(|((id, op), _)| same_plugin(id, name) && op.eq_ignore_ascii_case(&ev.value))
                .map(|(_, n)| *n)
                .sum();
            if let Some(want) = e.calls {
                out.push((
                    format!("plugin {name} is called {want} time(s) for {}", ev.value),
                    if n == want {
                        Ok(())
                    } else {
                        Err(format!("called {n} time(s)"))
                    },
                ));
            }
            if let Some(min) = e.min_calls {
                out.push((
                    format!(
                        "plugin {name} is called at least {min} time(s) for {}",
                        ev.value
                    ),
                    if n >= min {
                        Ok(())
                    } else {
                        Err(format!("called {n} time(s)"))
                    },
                ));
            }
        }
    }
    if let Some(s) = &e.step {
        let want_ok = e.outcome.as_ref().is_none_or(|o| o.value == "ok");
        let got = v.outcomes.get(&s.value).copied();
        out.push((
            format!(
                "step {} {}",
                s.value,
                if want_ok { "succeeds" } else { "fails" }
            ),
            match got {
                Some(g) if g == want_ok => Ok(()),
                Some(true) => Err("it succeeded".into()),
                Some(false) => Err("it failed".into()),
                None => Err("it did not run".into()),
            },
        ));
    }
    if let Some(want) = e.conflict {
        let found: Vec<&String> = v
            .conflicts
            .iter()
            .filter(|c| e.by.as_ref().is_none_or(|b| same_plugin(c, b)))
            .collect();
        let by =
            e.by.as_ref()
                .map(|b| format!(" caused by {b}"))
                .unwrap_or_default();
        out.push((
            if want {
                format!("a conflict is reported{by}")
            } else {
                format!("no conflict is reported{by}")
            },
            match (want, found.is_empty()) {
                (true, false) | (false, true) => Ok(()),
                (true, true) if v.conflicts.is_empty() => Err("no conflict".into()),
                (true, true) => Err(format!("conflicts by {}", v.conflicts.join(", "))),
                (false, false) => Err(format!(
                    "conflicts by {}",
                    found
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            },
        ));
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn plugin_names_match_with_or_without_index() {
        assert!(same_plugin("10-env", "env"));
        assert!(same_plugin("10-env", "10-env"));
        assert!(!same_plugin("10-env", "envx"));
        assert!(same_plugin("10-my-plugin", "my-plugin"));
    }
}
