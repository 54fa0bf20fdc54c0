//! The logger's settings, handled as the Go logger handles them: the flags
//! set a configuration (`-events` split at commas), the runtime's YAML
//! configuration is decoded over it (`sigs.k8s.io/yaml` rules, keys
//! `logFile`, `events`, `addAnnotation`, `setAnnotation`, `addEnv`,
//! `setEnv`), and the event list is parsed as Go's `api.ParseEventMask`.

use std::path::PathBuf;

use nri_plugin::EventMask;
use nri_plugin::api::{ContainerAdjustment, Event};
use nri_sample_common::goyaml::{Field, Shape};
use nri_sample_common::{AnnotationError, Source, decode_annotation};
use serde::{Deserialize, Serialize};

/// Why a configuration or event list was refused (Go refuses the same).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Not YAML of the expected shape (or, strict, with what Go ignores).
    #[error("failed to parse provided configuration: {0}")]
    Parse(#[source] AnnotationError),
    /// An event name Go does not know (`""` for an empty one).
    #[error("failed to parse events in configuration: unknown event {0:?}")]
    Events(String),
    /// The log file cannot be opened.
    #[error("failed to open log file {0:?}")]
    LogFile(String),
}

/// The configuration (Go's `config` struct, JSON names).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Config {
    /// Log to this file (appending) instead of stderr.
    pub log_file: String,
    /// Event lists (names, `pod`, `container`, `all`, comma-separated).
    pub events: Vec<String>,
    /// Add this annotation to created containers.
    pub add_annotation: String,
    /// Set (remove, then add: overrides other plugins) this annotation.
    pub set_annotation: String,
    /// Add this environment variable.
    pub add_env: String,
    /// Set (remove, then add) this environment variable.
    pub set_env: String,
}

const CONFIG: Shape = Shape::Struct(&[
    // Ours: the `-strict` flag as a key (see `strict_key`).
    Field::new("strict", Shape::Bool),
    Field::new("logFile", Shape::Str),
    Field::new("events", Shape::Seq(&Shape::Str)),
    Field::new("addAnnotation", Shape::Str),
    Field::new("setAnnotation", Shape::Str),
    Field::new("addEnv", Shape::Str),
    Field::new("setEnv", Shape::Str),
]);

/// Go's `api.ParseEventMask`: each list lower-cased and split at commas;
/// `all`, `pod`/`podsandbox` (events whose name contains "pod") and
/// `container` (whose name contains "container", validation included)
/// match exactly; other names match an event name after trimming blanks.
/// An empty list (or none) is the empty mask (every event).
///
/// # Errors
///
/// [`ConfigError::Events`] with the name as written (an empty flag value
/// gives one empty name, which Go refuses).
pub fn parse_event_mask(lists: &[String]) -> Result<EventMask, ConfigError> {
    let mut mask = EventMask::EMPTY;
    let matching = |part: &str| {
        EventMask::from_events(&Event::ALL_EVENTS)
            .iter()
            .filter(|e| e.pretty_name().to_lowercase().contains(part))
            .fold(EventMask::EMPTY, |m, e| {
                m.union(EventMask::from_events(&[e]))
            })
    };
    for list in lists {
        for name in list.to_lowercase().split(',') {
            let add = match name {
                "all" => EventMask::ALL,
                "pod" | "podsandbox" => matching("pod"),
                "container" => matching("container"),
                _ => Event::ALL_EVENTS
                    .iter()
                    .find(|e| e.pretty_name().to_lowercase() == name.trim())
                    .map(|e| EventMask::from_events(&[*e]))
                    .ok_or_else(|| ConfigError::Events(name.to_owned()))?,
            };
            mask = mask.union(add);
        }
    }
    Ok(mask)
}

impl Config {
    /// The configuration of the flags: `-events` split at commas (one empty
    /// name without the flag, as Go's `strings.Split`).
    pub fn from_flags(events: &str) -> Config {
        Config {
            events: events.split(',').map(str::to_owned).collect(),
            ..Default::default()
        }
    }

    /// This configuration with the runtime's `text` decoded over it, and
    /// its subscription (`None`: the flags'). As Go: an empty text keeps
    /// everything and the flags' subscription (`flag_mask`); otherwise the
    /// event list, from the text or else from the flags, must parse
    /// (without `events` and without `-events` that is an empty name,
    /// refused), and an empty list is every event.
    ///
    /// # Errors
    ///
    /// [`ConfigError`].
    pub fn with_config(
        &self,
        text: &str,
        flag_mask: Option<EventMask>,
        strict: bool,
    ) -> Result<(Config, Option<EventMask>), ConfigError> {
        if text.is_empty() {
            return Ok((self.clone(), flag_mask));
        }
        let strict = nri_sample_common::strict_key(text, false).unwrap_or(strict);
        let src = Source {
            pod: "",
            container: "",
            annotation: "configuration",
            value: text,
        };
        let cfg: Config =
            decode_annotation(&src, &CONFIG, self, strict).map_err(ConfigError::Parse)?;
        let mask = parse_event_mask(&cfg.events)?;
        let mask = if mask.is_empty() {
            EventMask::ALL
        } else {
            mask
        };
        Ok((cfg.clone(), Some(mask)))
    }

    /// The log file, if any.
    pub fn log_file(&self) -> Option<PathBuf> {
        (!self.log_file.is_empty()).then(|| PathBuf::from(&self.log_file))
    }

