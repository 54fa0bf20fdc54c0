//! Input the Go plugins drop without a word (unknown or repeated keys,
//! unknown names): by default ours drop it too, with a warning that names
//! the pod, the container, the annotation and its value; in strict mode
//! (`-strict`, or `strict: true` in the plugin's configuration) it is an
//! error instead.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::goyaml::{
    DecodeError, Decoded, Field, Notice, Shape, decode_sigs_value, decode_v3_value,
};

/// Where a value came from, for warnings and errors.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    /// Pod name (empty for configurations).
    pub pod: &'a str,
    /// Container name (empty for pod-level input).
    pub container: &'a str,
    /// Annotation key (or `configuration`).
    pub annotation: &'a str,
    /// The value as given.
    pub value: &'a str,
}

/// Refused in strict mode: what Go would have dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "annotation {annotation:?}{target}: {what} (refused in strict mode; the Go plugin ignores it)"
)]
pub struct StrictError {
    /// The annotation key.
    pub annotation: String,
    /// ` of pod/container`, or empty.
    pub target: String,
    /// What was dropped.
    pub what: String,
}

impl Source<'_> {
    fn target(&self) -> String {
        match (self.pod.is_empty(), self.container.is_empty()) {
            (true, _) => String::new(),
            (false, true) => format!(" of pod {}", self.pod),
            (false, false) => format!(" of {}/{}", self.pod, self.container),
        }
    }

    /// Something Go drops silently: a warning naming the source, or with
    /// `strict` the error.
    ///
    /// # Errors
    ///
    /// [`StrictError`] when `strict`.
    pub fn dropped(&self, strict: bool, what: impl std::fmt::Display) -> Result<(), StrictError> {
        if strict {
            return Err(StrictError {
                annotation: self.annotation.to_owned(),
                target: self.target(),
                what: what.to_string(),
            });
        }
        tracing::warn!(
            pod = %self.pod,
            container = %self.container,
            annotation = %self.annotation,
            value = %self.value,
            "{what}; ignored, as the Go plugin does (-strict refuses it)"
        );
        Ok(())
    }

    /// [`Source::dropped`] for each decoding notice.
    ///
    /// # Errors
    ///
    /// The first notice as a [`StrictError`] when `strict`.
    pub fn notices(&self, strict: bool, notices: &[Notice]) -> Result<(), StrictError> {
        notices.iter().try_for_each(|n| self.dropped(strict, n))
    }
}

/// The strict setting of a running plugin: the `-strict` flag, overridden
/// by `strict:` in the runtime's configuration when given.
#[derive(Debug, Default)]
pub struct Strict {
    flag: bool,
    current: AtomicBool,
}

/// The `strict` key of a configuration, decoded as the plugins'
/// configurations are (`sigs.k8s.io/yaml` rules).
const STRICT_CONFIG: Shape = Shape::Struct(&[Field::new("strict", Shape::Bool)]);

impl Strict {
    /// The setting from the `-strict` flag.
    pub fn new(flag: bool) -> Self {
        Strict {
            flag,
            current: AtomicBool::new(flag),
        }
    }

    /// Whether input Go drops is refused.
    pub fn get(&self) -> bool {
        self.current.load(Ordering::Relaxed)
    }

    /// Applies the `strict:` key of a configuration read elsewhere (see
    /// [`crate::fence::read_config`]): its value when given, else the
    /// flag's.
    pub fn set(&self, config: Option<bool>) {
        self.current
            .store(config.unwrap_or(self.flag), Ordering::Relaxed);
    }

