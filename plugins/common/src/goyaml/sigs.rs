//! `sigs.k8s.io/yaml.Unmarshal`: YAML 1.1 into Go's generic values
//! (`yaml.v2`), to JSON with scalars turned into strings where the target
//! field is a string, then `encoding/json` into the target.

use std::collections::BTreeMap;

use serde_json::Value;

use super::gofmt::{format_g32, format_json_float};
use super::resolve::{Resolved, Schema, resolve};
use super::tree::{CORE_TAG, Node, Scalar, parse};
use super::{DecodeError, Decoded, Field, Notice, Shape, join_key};

/// A value as `yaml.v2` decodes it into `interface{}`.
#[derive(Debug, Clone, PartialEq)]
enum Yv {
    Scalar(Resolved),
    Seq(Vec<Yv>),
    /// Keys unique by Go equality; document order of first appearance.
    Map(Vec<(Resolved, Yv)>),
}

fn is_merge(k: &Node) -> bool {
    matches!(k, Node::Scalar(Scalar { value, plain, tag, .. })
        if value == "<<" && (*plain && tag.is_none() || tag.as_deref() == Some(&format!("{CORE_TAG}merge"))))
}

/// Go `==` on interface values holding these.
fn same_key(a: &Resolved, b: &Resolved) -> bool {
    match (a, b) {
        (Resolved::Float(x), Resolved::Float(y)) => x == y,
        _ => a == b,
    }
}

fn key_text(k: &Resolved) -> String {
    match k {
        Resolved::Str(s) => s.clone(),
        Resolved::Int(i) => i.to_string(),
        Resolved::Uint(u) => u.to_string(),
        Resolved::Float(f) => format!("{f}"),
        Resolved::Bool(b) => b.to_string(),
        Resolved::Null => "null".into(),
    }
}

struct ToYv<'a> {
    notices: &'a mut Vec<Notice>,
}

impl ToYv<'_> {
    fn value(&mut self, n: &Node, path: &str) -> Result<Yv, DecodeError> {
        Ok(match n {
            Node::Scalar(s) => Yv::Scalar(
                resolve(Schema::V2, &s.value, s.plain, s.tag.as_deref())
                    .map_err(|e| DecodeError::Shape(format!("line {}: {e}", s.line)))?,
            ),
            Node::Seq(items) => Yv::Seq(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| self.value(v, &format!("{path}[{i}]")))
                    .collect::<Result<_, _>>()?,
            ),
            Node::Map(pairs) => {
                let mut out = Vec::new();
                self.mapping(pairs, path, &mut out, true)?;
                Yv::Map(out.into_iter().map(|(k, v, _)| (k, v)).collect())
            }
        })
    }

    /// Sets `k` in `out`. `explicit`: written in this mapping (not merged
    /// in with `<<`); an explicit key set twice is a duplicate.
    fn insert(
        &mut self,
        out: &mut Vec<(Resolved, Yv, bool)>,
        k: Resolved,
        v: Yv,
        path: &str,
        explicit: bool,
    ) {
        match out.iter_mut().find(|(e, _, _)| same_key(e, &k)) {
            Some(slot) => {
                if explicit && slot.2 {
                    self.notices.push(Notice::DuplicateKey {
                        path: join_key(path, &key_text(&k)),
                    });
                }
                slot.1 = v;
                slot.2 |= explicit;
            }
            None => out.push((k, v, explicit)),
        }
    }

    /// The pairs of a mapping into `out`, merge keys (`<<`) expanded where
    /// they stand, as `yaml.v2` does.
    fn mapping(
        &mut self,
        pairs: &[(Node, Node)],
        path: &str,
        out: &mut Vec<(Resolved, Yv, bool)>,
        explicit: bool,
    ) -> Result<(), DecodeError> {
        for (k, v) in pairs {
            if is_merge(k) {
                let sources: Vec<&Node> = match v {
                    Node::Map(_) => vec![v],
                    Node::Seq(items) if items.iter().all(|i| matches!(i, Node::Map(_))) => {
                        items.iter().rev().collect()
                    }
                    _ => {
                        return Err(DecodeError::Shape(
                            "map merge requires map or sequence of maps as the value".into(),
                        ));
                    }
                };
                for src in sources {
                    if let Node::Map(p) = src {
                        self.mapping(p, path, out, false)?;
                    }
                }
                continue;
            }
            let key = match self.value(k, path)? {
                Yv::Scalar(r) => r,
                _ => return Err(DecodeError::Shape(format!("invalid map key at {path:?}"))),
            };
            let child = join_key(path, &key_text(&key));
            let value = self.value(v, &child)?;
            self.insert(out, key, value, path, explicit);
        }
        Ok(())
    }
}

/// JSON as `encoding/json` would print it (numbers kept as their text).
#[derive(Debug, Clone, PartialEq)]
enum Jv {
    Null,
    Bool(bool),
    Num(String),
    Str(String),
    Arr(Vec<Jv>),
    Obj(BTreeMap<String, Jv>),
}

