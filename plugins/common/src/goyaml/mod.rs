//! Reading YAML exactly as the Go sample plugins do.
//!
//! Upstream's samples decode annotations and configurations with one of two
//! Go libraries, and an operator's pod specs depend on the details:
//!
//! - [`decode_sigs`]: `sigs.k8s.io/yaml` (device-injector, ulimit-adjuster,
//!   network-device-injector, logger, template). The document is read with
//!   YAML 1.1 rules (`yes`/`on` are booleans, `0666` is octal), converted
//!   to JSON, where a number or boolean is turned into a string when the Go
//!   field is a string (`256` -> `"256"`, `on` -> `"true"`, `1.0` -> `"1"`),
//!   then decoded with Go's `encoding/json`: keys match field names
//!   case-insensitively, unknown keys are ignored, a float with no fraction
//!   fits an integer field (`1.0`, `1e3`), a string never fits a number,
//!   duplicate keys keep the last value.
//! - [`decode_v3`]: `go.yaml.in/yaml/v3` (the default validator): YAML 1.2
//!   scalars, exact key names, duplicate keys are an error, any scalar
//!   decodes into a string as written, a boolean field also takes
//!   `yes`/`on`/`y` and `no`/`off`/`n`.
//!
//! The target Go type is described by a [`Shape`]; the result is JSON-like
//! data with the shape's field names, ready for `serde` into a Rust struct
//! whose fields carry the Go JSON names. What Go drops silently (unknown
//! keys, overwritten duplicates) is reported as [`Notice`]s, so a plugin
//! can warn about it or, when strict, refuse it.
//!
//! # Bounds
//!
//! Annotations are written by anyone who can create a pod, so decoding
//! one has a bounded cost whatever its text (Go's libraries have none of
//! these bounds): at most [`MAX_INPUT_BYTES`] of input (refused before
//! parsing), [`MAX_DEPTH`] levels of nesting, [`MAX_NODES`] nodes and
//! [`MAX_TEXT_BYTES`] of scalar text built, an alias counted as what it
//! expands to and an anchor as the copy kept of its node. Every step is
//! linear in what it reads (no pairwise comparison of map keys), so the
//! time is bounded too. Messages keep at most [`MAX_ERRORS`] errors, and
//! quote at most [`MAX_EXCERPT_BYTES`] of a value and [`MAX_PATH_BYTES`] of
//! a key path. Going over a bound is [`DecodeError::Limit`].

mod gofmt;
mod limits;
mod resolve;
mod sigs;
mod tree;
mod v3;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use limits::{
    MAX_DEPTH, MAX_ERRORS, MAX_EXCERPT_BYTES, MAX_INPUT_BYTES, MAX_NODES, MAX_PATH_BYTES,
    MAX_TEXT_BYTES, excerpt,
};
pub use sigs::decode_sigs_value;
pub use v3::decode_v3_value;

/// Why a document could not be decoded, in the terms of Go's error (Go
/// fails the same input).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Not YAML.
    #[error("{0}")]
    Syntax(String),
    /// Beyond one of the bounds of decoding (see the module docs); Go has
    /// none of these, so it may decode what is refused here.
    #[error("document refused: more than {limit} {what}")]
    Limit {
        /// What was counted (`bytes of input`, `nodes (aliases expanded)`,
        /// ...).
        what: &'static str,
        /// Its bound.
        limit: usize,
    },
    /// YAML, but not something Go can decode into the target type.
    #[error("{0}")]
    Shape(String),
}

/// The Go type a document is decoded into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Shape {
    /// `string`.
    Str,
    /// `bool`.
    Bool,
    /// A signed integer of so many bits (`int64`: 64).
    Int(u8),
    /// An unsigned integer of so many bits (`uint32`: 32).
    Uint(u8),
    /// A float of so many bits.
    Float(u8),
    /// A slice.
    Seq(&'static Shape),
    /// A map with string keys.
    Map(&'static Shape),
    /// A struct, by its JSON (or YAML) field names.
    Struct(&'static [Field]),
    /// `interface{}`.
    Any,
}

/// A struct field of a [`Shape::Struct`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// Its JSON (sigs.k8s.io/yaml) or YAML (yaml.v3) name.
    pub name: &'static str,
    /// Its type.
    pub shape: Shape,
}

impl Field {
    /// A field.
    pub const fn new(name: &'static str, shape: Shape) -> Field {
        Field { name, shape }
    }
}

impl Shape {
    /// Go's zero value of this type as JSON-like data (`""`, `0`, empty
    /// list or map, struct of zero fields, `null`).
    pub fn zero(&self) -> Value {
        match self {
            Shape::Str => Value::String(String::new()),
            Shape::Bool => Value::Bool(false),
            Shape::Int(_) | Shape::Uint(_) => Value::from(0),
            Shape::Float(_) => Value::from(0.0),
            Shape::Seq(_) => Value::Array(Vec::new()),
            Shape::Map(_) => Value::Object(serde_json::Map::new()),
            Shape::Struct(fields) => Value::Object(
                fields
                    .iter()
                    .map(|f| (f.name.to_owned(), f.shape.zero()))
                    .collect(),
            ),
            Shape::Any => Value::Null,
        }
    }
}

/// Something Go drops without a word: worth a warning, an error when strict.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Notice {
    /// A key that matches no field is ignored (`path` names it, e.g.
    /// `[0].majr`).
    UnknownKey {
        /// Where.
        path: String,
    },
    /// A key given twice: the earlier value is dropped.
    DuplicateKey {
        /// Where.
        path: String,
    },
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Notice::UnknownKey { path } => write!(f, "unknown key {path:?} ignored"),
            Notice::DuplicateKey { path } => {
                write!(f, "duplicate key {path:?}: the earlier value is ignored")
            }
        }
    }
}