    /// Applies the runtime's configuration text of a plugin whose Go
    /// counterpart takes none: `strict: true|false` sets the mode (the
    /// flag's value when absent); anything else is ignored with a warning,
    /// as Go ignores the whole text.
    pub fn configure(&self, config: &str) {
        let mut strict = self.flag;
        if !config.trim().is_empty() {
            // Start from `null` to tell an absent key from `false`.
            let start = serde_json::json!({ "strict": null });
            match decode_sigs_value(config, &STRICT_CONFIG, start) {
                Ok(Decoded { value, notices }) => {
                    if let Some(b) = value.get("strict").and_then(serde_json::Value::as_bool) {
                        strict = b;
                    }
                    if !notices.is_empty() {
                        tracing::warn!(
                            "configuration: only `strict` is read, the rest is ignored (the Go plugin ignores its configuration)"
                        );
                    }
                }
                Err(e) => tracing::warn!(
                    error = %e,
                    "configuration ignored: not YAML with a `strict` key (the Go plugin ignores its configuration)"
                ),
            }
        }
        self.current.store(strict, Ordering::Relaxed);
    }
}

/// The `strict` key of a plugin's configuration `text`, when it has one:
/// read with `sigs.k8s.io/yaml` rules, or with yaml.v3's when `v3` (the
/// rules of the plugin's other keys). `None` when absent, or when the text
/// does not decode (the plugin's own decoding reports that). A plugin
/// whose configuration has other keys reads this first, so `strict: true`
/// applies to the rest of the same text, and lists `strict` among its
/// keys.
pub fn strict_key(text: &str, v3: bool) -> Option<bool> {
    let start = serde_json::json!({ "strict": null });
    let decoded = if v3 {
        decode_v3_value(text, &STRICT_CONFIG, start)
    } else {
        decode_sigs_value(text, &STRICT_CONFIG, start)
    };
    decoded
        .ok()?
        .value
        .get("strict")
        .and_then(serde_json::Value::as_bool)
}

/// Decodes an annotation value with `sigs.k8s.io/yaml` rules and reports
/// what Go would drop (see [`Source::notices`]).
///
/// # Errors
///
/// Go's decoding error, or [`StrictError`] as text when `strict`.
pub fn decode_annotation<T: serde::Serialize + serde::de::DeserializeOwned>(
    src: &Source<'_>,
    shape: &Shape,
    start: &T,
    strict: bool,
) -> Result<T, AnnotationError> {
    let d = crate::goyaml::decode_sigs(src.value, shape, start)
        .map_err(|e| AnnotationError::Decode(src.annotation.to_owned(), e))?;
    src.notices(strict, &d.notices)?;
    Ok(d.value)
}

/// Why an annotation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AnnotationError {
    /// Go fails it too.
    #[error("invalid annotation {0:?}: {1}")]
    Decode(String, #[source] DecodeError),
    /// Go drops it; refused in strict mode.
    #[error(transparent)]
    Strict(#[from] StrictError),
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn strict_from_flag_and_config() {
        let s = Strict::new(false);
        assert!(!s.get());
        s.configure("strict: true");
        assert!(s.get());
        s.configure("");
        assert!(!s.get());
        s.configure("strict: yes\nother: 1");
        assert!(s.get());
        s.configure("{not yaml");
        assert!(!s.get());
        let s = Strict::new(true);
        s.configure("strict: false");
        assert!(!s.get());
        s.configure("something: else");
        assert!(s.get());
    }

    #[test]
    fn strict_key_in_either_dialect() {
        assert_eq!(strict_key("strict: true\nother: 1", false), Some(true));
        assert_eq!(strict_key("strict: on", false), Some(true));
        assert_eq!(strict_key("strict: no", true), Some(false));
        assert_eq!(strict_key("other: 1", true), None);
        assert_eq!(strict_key("", false), None);
        assert_eq!(strict_key("{broken", false), None);
        // yaml.v3 refuses a repeated key: the plugin's decoding says so.
        assert_eq!(strict_key("strict: true\nstrict: false", true), None);
    }

    #[test]
    fn dropped_is_an_error_only_when_strict() {
        let src = Source {
            pod: "p",
            container: "c",
            annotation: "k",
            value: "v",
        };
        assert!(src.dropped(false, "x").is_ok());
        let e = src.dropped(true, "unknown key").unwrap_err();
        assert_eq!(
            e.to_string(),
            "annotation \"k\" of p/c: unknown key (refused in strict mode; the Go plugin ignores it)"
        );
    }
}
