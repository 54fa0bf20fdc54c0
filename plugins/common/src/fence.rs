//! Allow-lists an operator puts around the injecting plugins
//! (device-injector, network-device-injector, ulimit-adjuster,
//! hook-injector): which pods may use the plugin at all, and which values
//! it may inject for them.
//!
//! The upstream Go plugins inject whatever a pod's annotations ask for, so
//! any pod that can set annotations gets host devices, host mounts,
//! sysctls, network interfaces, rlimits or hooks. A plugin's configuration
//! can carry an `allow` section; every list in it is a fence, and a list
//! that is absent leaves that setting as upstream has it (anything goes),
//! so a plugin without an `allow` section is a drop-in for the Go one.
//!
//! The pieces shared by the plugins are here:
//!
//! - [`Glob`] and [`Globs`]: names with `*` wildcards (namespaces,
//!   interface names, CDI device names, hook paths);
//! - [`Prefixes`]: path-like names allowed by a component prefix (mount
//!   sources, hook paths, sysctls); a path with a `..` component is
//!   refused outright (the runtime resolves symbolic links before `..`,
//!   so no lexical clean-up can say where it leads), a sysctl name is
//!   compared in either spelling (`.` or `/`);
//! - [`Refused`]: the error naming the pod, the annotation, the value and
//!   the rule, logged when made;
//! - [`read_config`]: a plugin configuration (`strict` and `allow`) read
//!   with the Go plugins' YAML rules, where a mistake in `allow` is an
//!   error rather than a fence silently left open;
//! - [`Current`]: the configuration in force, replaced on each Configure.

use std::sync::{Arc, Mutex, PoisonError};

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::goyaml::{Decoded, MAX_EXCERPT_BYTES, Notice, Shape, decode_sigs_value, excerpt};

/// Longest pod or annotation name in a refusal.
const MAX_NAME_BYTES: usize = 512;
/// Longest rule in a refusal (the allow-list as written can be long).
const MAX_RULE_BYTES: usize = 1024;

/// The configuration key of the allow-lists.
pub const ALLOW_KEY: &str = "allow";

/// A name pattern: the exact name, or with `*` matching any run of
/// characters (`gpu-*`, `vendor.com/gpu=*`, `*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob(String);

impl Glob {
    /// The pattern `p`.
    pub fn new(p: impl Into<String>) -> Self {
        Glob(p.into())
    }

    /// Whether `name` matches.
    pub fn matches(&self, name: &str) -> bool {
        let mut parts = self.0.split('*');
        let first = parts.next().unwrap_or_default();
        let Some(mut rest) = name.strip_prefix(first) else {
            return false;
        };
        let parts: Vec<&str> = parts.collect();
        let Some((last, middle)) = parts.split_last() else {
            // No `*`: the whole name must be the pattern.
            return rest.is_empty();
        };
        for p in middle {
            match rest.find(p) {
                Some(i) => rest = &rest[i + p.len()..],
                None => return false,
            }
        }
        rest.len() >= last.len() && rest.ends_with(last)
    }
}

impl std::fmt::Display for Glob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// An allow-list of name patterns. `None` (the key absent): anything is
/// allowed, as upstream; an empty list allows nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Globs(Option<Vec<Glob>>);

impl Globs {
    /// The list from a configuration value (`None`: absent).
    pub fn new(list: Option<Vec<String>>) -> Self {
        Globs(list.map(|l| l.into_iter().map(Glob::new).collect()))
    }

    /// Whether a list is set.
    pub fn is_set(&self) -> bool {
        self.0.is_some()
    }

    /// Whether `name` is allowed.
    pub fn allows(&self, name: &str) -> bool {
        self.0
            .as_ref()
            .is_none_or(|l| l.iter().any(|g| g.matches(name)))
    }

    /// The list as written, for messages (`[a, b*]`).
    pub fn describe(&self) -> String {
        describe(self.0.iter().flatten())
    }
}

fn describe<T: std::fmt::Display>(items: impl Iterator<Item = T>) -> String {
    let items: Vec<String> = items.map(|i| i.to_string()).collect();
    format!("[{}]", items.join(", "))
}

