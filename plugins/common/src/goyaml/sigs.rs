//! `sigs.k8s.io/yaml.Unmarshal`: YAML 1.1 into Go's generic values
//! (`yaml.v2`), to JSON with scalars turned into strings where the target
//! field is a string, then `encoding/json` into the target.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use super::gofmt::{format_g32, format_json_float};
use super::limits::{MAX_EXCERPT_BYTES, Path, excerpt};
use super::resolve::{Resolved, Schema, resolve};
use super::tree::{CORE_TAG, Node, Scalar, parse};
use super::{DecodeError, Decoded, Field, Notice, Shape, key_text};

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

/// A key as Go's `==` on interface values compares it, for hashing: the
/// dynamic type and the value; `-0.0` is `0.0`; NaN equals nothing, so it
/// has no identity (`None`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum KeyId {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(u64),
    Str(String),
}

impl KeyId {
    fn of(k: &Resolved) -> Option<KeyId> {
        Some(match k {
            Resolved::Null => KeyId::Null,
            Resolved::Bool(b) => KeyId::Bool(*b),
            Resolved::Int(i) => KeyId::Int(*i),
            Resolved::Uint(u) => KeyId::Uint(*u),
            Resolved::Float(f) if f.is_nan() => return None,
            Resolved::Float(f) if *f == 0.0 => KeyId::Float(0),
            Resolved::Float(f) => KeyId::Float(f.to_bits()),
            Resolved::Str(s) => KeyId::Str(s.clone()),
        })
    }
}

/// The entries of one mapping being decoded, with an index by key (so a
/// mapping of n keys costs n lookups, not n² comparisons).
#[derive(Default)]
struct Entries {
    /// Key, value, and whether the key was written in this mapping (not
    /// merged in with `<<`).
    list: Vec<(Resolved, Yv, bool)>,
    index: HashMap<KeyId, usize>,
}

struct ToYv<'a> {
    notices: &'a mut Vec<Notice>,
}

impl ToYv<'_> {
    fn value(&mut self, n: &Node, path: &Path<'_>) -> Result<Yv, DecodeError> {
        Ok(match n {
            Node::Scalar(s) => Yv::Scalar(
                resolve(Schema::V2, &s.value, s.plain, s.tag.as_deref())
                    .map_err(|e| DecodeError::Shape(format!("line {}: {e}", s.line)))?,
            ),
            Node::Seq(items) => Yv::Seq(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| self.value(v, &path.index(i)))
                    .collect::<Result<_, _>>()?,
            ),
            Node::Map(pairs) => {
                let mut out = Entries::default();
                self.mapping(pairs, path, &mut out, true)?;
                Yv::Map(out.list.into_iter().map(|(k, v, _)| (k, v)).collect())
            }
        })
    }

    /// Sets `k` in `out`. `explicit`: written in this mapping (not merged
    /// in with `<<`); an explicit key set twice is a duplicate.
    fn insert(&mut self, out: &mut Entries, k: Resolved, v: Yv, path: &Path<'_>, explicit: bool) {
        let id = KeyId::of(&k);
        match id.as_ref().and_then(|id| out.index.get(id)) {
            Some(&i) => {
                let slot = &mut out.list[i];
                if explicit && slot.2 {
                    self.notices.push(Notice::DuplicateKey {
                        path: Path::Resolved(path, &k).render(),
                    });
                }
                slot.1 = v;
                slot.2 |= explicit;
            }
            None => {
                if let Some(id) = id {
                    out.index.insert(id, out.list.len());
                }
                out.list.push((k, v, explicit));
            }
        }
    }

    /// The pairs of a mapping into `out`, merge keys (`<<`) expanded where
    /// they stand, as `yaml.v2` does.
    fn mapping(
        &mut self,
        pairs: &[(Node, Node)],
        path: &Path<'_>,
        out: &mut Entries,
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
                _ => {
                    return Err(DecodeError::Shape(format!(
                        "invalid map key at {:?}",
                        path.render()
                    )));
                }
            };
            let value = self.value(v, &Path::Resolved(path, &key))?;
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

