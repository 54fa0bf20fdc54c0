//! Input the Go plugins drop without a word (unknown or repeated keys,
//! unknown names): by default ours drop it too, with one warning per
//! annotation that names the pod, the container, the annotation, the
//! first few things dropped (and how many in all) and an excerpt of the
//! value; in strict mode (`-strict`, or `strict: true` in the plugin's
//! configuration) it is an error instead. A warning is at most
//! [`MAX_LOG_BYTES_PER_ANNOTATION`] bytes, however large the annotation
//! and however many things it drops.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::goyaml::{
    DecodeError, Decoded, Field, MAX_EXCERPT_BYTES, Notice, Shape, decode_sigs_value,
    decode_v3_value, excerpt,
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

/// Things listed by name in one warning; the rest are counted.
pub const MAX_LISTED: usize = 4;
/// Most bytes of log one annotation can cause (its warning, its summary of
/// what was injected, a refusal): names, values and lists in a log line
/// are cut to fit (see [`excerpt`]).
pub const MAX_LOG_BYTES_PER_ANNOTATION: usize = 4096;
/// Longest excerpt of a name (pod, container, annotation key) in a log
/// line.
const MAX_NAME_BYTES: usize = 256;

impl Source<'_> {
    fn target(&self) -> String {
        match (self.pod.is_empty(), self.container.is_empty()) {
            (true, _) => String::new(),
            (false, true) => format!(" of pod {}", excerpt(self.pod, MAX_NAME_BYTES)),
            (false, false) => format!(
                " of {}/{}",
                excerpt(self.pod, MAX_NAME_BYTES),
                excerpt(self.container, MAX_NAME_BYTES)
            ),
        }
    }

    fn refuse(&self, what: &str) -> StrictError {
        StrictError {
            annotation: excerpt(self.annotation, MAX_NAME_BYTES).into_owned(),
            target: self.target(),
            what: excerpt(what, MAX_EXCERPT_BYTES * 2).into_owned(),
        }
    }

    /// One warning for this annotation: what was dropped (`listed`, cut to
    /// fit, and how many in all) and an excerpt of the value.
    fn warn(&self, count: usize, listed: &[String]) {
        let mut what = listed.join("; ");
        if count > listed.len() {
            what.push_str(&format!("; and {} more", count - listed.len()));
        }
        tracing::warn!(
            pod = %excerpt(self.pod, MAX_NAME_BYTES),
            container = %excerpt(self.container, MAX_NAME_BYTES),
            annotation = %excerpt(self.annotation, MAX_NAME_BYTES),
            value = ?excerpt(self.value, MAX_EXCERPT_BYTES),
            dropped = count,
            "{what}; ignored, as the Go plugin does (-strict refuses it)"
        );
    }

    /// Something Go drops silently: a warning naming the source (an
    /// excerpt of the value), or with `strict` the error. For several
    /// things of one annotation use [`Source::drops`], which warns once.
    ///
    /// # Errors
    ///
    /// [`StrictError`] when `strict`.
    pub fn dropped(&self, strict: bool, what: impl std::fmt::Display) -> Result<(), StrictError> {
        let what = what.to_string();
        if strict {
            return Err(self.refuse(&what));
        }
        self.warn(1, &[excerpt(&what, MAX_EXCERPT_BYTES * 2).into_owned()]);
        Ok(())
    }

    /// [`Source::dropped`] for each decoding notice, in one warning.
    ///
    /// # Errors
    ///
    /// The first notice as a [`StrictError`] when `strict`.
    pub fn notices(&self, strict: bool, notices: &[Notice]) -> Result<(), StrictError> {
        let mut d = self.drops(strict);
        notices.iter().try_for_each(|n| d.push(n))
    }

    /// A collector of what this annotation drops: one warning when it is
    /// dropped, listing the first [`MAX_LISTED`] things and counting the
    /// rest; with `strict`, the first thing pushed is the error.
    pub fn drops(&self, strict: bool) -> Drops<'_> {
        Drops {
            src: self,
            strict,
            listed: Vec::new(),
            count: 0,
        }
    }
}

/// What one annotation drops, warned about once (see [`Source::drops`]).
#[derive(Debug)]
pub struct Drops<'a> {
    src: &'a Source<'a>,
    strict: bool,
    listed: Vec<String>,
    count: usize,
}

impl Drops<'_> {
    /// One more thing dropped.
    ///
    /// # Errors
    ///
    /// [`StrictError`] when strict.
    pub fn push(&mut self, what: impl std::fmt::Display) -> Result<(), StrictError> {
        let what = what.to_string();
        if self.strict {
            return Err(self.src.refuse(&what));
        }
        self.count += 1;
        if self.listed.len() < MAX_LISTED {
            self.listed
                .push(excerpt(&what, MAX_EXCERPT_BYTES * 2).into_owned());
        }
        Ok(())
    }
}

impl Drop for Drops<'_> {
    fn drop(&mut self) {
        if self.count > 0 {
            self.src.warn(self.count, &self.listed);
        }
    }
}

/// Longest [`listing`].
pub const MAX_LISTING_BYTES: usize = 1024;

/// `items` joined with `, `, cut at [`MAX_LISTING_BYTES`] (with how many
/// were left out): what a plugin logs of the values it injected from one
/// annotation, in one line, however many there are.
///
/// ```
/// use nri_sample_common::listing;
///
/// assert_eq!(listing(["a", "b"]), "a, b");
/// let many = listing((0..10_000).map(|i| i.to_string()));
/// assert!(many.len() < 1100 && many.ends_with("more)"), "{many}");
/// ```
pub fn listing<T: std::fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    let mut out = String::new();
    let mut left = 0usize;
    for item in items {
        if left > 0 || out.len() >= MAX_LISTING_BYTES {
            left += 1;
            continue;
        }
        if !out.is_empty() {
            out.push_str(", ");
        }
        let text = item.to_string();
        let room = MAX_LISTING_BYTES.saturating_sub(out.len()).max(16);
        out.push_str(&excerpt(&text, room));
    }
    if left > 0 {
        out.push_str(&format!(" (and {left} more)"));
    }
    out
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
    let d = crate::goyaml::decode_sigs(src.value, shape, start).map_err(|e| {
        AnnotationError::Decode(excerpt(src.annotation, MAX_NAME_BYTES).into_owned(), e)
    })?;
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
