//! The default validator as a standalone NRI validator plugin.
//!
//! Upstream ships its default validator only as a runtime built-in
//! (`00-default-validator`, configured in the runtime's own configuration).
//! This plugin runs the same rules out of process, for runtimes whose
//! built-in validator is off or missing. As upstream's, it is off unless
//! its configuration says `enable: true`: then it subscribes to
//! `ValidateContainerAdjustment` (NRI v0.10+) and rejects merged container
//! adjustments according to the YAML configuration with upstream's keys
//! (see the README); off, it is never asked to validate anything.
//!
//! The rules are those of [`nri_merge::validate::DefaultValidator`] (the
//! merge core's, which our runtime library's built-in also uses): OCI hook
//! injection, seccomp policy changes by profile kind, namespace changes, sysctl
//! changes, required plugins (global list plus the pod annotation
//! `required-plugins.noderesource.dev`, skipped when the configured
//! toleration annotation is `true`), and our `rejectFields` extension.

use std::sync::{Mutex, MutexGuard, PoisonError};

use nri_merge::validate::{DefaultValidator, DefaultValidatorConfig};
use nri_plugin::api::{Event, ValidateContainerAdjustmentRequest};
use nri_plugin::{ConfigureInfo, EventMask, HandlerError, HandlerResult, Plugin};
use nri_sample_common::goyaml::{self, Field, Shape};
use nri_sample_common::{Source, StrictError};

/// The configuration as upstream's `DefaultValidatorConfig` reads YAML:
/// its `yaml` names, matched exactly (yaml.v3), plus our `rejectFields`.
/// Other spellings (the TOML names, another case) are unknown keys:
/// ignored with a warning, refused in strict mode.
const CONFIG: Shape = Shape::Struct(&[
    Field::new("enable", Shape::Bool),
    Field::new("rejectOCIHookAdjustment", Shape::Bool),
    Field::new("rejectRuntimeDefaultSeccompAdjustment", Shape::Bool),
    Field::new("rejectUnconfinedSeccompAdjustment", Shape::Bool),
    Field::new("rejectCustomSeccompAdjustment", Shape::Bool),
    Field::new("rejectNamespaceAdjustment", Shape::Bool),
    Field::new("rejectSysctlAdjustment", Shape::Bool),
    Field::new("requiredPlugins", Shape::Seq(&Shape::Str)),
    Field::new("tolerateMissingPluginsAnnotation", Shape::Str),
    Field::new("rejectFields", Shape::Seq(&Shape::Str)),
    // Ours: the `-strict` flag as a key (see `strict_key`).
    Field::new("strict", Shape::Bool),
]);

/// The subscription of an enabled validator.
const VALIDATING: EventMask = EventMask::from_events(&[Event::ValidateContainerAdjustment]);

