//! Checking a scenario's `expect` section against what happened.

use std::collections::BTreeMap;

use oci_spec::runtime::Spec;

use crate::report::{Change, Record, Reporter, Summary};
use serde_json::Value;

use crate::jsonpath::{lookup, matches, show};
use crate::scenario::{Expectation, ResourcesSpec, Scenario, SpecItem};
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
pub(crate) fn same_plugin(id: &str, name: &str) -> bool {
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

/// The outcomes of one expectation: its container's, its plugin's, its
/// step's and its conflict's checks, in that order.
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
        check_container(e, name, spec, &mut out);
        check_owners(e, name, v, &mut out);
    }
    if let Some(p) = &e.plugin {
        check_plugin(e, &p.value, v, &mut out);
    }
    if let Some(s) = &e.step {
        out.push(check_step(e, &s.value, v));
    }
    if let Some(want) = e.conflict {
        out.push(check_conflict(e, want, v));
    }
    out
}

/// The checks of container `name`'s final spec: env, annotations,
/// mounts, devices, resources, spec paths, rlimits.
fn check_container(e: &Expectation, name: &str, spec: &Spec, out: &mut Vec<Outcome>) {
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
    let json = nri_oci::spec_json(spec).unwrap_or_default();
    check_items(
        name,
        &json,
        "mounts",
        "destination",
        "a mount at",
        &e.mounts,
        out,
    );
    let devices = json.pointer("/linux/devices").cloned().unwrap_or_default();
    let devices = serde_json::json!({ "devices": devices });
    check_items(name, &devices, "devices", "path", "device", &e.devices, out);
    if let Some(r) = &e.resources {
        for (path, want) in resource_values(r) {
            out.push(check_path(name, &json, &path, &want));
        }
    }
    for (path, want) in &e.spec {
        out.push(check_path(name, &json, path, want));
    }
    check_rlimits(e, name, spec, out);
}

/// The rlimits of container `name`'s final spec.
fn check_rlimits(e: &Expectation, name: &str, spec: &Spec, out: &mut Vec<Outcome>) {
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
                    if want.soft.is_none_or(|w| w == *s) && want.hard.is_none_or(|w| w == *h) =>
                {
                    Ok(())
                }
                Some((_, s, h)) => Err(format!("soft={s} hard={h}")),
            },
        ));
    }
}

