//! `go.yaml.in/yaml/v3.Unmarshal` into a typed target.

use std::collections::HashSet;

use serde_json::Value;

use super::limits::{Errors, MAX_EXCERPT_BYTES, Path, excerpt};
use super::resolve::{Resolved, Schema, resolve};
use super::tree::{CORE_TAG, Node, Scalar, parse};
use super::{DecodeError, Decoded, Notice, Shape};

fn is_merge(k: &Node) -> bool {
    matches!(k, Node::Scalar(Scalar { value, plain, tag, .. })
        if value == "<<" && (*plain && tag.is_none() || tag.as_deref() == Some(&format!("{CORE_TAG}merge"))))
}

fn describe(n: &Node) -> String {
    match n {
        Node::Scalar(s) => format!("`{}`", excerpt(&s.value, MAX_EXCERPT_BYTES)),
        Node::Seq(_) => "a sequence".into(),
        Node::Map(_) => "a mapping".into(),
    }
}

fn line(n: &Node) -> usize {
    match n {
        Node::Scalar(s) => s.line,
        Node::Seq(items) => items.first().map_or(0, line),
        Node::Map(pairs) => pairs.first().map_or(0, |(k, _)| line(k)),
    }
}

struct V3<'a> {
    notices: &'a mut Vec<Notice>,
    errors: Errors,
}

