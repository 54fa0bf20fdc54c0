//! The runtime's configuration file: YAML or TOML, the same keys in both.
//!
//! The format is documented in `docs/runtime/config.md` of the
//! repository. Every error names the file and, where the parser knows it,
//! the line and column; unknown keys, event names and policy names are
//! refused with the list of valid ones.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nri_api::api::Event;
use serde::Deserialize;

use crate::config::Config;
use crate::error::Error;
use crate::failure::{FailurePolicy, PluginPolicy, ValidationMode};
use nri_merge::validate::{DefaultValidator, DefaultValidatorConfig};

/// The syntax of a configuration file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigFormat {
    /// YAML (`.yaml`, `.yml`, and any name not ending in `.toml`).
    Yaml,
    /// TOML (`.toml`).
    Toml,
}

impl ConfigFormat {
    /// The format of a file, by its name: TOML for `.toml`, else YAML.
    pub fn of_path(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("toml") => ConfigFormat::Toml,
            _ => ConfigFormat::Yaml,
        }
    }
}

/// The whole file. Every key is optional; what is left out keeps the value
/// the configuration had before (the library's default, or what the
/// embedding runtime set).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileConfig {
    socket_path: Option<PathBuf>,
    plugin_dir: Option<PathBuf>,
    config_dir: Option<PathBuf>,
    registration_timeout: Option<Dur>,
    request_timeout: Option<Dur>,
    disable_connections: Option<bool>,
    disable_launch: Option<bool>,
    strike_limit: Option<u32>,
    allowed_uids: Option<Vec<u32>>,
    allowed_gids: Option<Vec<u32>>,
    stop_grace: Option<Dur>,
    spin_budget: Option<Dur>,
    default_policy: Option<FailurePolicy>,
    exempt_namespaces: Option<Vec<String>>,
    startup_grace: Option<Dur>,
    default_validator: Option<FileValidator>,
    wasm: Option<crate::wasm::file_config::FileWasm>,
    grants: Option<Vec<crate::grants::file::FileGrant>>,
    #[serde(default)]
    plugins: BTreeMap<PluginKey, FilePlugin>,
}

/// One plugin's entry.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FilePlugin {
    policy: Option<FailurePolicy>,
    #[serde(default)]
    events: BTreeMap<EventName, FailurePolicy>,
    #[serde(default)]
    ignore_events: Vec<EventName>,
    request_timeout: Option<Dur>,
    strike_limit: Option<u32>,
    validation: Option<ValidationMode>,
    supersede: Option<bool>,
}

/// The built-in default validator, with our kebab-case keys.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileValidator {
    #[serde(default = "yes")]
    enable: bool,
    #[serde(default)]
    reject_oci_hook_adjustment: bool,
    #[serde(default)]
    reject_runtime_default_seccomp_adjustment: bool,
    #[serde(default)]
    reject_unconfined_seccomp_adjustment: bool,
    #[serde(default)]
    reject_custom_seccomp_adjustment: bool,
    #[serde(default)]
    reject_namespace_adjustment: bool,
    #[serde(default)]
    reject_sysctl_adjustment: bool,
    #[serde(default)]
    required_plugins: Vec<String>,
    #[serde(default)]
    tolerate_missing_plugins_annotation: String,
    #[serde(default)]
    reject_fields: Vec<String>,
    #[serde(default)]
    roles: BTreeMap<String, crate::grants::file::FileRole>,
}

fn yes() -> bool {
    true
}

impl FileValidator {
    fn into_config(self) -> DefaultValidatorConfig {
        let mut c = DefaultValidatorConfig::default();
        c.enable = self.enable;
        c.reject_oci_hook_adjustment = self.reject_oci_hook_adjustment;
        c.reject_runtime_default_seccomp_adjustment =
            self.reject_runtime_default_seccomp_adjustment;
        c.reject_unconfined_seccomp_adjustment = self.reject_unconfined_seccomp_adjustment;
        c.reject_custom_seccomp_adjustment = self.reject_custom_seccomp_adjustment;
        c.reject_namespace_adjustment = self.reject_namespace_adjustment;
        c.reject_sysctl_adjustment = self.reject_sysctl_adjustment;
        c.required_plugins = self.required_plugins;
        c.tolerate_missing_plugins_annotation = self.tolerate_missing_plugins_annotation;
        c.reject_fields = self.reject_fields;
        c.roles = self.roles.into_iter().map(|(k, r)| (k, r.into())).collect();
        c
    }
}

