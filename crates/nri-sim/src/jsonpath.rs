//! Values in a final OCI spec (as JSON, the way `config.json` is written),
//! found by the paths the spec diff prints, and matched against expected
//! values from a scenario.
//!
//! A path is dotted object keys, each optionally followed by `[ID]` to pick
//! a list element: by its `destination`, `path`, `type`, `hostPath` or
//! `name` (the keys the diff uses), else by position. Keys may contain dots
//! themselves (`annotations.nri.example/owner`): the longest key of the
//! object that fits is taken.

use serde_json::Value;

/// The keys that identify a list element, as in the spec diff.
pub(crate) const ID_KEYS: [&str; 5] = ["destination", "path", "type", "hostPath", "name"];

/// The element of `items` named `id` (see [`ID_KEYS`]), else at position `id`.
fn element<'a>(items: &'a [Value], id: &str) -> Option<&'a Value> {
    items
        .iter()
        .find(|i| {
            ID_KEYS
                .iter()
                .find_map(|k| i.get(k).and_then(Value::as_str))
                .is_some_and(|v| v == id)
        })
        .or_else(|| id.parse::<usize>().ok().and_then(|n| items.get(n)))
}

/// The value at `path` in `root`, if there is one.
pub(crate) fn lookup<'a>(root: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = root;
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('[') {
            let end = after.find(']')?;
            cur = element(cur.as_array()?, &after[..end])?;
            rest = &after[end + 1..];
        } else {
            let rest_no_dot = rest.strip_prefix('.').unwrap_or(rest);
            let obj = cur.as_object()?;
            let key = obj
                .keys()
                .filter(|k| {
                    rest_no_dot
                        .strip_prefix(k.as_str())
                        .is_some_and(|r| r.is_empty() || r.starts_with(['.', '[']))
                })
                .max_by_key(|k| k.len())?;
            cur = &obj[key];
            rest = &rest_no_dot[key.len()..];
        }
    }
    Some(cur)
}

/// Whether `actual` has what `want` asks for: equal scalars (a quantity
/// such as `256Mi` or `1G` for a number); for a map, each of its keys
/// matching; for a list, each of its items found in the actual list (in
/// any order).
pub(crate) fn matches(want: &Value, actual: &Value) -> bool {
    match (want, actual) {
        (Value::Object(w), Value::Object(a)) => w
            .iter()
            .all(|(k, v)| a.get(k).is_some_and(|x| matches(v, x))),
        (Value::Array(w), Value::Array(a)) => w.iter().all(|v| a.iter().any(|x| matches(v, x))),
        (Value::String(s), Value::Number(n)) => crate::scenario::parse_quantity(s)
            .ok()
            .is_some_and(|q| n.as_i64() == Some(q)),
        (w, a) => w == a,
    }
}

/// A value as a failure message shows it (strings without quotes).
pub(crate) fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec() -> Value {
        json!({
            "annotations": {"nri.example/owner": "env", "nri": "x"},
            "mounts": [
                {"destination": "/proc", "type": "proc"},
                {"destination": "/scratch", "type": "tmpfs", "options": ["nosuid", "size=64m"]}
            ],
            "process": {"rlimits": [{"type": "RLIMIT_NOFILE", "soft": 1024, "hard": 4096}]},
            "linux": {"resources": {"memory": {"limit": 268435456}}}
        })
    }

    #[test]
    fn paths_reach_keyed_elements_and_dotted_keys() {
        let s = spec();
        assert_eq!(
            lookup(&s, "linux.resources.memory.limit"),
            Some(&json!(268435456))
        );
        assert_eq!(
            lookup(&s, "process.rlimits[RLIMIT_NOFILE].soft"),
            Some(&json!(1024))
        );
        assert_eq!(
            lookup(&s, "mounts[/scratch].options"),
            Some(&json!(["nosuid", "size=64m"]))
        );
        assert_eq!(lookup(&s, "mounts[0].type"), Some(&json!("proc")));
        assert_eq!(
            lookup(&s, "annotations.nri.example/owner"),
            Some(&json!("env"))
        );
        assert_eq!(lookup(&s, "annotations.nri"), Some(&json!("x")));
        assert_eq!(lookup(&s, "mounts[/nowhere]"), None);
        assert_eq!(lookup(&s, "linux.resources.cpu"), None);
        assert_eq!(lookup(&s, "mounts[/scratch"), None);
    }

    #[test]
    fn expected_values_match_by_quantity_and_subset() {
        assert!(matches(&json!("256Mi"), &json!(268435456)));
        assert!(!matches(&json!("255Mi"), &json!(268435456)));
        assert!(matches(
            &json!(["size=64m"]),
            &json!(["nosuid", "size=64m"])
        ));
        assert!(!matches(
            &json!(["size=32m"]),
            &json!(["nosuid", "size=64m"])
        ));
        assert!(matches(
            &json!({"type": "tmpfs", "options": ["size=64m"]}),
            &json!({"destination": "/scratch", "type": "tmpfs", "options": ["nosuid", "size=64m"]})
        ));
        assert!(!matches(
            &json!({"type": "bind"}),
            &json!({"type": "tmpfs"})
        ));
        assert!(!matches(&json!("1024"), &json!("10240")));
        assert!(matches(&json!(true), &json!(true)));
    }
}