impl V3<'_> {
    fn type_error(&mut self, n: &Node, shape: &Shape, path: &Path<'_>) {
        self.errors.push(format!(
            "line {}: cannot unmarshal {} into {shape:?} (at {})",
            line(n),
            describe(n),
            path.render()
        ));
    }

    fn scalar(&mut self, s: &Scalar, n: &Node, shape: &Shape, slot: &mut Value, path: &Path<'_>) {
        let resolved = match resolve(Schema::V3, &s.value, s.plain, s.tag.as_deref()) {
            Ok(r) => r,
            Err(e) => {
                self.errors.push(format!("line {}: {e}", s.line));
                return;
            }
        };
        let binary = s.tag.as_deref() == Some(&format!("{CORE_TAG}binary"));
        match (&resolved, shape) {
            (Resolved::Null, Shape::Seq(_) | Shape::Map(_) | Shape::Any) => *slot = Value::Null,
            (Resolved::Null, _) => {}
            (Resolved::Str(v), Shape::Str) if binary => *slot = Value::String(v.clone()),
            (_, Shape::Str) => *slot = Value::String(s.value.clone()),
            (Resolved::Bool(b), Shape::Bool) => *slot = Value::Bool(*b),
            (Resolved::Str(v), Shape::Bool) => match v.as_str() {
                "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => *slot = Value::Bool(true),
                "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => {
                    *slot = Value::Bool(false)
                }
                _ => self.type_error(n, shape, path),
            },
            (Resolved::Int(i), Shape::Int(bits))
                if *bits >= 64 || (*i >> (bits - 1)) == 0 || (*i >> (bits - 1)) == -1 =>
            {
                *slot = Value::from(*i)
            }
            (Resolved::Int(i), Shape::Uint(bits))
                if *i >= 0 && (*bits >= 64 || (*i >> bits) == 0) =>
            {
                *slot = Value::from(*i)
            }
            (Resolved::Uint(u), Shape::Uint(64)) => *slot = Value::from(*u),
            (Resolved::Int(i), Shape::Float(_)) => *slot = Value::from(*i as f64),
            (Resolved::Float(f), Shape::Float(_)) if f.is_finite() => *slot = Value::from(*f),
            (r, Shape::Any) => {
                *slot = match r {
                    Resolved::Bool(b) => Value::Bool(*b),
                    Resolved::Int(i) => Value::from(*i),
                    Resolved::Uint(u) => Value::from(*u),
                    Resolved::Float(f) => {
                        serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number)
                    }
                    Resolved::Str(v) => Value::String(v.clone()),
                    Resolved::Null => Value::Null,
                }
            }
            _ => self.type_error(n, shape, path),
        }
    }

    fn node(&mut self, n: &Node, shape: &Shape, slot: &mut Value, path: &Path<'_>) {
        match n {
            Node::Scalar(s) => self.scalar(s, n, shape, slot, path),
            Node::Seq(items) => match shape {
                Shape::Seq(elem) => {
                    let mut out = Vec::with_capacity(items.len());
                    for (i, item) in items.iter().enumerate() {
                        let mut v = elem.zero();
                        self.node(item, elem, &mut v, &path.index(i));
                        out.push(v);
                    }
                    *slot = Value::Array(out);
                }
                Shape::Any => {
                    let mut out = Vec::with_capacity(items.len());
                    for (i, item) in items.iter().enumerate() {
                        let mut v = Value::Null;
                        self.node(item, &Shape::Any, &mut v, &path.index(i));
                        out.push(v);
                    }
                    *slot = Value::Array(out);
                }
                _ => self.type_error(n, shape, path),
            },
            Node::Map(pairs) => match shape {
                Shape::Struct(_) | Shape::Map(_) | Shape::Any => {
                    self.check_unique(pairs);
                    if !slot.is_object() {
                        *slot = match shape {
                            Shape::Any => Value::Object(serde_json::Map::new()),
                            s => s.zero(),
                        };
                    }
                    self.mapping(pairs, shape, slot, path);
                }
                _ => self.type_error(n, shape, path),
            },
        }
    }

    /// yaml.v3 refuses a mapping that repeats a key (reported where it is
    /// repeated; one hash lookup per key).
    fn check_unique(&mut self, pairs: &[(Node, Node)]) {
        let mut seen = HashSet::with_capacity(pairs.len());
        for (k, _) in pairs {
            if let Node::Scalar(sk) = k {
                if !seen.insert(sk.value.as_str()) {
                    self.errors.push(format!(
                        "line {}: mapping key {:?} already defined",
                        sk.line,
                        excerpt(&sk.value, MAX_EXCERPT_BYTES)
                    ));
                }
            }
        }
    }

    fn merge(&mut self, v: &Node, shape: &Shape, slot: &mut Value, path: &Path<'_>) {
        let bad = |n: &Node| {
            format!(
                "line {}: map merge requires map or sequence of maps as the value",
                line(n)
            )
        };
        match v {
            Node::Map(p) => self.mapping(p, shape, slot, path),
            Node::Seq(items) => {
                for item in items.iter().rev() {
                    match item {
                        Node::Map(p) => self.mapping(p, shape, slot, path),
                        other => self.errors.push(bad(other)),
                    }
                }
            }
            other => self.errors.push(bad(other)),
        }
    }

    fn mapping(
        &mut self,
        pairs: &[(Node, Node)],
        shape: &Shape,
        slot: &mut Value,
        path: &Path<'_>,
    ) {
        for (k, v) in pairs {
            if is_merge(k) {
                self.merge(v, shape, slot, path);
                continue;
            }
            let Node::Scalar(key) = k else {
                self.type_error(k, &Shape::Str, path);
                continue;
            };
            let child = path.key(&key.value);
            let Some(map) = slot.as_object_mut() else {
                return;
            };
            match shape {
                Shape::Struct(fields) => match fields.iter().find(|f| f.name == key.value) {
                    Some(f) => {
                        let field = map.entry(f.name).or_insert_with(|| f.shape.zero());
                        self.node(v, &f.shape, field, &child);
                    }
                    None => self.notices.push(Notice::UnknownKey {
                        path: child.render(),
                    }),
                },
                Shape::Map(elem) => {
                    let mut e = elem.zero();
                    self.node(v, elem, &mut e, &child);
                    map.insert(key.value.clone(), e);
                }
                _ => {
                    let mut e = Value::Null;
                    self.node(v, &Shape::Any, &mut e, &child);
                    map.insert(key.value.clone(), e);
                }
            }
        }
    }
}

