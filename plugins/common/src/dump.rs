//! Log dumps in the Go samples' format: an object as YAML (`sigs.k8s.io/yaml`
//! style: the JSON field names, empty fields left out, keys sorted, lists
//! not indented under their key), one log line per YAML line, prefixed
//! with the event and the object's tag (`CreateContainer: pod:`, then
//! `CreateContainer:    name: web`).

use serde::Serialize;
use serde_json::Value;

use crate::goyaml::plain_str_is_string;

/// Logs each `(tag, object)` of `objects` at info level under `prefix`, as
/// YAML, one line per log line; with no objects, just the prefix.
pub fn dump(prefix: &str, objects: &[(&str, &dyn erased::Dump)]) {
    if objects.is_empty() {
        tracing::info!("{prefix}");
    }
    for (tag, obj) in objects {
        tracing::info!("{prefix}: {tag}:");
        for line in obj.yaml().lines() {
            tracing::info!("{prefix}:    {line}");
        }
    }
}

/// Object-safe serialization for [`dump`].
pub mod erased {
    /// Anything `Serialize`, as YAML.
    pub trait Dump {
        /// The object as YAML (see [`to_yaml`](super::to_yaml)).
        fn yaml(&self) -> String;
    }

    impl<T: serde::Serialize> Dump for T {
        fn yaml(&self) -> String {
            super::to_yaml(self)
        }
    }
}

/// `value` as the Go samples dump it: YAML of its JSON form, with Go's
/// `omitempty` (null, false, 0, empty strings, lists and maps left out).
pub fn to_yaml<T: Serialize + ?Sized>(value: &T) -> String {
    let v = serde_json::to_value(value).unwrap_or(Value::Null);
    let v = omit_empty(v).unwrap_or(Value::Object(serde_json::Map::new()));
    let mut out = String::new();
    emit(&v, 0, &mut out);
    out
}

/// Go's `omitempty`: drops zero scalars and empty lists and maps; an object
/// that had fields (a message) stays, even if they were all empty.
fn omit_empty(v: Value) -> Option<Value> {
    match v {
        Value::Null | Value::Bool(false) => None,
        Value::Number(n) if n.as_f64() == Some(0.0) => None,
        Value::String(s) if s.is_empty() => None,
        Value::Array(a) if a.is_empty() => None,
        Value::Object(m) if m.is_empty() => None,
        Value::Array(a) => Some(Value::Array(
            a.into_iter()
                .map(|i| omit_empty(i).unwrap_or(Value::Null))
                .collect(),
        )),
        Value::Object(m) => Some(Value::Object(
            m.into_iter()
                .filter_map(|(k, v)| omit_empty(v).map(|v| (k, v)))
                .collect(),
        )),
        other => Some(other),
    }
}

fn scalar(s: &str) -> String {
    let safe = !s.is_empty()
        && plain_str_is_string(s)
        && !s.starts_with(|c: char| "-?:,[]{}#&*!|>'\"%@` ".contains(c))
        && !s.ends_with([' ', ':'])
        && !s.contains(": ")
        && !s.contains(" #")
        && !s.chars().any(char::is_control);
    if safe {
        s.to_owned()
    } else if s.chars().any(char::is_control) {
        serde_json::to_string(s).unwrap_or_default()
    } else {
        format!("'{}'", s.replace('\'', "''"))
    }
}

fn leaf(v: &Value) -> Option<String> {
    match v {
        Value::Null => Some("null".into()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => Some(scalar(s)),
        Value::Array(a) if a.is_empty() => Some("[]".into()),
        Value::Object(m) if m.is_empty() => Some("{}".into()),
        _ => None,
    }
}

fn pad(n: usize, out: &mut String) {
    out.extend(std::iter::repeat_n(' ', n));
}

/// Writes `v` (a collection, or a scalar at the top) at indentation
/// `indent`, each line ending with a newline.
fn emit(v: &Value, indent: usize, out: &mut String) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                pad(indent, out);
                out.push_str(&scalar(k));
                out.push(':');
                match (leaf(child), child) {
                    (Some(l), _) => {
                        out.push(' ');
                        out.push_str(&l);
                        out.push('\n');
                    }
                    (None, Value::Array(_)) => {
                        out.push('\n');
                        emit(child, indent, out);
                    }
                    (None, _) => {
                        out.push('\n');
                        emit(child, indent + 2, out);
                    }
                }
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for item in a {
                pad(indent, out);
                out.push('-');
                match leaf(item) {
                    Some(l) => {
                        out.push(' ');
                        out.push_str(&l);
                        out.push('\n');
                    }
                    None => {
                        // The item's first line goes after the dash.
                        let mut sub = String::new();
                        emit(item, indent + 2, &mut sub);
                        out.push(' ');
                        out.push_str(sub.trim_start());
                    }
                }
            }
        }
        other => {
            pad(indent, out);
            out.push_str(&leaf(other).unwrap_or_default());
            out.push('\n');
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn go_style_yaml() {
        let v = json!({
            "id": "pod-1",
            "name": "web",
            "labels": {},
            "annotations": {"a.b/c": "x: y", "n": "10", "t": "true"},
            "args": ["sleep", "10"],
            "linux": {"namespaces": [{"type": "network", "path": "/x"}], "resources": {"cpu": {"shares": 0}}},
            "pid": 0,
            "empty_list": [],
            "mounts": [{"options": ["ro"], "destination": "/d"}]
        });
        assert_eq!(
            to_yaml(&v),
            "annotations:\n  a.b/c: 'x: y'\n  'n': '10'\n  t: 'true'\nargs:\n- sleep\n- '10'\nid: pod-1\nlinux:\n  namespaces:\n  - path: /x\n    type: network\n  resources:\n    cpu: {}\nmounts:\n- destination: /d\n  options:\n  - ro\nname: web\n"
        );
        assert_eq!(to_yaml(&json!({})), "{}\n");
        assert_eq!(to_yaml(&json!("multi\nline")), "\"multi\\nline\"\n");
        // The output is YAML that reads back as the (non-empty) data; `n`
        // is quoted, as a YAML 1.1 boolean.
        let back: Value = serde_saphyr::from_str(&to_yaml(&v)).unwrap();
        assert_eq!(back["args"], json!(["sleep", "10"]));
        assert_eq!(back["annotations"]["a.b/c"], "x: y");
        assert_eq!(back["linux"]["namespaces"][0]["type"], "network");
    }
}