/// A decoded value and what Go would have dropped silently on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded<T> {
    /// The value.
    pub value: T,
    /// Dropped keys and values.
    pub notices: Vec<Notice>,
}

fn typed<T: DeserializeOwned>(d: Decoded<Value>) -> Result<Decoded<T>, DecodeError> {
    let value = serde_json::from_value(d.value).map_err(|e| DecodeError::Shape(e.to_string()))?;
    Ok(Decoded {
        value,
        notices: d.notices,
    })
}

fn initial<T: Serialize>(start: &T) -> Result<Value, DecodeError> {
    serde_json::to_value(start).map_err(|e| DecodeError::Shape(e.to_string()))
}

/// Decodes `text` into `start` (a Go variable that already holds a value:
/// fields absent from the document keep theirs) as Go's
/// `sigs.k8s.io/yaml.Unmarshal` does (see the module docs). `T`'s serde
/// field names must be `shape`'s.
///
/// # Errors
///
/// [`DecodeError`] where Go returns an error.
///
/// ```
/// use nri_sample_common::goyaml::{decode_sigs, Field, Shape};
///
/// #[derive(serde::Deserialize, serde::Serialize, Default, Debug, PartialEq)]
/// #[serde(default)]
/// struct Limit { r#type: String, hard: u64, soft: u64 }
/// const LIMIT: Shape = Shape::Struct(&[
///     Field::new("type", Shape::Str),
///     Field::new("hard", Shape::Uint(64)),
///     Field::new("soft", Shape::Uint(64)),
/// ]);
/// const LIMITS: Shape = Shape::Seq(&LIMIT);
///
/// let d = decode_sigs("- {Type: nofile, hard: 4096.0, soft: 1e3, extra: 1}", &LIMITS, &Vec::<Limit>::new())?;
/// assert_eq!(d.value, vec![Limit { r#type: "nofile".into(), hard: 4096, soft: 1000 }]);
/// assert_eq!(d.notices.len(), 1); // `extra` is ignored, as in Go
/// assert!(decode_sigs::<Vec<Limit>>("- {hard: 1.5}", &LIMITS, &Vec::new()).is_err());
/// # Ok::<(), nri_sample_common::goyaml::DecodeError>(())
/// ```
pub fn decode_sigs<T: Serialize + DeserializeOwned>(
    text: &str,
    shape: &Shape,
    start: &T,
) -> Result<Decoded<T>, DecodeError> {
    typed(decode_sigs_value(text, shape, initial(start)?)?)
}

/// Decodes `text` into `start` as Go's `go.yaml.in/yaml/v3.Unmarshal`
/// does (see the module docs). `T`'s serde field names must be `shape`'s.
///
/// # Errors
///
/// [`DecodeError`] where Go returns an error.
pub fn decode_v3<T: Serialize + DeserializeOwned>(
    text: &str,
    shape: &Shape,
    start: &T,
) -> Result<Decoded<T>, DecodeError> {
    typed(decode_v3_value(text, shape, initial(start)?)?)
}

/// Whether `s`, written as a plain YAML scalar, reads back as the string
/// `s` with Go's `yaml.v2` (YAML 1.1) rules, i.e. is not a number, boolean
/// (`yes`, `on`, ...) or null.
pub fn plain_str_is_string(s: &str) -> bool {
    matches!(
        resolve::resolve_plain(resolve::Schema::V2, s),
        resolve::Resolved::Str(_)
    )
}

/// A YAML key's text in a path.
fn key_text(k: &resolve::Resolved) -> String {
    use resolve::Resolved;
    match k {
        Resolved::Str(s) => s.clone(),
        Resolved::Int(i) => i.to_string(),
        Resolved::Uint(u) => u.to_string(),
        Resolved::Float(f) => format!("{f}"),
        Resolved::Bool(b) => b.to_string(),
        Resolved::Null => "null".into(),
    }
}