/// Path-like names allowed by a component prefix: the entry itself and
/// everything under it (`/data` allows `/data` and `/data/x`, not
/// `/database`). Names and entries are split at their separators; empty
/// and `.` components of a path are dropped (`//data/./x` is `/data/x`),
/// a path with a `..` component is refused while a list is set (and is
/// not a valid entry): the runtime resolves `a/link/..` through the link,
/// so `/data/link/../x` may lead anywhere.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Prefixes {
    entries: Option<Vec<Vec<String>>>,
    written: Vec<String>,
    kind: PrefixKind,
}

/// How [`Prefixes`] splits names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum PrefixKind {
    /// File paths: `/` separates, empty and `.` components are dropped, a
    /// `..` component is refused; a relative name (a `tmpfs` source) must
    /// equal an entry.
    #[default]
    Path,
    /// Sysctl names: `.` and `/` both separate (the OCI runtime writes
    /// `/proc/sys/` followed by the name with `.` turned into `/`); an
    /// empty component (`a..b`, a leading or trailing separator) is
    /// refused.
    Sysctl,
}

impl Prefixes {
    /// The list from the configuration value of `key` (`None`: absent,
    /// anything goes).
    ///
    /// # Errors
    ///
    /// [`ConfigError::Value`] for an entry that cannot be compared (empty,
    /// or a sysctl name with an empty component).
    pub fn new(
        key: &str,
        list: Option<Vec<String>>,
        kind: PrefixKind,
    ) -> Result<Self, ConfigError> {
        let written = list.clone().unwrap_or_default();
        let entries = match list {
            None => None,
            Some(l) => Some(
                l.iter()
                    .enumerate()
                    .map(|(i, e)| {
                        split(e, kind).ok_or_else(|| ConfigError::Value {
                            key: format!("{key}[{i}]"),
                            reason: format!("{e:?} is not a name this list can hold"),
                        })
                    })
                    .collect::<Result<_, _>>()?,
            ),
        };
        Ok(Prefixes {
            entries,
            written,
            kind,
        })
    }

    /// Whether a list is set.
    pub fn is_set(&self) -> bool {
        self.entries.is_some()
    }

    /// Whether `name` is allowed.
    pub fn allows(&self, name: &str) -> bool {
        let Some(entries) = &self.entries else {
            return true;
        };
        let Some(parts) = split(name, self.kind) else {
            return false;
        };
        entries
            .iter()
            .any(|e| parts.len() >= e.len() && parts[..e.len()] == e[..])
    }

    /// The list as written, for messages.
    pub fn describe(&self) -> String {
        describe(self.written.iter())
    }
}

/// `name` split into components (see [`PrefixKind`]); `None` when it
/// cannot be compared safely. An absolute path starts with an empty
/// component, so it never equals a relative one.
fn split(name: &str, kind: PrefixKind) -> Option<Vec<String>> {
    match kind {
        PrefixKind::Sysctl => {
            let parts: Vec<String> = name.split(['.', '/']).map(str::to_owned).collect();
            parts.iter().all(|p| !p.is_empty()).then_some(parts)
        }
        PrefixKind::Path => {
            let Some(rel) = name.strip_prefix('/') else {
                // Not a host path (`tmpfs`, `none`): compared as written.
                return (!name.is_empty() && !name.contains('/')).then(|| vec![name.to_owned()]);
            };
            let mut parts = vec![String::new()];
            for c in rel.split('/') {
                match c {
                    "" | "." => {}
                    ".." => return None,
                    c => parts.push(c.to_owned()),
                }
            }
            Some(parts)
        }
    }
}

/// A request outside the allow-list: names the pod (`namespace/name`),
/// the annotation, the value refused and the rule it broke. Made with
/// [`Refused::new`], which logs it. Each part is cut to fit (see
/// [`excerpt`]), so a refusal is at most a few KiB of message and log
/// however large the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pod {pod}: annotation {annotation:?}: {value} is not allowed by {rule}")]
pub struct Refused {
    /// `namespace/name` of the pod.
    pub pod: String,
    /// The annotation key (or what selected the value, e.g. a hook file).
    pub annotation: String,
    /// The value refused (one entry of the annotation, as text).
    pub value: String,
    /// The rule: the configuration key and its setting.
    pub rule: String,
}