/// Go's case folding of JSON names: ASCII letters, plus the two non-ASCII
/// letters that fold onto ASCII ones (long s, Kelvin sign).
fn fold(c: char) -> char {
    match c {
        '\u{17f}' => 'S',
        '\u{212a}' => 'K',
        c => c.to_ascii_uppercase(),
    }
}

pub(crate) fn equal_fold(a: &str, b: &str) -> bool {
    a.chars().map(fold).eq(b.chars().map(fold))
}

/// The field a JSON key goes to: the exact name, else the first field that
/// matches ignoring case.
fn find_field<'f>(fields: &'f [Field], key: &str) -> Option<&'f Field> {
    fields
        .iter()
        .find(|f| f.name == key)
        .or_else(|| fields.iter().find(|f| equal_fold(f.name, key)))
}

/// `convertToJSONableObject` of `sigs.k8s.io/yaml`, then the number
/// formatting of `json.Marshal`.
fn to_json(v: &Yv, target: Option<&Shape>) -> Result<Jv, DecodeError> {
    Ok(match v {
        Yv::Scalar(r) => {
            if target == Some(&Shape::Str) {
                let s = match r {
                    Resolved::Int(i) => Some(i.to_string()),
                    Resolved::Uint(u) => Some(u.to_string()),
                    Resolved::Float(f) => Some(format_g32(*f)),
                    Resolved::Bool(b) => Some(b.to_string()),
                    _ => None,
                };
                if let Some(s) = s {
                    return Ok(Jv::Str(s));
                }
            }
            match r {
                Resolved::Null => Jv::Null,
                Resolved::Bool(b) => Jv::Bool(*b),
                Resolved::Int(i) => Jv::Num(i.to_string()),
                Resolved::Uint(u) => Jv::Num(u.to_string()),
                Resolved::Float(f) => Jv::Num(format_json_float(*f).ok_or_else(|| {
                    DecodeError::Shape(format!("json: unsupported value: {}", format_g32(*f)))
                })?),
                Resolved::Str(s) => Jv::Str(s.clone()),
            }
        }
        Yv::Seq(items) => {
            let elem = match target {
                Some(Shape::Seq(e)) => Some(*e),
                _ => None,
            };
            Jv::Arr(
                items
                    .iter()
                    .map(|i| to_json(i, elem))
                    .collect::<Result<_, _>>()?,
            )
        }
        Yv::Map(pairs) => {
            let mut obj = BTreeMap::new();
            for (k, v) in pairs {
                let key = match k {
                    Resolved::Str(s) => s.clone(),
                    Resolved::Int(i) => i.to_string(),
                    Resolved::Float(f) => match format_g32(*f).as_str() {
                        "+Inf" => ".inf".into(),
                        "-Inf" => "-.inf".into(),
                        "NaN" => ".nan".into(),
                        s => s.to_owned(),
                    },
                    Resolved::Bool(b) => b.to_string(),
                    Resolved::Uint(_) | Resolved::Null => {
                        return Err(DecodeError::Shape(format!(
                            "unsupported map key {:?}",
                            key_text(k)
                        )));
                    }
                };
                let sub = match target {
                    Some(Shape::Struct(fields)) => find_field(fields, &key).map(|f| &f.shape),
                    Some(Shape::Map(e)) => Some(*e),
                    _ => None,
                };
                obj.insert(key, to_json(v, sub)?);
            }
            Jv::Obj(obj)
        }
    })
}

fn type_error(what: &str, shape: &Shape, path: &str) -> DecodeError {
    let ty = match shape {
        Shape::Str => "string".to_owned(),
        Shape::Bool => "bool".to_owned(),
        Shape::Int(b) => format!("int{b}"),
        Shape::Uint(b) => format!("uint{b}"),
        Shape::Float(b) => format!("float{b}"),
        Shape::Seq(_) => "a list".to_owned(),
        Shape::Map(_) | Shape::Struct(_) => "a mapping".to_owned(),
        Shape::Any => "any".to_owned(),
    };
    let at = if path.is_empty() {
        String::new()
    } else {
        format!(" (at {path})")
    };
    DecodeError::Shape(format!("cannot unmarshal {what} into {ty}{at}"))
}