/// [`decode_v3`](super::decode_v3) on JSON-like data: `start` is the
/// variable's value before decoding.
///
/// # Errors
///
/// [`DecodeError`] where Go returns an error (the type errors, as Go
/// collects them, up to [`MAX_ERRORS`](super::MAX_ERRORS)), and
/// [`DecodeError::Limit`] beyond the bounds of decoding (see the module
/// docs).
pub fn decode_v3_value(
    text: &str,
    shape: &Shape,
    start: Value,
) -> Result<Decoded<Value>, DecodeError> {
    let mut notices = Vec::new();
    let mut value = start;
    let Some(node) = parse(text)? else {
        return Ok(Decoded { value, notices });
    };
    let mut d = V3 {
        notices: &mut notices,
        errors: Errors::default(),
    };
    d.node(&node, shape, &mut value, &Path::Root);
    if !d.errors.is_empty() {
        return Err(DecodeError::Shape(d.errors.joined()));
    }
    // `null` lists and maps are Go's nil: empty.
    normalize(&mut value, shape);
    Ok(Decoded { value, notices })
}

fn normalize(v: &mut Value, shape: &Shape) {
    match shape {
        Shape::Seq(elem) => match v {
            Value::Array(items) => items.iter_mut().for_each(|i| normalize(i, elem)),
            _ => *v = shape.zero(),
        },
        Shape::Map(elem) => match v {
            Value::Object(m) => m.values_mut().for_each(|i| normalize(i, elem)),
            _ => *v = shape.zero(),
        },
        Shape::Struct(fields) => {
            if let Value::Object(m) = v {
                for f in *fields {
                    if let Some(x) = m.get_mut(f.name) {
                        normalize(x, &f.shape);
                    }
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::super::Field;
    use super::*;

    const CONFIG: Shape = Shape::Struct(&[
        Field::new("enable", Shape::Bool),
        Field::new("rejectOCIHookAdjustment", Shape::Bool),
        Field::new("requiredPlugins", Shape::Seq(&Shape::Str)),
        Field::new("tolerateMissingPluginsAnnotation", Shape::Str),
    ]);

    fn dec(text: &str) -> Result<Decoded<Value>, DecodeError> {
        decode_v3_value(text, &CONFIG, CONFIG.zero())
    }

    #[test]
    fn booleans_strings_and_exact_keys() {
        let d = dec("enable: yes\nrejectOCIHookAdjustment: 'on'\nrequiredPlugins: [a, 12, 0x10, true]\ntolerateMissingPluginsAnnotation: 1.50\nEnable: false\nreject_oci_hook_adjustment: false\n").unwrap();
        assert_eq!(d.value["enable"], true);
        assert_eq!(d.value["rejectOCIHookAdjustment"], true);
        assert_eq!(
            d.value["requiredPlugins"],
            serde_json::json!(["a", "12", "0x10", "true"])
        );
        assert_eq!(d.value["tolerateMissingPluginsAnnotation"], "1.50");
        assert_eq!(
            d.notices,
            [
                Notice::UnknownKey {
                    path: "Enable".into()
                },
                Notice::UnknownKey {
                    path: "reject_oci_hook_adjustment".into()
                }
            ]
        );
    }

    #[test]
    fn errors_as_go() {
        assert!(dec("enable: 1\n").is_err());
        assert!(dec("enable: maybe\n").is_err());
        assert!(dec("enable: true\nenable: false\n").is_err());
        assert!(dec("requiredPlugins: a\n").is_err());
        assert!(dec("- 1\n").is_err());
        assert!(dec("enable: [\n").is_err());
    }

    #[test]
    fn null_and_empty() {
        let d = dec("").unwrap();
        assert_eq!(d.value, CONFIG.zero());
        let d = dec("enable: ~\nrequiredPlugins: ~\n").unwrap();
        assert_eq!(d.value["enable"], false);
        assert_eq!(d.value["requiredPlugins"], serde_json::json!([]));
        let start = serde_json::json!({"enable": true, "rejectOCIHookAdjustment": false, "requiredPlugins": ["x"], "tolerateMissingPluginsAnnotation": ""});
        let d = decode_v3_value("enable: null\n", &CONFIG, start).unwrap();
        assert_eq!(d.value["enable"], true);
        assert_eq!(d.value["requiredPlugins"], serde_json::json!(["x"]));
    }
}