/// Which plugin owns each field of container `name` the expectation names.
fn check_owners(e: &Expectation, name: &str, v: &View<'_>, out: &mut Vec<Outcome>) {
    let changes = v.owners.get(name).cloned().unwrap_or_default();
    for (field, plugin) in &e.owners {
        let (f, key) = field.split_once('/').unwrap_or((field, ""));
        let owner: Vec<&Change> = changes
            .iter()
            .filter(|c| c.field == f && c.key == key)
            .collect();
        out.push((
            format!("{name}: {field} is owned by {}", plugin.value),
            if owner.iter().any(|c| same_plugin(&c.plugin, &plugin.value)) {
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

/// Plugin `name`'s registration at the end and its calls for an event.
fn check_plugin(e: &Expectation, name: &str, v: &View<'_>, out: &mut Vec<Outcome>) {
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

/// Whether step `step` succeeded or failed as expected.
fn check_step(e: &Expectation, step: &str, v: &View<'_>) -> Outcome {
    let want_ok = e.outcome.as_ref().is_none_or(|o| o.value == "ok");
    let got = v.outcomes.get(step).copied();
    (
        format!(
            "step {} {}",
            step,
            if want_ok { "succeeds" } else { "fails" }
        ),
        match got {
            Some(g) if g == want_ok => Ok(()),
            Some(true) => Err("it succeeded".into()),
            Some(false) => Err("it failed".into()),
            None => Err("it did not run".into()),
        },
    )
}

/// Whether a conflict (by the expected plugin, if named) was reported.
fn check_conflict(e: &Expectation, want: bool, v: &View<'_>) -> Outcome {
    let found: Vec<&String> = v
        .conflicts
        .iter()
        .filter(|c| e.by.as_ref().is_none_or(|b| same_plugin(c, &b.value)))
        .collect();
    let by =
        e.by.as_ref()
            .map(|b| format!(" caused by {}", b.value))
            .unwrap_or_default();
    (
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
    )
}

/// Checks the `mounts`/`devices` entries of an expectation against the
/// list `list` of `json`, elements named by `key`.
fn check_items(
    name: &str,
    json: &Value,
    list: &str,
    key: &str,
    what: &str,
    items: &[SpecItem],
    out: &mut Vec<Outcome>,
) {
    let all: Vec<&Value> = json
        .get(list)
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let keys: Vec<&str> = all
        .iter()
        .filter_map(|v| v.get(key).and_then(Value::as_str))
        .collect();
    for item in items {
        let k = item.key(key).unwrap_or_default();
        let found = all
            .iter()
            .find(|v| v.get(key).and_then(Value::as_str) == Some(k));
        let (text, result) = match (item, found) {
            (SpecItem::Key(_), Some(_)) => (format!("{name} has {what} {k}"), Ok(())),
            (SpecItem::Fields(f), Some(v)) => {
                let want = Value::Object(f.clone().into_iter().collect());
                let text = format!("{name} has {what} {}", show(&want));
                if matches(&want, v) {
                    (text, Ok(()))
                } else {
                    (text, Err(format!("found {}", show(v))))
                }
            }
            (_, None) => (
                format!("{name} has {what} {k}"),
                Err(if keys.is_empty() {
                    format!("no {list}")
                } else {
                    format!("{list}: {}", keys.join(", "))
                }),
            ),
        };
        out.push((text, result));
    }
}

/// The value at `path` of the spec matches `want`.
fn check_path(name: &str, json: &Value, path: &str, want: &Value) -> Outcome {
    let text = format!("{name}: {path} is {}", show(want));
    let result = match lookup(json, path) {
        Some(v) if matches(want, v) => Ok(()),
        Some(v) => Err(format!("expected {}, found {}", show(want), show(v))),
        None => Err(format!("expected {}, found nothing at {path}", show(want))),
    };
    (text, result)
}

/// The spec paths and values of a resources expectation.
fn resource_values(r: &ResourcesSpec) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut put = |path: &str, v: Value| out.push((format!("linux.resources.{path}"), v));
    if let Some(m) = &r.memory {
        for (k, q) in [
            ("limit", &m.limit),
            ("reservation", &m.reservation),
            ("swap", &m.swap),
        ] {
            if let Some(b) = q.as_ref().and_then(|q| q.value.bytes().ok()) {
                put(&format!("memory.{k}"), Value::from(b));
            }
        }
    }
    if let Some(c) = &r.cpu {
        if let Some(v) = c.shares {
            put("cpu.shares", Value::from(v));
        }
        if let Some(v) = c.quota {
            put("cpu.quota", Value::from(v));
        }
        if let Some(v) = c.period {
            put("cpu.period", Value::from(v));
        }
        if let Some(v) = &c.cpus {
            put("cpu.cpus", Value::from(v.clone()));
        }
        if let Some(v) = &c.mems {
            put("cpu.mems", Value::from(v.clone()));
        }
    }
    if let Some(p) = r.pids {
        put("pids.limit", Value::from(p));
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

    /// The final spec of `p/c` with a value of each kind set.
    fn spec() -> Spec {
        let mut v = serde_json::to_value(Spec::default()).unwrap();
        v["annotations"] = serde_json::json!({ "a": "1" });
        v["mounts"] = serde_json::json!([{
            "destination": "/scratch", "type": "tmpfs", "source": "tmpfs",
            "options": ["nosuid", "size=64m"]
        }]);
        v["hooks"] = serde_json::json!({ "prestart": [{ "path": "/usr/local/bin/hook" }] });
        v["process"]["rlimits"] =
            serde_json::json!([{ "type": "RLIMIT_NOFILE", "soft": 1024, "hard": 4096 }]);
        v["linux"]["devices"] = serde_json::json!([{
            "path": "/dev/fuse", "type": "c", "major": 10, "minor": 229, "fileMode": 438
        }]);
        v["linux"]["resources"] = serde_json::json!({
            "memory": { "limit": 268435456 },
            "cpu": { "shares": 512, "quota": 50000, "cpus": "0-1" }
        });
        serde_json::from_value(v).unwrap()
    }

    /// The failed checks of the scenario's one expectation: what was
    /// expected, and what was found.
    fn failures(expect: &str) -> Vec<(String, String)> {
        let text =
            format!("pods:\n  - name: p\n    containers: [{{ name: c }}]\nexpect:\n{expect}");
        let sc = Scenario::parse("t.yaml", std::path::Path::new("."), &text).unwrap();
        let view = View {
            specs: vec![("p/c".into(), spec())],
            owners: BTreeMap::new(),
            counts: BTreeMap::new(),
            conflicts: Vec::new(),
            registered: &[],
            outcomes: &BTreeMap::new(),
        };
        check(&sc.expect[0].value, &view)
            .into_iter()
            .filter_map(|(what, r)| r.err().map(|e| (what, e)))
            .collect()
    }

    #[test]
    fn matching_values_hold() {
        let held = failures(
            "  - container: p/c\n    annotations: { a: '1' }\n    mounts: [{ destination: /scratch, type: tmpfs, options: [size=64m] }]\n    devices: [{ path: /dev/fuse, type: c, major: 10, minor: 229, fileMode: 438 }]\n    rlimits: { nofile: { soft: 1024, hard: 4096 } }\n    resources: { memory: { limit: 256Mi }, cpu: { shares: 512, quota: 50000, cpus: 0-1 } }\n    spec:\n      hooks.prestart: [{ path: /usr/local/bin/hook }]\n",
        );
        assert_eq!(held, Vec::<(String, String)>::new());
    }

    #[test]
    fn each_failed_value_says_what_was_expected_and_found() {
        let failed = failures(
            "  - container: p/c\n    annotations: { a: '2', b: x }\n    mounts: [{ destination: /scratch, type: bind }, /data]\n    devices: [{ path: /dev/fuse, type: b, major: 11, minor: 228, fileMode: 420 }]\n    rlimits: { nofile: { soft: 2048 }, core: { hard: 0 } }\n    resources: { memory: { limit: 128Mi }, cpu: { shares: 256, cpus: 0-3 } }\n    spec:\n      hooks.prestart: [{ path: /bin/other }]\n      hooks.poststop: [{ path: /bin/x }]\n",
        );
        let detail = |what: &str| {
            failed
                .iter()
                .find(|(w, _)| w == what)
                .map(|(_, d)| d.as_str())
                .unwrap_or_else(|| panic!("no failure {what:?} in {failed:#?}"))
        };
        assert_eq!(detail("p/c has annotation a=2"), "a=1");
        assert_eq!(detail("p/c has annotation b=x"), "annotation b is not set");
        assert_eq!(
            detail("p/c has a mount at {\"destination\":\"/scratch\",\"type\":\"bind\"}"),
            "found {\"destination\":\"/scratch\",\"options\":[\"nosuid\",\"size=64m\"],\"source\":\"tmpfs\",\"type\":\"tmpfs\"}"
        );
        assert_eq!(detail("p/c has a mount at /data"), "mounts: /scratch");
        let dev = detail(
            "p/c has device {\"fileMode\":420,\"major\":11,\"minor\":228,\"path\":\"/dev/fuse\",\"type\":\"b\"}",
        );
        for part in [
            "\"major\":10",
            "\"minor\":229",
            "\"type\":\"c\"",
            "\"fileMode\":438",
        ] {
            assert!(dev.starts_with("found {") && dev.contains(part), "{dev}");
        }
        assert_eq!(
            detail("p/c has rlimit RLIMIT_NOFILE soft=2048"),
            "soft=1024 hard=4096"
        );
        assert_eq!(
            detail("p/c has rlimit RLIMIT_CORE hard=0"),
            "RLIMIT_CORE is not set"
        );
        assert_eq!(
            detail("p/c: linux.resources.memory.limit is 134217728"),
            "expected 134217728, found 268435456"
        );
        assert_eq!(
            detail("p/c: linux.resources.cpu.shares is 256"),
            "expected 256, found 512"
        );
        assert_eq!(
            detail("p/c: linux.resources.cpu.cpus is 0-3"),
            "expected 0-3, found 0-1"
        );
        assert_eq!(
            detail("p/c: hooks.prestart is [{\"path\":\"/bin/other\"}]"),
            "expected [{\"path\":\"/bin/other\"}], found [{\"path\":\"/usr/local/bin/hook\"}]"
        );
        assert_eq!(
            detail("p/c: hooks.poststop is [{\"path\":\"/bin/x\"}]"),
            "expected [{\"path\":\"/bin/x\"}], found nothing at hooks.poststop"
        );
        assert_eq!(failed.len(), 12, "{failed:#?}");
    }
}