/// The subscription of a disabled one: an event answered with success and
/// that cannot fail anything (a registration needs one event), so the
/// plugin stays connected without ever being asked to validate.
const IDLE: EventMask = EventMask::from_events(&[Event::RemovePodSandbox]);

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Not YAML, or not the expected shape.
    #[error("invalid default validator configuration: {source}")]
    Decode {
        /// The decoding error.
        #[source]
        source: goyaml::DecodeError,
    },
    /// A key upstream ignores, refused in strict mode.
    #[error("invalid default validator configuration")]
    Strict {
        /// What was refused.
        #[source]
        source: StrictError,
    },
    /// Decoded, but refused by the validator (unknown `rejectFields` name).
    #[error("invalid default validator configuration")]
    Invalid {
        /// The validator's error.
        #[source]
        source: nri_merge::Error,
    },
    /// The configuration file cannot be read.
    #[error("cannot read configuration file {path}")]
    Read {
        /// The file.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Parses a configuration (YAML or JSON) as upstream's validator reads
/// it: its keys exactly, everything off by default. An empty text is the
/// default configuration: disabled. Unknown keys are ignored with a
/// warning, or refused when `strict`; a `strict: true|false` key in the
/// text overrides `strict` (the `-strict` flag).
///
/// # Errors
///
/// [`Error::Decode`], [`Error::Strict`], [`Error::Invalid`].
pub fn parse_config(text: &str, strict: bool) -> Result<DefaultValidator, Error> {
    let strict = nri_sample_common::strict_key(text, true).unwrap_or(strict);
    let decoded = goyaml::decode_v3(text, &CONFIG, &DefaultValidatorConfig::default())
        .map_err(|source| Error::Decode { source })?;
    let src = Source {
        pod: "",
        container: "",
        annotation: "configuration",
        value: text,
    };
    src.notices(strict, &decoded.notices)
        .map_err(|source| Error::Strict { source })?;
    DefaultValidator::new(decoded.value).map_err(|source| Error::Invalid { source })
}

/// The validator plugin.
#[derive(Debug)]
pub struct DefaultValidatorPlugin {
    /// From the `-config` file (external plugins), used when the runtime
    /// hands over no configuration text.
    base: Option<String>,
    strict: bool,
    current: Mutex<DefaultValidator>,
}

impl DefaultValidatorPlugin {
    /// A plugin whose configuration is `base` (e.g. a `-config` file's
    /// text) unless the runtime hands one over in Configure; `strict`
    /// refuses keys upstream ignores.
    ///
    /// # Errors
    ///
    /// A bad `base` ([`parse_config`]).
    pub fn new(base: Option<String>, strict: bool) -> Result<Self, Error> {
        let current = parse_config(base.as_deref().unwrap_or(""), strict)?;
        Ok(Self {
            base,
            strict,
            current: Mutex::new(current),
        })
    }

    fn current(&self) -> MutexGuard<'_, DefaultValidator> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The configuration in use.
    pub fn config(&self) -> DefaultValidatorConfig {
        self.current().config().clone()
    }

    /// Accepts or rejects a merged adjustment (the reason is the error,
    /// worded as upstream's validator words it: `validation error: ...`).
    pub fn check(&self, req: &ValidateContainerAdjustmentRequest) -> Result<(), String> {
        self.current()
            .validate(req)
            .map_err(|r| format!("validation error: {}", r.reason))
    }
}

#[nri_plugin::plugin]
impl Plugin for DefaultValidatorPlugin {
    const EVENTS: EventMask = VALIDATING.union(IDLE);

    async fn configure(&self, info: &ConfigureInfo) -> HandlerResult<Option<EventMask>> {
        let text = if info.config.trim().is_empty() {
            self.base.as_deref().unwrap_or("")
        } else {
            info.config.as_str()
        };
        let validator = parse_config(text, self.strict)?;
        if !validator.is_enabled() {
            tracing::info!(
                "default validator is disabled (no `enable: true` in its configuration): not validating"
            );
            *self.current() = validator;
            return Ok(Some(IDLE));
        }
        if !info
            .runtime
            .valid_events()
            .contains(Event::ValidateContainerAdjustment)
        {
            return Err(HandlerError::msg(format!(
                "runtime {} {} (NRI {}) cannot call validator plugins (NRI v0.10 or later needed)",
                info.runtime.name, info.runtime.version, info.runtime.nri_version.version
            )));
        }
        let c = validator.config();
        tracing::info!(
            enable = c.enable,
            hooks = c.reject_oci_hook_adjustment,
            seccomp_runtime_default = c.reject_runtime_default_seccomp_adjustment,
            seccomp_unconfined = c.reject_unconfined_seccomp_adjustment,
            seccomp_custom = c.reject_custom_seccomp_adjustment,
            namespaces = c.reject_namespace_adjustment,
            sysctl = c.reject_sysctl_adjustment,
            required = ?c.required_plugins,
            tolerate = %c.tolerate_missing_plugins_annotation,
            reject_fields = ?c.reject_fields,
            "configured"
        );
        *self.current() = validator;
        Ok(Some(VALIDATING))
    }

    async fn validate_container_adjustment(
        &self,
        request: ValidateContainerAdjustmentRequest,
    ) -> HandlerResult<()> {
        self.check(&request).map_err(HandlerError::msg)
    }
}

#[cfg(test)]
mod tests;
