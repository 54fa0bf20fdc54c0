//! The default validator as a standalone NRI validator plugin.
//!
//! Upstream ships its default validator only as a runtime built-in
//! (`00-default-validator`, configured in the runtime's own configuration).
//! This plugin runs the same rules out of process, for runtimes whose
//! built-in validator is off or missing: it subscribes to
//! `ValidateContainerAdjustment` (NRI v0.10+) and rejects merged container
//! adjustments according to a YAML configuration with upstream's keys (see
//! the README).
//!
//! The rules are those of [`nri_runtime::validate::DefaultValidator`]
//! (shared with our runtime library's built-in): OCI hook injection,
//! seccomp policy changes by profile kind, namespace changes, sysctl
//! changes, required plugins (global list plus the pod annotation
//! `required-plugins.noderesource.dev`, skipped when the configured
//! toleration annotation is `true`), and our `rejectFields` extension.

use std::sync::{Mutex, MutexGuard, PoisonError};

use nri_plugin::api::{Event, ValidateContainerAdjustmentRequest};
use nri_plugin::{ConfigureInfo, EventMask, HandlerError, HandlerResult, Plugin};
use nri_runtime::validate::{DefaultValidator, DefaultValidatorConfig};
use serde::Deserialize;

/// The YAML keys of the configuration (upstream's), matched
/// case-insensitively as Go's YAML decoding does. The TOML spellings
/// (`reject_oci_hook_adjustment`, ...) are accepted too.
pub const CONFIG_KEYS: &[&str] = &[
    "enable",
    "rejectOCIHookAdjustment",
    "rejectRuntimeDefaultSeccompAdjustment",
    "rejectUnconfinedSeccompAdjustment",
    "rejectCustomSeccompAdjustment",
    "rejectNamespaceAdjustment",
    "rejectSysctlAdjustment",
    "requiredPlugins",
    "tolerateMissingPluginsAnnotation",
    "rejectFields",
];

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Not YAML, or not the expected shape.
    #[error("invalid default validator configuration: {source}")]
    Decode {
        /// The decoding error.
        #[source]
        source: nri_sample_common::DecodeError,
    },
    /// Decoded, but refused by the validator (unknown `rejectFields` name).
    #[error("invalid default validator configuration")]
    Invalid {
        /// The validator's error.
        #[source]
        source: nri_runtime::Error,
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

#[derive(Deserialize, Default)]
#[serde(default)]
struct EnableProbe {
    enable: Option<bool>,
}

/// Parses a configuration (YAML or JSON, upstream's keys). An empty text is
/// the default configuration: enabled, nothing rejected.
///
/// Unlike the runtime built-in, installing this plugin is the opt-in, so
/// `enable` defaults to `true`; `enable: false` makes the plugin accept
/// everything.
///
/// # Errors
///
/// [`Error::Decode`], [`Error::Invalid`].
pub fn parse_config(text: &str) -> Result<DefaultValidator, Error> {
    let probe: Option<EnableProbe> = nri_sample_common::decode_yaml(text, CONFIG_KEYS)
        .map_err(|source| Error::Decode { source })?;
    let config: Option<DefaultValidatorConfig> = nri_sample_common::decode_yaml(text, CONFIG_KEYS)
        .map_err(|source| Error::Decode { source })?;
    let mut config = config.unwrap_or_default();
    config.enable = probe.and_then(|p| p.enable).unwrap_or(true);
    DefaultValidator::new(config).map_err(|source| Error::Invalid { source })
}

/// The validator plugin.
#[derive(Debug)]
pub struct DefaultValidatorPlugin {
    /// From the `-config` file (external plugins), used when the runtime
    /// hands over no configuration text.
    base: Option<String>,
    current: Mutex<DefaultValidator>,
}

impl DefaultValidatorPlugin {
    /// A plugin whose configuration is `base` (e.g. a `-config` file's
    /// text) unless the runtime hands one over in Configure.
    ///
    /// # Errors
    ///
    /// A bad `base` ([`parse_config`]).
    pub fn new(base: Option<String>) -> Result<Self, Error> {
        let current = parse_config(base.as_deref().unwrap_or(""))?;
        Ok(Self {
            base,
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

    /// Accepts or rejects a merged adjustment (the reason is the error).
    pub fn check(&self, req: &ValidateContainerAdjustmentRequest) -> Result<(), String> {
        self.current().validate(req).map_err(|r| r.reason)
    }
}

#[nri_plugin::plugin]
impl Plugin for DefaultValidatorPlugin {
    async fn configure(&self, info: &ConfigureInfo) -> HandlerResult<Option<EventMask>> {
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
        let text = if info.config.trim().is_empty() {
            self.base.as_deref().unwrap_or("")
        } else {
            info.config.as_str()
        };
        let validator = parse_config(text)?;
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
        if !c.enable {
            tracing::warn!("enable: false: every adjustment is accepted");
        }
        *self.current() = validator;
        Ok(None)
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