/// The field a JSON key goes to (by its position): the exact name, else
/// the first field that matches ignoring case.
fn find_field(fields: &[Field], key: &str) -> Option<usize> {
    fields
        .iter()
        .position(|f| f.name == key)
        .or_else(|| fields.iter().position(|f| equal_fold(f.name, key)))
}

/// A JSON object key from a YAML key, as `sigs.k8s.io/yaml` writes it.
fn json_key(k: &Resolved) -> Result<String, DecodeError> {
    Ok(match k {
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
                excerpt(&key_text(k), MAX_EXCERPT_BYTES)
            )));
        }
    })
}

/// A scalar as `sigs.k8s.io/yaml` turns it into JSON; `to_string`: the Go
/// field is a string, so numbers and booleans become their text.
fn scalar_json(r: &Resolved, to_string: bool) -> Result<Jv, DecodeError> {
    if to_string {
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
    Ok(match r {
        Resolved::Null => Jv::Null,
        Resolved::Bool(b) => Jv::Bool(*b),
        Resolved::Int(i) => Jv::Num(i.to_string()),
        Resolved::Uint(u) => Jv::Num(u.to_string()),
        Resolved::Float(f) => Jv::Num(format_json_float(*f).ok_or_else(|| {
            DecodeError::Shape(format!("json: unsupported value: {}", format_g32(*f)))
        })?),
        Resolved::Str(s) => Jv::Str(s.clone()),
    })
}

/// `convertToJSONableObject` of `sigs.k8s.io/yaml`, then the number
/// formatting of `json.Marshal`.
fn to_json(v: &Yv, target: Option<&Shape>) -> Result<Jv, DecodeError> {
    Ok(match v {
        Yv::Scalar(r) => scalar_json(r, target == Some(&Shape::Str))?,
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
                let key = json_key(k)?;
                let sub = match target {
                    Some(Shape::Struct(fields)) => {
                        find_field(fields, &key).map(|i| &fields[i].shape)
                    }
                    Some(Shape::Map(e)) => Some(*e),
                    _ => None,
                };
                obj.insert(key, to_json(v, sub)?);
            }
            Jv::Obj(obj)
        }
    })
}

fn type_error(what: &str, shape: &Shape, path: &Path<'_>) -> DecodeError {
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
    let at = match path {
        Path::Root => String::new(),
        p => format!(" (at {})", p.render()),
    };
    DecodeError::Shape(format!("cannot unmarshal {what} into {ty}{at}"))
}

/// What a JSON value is, for an error.
fn describe(v: &Jv) -> String {
    match v {
        Jv::Bool(_) => "bool".to_owned(),
        Jv::Num(t) => format!("number {}", excerpt(t, MAX_EXCERPT_BYTES)),
        Jv::Str(s) => format!("string {:?}", excerpt(s, MAX_EXCERPT_BYTES)),
        Jv::Arr(_) => "array".to_owned(),
        Jv::Obj(_) => "object".to_owned(),
        Jv::Null => "null".to_owned(),
    }
}

/// `encoding/json` decoding of a number into a Go number of type `shape`.
fn number(t: &str, shape: &Shape, path: &Path<'_>) -> Result<Value, DecodeError> {
    let bad = || type_error(&describe(&Jv::Num(t.to_owned())), shape, path);
    Ok(match shape {
        Shape::Int(bits) => Value::from(
            t.parse::<i64>()
                .ok()
                .filter(|n| *bits >= 64 || (*n >> (bits - 1)) == 0 || (*n >> (bits - 1)) == -1)
                .ok_or_else(bad)?,
        ),
        Shape::Uint(bits) => Value::from(
            t.parse::<u64>()
                .ok()
                .filter(|n| *bits >= 64 || (*n >> bits) == 0)
                .filter(|_| !t.starts_with('+'))
                .ok_or_else(bad)?,
        ),
        Shape::Float(bits) => Value::from(
            t.parse::<f64>()
                .ok()
                .filter(|f| *bits >= 64 || (*f as f32).is_finite())
                .ok_or_else(bad)?,
        ),
        _ => t.parse::<f64>().map(Value::from).unwrap_or(Value::Null),
    })
}

