//! The mount part of the allow-list (`mountSources`, `mountTypes`,
//! `mountOptions`): what is mounted, not only where from.
//!
//! The source of a mount names what is mounted only for a bind mount:
//! the kernel ignores it for `proc` or `sysfs`, and an `overlay` takes
//! its layers from its options (`lowerdir=/`). So once any of the three
//! keys is given, a mount must have an allowed type (`bind` unless
//! `mountTypes` says otherwise), only options of a built-in list of flags
//! or matched by `mountOptions` (never one that names a path or changes
//! what the source means), a source under `mountSources` without `..`,
//! and an absolute destination without `..`.

use nri_sample_common::fence::{ALLOW_KEY, ConfigError, Globs, PrefixKind, Prefixes};

use crate::inject::MountSpec;
use crate::rules::{SAFE_MOUNT_OPTIONS, absolute_without_dot_dot, is_bind, never_option};

/// The mount fence. Off (anything goes, as upstream) unless one of its
/// keys is given.
#[derive(Debug, Clone, Default)]
pub(crate) struct MountFence {
    on: bool,
    sources: Prefixes,
    /// Allowed types (default `bind`).
    types: Vec<String>,
    types_given: bool,
    /// Options allowed beyond [`SAFE_MOUNT_OPTIONS`].
    options: Globs,
}

/// Why a mount is outside the fence: what is refused, and the rule.
pub(crate) struct Outside {
    pub(crate) value: String,
    pub(crate) rule: String,
}

impl MountFence {
    /// The fence from the three keys (`None`: absent).
    pub(crate) fn new(
        sources: Option<Vec<String>>,
        types: Option<Vec<String>>,
        options: Option<Vec<String>>,
    ) -> Result<MountFence, ConfigError> {
        let on = sources.is_some() || types.is_some() || options.is_some();
        for (i, t) in types.iter().flatten().enumerate() {
            if t.is_empty() || t.contains([',', '/']) || t.chars().any(char::is_whitespace) {
                return Err(ConfigError::Value {
                    key: format!("{ALLOW_KEY}.mountTypes[{i}]"),
                    reason: format!("{t:?} is not a file system type"),
                });
            }
        }
        for (i, o) in options.iter().flatten().enumerate() {
            if let Some(why) = never_option(o) {
                return Err(ConfigError::Value {
                    key: format!("{ALLOW_KEY}.mountOptions[{i}]"),
                    reason: format!("{o:?} can never be allowed: {why}"),
                });
            }
        }
        Ok(MountFence {
            on,
            sources: Prefixes::new(
                &format!("{ALLOW_KEY}.mountSources"),
                sources,
                PrefixKind::Path,
            )?,
            types_given: types.is_some(),
            types: types.unwrap_or_else(|| vec!["bind".to_owned()]),
            options: Globs::new(Some(options.unwrap_or_default())),
        })
    }

    fn types_rule(&self) -> String {
        let given = if self.types_given { "" } else { " (default)" };
        format!("{ALLOW_KEY}.mountTypes [{}]{given}", self.types.join(", "))
    }

    /// Checks one mount.
    pub(crate) fn check(&self, m: &MountSpec) -> Result<(), Outside> {
        if !self.on {
            return Ok(());
        }
        let outside = |value: String, rule: String| Err(Outside { value, rule });
        if !absolute_without_dot_dot(&m.destination) {
            return outside(
                format!("mount destination {:?}", m.destination),
                "an absolute destination without `..` or control characters".into(),
            );
        }
        let bind = is_bind(&m.r#type, &m.options);
        if !self.types.contains(&m.r#type) || (bind && !self.types.iter().any(|t| t == "bind")) {
            let what = if bind && m.r#type != "bind" {
                format!("mount type {:?} with a bind option", m.r#type)
            } else {
                format!("mount type {:?}", m.r#type)
            };
            return outside(what, self.types_rule());
        }
        if m.source.chars().any(char::is_control) {
            return outside(
                format!("mount source {:?}", m.source),
                "a source without control characters".into(),
            );
        }
        if bind && !m.source.starts_with('/') {
            return outside(
                format!("bind mount source {:?}", m.source),
                "an absolute source for a bind mount".into(),
            );
        }
        if !self.sources.allows(&m.source) {
            let rule = format!("{ALLOW_KEY}.mountSources {}", self.sources.describe());
            return outside(format!("mount source {:?}", m.source), rule);
        }
        for o in &m.options {
            if let Some(why) = never_option(o) {
                return outside(
                    format!("mount option {o:?}"),
                    format!("never allowed: {why}"),
                );
            }
            if !SAFE_MOUNT_OPTIONS.contains(&o.as_str()) && !self.options.allows(o) {
                let rule = format!(
                    "{ALLOW_KEY}.mountOptions {} (beyond the flags allowed by default)",
                    self.options.describe()
                );
                return outside(format!("mount option {o:?}"), rule);
            }
        }
        Ok(())
    }
}
