//! The logger's settings: flags, then the runtime's YAML configuration
//! (keys as upstream: `logFile`, `events`, `addAnnotation`,
//! `setAnnotation`, `addEnv`, `setEnv`).

use std::path::PathBuf;

use nri_plugin::EventMask;
use nri_plugin::api::ContainerAdjustment;
use serde::Deserialize;

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Not YAML of the expected shape.
    #[error("failed to parse provided configuration")]
    Parse(#[source] nri_sample_common::DecodeError),
    /// Unknown event name.
    #[error("failed to parse events {events:?}")]
    Events {
        /// The list as given.
        events: String,
        /// The parser's error.
        #[source]
        source: nri_api::Error,
    },
}

/// Effective settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    /// Log to this file (appending) instead of stderr.
    pub log_file: Option<PathBuf>,
    /// Event list (upstream syntax: names, `pod`, `container`, `all`);
    /// empty: every event.
    pub events: Vec<String>,
    /// Add this annotation to created containers.
    pub add_annotation: Option<String>,
    /// Set (remove, then add: overrides other plugins) this annotation.
    pub set_annotation: Option<String>,
    /// Add this environment variable.
    pub add_env: Option<String>,
    /// Set (remove, then add) this environment variable.
    pub set_env: Option<String>,
}

/// The YAML document; absent keys keep the current setting.
#[derive(Debug, Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Document {
    log_file: Option<String>,
    events: Option<Vec<String>>,
    add_annotation: Option<String>,
    set_annotation: Option<String>,
    add_env: Option<String>,
    set_env: Option<String>,
}

const FIELDS: &[&str] = &[
    "logFile",
    "events",
    "addAnnotation",
    "setAnnotation",
    "addEnv",
    "setEnv",
];

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

impl Settings {
    /// The subscription: the parsed event list, or `None` for every event.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Events`] for an unknown name.
    pub fn event_mask(&self) -> Result<Option<EventMask>, ConfigError> {
        let names: Vec<&str> = self
            .events
            .iter()
            .flat_map(|e| e.split(','))
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .collect();
        if names.is_empty() {
            return Ok(None);
        }
        let mask = EventMask::parse_all(&names).map_err(|source| ConfigError::Events {
            events: names.join(","),
            source,
        })?;
        Ok((!mask.is_empty()).then_some(mask))
    }

    /// These settings with the YAML configuration `text` applied on top
    /// (keys present in it replace the setting; an empty string clears
    /// it). The event list is checked.
    ///
    /// # Errors
    ///
    /// [`ConfigError`].
    pub fn with_config(&self, text: &str) -> Result<Settings, ConfigError> {
        let doc: Option<Document> =
            nri_sample_common::decode_yaml(text, FIELDS).map_err(ConfigError::Parse)?;
        let mut s = self.clone();
        if let Some(d) = doc {
            if let Some(v) = d.log_file {
                s.log_file = non_empty(v).map(PathBuf::from);
            }
            if let Some(v) = d.events {
                s.events = v;
            }
            if let Some(v) = d.add_annotation {
                s.add_annotation = non_empty(v);
            }
            if let Some(v) = d.set_annotation {
                s.set_annotation = non_empty(v);
            }
            if let Some(v) = d.add_env {
                s.add_env = non_empty(v);
            }
            if let Some(v) = d.set_env {
                s.set_env = non_empty(v);
            }
        }
        s.event_mask()?;
        Ok(s)
    }

    /// The adjustment for a created container: each configured annotation
    /// and env var with the value `logger-pid-<pid>`.
    pub fn adjustment(&self, pid: u32) -> ContainerAdjustment {
        let value = format!("logger-pid-{pid}");
        let mut a = ContainerAdjustment::default();
        if let Some(k) = &self.add_annotation {
            a.add_annotation(k.clone(), value.clone());
        }
        if let Some(k) = &self.set_annotation {
            a.remove_annotation(k);
            a.add_annotation(k.clone(), value.clone());
        }
        if let Some(k) = &self.add_env {
            a.add_env(k.clone(), value.clone());
        }
        if let Some(k) = &self.set_env {
            a.remove_env(k);
            a.add_env(k.clone(), value);
        }
        a
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use nri_plugin::api::Event;

    #[test]
    fn config_overrides_flags() {
        let flags = Settings {
            events: vec!["CreateContainer".into()],
            add_env: Some("FROM_FLAG".into()),
            ..Default::default()
        };
        let s = flags
            .with_config("logFile: /tmp/x.log\nevents: [pod, StartContainer]\nAddAnnotation: logger.example.com/pid\nsetEnv: LOGGER\naddEnv: ''\n")
            .unwrap();
        assert_eq!(s.log_file, Some(PathBuf::from("/tmp/x.log")));
        assert_eq!(s.add_annotation.as_deref(), Some("logger.example.com/pid"));
        assert_eq!(s.set_env.as_deref(), Some("LOGGER"));
        assert_eq!(s.add_env, None);
        let m = s.event_mask().unwrap().unwrap();
        assert!(m.contains(Event::RunPodSandbox) && m.contains(Event::StartContainer));
        assert!(!m.contains(Event::CreateContainer));

        // Empty config: unchanged; no events anywhere: all events.
        assert_eq!(flags.with_config("").unwrap(), flags);
        assert_eq!(Settings::default().event_mask().unwrap(), None);
        // Events given as one comma-separated string element (as the flag).
        let s = Settings {
            events: vec!["createcontainer, removecontainer".into()],
            ..Default::default()
        };
        assert_eq!(
            s.event_mask().unwrap(),
            Some(EventMask::from_events(&[
                Event::CreateContainer,
                Event::RemoveContainer
            ]))
        );
    }

    #[test]
    fn bad_config() {
        let e = Settings::default()
            .with_config("events: [CreateCont]")
            .unwrap_err();
        assert!(matches!(e, ConfigError::Events { .. }), "{e}");
        assert!(e.to_string().contains("CreateCont"), "{e}");
        let e = Settings::default()
            .with_config("events: CreateContainer")
            .unwrap_err();
        assert!(matches!(e, ConfigError::Parse(_)), "{e}");
        let e = Settings::default().with_config("logFile: [").unwrap_err();
        assert!(matches!(e, ConfigError::Parse(_)), "{e}");
    }

    #[test]
    fn adjustment_add_and_set() {
        let s = Settings {
            add_annotation: Some("a.example.com/x".into()),
            set_annotation: Some("a.example.com/y".into()),
            add_env: Some("ADD".into()),
            set_env: Some("SET".into()),
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
            Settings::default().adjustment(1),
            ContainerAdjustment::default()
        );
    }
}