/// `encoding/json` decoding of an object into the struct in `slot`.
fn decode_struct(
    obj: &BTreeMap<String, Jv>,
    fields: &[Field],
    slot: &mut Value,
    path: &Path<'_>,
    notices: &mut Vec<Notice>,
) -> Result<(), DecodeError> {
    let mut seen = vec![false; fields.len()];
    for (k, v) in obj {
        let child = path.key(k);
        let Some(i) = find_field(fields, k) else {
            notices.push(Notice::UnknownKey {
                path: child.render(),
            });
            continue;
        };
        let f = &fields[i];
        // `Path` and `path` both set the field: the later (in byte order)
        // wins, as in Go.
        if seen[i] {
            notices.push(Notice::DuplicateKey {
                path: child.render(),
            });
        }
        seen[i] = true;
        if let Some(map) = slot.as_object_mut() {
            let field = map.entry(f.name).or_insert_with(|| f.shape.zero());
            decode(v, &f.shape, field, &child, notices)?;
        }
    }
    Ok(())
}

/// `encoding/json` decoding of `v` into `slot`, which holds the current
/// value of a Go variable of type `shape`.
fn decode(
    v: &Jv,
    shape: &Shape,
    slot: &mut Value,
    path: &Path<'_>,
    notices: &mut Vec<Notice>,
) -> Result<(), DecodeError> {
    match (v, shape) {
        (Jv::Null, Shape::Seq(_) | Shape::Map(_) | Shape::Any) => *slot = shape.zero(),
        (Jv::Null, _) => {}
        (Jv::Bool(b), Shape::Bool | Shape::Any) => *slot = Value::Bool(*b),
        (Jv::Num(t), Shape::Int(_) | Shape::Uint(_) | Shape::Float(_) | Shape::Any) => {
            *slot = number(t, shape, path)?;
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
                decode(item, elem, &mut cur[i], &path.index(i), notices)?;
            }
            *slot = Value::Array(cur);
        }
        (Jv::Arr(items), Shape::Any) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let mut v = Value::Null;
                decode(item, &Shape::Any, &mut v, &path.index(i), notices)?;
                out.push(v);
            }
            *slot = Value::Array(out);
        }
        (Jv::Obj(obj), Shape::Struct(fields)) => {
            if !slot.is_object() {
                *slot = shape.zero();
            }
            decode_struct(obj, fields, slot, path, notices)?;
        }
        (Jv::Obj(obj), Shape::Map(elem)) => {
            if !slot.is_object() {
                *slot = shape.zero();
            }
            for (k, v) in obj {
                let mut e = elem.zero();
                decode(v, elem, &mut e, &path.key(k), notices)?;
                if let Some(map) = slot.as_object_mut() {
                    map.insert(k.clone(), e);
                }
            }
        }
        (Jv::Obj(obj), Shape::Any) => {
            let mut map = serde_json::Map::new();
            for (k, v) in obj {
                let mut e = Value::Null;
                decode(v, &Shape::Any, &mut e, &path.key(k), notices)?;
                map.insert(k.clone(), e);
            }
            *slot = Value::Object(map);
        }
        (other, _) => return Err(type_error(&describe(other), shape, path)),
    }
    Ok(())
}

/// [`decode_sigs`](super::decode_sigs) on JSON-like data: `start` is the
/// variable's value before decoding (e.g. `shape.zero()`).
///
/// # Errors
///
/// [`DecodeError`] where Go returns an error, and
/// [`DecodeError::Limit`] beyond the bounds of decoding (see the module
/// docs).
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
    // Each stage is dropped once the next is built: at most two copies of
    // the document are held at a time.
    let yv = ToYv {
        notices: &mut notices,
    }
    .value(&node, &Path::Root)?;
    drop(node);
    let jv = to_json(&yv, Some(shape))?;
    drop(yv);
    // A top-level null leaves the variable as it was.
    if jv != Jv::Null {
        decode(&jv, shape, &mut value, &Path::Root, &mut notices)?;
    }
    Ok(Decoded { value, notices })
}

#[cfg(test)]
mod tests;