/// A duration written as a number with a unit: `100us`, `250ms`, `2s`,
/// `1.5s`, `1m`, `1h`.
#[derive(Debug, Clone, Copy)]
struct Dur(Duration);

/// A duration in a configuration file, written as the runtime's own keys
/// are: a number with a unit (`100us`, `250ms`, `2s`, `1.5s`, `1m`, `1h`).
/// For the keys of an embedder's [`ConfigSection`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ConfigDuration(pub Duration);

impl<'de> Deserialize<'de> for ConfigDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Dur::deserialize(d).map(|Dur(x)| ConfigDuration(x))
    }
}

impl From<ConfigDuration> for Duration {
    fn from(d: ConfigDuration) -> Duration {
        d.0
    }
}

/// An embedder's own section of the runtime's configuration file: one
/// top-level key, [`KEY`](Self::KEY), whose value deserializes into `Self`.
/// Read with [`Config::apply_file_with`]; the file's other keys are the
/// runtime's, checked as usual (an unknown key is still an error).
///
/// ```
/// use nri_runtime::{Config, ConfigFormat, ConfigSection};
///
/// #[derive(serde::Deserialize)]
/// #[serde(deny_unknown_fields, rename_all = "kebab-case")]
/// struct Shim { log_level: String }
///
/// impl ConfigSection for Shim {
///     const KEY: &'static str = "shim";
/// }
///
/// let mut config = Config::new("my-shim", "1.0");
/// let text = "request-timeout: 1s\nshim:\n  log-level: debug\n";
/// let shim: Option<Shim> = config.apply_str_with("shim.yaml", ConfigFormat::Yaml, text)?;
/// assert_eq!(shim.map(|s| s.log_level).as_deref(), Some("debug"));
/// assert_eq!(config.request_timeout, std::time::Duration::from_secs(1));
/// # Ok::<(), nri_runtime::Error>(())
/// ```
pub trait ConfigSection: serde::de::DeserializeOwned {
    /// The top-level key of the section (kebab-case, like the runtime's
    /// keys, and not one of them).
    const KEY: &'static str;
}

/// The file with an embedder's section: the runtime's keys and the section.
struct WithSection<S> {
    runtime: FileConfig,
    section: Option<S>,
}

impl<'de, S: ConfigSection> Deserialize<'de> for WithSection<S> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<S>(std::marker::PhantomData<S>);
        impl<'de, S: ConfigSection> serde::de::Visitor<'de> for V<S> {
            type Value = WithSection<S>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of configuration keys")
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(WithSection {
                    runtime: FileConfig::default(),
                    section: None,
                })
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut rest = SkipSection::<A, S> {
                    inner: map,
                    section: None,
                };
                let runtime = FileConfig::deserialize(
                    serde::de::value::MapAccessDeserializer::new(&mut rest),
                )?;
                Ok(WithSection {
                    runtime,
                    section: rest.section,
                })
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// The entries of a map but the section's, whose value it keeps.
struct SkipSection<A, S> {
    inner: A,
    section: Option<S>,
}

impl<'de, A: serde::de::MapAccess<'de>, S: ConfigSection> serde::de::MapAccess<'de>
    for &mut SkipSection<A, S>
{
    type Error = A::Error;

    fn next_key_seed<K: serde::de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        use serde::de::IntoDeserializer as _;
        loop {
            let Some(key) = self.inner.next_key::<String>()? else {
                return Ok(None);
            };
            if key == S::KEY {
                if self.section.is_some() {
                    return Err(serde::de::Error::duplicate_field(S::KEY));
                }
                self.section = Some(self.inner.next_value()?);
                continue;
            }
            return seed.deserialize(key.into_deserializer()).map(Some);
        }
    }

    fn next_value_seed<V: serde::de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, A::Error> {
        self.inner.next_value_seed(seed)
    }
}

const DURATION_EXPECTED: &str = "a duration with a unit, such as 250ms, 2s, 1.5s or 1m";

/// Parses a duration with a unit (`us`, `ms`, `s`, `m`, `h`).
pub(crate) fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    let secs = match unit {
        "us" | "µs" => n / 1e6,
        "ms" => n / 1e3,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return None,
    };
    Duration::try_from_secs_f64(secs).ok()
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(DURATION_EXPECTED)
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Dur, E> {
                parse_duration(s)
                    .map(Dur)
                    .ok_or_else(|| E::invalid_value(serde::de::Unexpected::Str(s), &self))
            }
        }
        d.deserialize_str(V)
    }
}

