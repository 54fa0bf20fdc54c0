//! Decoding YAML (and JSON) the way the Go samples do with
//! `sigs.k8s.io/yaml` + `encoding/json`: the document becomes JSON-like
//! data, object keys match struct fields **case-insensitively**, unknown
//! keys are ignored, missing ones take their zero value (use
//! `#[serde(default)]`), and integers with a leading `0` are octal (YAML
//! 1.1, e.g. `file_mode: 0666`).

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::goyaml::{MAX_DEPTH, MAX_INPUT_BYTES, MAX_NODES, MAX_TEXT_BYTES, excerpt};

/// Why a document could not be decoded; the message names the position
/// (YAML) or the field and the problem.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Not valid YAML.
    #[error("{0}")]
    Syntax(String),
    /// Valid YAML, but not the expected shape (field and problem).
    #[error("{0}")]
    Shape(String),
}

/// Parses a YAML document into JSON-like data. An empty (or blank)
/// document is `null`. Within the bounds of [`goyaml`](crate::goyaml)
/// (input size, nesting, nodes and scalar text, aliases counted as what
/// they expand to); messages quote no more than an excerpt of the text.
///
/// # Errors
///
/// [`DecodeError::Syntax`], also beyond a bound.
pub fn parse_yaml(text: &str) -> Result<Value, DecodeError> {
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    if text.len() > MAX_INPUT_BYTES {
        return Err(DecodeError::Syntax(format!(
            "document refused: more than {MAX_INPUT_BYTES} bytes of input"
        )));
    }
    let mut opts = serde_saphyr::Options::default();
    opts.legacy_octal_numbers = true;
    opts.with_snippet = false;
    let mut budget = serde_saphyr::Budget::default();
    budget.max_depth = MAX_DEPTH;
    budget.max_nodes = MAX_NODES;
    budget.max_total_scalar_bytes = MAX_TEXT_BYTES;
    budget.max_events = 4 * MAX_NODES;
    budget.max_aliases = MAX_NODES;
    budget.max_anchors = MAX_NODES;
    budget.max_recorded_anchor_events = MAX_NODES;
    budget.max_recorded_anchor_bytes = MAX_TEXT_BYTES;
    budget.max_documents = 1;
    opts.budget = Some(budget);
    serde_saphyr::from_str_with_options::<Value>(text, opts)
        .map_err(|e| DecodeError::Syntax(excerpt(&e.to_string(), 512).into_owned()))
}

/// Renames, in every object anywhere in `value`, a key that equals one of
/// `fields` ignoring ASCII case to that field's spelling (Go's
/// `encoding/json` matching). Other keys are left alone.
pub fn fold_keys(value: &mut Value, fields: &[&str]) {
    match value {
        Value::Array(items) => items.iter_mut().for_each(|v| fold_keys(v, fields)),
        Value::Object(map) => {
            let old = std::mem::take(map);
            let mut new = Map::with_capacity(old.len());
            for (k, mut v) in old {
                fold_keys(&mut v, fields);
                let key = match fields.iter().find(|f| f.eq_ignore_ascii_case(&k)) {
                    Some(f) if **f != k => {
                        // An exact match wins over a case-folded one.
                        if new.contains_key(*f) {
                            continue;
                        }
                        (*f).to_owned()
                    }
                    _ => k,
                };
                new.insert(key, v);
            }
            *map = new;
        }
        _ => {}
    }
}

/// Decodes a YAML document into `T`, with Go's key matching for the
/// struct field names listed in `fields` (see the module docs). An empty
/// document decodes as `null` (so `Option`/`Vec` targets give
/// `None`/empty, as Go leaves its value untouched).
///
/// # Errors
///
/// [`DecodeError`] naming the problem.
///
/// ```
/// #[derive(serde::Deserialize, Debug, PartialEq, Default)]
/// #[serde(default)]
/// struct Dev { path: String, major: i64, file_mode: u32 }
///
/// let v: Vec<Dev> = nri_sample_common::decode_yaml(
///     "- Path: /dev/null\n  major: 1\n  file_mode: 0666\n  extra: ignored\n",
///     &["path", "major", "file_mode"],
/// )?;
/// assert_eq!(v, vec![Dev { path: "/dev/null".into(), major: 1, file_mode: 0o666 }]);
/// # Ok::<(), nri_sample_common::DecodeError>(())
/// ```
pub fn decode_yaml<T: DeserializeOwned>(text: &str, fields: &[&str]) -> Result<T, DecodeError> {
    let mut value = parse_yaml(text)?;
    fold_keys(&mut value, fields);
    serde_json::from_value(value).map_err(|e| DecodeError::Shape(e.to_string()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn empty_is_null() {
        let v: Option<Vec<String>> = decode_yaml("  \n", &[]).unwrap();
        assert_eq!(v, None);
        let v: Vec<String> = decode_yaml("[]", &[]).unwrap();
        assert!(v.is_empty());
    }

    #[test]
    fn exact_key_wins() {
        let mut v = serde_json::json!({"Name": "a", "name": "b", "NAME": "c"});
        fold_keys(&mut v, &["name"]);
        assert_eq!(v, serde_json::json!({"name": "b"}));
    }

    #[test]
    fn errors_are_reported() {
        assert!(matches!(
            decode_yaml::<Vec<String>>("- a\n b: [", &[]),
            Err(DecodeError::Syntax(_))
        ));
        let e = decode_yaml::<Vec<String>>("a: 1", &[]).unwrap_err();
        assert!(matches!(e, DecodeError::Shape(_)), "{e}");
    }
}