/// `encoding/json` decoding of `v` into `slot`, which holds the current
/// value of a Go variable of type `shape`.
#[allow(clippy::too_many_lines)]
fn decode(
    v: &Jv,
    shape: &Shape,
    slot: &mut Value,
    path: &str,
    notices: &mut Vec<Notice>,
) -> Result<(), DecodeError> {
    match (v, shape) {
        (Jv::Null, Shape::Seq(_) | Shape::Map(_) | Shape::Any) => *slot = shape.zero(),
        (Jv::Null, _) => {}
        (Jv::Bool(b), Shape::Bool | Shape::Any) => *slot = Value::Bool(*b),
        (Jv::Num(t), Shape::Int(bits)) => {
            let n: i64 = t
                .parse()
                .ok()
                .filter(|n: &i64| {
                    *bits >= 64 || (*n >> (bits - 1)) == 0 || (*n >> (bits - 1)) == -1
                })
                .ok_or_else(|| type_error(&format!("number {t}"), shape, path))?;
            *slot = Value::from(n);
        }
        (Jv::Num(t), Shape::Uint(bits)) => {
            let n: u64 = t
                .parse()
                .ok()
                .filter(|n: &u64| *bits >= 64 || (*n >> bits) == 0)
                .filter(|_| !t.starts_with('+'))
                .ok_or_else(|| type_error(&format!("number {t}"), shape, path))?;
            *slot = Value::from(n);
        }
        (Jv::Num(t), Shape::Float(bits)) => {
            let f: f64 = t
                .parse()
                .ok()
                .filter(|f: &f64| *bits >= 64 || (*f as f32).is_finite())
                .ok_or_else(|| type_error(&format!("number {t}"), shape, path))?;
            *slot = Value::from(f);
        }
        (Jv::Num(t), Shape::Any) => {
            *slot = t.parse::<f64>().map(Value::from).unwrap_or(Value::Null);
        }
        (Jv::Str(s), Shape::Str | Shape::Any) => *slot = Value::String(s.clone()),
        (Jv::Arr(items), Shape::Seq(elem)) => {
            let mut cur = match std::mem::take(slot) {
                Value::Array(a) => a,
                _ => Vec::new(),
            };
            cur.truncate(items.len());
            for (i, item) in items.iter().enumerate() {
                if i >= cur.len() {
                    cur.push(elem.zero());
                }
                decode(item, elem, &mut cur[i], &format!("{path}[{i}]"), notices)?;
            }
            *slot = Value::Array(cur);
        }
        (Jv::Arr(items), Shape::Any) => {
            let mut out = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let mut v = Value::Null;
                decode(item, &Shape::Any, &mut v, &format!("{path}[{i}]"), notices)?;
                out.push(v);
            }
            *slot = Value::Array(out);
        }
        (Jv::Obj(obj), Shape::Struct(fields)) => {
            if !slot.is_object() {
                *slot = shape.zero();
            }
            let mut seen: Vec<&str> = Vec::new();
            for (k, v) in obj {
                let child = join_key(path, k);
                match find_field(fields, k) {
                    Some(f) => {
                        // `Path` and `path` both set the field: the later
                        // (in byte order) wins, as in Go.
                        if seen.contains(&f.name) {
                            notices.push(Notice::DuplicateKey {
                                path: child.clone(),
                            });
                        }
                        seen.push(f.name);
                        if let Some(map) = slot.as_object_mut() {
                            let field = map.entry(f.name).or_insert_with(|| f.shape.zero());
                            decode(v, &f.shape, field, &child, notices)?;
                        }
                    }
                    None => notices.push(Notice::UnknownKey { path: child }),
                }
            }
        }
        (Jv::Obj(obj), Shape::Map(elem)) => {
            if !slot.is_object() {
                *slot = shape.zero();
            }
            for (k, v) in obj {
                let mut e = elem.zero();
                decode(v, elem, &mut e, &join_key(path, k), notices)?;
                if let Some(map) = slot.as_object_mut() {
                    map.insert(k.clone(), e);
                }
            }
        }
        (Jv::Obj(obj), Shape::Any) => {
            let mut map = serde_json::Map::new();
            for (k, v) in obj {
                let mut e = Value::Null;
                decode(v, &Shape::Any, &mut e, &join_key(path, k), notices)?;
                map.insert(k.clone(), e);
            }
            *slot = Value::Object(map);
        }
        (other, _) => {
            let what = match other {
                Jv::Bool(_) => "bool".to_owned(),
                Jv::Num(t) => format!("number {t}"),
                Jv::Str(s) => format!("string {s:?}"),
                Jv::Arr(_) => "array".to_owned(),
                Jv::Obj(_) => "object".to_owned(),
                Jv::Null => "null".to_owned(),
            };
            return Err(type_error(&what, shape, path));
        }
    }
    Ok(())
}

/// [`decode_sigs`](super::decode_sigs) on JSON-like data: `start` is the
/// variable's value before decoding (e.g. `shape.zero()`).
///
/// # Errors
///
/// [`DecodeError`] where Go returns an error.
pub fn decode_sigs_value(
    text: &str,
    shape: &Shape,
    start: Value,
) -> Result<Decoded<Value>, DecodeError> {
    let mut notices = Vec::new();
    let mut value = start;
    let Some(node) = parse(text)? else {
        return Ok(Decoded { value, notices });
    };
    let yv = ToYv {
        notices: &mut notices,
    }
    .value(&node, "")?;
    let jv = to_json(&yv, Some(shape))?;
    // A top-level null leaves the variable as it was.
    if jv != Jv::Null {
        decode(&jv, shape, &mut value, "", &mut notices)?;
    }
    Ok(Decoded { value, notices })
}

#[cfg(test)]
mod tests;