/// An event name (`CreateContainer`, case-insensitive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct EventName(i32);

const EVENT_NAMES: [&str; 14] = [
    "RunPodSandbox",
    "StopPodSandbox",
    "RemovePodSandbox",
    "CreateContainer",
    "PostCreateContainer",
    "StartContainer",
    "PostStartContainer",
    "UpdateContainer",
    "PostUpdateContainer",
    "StopContainer",
    "RemoveContainer",
    "UpdatePodSandbox",
    "PostUpdatePodSandbox",
    "ValidateContainerAdjustment",
];

impl<'de> Deserialize<'de> for EventName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Event::ALL_EVENTS
            .into_iter()
            .find(|e| e.pretty_name().eq_ignore_ascii_case(&s))
            .map(|e| EventName(e as i32))
            .ok_or_else(|| serde::de::Error::unknown_variant(&s, &EVENT_NAMES))
    }
}

/// A plugin key: `name` or `NN-name`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct PluginKey(String);

impl<'de> Deserialize<'de> for PluginKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        check_plugin_key(&s).map_err(|reason| {
            serde::de::Error::custom(format!("{reason}; expected `name` or `NN-name`"))
        })?;
        Ok(PluginKey(s))
    }
}

fn check_plugin_key(s: &str) -> Result<(), String> {
    let b = s.as_bytes();
    let (idx, name) =
        if b.len() > 3 && b[0].is_ascii_digit() && b[1].is_ascii_digit() && b[2] == b'-' {
            (Some(&s[..2]), &s[3..])
        } else {
            (None, s)
        };
    if let Some(idx) = idx {
        nri_api::check_plugin_index(idx).map_err(|e| e.to_string())?;
    }
    nri_api::check_plugin_name(name).map_err(|e| e.to_string())
}