    /// The adjustment for a created container: each configured annotation
    /// and env var with the value `logger-pid-<pid>`.
    pub fn adjustment(&self, pid: u32) -> ContainerAdjustment {
        let value = format!("logger-pid-{pid}");
        let mut a = ContainerAdjustment::default();
        if !self.add_annotation.is_empty() {
            a.add_annotation(self.add_annotation.clone(), value.clone());
        }
        if !self.set_annotation.is_empty() {
            a.remove_annotation(&self.set_annotation);
            a.add_annotation(self.set_annotation.clone(), value.clone());
        }
        if !self.add_env.is_empty() {
            a.add_env(self.add_env.clone(), value.clone());
        }
        if !self.set_env.is_empty() {
            a.remove_env(&self.set_env);
            a.add_env(self.set_env.clone(), value);
        }
        a
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn event_lists_as_go() {
        let m = parse_event_mask(&["pod,StartContainer".into()]).unwrap();
        assert!(m.contains(Event::RunPodSandbox) && m.contains(Event::PostUpdatePodSandbox));
        assert!(m.contains(Event::StartContainer) && !m.contains(Event::CreateContainer));
        let m = parse_event_mask(&["container".into()]).unwrap();
        assert!(m.contains(Event::ValidateContainerAdjustment));
        assert!(!m.contains(Event::RunPodSandbox));
        assert_eq!(parse_event_mask(&["ALL".into()]).unwrap(), EventMask::ALL);
        assert_eq!(
            parse_event_mask(&["createcontainer, removecontainer".into()]).unwrap(),
            EventMask::from_events(&[Event::CreateContainer, Event::RemoveContainer])
        );
        assert_eq!(parse_event_mask(&[]).unwrap(), EventMask::EMPTY);
        // Go matches `all`, `pod`, `container` before trimming.
        for bad in [" all", "pod, container", "", "CreateCont"] {
            assert!(parse_event_mask(&[bad.into()]).is_err(), "{bad:?}");
        }
        assert_eq!(
            parse_event_mask(&[String::new()]).unwrap_err(),
            ConfigError::Events(String::new())
        );
    }

    #[test]
    fn configuration_over_the_flags() {
        let flags = Config {
            add_env: "FROM_FLAG".into(),
            ..Config::from_flags("CreateContainer")
        };
        let flag_mask = Some(EventMask::from_events(&[Event::CreateContainer]));
        let (c, m) = flags
            .with_config(
                "logFile: /tmp/x.log\nevents: [pod, StartContainer]\nAddAnnotation: a.example.com/pid\nsetEnv: LOGGER\n",
                flag_mask,
                false,
            )
            .unwrap();
        assert_eq!(c.log_file, "/tmp/x.log");
        assert_eq!(c.add_annotation, "a.example.com/pid");
        assert_eq!(c.add_env, "FROM_FLAG");
        assert!(m.unwrap().contains(Event::StartContainer));
        // No `events`: the flag's list.
        let (_, m) = flags.with_config("setEnv: X", flag_mask, false).unwrap();
        assert_eq!(m, flag_mask);
        let (_, m) = Config::from_flags("all")
            .with_config("setEnv: X", None, false)
            .unwrap();
        assert_eq!(m, Some(EventMask::ALL));
        // Empty text: unchanged.
        assert_eq!(
            flags.with_config("", flag_mask, false).unwrap(),
            (flags.clone(), flag_mask)
        );
        // `events: []`: every event.
        assert_eq!(
            flags.with_config("events: []", flag_mask, false).unwrap().1,
            Some(EventMask::ALL)
        );
    }

    #[test]
    fn missing_events_without_the_flag_is_refused_as_in_go() {
        let flags = Config::from_flags("");
        assert_eq!(flags.with_config("", None, false).unwrap().1, None);
        assert_eq!(
            flags.with_config("addEnv: X", None, false).unwrap_err(),
            ConfigError::Events(String::new())
        );
        assert!(flags.with_config("events: [all]", None, false).is_ok());
    }

    #[test]
    fn bad_configurations() {
        let flags = Config::from_flags("");
        for bad in [
            "events: CreateContainer",
            "logFile: [",
            "events: [CreateCont]",
        ] {
            assert!(flags.with_config(bad, None, false).is_err(), "{bad}");
        }
        // Unknown keys: ignored, refused when strict.
        assert!(
            flags
                .with_config("events: [all]\nlogfile2: x", None, false)
                .is_ok()
        );
        assert!(
            flags
                .with_config("events: [all]\nlogfile2: x", None, true)
                .is_err()
        );
        // `strict` as a key, over the flag.
        let typo = "events: [all]\nlogfile2: x";
        assert!(
            flags
                .with_config(&format!("strict: yes\n{typo}"), None, false)
                .is_err()
        );
        assert!(
            flags
                .with_config(&format!("strict: false\n{typo}"), None, true)
                .is_ok()
        );
        assert!(
            flags
                .with_config("strict: true\nevents: [all]", None, false)
                .is_ok()
        );
    }

    #[test]
    fn adjustment_add_and_set() {
        let s = Config {
            add_annotation: "a.example.com/x".into(),
            set_annotation: "a.example.com/y".into(),
            add_env: "ADD".into(),
            set_env: "SET".into(),
            ..Default::default()
        };
        let a = s.adjustment(42);
        assert_eq!(a.annotations["a.example.com/x"], "logger-pid-42");
        assert_eq!(a.annotations["a.example.com/y"], "logger-pid-42");
        assert!(a.annotations.contains_key("-a.example.com/y"));
        let env: Vec<_> = a
            .env
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()))
            .collect();
        assert_eq!(
            env,
            [
                ("ADD", "logger-pid-42"),
                ("-SET", ""),
                ("SET", "logger-pid-42")
            ]
        );
        assert_eq!(
            Config::default().adjustment(1),
            ContainerAdjustment::default()
        );
    }
}