impl Refused {
    /// The refusal, logged as a warning with structured fields.
    pub fn new(
        pod: impl Into<String>,
        annotation: impl Into<String>,
        value: impl Into<String>,
        rule: impl Into<String>,
    ) -> Self {
        let cut = |s: String, max: usize| match excerpt(&s, max) {
            std::borrow::Cow::Borrowed(_) => s,
            std::borrow::Cow::Owned(o) => o,
        };
        let r = Refused {
            pod: cut(pod.into(), MAX_NAME_BYTES),
            annotation: cut(annotation.into(), MAX_NAME_BYTES),
            value: cut(value.into(), MAX_EXCERPT_BYTES * 2),
            rule: cut(rule.into(), MAX_RULE_BYTES),
        };
        tracing::warn!(
            pod = %r.pod,
            annotation = %r.annotation,
            value = %r.value,
            rule = %r.rule,
            "refused by the allow-list"
        );
        r
    }
}

/// The pod's namespace against `allow.namespaces` (`namespaces`), for a
/// request made through `annotation`.
///
/// # Errors
///
/// [`Refused`] when the namespace is not listed.
pub fn check_namespace(
    namespaces: &Globs,
    namespace: &str,
    name: &str,
    annotation: &str,
) -> Result<(), Refused> {
    if namespaces.allows(namespace) {
        return Ok(());
    }
    Err(Refused::new(
        format!("{namespace}/{name}"),
        annotation,
        format!("namespace {namespace:?}"),
        format!("{ALLOW_KEY}.namespaces {}", namespaces.describe()),
    ))
}

/// A plugin configuration: `strict` (absent: the `-strict` flag decides)
/// and the plugin's `allow` section (its fields absent when not given).
#[derive(Debug, Clone, PartialEq)]
pub struct Config<A> {
    /// `strict:`, when given.
    pub strict: Option<bool>,
    /// The `allow` section.
    pub allow: A,
}

/// Why a configuration was refused: the plugin fails its Configure rather
/// than run with a fence it cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Not YAML, or a value of the wrong type.
    #[error("invalid configuration: {0}")]
    Decode(#[from] crate::goyaml::DecodeError),
    /// A key of `allow` that is not one of the plugin's, or given twice:
    /// an allow-list that says something else than meant is refused.
    #[error("invalid configuration: {0} (the allow-list must say exactly what is allowed)")]
    Allow(String),
    /// A value of `allow` that does not parse.
    #[error("invalid configuration: {key}: {reason}")]
    Value {
        /// Where (`allow.devices[0].major`).
        key: String,
        /// What is wrong.
        reason: String,
    },
}

/// Reads a plugin configuration with the Go plugins' YAML rules
/// (`sigs.k8s.io/yaml`): `shape` is a struct with `strict` (a boolean)
/// and `allow` (the plugin's section). An empty text is no configuration.
/// Unknown keys outside `allow` are ignored with a warning, as the Go
/// plugins ignore their configuration; inside `allow` they are an error.
///
/// # Errors
///
/// [`ConfigError`].
pub fn read_config<A: DeserializeOwned>(
    text: &str,
    shape: &Shape,
) -> Result<Config<A>, ConfigError> {
    // `allow` starts as an empty object so absent keys stay absent.
    let start = serde_json::json!({ "strict": null, ALLOW_KEY: {} });
    let Decoded { value, notices } = decode_sigs_value(text, shape, start)?;
    for n in &notices {
        let (Notice::UnknownKey { path } | Notice::DuplicateKey { path }) = n;
        if path == ALLOW_KEY || path.starts_with(&format!("{ALLOW_KEY}.")) {
            return Err(ConfigError::Allow(n.to_string()));
        }
        tracing::warn!("configuration: {n}");
    }
    let strict = value.get("strict").and_then(Value::as_bool);
    let allow_value = value
        .get(ALLOW_KEY)
        .cloned()
        .unwrap_or_else(|| serde_json::json!({}));
    let allow = serde_json::from_value(allow_value).map_err(|e| ConfigError::Value {
        key: ALLOW_KEY.to_owned(),
        reason: e.to_string(),
    })?;
    Ok(Config { strict, allow })
}

/// A value replaced as a whole on each Configure and read by the handlers.
#[derive(Debug, Default)]
pub struct Current<T>(Mutex<Arc<T>>);

impl<T> Current<T> {
    /// Holds `v`.
    pub fn new(v: T) -> Self {
        Current(Mutex::new(Arc::new(v)))
    }

    /// The value in force.
    pub fn get(&self) -> Arc<T> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces it.
    pub fn set(&self, v: T) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Arc::new(v);
    }
}

#[cfg(test)]
#[path = "fence_tests.rs"]
mod tests;