impl Config {
    /// Reads a configuration file and applies it on top of this
    /// configuration: TOML when the file name ends in `.toml`, else YAML
    /// (same keys in both; see `docs/runtime/config.md`). Keys the file
    /// leaves out keep their current values; a plugin entry of the file
    /// replaces an entry of the same name.
    ///
    /// # Errors
    ///
    /// [`Error::ConfigFile`], naming the file, and where known the line
    /// and column: the file cannot be read, has a syntax error, an unknown
    /// key, event name or policy name (the message lists the valid ones),
    /// a value of the wrong type, or an invalid setting.
    pub fn apply_file(&mut self, path: &Path) -> Result<(), Error> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| Error::ConfigFile {
            file: file.clone(),
            line: None,
            column: None,
            message: format!("cannot read the file: {e}"),
        })?;
        self.apply_str(&file, ConfigFormat::of_path(path), &text)
    }

    /// Applies configuration `text` (see [`Config::apply_file`]); `file`
    /// names it in errors.
    ///
    /// # Errors
    ///
    /// As [`Config::apply_file`].
    pub fn apply_str(&mut self, file: &str, format: ConfigFormat, text: &str) -> Result<(), Error> {
        let parsed = match format {
            ConfigFormat::Yaml => parse_yaml(file, text)?,
            ConfigFormat::Toml => parse_toml(file, text)?,
        };
        let at = |needle: &str, message: String| {
            let (line, column) = find(text, needle);
            Error::ConfigFile {
                file: file.to_owned(),
                line,
                column,
                message,
            }
        };
        self.apply_parsed(parsed, &at)
    }

    /// Reads a configuration file with an embedder's own section (see
    /// [`ConfigSection`]): applies the runtime's keys as
    /// [`Config::apply_file`] does and returns the section, if the file has
    /// it.
    ///
    /// # Errors
    ///
    /// As [`Config::apply_file`]; errors in the section name the file and
    /// the line as well.
    pub fn apply_file_with<S: ConfigSection>(&mut self, path: &Path) -> Result<Option<S>, Error> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| Error::ConfigFile {
            file: file.clone(),
            line: None,
            column: None,
            message: format!("cannot read the file: {e}"),
        })?;
        self.apply_str_with(&file, ConfigFormat::of_path(path), &text)
    }

    /// Applies configuration `text` with an embedder's section (see
    /// [`Config::apply_file_with`]); `file` names it in errors.
    ///
    /// # Errors
    ///
    /// As [`Config::apply_file`].
    pub fn apply_str_with<S: ConfigSection>(
        &mut self,
        file: &str,
        format: ConfigFormat,
        text: &str,
    ) -> Result<Option<S>, Error> {
        let parsed: WithSection<S> = match format {
            ConfigFormat::Yaml => parse_yaml(file, text)?,
            ConfigFormat::Toml => parse_toml(file, text)?,
        };
        let at = |needle: &str, message: String| {
            let (line, column) = find(text, needle);
            Error::ConfigFile {
                file: file.to_owned(),
                line,
                column,
                message,
            }
        };
        self.apply_parsed(parsed.runtime, &at)?;
        Ok(parsed.section)
    }

    fn apply_parsed(
        &mut self,
        f: FileConfig,
        at: &dyn Fn(&str, String) -> Error,
    ) -> Result<(), Error> {
        for (key, d) in [
            ("request-timeout", f.request_timeout),
            ("registration-timeout", f.registration_timeout),
        ] {
            if d.is_some_and(|d| d.0.is_zero()) {
                return Err(at(key, format!("{key} must be positive")));
            }
        }
        set(&mut self.socket_path, f.socket_path);
        set(&mut self.plugin_dir, f.plugin_dir);
        set(&mut self.config_dir, f.config_dir);
        set(
            &mut self.registration_timeout,
            f.registration_timeout.map(|d| d.0),
        );
        set(&mut self.request_timeout, f.request_timeout.map(|d| d.0));
        set(&mut self.disable_connections, f.disable_connections);
        set(&mut self.disable_launch, f.disable_launch);
        set(&mut self.strike_limit, f.strike_limit);
        set(&mut self.allowed_uids, f.allowed_uids);
        set(&mut self.allowed_gids, f.allowed_gids);
        set(&mut self.stop_grace, f.stop_grace.map(|d| d.0));
        set(&mut self.spin_budget, f.spin_budget.map(|d| d.0));
        set(&mut self.exempt_namespaces, f.exempt_namespaces);
        set(&mut self.startup_grace, f.startup_grace.map(|d| d.0));
        if let Some(p) = f.default_policy {
            self.default_policy.failure = Some(p);
        }
        if let Some(v) = f.default_validator {
            let cfg = v.into_config();
            if cfg.enable {
                DefaultValidator::new(cfg.clone())
                    .map_err(|e| at("reject-fields", e.to_string()))?;
                self.default_validator = Some(cfg);
            } else {
                self.default_validator = None;
            }
        }
        if let Some(w) = f.wasm {
            w.apply(&mut self.wasm).map_err(|(key, m)| at(key, m))?;
        }
        if let Some(list) = f.grants {
            let grants = list
                .into_iter()
                .enumerate()
                .map(|(i, g)| g.into_grant(i))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|m| at("grants", m))?;
            self.grants = Some(grants);
        }
        for (PluginKey(name), p) in f.plugins {
            let policy = plugin_policy(&name, p).map_err(|m| at(&name, m))?;
            self.plugin_policies.insert(name, policy);
        }
        Ok(())
    }
}

fn set<T>(dst: &mut T, v: Option<T>) {
    if let Some(v) = v {
        *dst = v;
    }
}

fn plugin_policy(name: &str, p: FilePlugin) -> Result<PluginPolicy, String> {
    let mut per_event: BTreeMap<i32, FailurePolicy> = p
        .events
        .into_iter()
        .map(|(EventName(e), pol)| (e, pol))
        .collect();
    for EventName(ev) in p.ignore_events {
        match per_event.get(&ev) {
            Some(FailurePolicy::Ignore) | None => {
                per_event.insert(ev, FailurePolicy::Ignore);
            }
            Some(other) => {
                let ev = Event::try_from(ev).map_or("?", |e| e.pretty_name());
                return Err(format!(
                    "plugin {name:?}: {ev} is in ignore-events but events gives it policy {other}"
                ));
            }
        }
    }
    let request_timeout = p.request_timeout.map(|d| d.0);
    if request_timeout.is_some_and(|d| d.is_zero()) {
        return Err(format!("plugin {name:?}: request-timeout must be positive"));
    }
    Ok(PluginPolicy {
        failure: p.policy,
        per_event,
        request_timeout,
        strike_limit: p.strike_limit,
        validation: p.validation,
        supersede: p.supersede,
    })
}

/// What a file that is empty (or YAML `null`) means.
trait Empty {
    fn empty() -> Self;
}

impl Empty for FileConfig {
    fn empty() -> Self {
        FileConfig::default()
    }
}

impl<S> Empty for WithSection<S> {
    fn empty() -> Self {
        WithSection {
            runtime: FileConfig::default(),
            section: None,
        }
    }
}

fn parse_yaml<T: serde::de::DeserializeOwned + Empty>(file: &str, text: &str) -> Result<T, Error> {
    if text.trim().is_empty() {
        return Ok(T::empty());
    }
    let opts = serde_saphyr::options! { with_snippet: false };
    serde_saphyr::from_str_with_options::<Option<T>>(text, opts)
        .map(|v| v.unwrap_or_else(T::empty))
        .map_err(|e| {
            // An unknown top-level key reported through a section's
            // filter has no position: find the key in the text.
            let loc = e
                .location()
                .map(|l| (l.line(), l.column()))
                .or_else(|| key_position(text, &e.to_string()));
            let mut message = e.without_snippet().to_string();
            if let Some((line, column)) = loc {
                let suffix = format!(" at line {line}, column {column}");
                if let Some(m) = message.strip_suffix(&suffix) {
                    message = m.to_owned();
                }
            }
            Error::ConfigFile {
                file: file.to_owned(),
                line: loc.and_then(|(l, _)| usize::try_from(l).ok()),
                column: loc.and_then(|(_, c)| usize::try_from(c).ok()),
                message,
            }
        })
}

fn parse_toml<T: serde::de::DeserializeOwned>(file: &str, text: &str) -> Result<T, Error> {
    toml::from_str::<T>(text).map_err(|e| {
        let (line, column) = match e.span() {
            Some(span) => {
                let (l, c) = line_col(text, span.start);
                (Some(l), Some(c))
            }
            None => match key_position(text, e.message()) {
                Some((l, c)) => (usize::try_from(l).ok(), usize::try_from(c).ok()),
                None => (None, None),
            },
        };
        Error::ConfigFile {
            file: file.to_owned(),
            line,
            column,
            message: e.message().trim_end().to_owned(),
        }
    })
}

/// For an "unknown field `x`" message without a position: where key `x`
/// is in `text`.
fn key_position(text: &str, message: &str) -> Option<(u64, u64)> {
    let rest = message.strip_prefix("unknown field `")?;
    let key = &rest[..rest.find('`')?];
    match find(text, key) {
        (Some(l), Some(c)) => Some((u64::try_from(l).ok()?, u64::try_from(c).ok()?)),
        _ => None,
    }
}

/// 1-based line and column of byte offset `at` of `text`.
fn line_col(text: &str, at: usize) -> (usize, usize) {
    let before = text.get(..at.min(text.len())).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// The position of key `key` (for errors found after parsing): the first
/// line that starts with it (YAML `key:`, TOML `key =`) or names it in a
/// TOML table header; unknown when there is none.
fn find(text: &str, key: &str) -> (Option<usize>, Option<usize>) {
    let quoted = format!("\"{key}\"");
    let starts = |l: &str| {
        let t = l.trim_start().trim_start_matches("- ");
        (t.starts_with(key) && t[key.len()..].trim_start().starts_with([':', '=']))
            || t.starts_with(&quoted)
    };
    let header = |l: &str| {
        let t = l.trim();
        t.starts_with('[')
            && t.trim_matches(['[', ']'])
                .split('.')
                .any(|part| part.trim().trim_matches('"') == key)
    };
    for (i, l) in text.lines().enumerate() {
        if starts(l) || header(l) {
            let column = l.len() - l.trim_start().len() + 1;
            return (Some(i + 1), Some(column));
        }
    }
    (None, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1m"), Some(Duration::from_secs(60)));
        assert_eq!(parse_duration("100us"), Some(Duration::from_micros(100)));
        assert_eq!(parse_duration("0s"), Some(Duration::ZERO));
        for bad in ["", "2", "s", "2 parsecs", "-1s", "1.2.3s"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn positions() {
        assert_eq!(line_col("a\nbc\n", 3), (2, 2));
        assert_eq!(line_col("abc", 0), (1, 1));
    }
}
