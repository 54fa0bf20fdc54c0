//! The built-in default validator.

use nri_api::api::{Field, ValidateContainerAdjustmentRequest, security_profile::ProfileType};
use serde::{Deserialize, Serialize};

use super::presence::{is_adjusted, is_updated};
use super::yaml::parse_string_list;
use super::{
    REQUIRED_PLUGINS_ANNOTATION, Rejection, UpdateValidation, Validator, effective_annotation,
    parse_bool,
};
use crate::error::Error;
use crate::{ContainerOwners, Ownership, PluginId};

/// Configuration of the [`DefaultValidator`].
///
/// Deserializes from upstream's YAML keys (`rejectOCIHookAdjustment`, ...)
/// and also accepts its TOML keys (`reject_oci_hook_adjustment`, ...). Unknown
/// keys are ignored. Everything defaults to off / empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct DefaultValidatorConfig {
    /// Turn the validator on (upstream: `enable`).
    #[serde(rename = "enable")]
    pub enable: bool,
    /// Reject any OCI hook injection (`rejectOCIHookAdjustment`).
    #[serde(
        rename = "rejectOCIHookAdjustment",
        alias = "reject_oci_hook_adjustment"
    )]
    pub reject_oci_hook_adjustment: bool,
    /// Reject seccomp policy changes of containers with the runtime default
    /// profile (`rejectRuntimeDefaultSeccompAdjustment`).
    #[serde(
        rename = "rejectRuntimeDefaultSeccompAdjustment",
        alias = "reject_runtime_default_seccomp_adjustment"
    )]
    pub reject_runtime_default_seccomp_adjustment: bool,
    /// Reject seccomp policy changes of unconfined containers, or containers
    /// without a profile (`rejectUnconfinedSeccompAdjustment`).
    #[serde(
        rename = "rejectUnconfinedSeccompAdjustment",
        alias = "reject_unconfined_seccomp_adjustment"
    )]
    pub reject_unconfined_seccomp_adjustment: bool,
    /// Reject seccomp policy changes of containers with a custom (localhost)
    /// profile (`rejectCustomSeccompAdjustment`).
    #[serde(
        rename = "rejectCustomSeccompAdjustment",
        alias = "reject_custom_seccomp_adjustment"
    )]
    pub reject_custom_seccomp_adjustment: bool,
    /// Reject any namespace change (`rejectNamespaceAdjustment`).
    #[serde(
        rename = "rejectNamespaceAdjustment",
        alias = "reject_namespace_adjustment"
    )]
    pub reject_namespace_adjustment: bool,
    /// Reject any sysctl change (`rejectSysctlAdjustment`).
    #[serde(rename = "rejectSysctlAdjustment", alias = "reject_sysctl_adjustment")]
    pub reject_sysctl_adjustment: bool,
    /// Plugins (base name or `NN-name`) that must have taken part in every
    /// container creation (`requiredPlugins`). Pods add their own with the
    /// [`REQUIRED_PLUGINS_ANNOTATION`].
    #[serde(rename = "requiredPlugins", alias = "required_plugins")]
    pub required_plugins: Vec<String>,
    /// Pod annotation key that, when effectively `true` for a container,
    /// skips the required-plugins check (`tolerateMissingPluginsAnnotation`;
    /// empty = no toleration).
    #[serde(
        rename = "tolerateMissingPluginsAnnotation",
        alias = "tolerate_missing_plugins_annotation"
    )]
    pub tolerate_missing_plugins_annotation: String,
    /// Our addition: fields no plugin may change, by `Field` enum name
    /// (`Mounts`, `Devices`, `CPUShares`, ...; case-insensitive)
    /// (`rejectFields`). They apply to adjustments of new containers and
    /// to updates of existing ones alike. `Devices` covers every way to
    /// give a container a device: `linux.devices`, the device cgroup rules
    /// in `linux.resources.devices` and CDI devices.
    #[serde(rename = "rejectFields", alias = "reject_fields")]
    pub reject_fields: Vec<String>,
}

/// The built-in default validator (upstream's `plugins/default-validator`,
/// registered as `00-default-validator`).
///
/// It judges the **merged** adjustment: both the owners recorded for the
/// container and the content of the merged adjustment, so neither splitting a
/// change across plugins nor an owner record that is missing (a pure removal
/// in a request from a runtime that does not record those) gets a change past
/// it. Checks, first failure wins: OCI hooks, seccomp, namespaces, required
/// plugins, sysctls (upstream's order), then the rejected fields.
#[derive(Debug, Clone)]
pub struct DefaultValidator {
    config: DefaultValidatorConfig,
    reject_fields: Vec<Field>,
    id: PluginId,
}

impl DefaultValidator {
    /// Index under which the validator takes part (upstream: `00`).
    pub const INDEX: &'static str = "00";
    /// Base name of the validator (upstream: `default-validator`).
    pub const NAME: &'static str = "default-validator";

    /// Creates a validator. Fails if `reject_fields` names an unknown field.
    pub fn new(config: DefaultValidatorConfig) -> Result<Self, Error> {
        let reject_fields = config
            .reject_fields
            .iter()
            .map(|name| {
                parse_field(name).ok_or_else(|| Error::InvalidConfig {
                    reason: format!("rejectFields: unknown field {name:?}"),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            config,
            reject_fields,
            id: PluginId::new(Self::INDEX, Self::NAME)?,
        })
    }

    /// The identity to report rejections under (`00-default-validator`).
    pub fn id(&self) -> &PluginId {
        &self.id
    }

    /// The configuration.
    pub fn config(&self) -> &DefaultValidatorConfig {
        &self.config
    }

    /// Whether the validator is enabled; a disabled one accepts everything.
    pub fn is_enabled(&self) -> bool {
        self.config.enable
    }

    /// Accepts or rejects container updates ([`Validator::validate_updates`]):
    /// the `rejectFields` rules apply to them as to adjustments.
    pub fn validate_updates(&self, v: &UpdateValidation<'_>) -> Result<(), Rejection> {
        if !self.config.enable {
            return Ok(());
        }
        let result = self.check_update_fields(v, None);
        if let Err(r) = &result {
            tracing::info!(
                operation = v.operation,
                reason = r.reason,
                "default validator rejects container updates"
            );
        }
        result
    }

    /// Accepts or rejects a merged adjustment.
    pub fn validate(&self, req: &ValidateContainerAdjustmentRequest) -> Result<(), Rejection> {
        if !self.config.enable {
            return Ok(());
        }
        let owners = req
            .owners
            .as_ref()
            .map(Ownership::from_wire)
            .unwrap_or_default();
        let container_id = req.container.as_ref().map_or("", |c| c.id.as_str());
        let cx = Check {
            req,
            owners: owners.container(container_id),
        };
        let result = self
            .check_hooks(&cx)
            .and_then(|()| self.check_seccomp(&cx))
            .and_then(|()| self.check_namespaces(&cx))
            .and_then(|()| self.check_required_plugins(req))
            .and_then(|()| self.check_sysctl(&cx))
            .and_then(|()| self.check_fields(&cx))
            .and_then(|()| {
                // The answers' updates of other containers.
                let v = UpdateValidation {
                    operation: "CreateContainer",
                    updates: &req.update,
                    owners: req.owners.as_ref(),
                    plugin: None,
                };
                self.check_update_fields(&v, Some(container_id))
            });
        if let Err(r) = &result {
            tracing::info!(
                container = container_id,
                reason = r.reason,
                "default validator rejects container adjustment"
            );
        }
        result
    }

    fn check_hooks(&self, cx: &Check<'_>) -> Result<(), Rejection> {
        if !self.config.reject_oci_hook_adjustment || !cx.touched(Field::OciHooks) {
            return Ok(());
        }
        let who = cx.blame(Field::OciHooks);
        Err(Rejection::new(
            format!(
                "{} attempted restricted OCI hook injection",
                plugins_phrase(&who)
            ),
            who,
        ))
    }

    fn check_seccomp(&self, cx: &Check<'_>) -> Result<(), Rejection> {
        if !cx.touched(Field::SeccompPolicy) {
            return Ok(());
        }
        let profile = cx
            .req
            .container
            .as_ref()
            .and_then(|c| c.linux.as_ref())
            .and_then(|l| l.seccomp_profile.as_ref())
            .map(|p| ProfileType::try_from(p.profile_type));
        let (rejected, kind) = match profile {
            None | Some(Ok(ProfileType::Unconfined)) => (
                self.config.reject_unconfined_seccomp_adjustment,
                "unconfined",
            ),
            Some(Ok(ProfileType::RuntimeDefault)) => (
                self.config.reject_runtime_default_seccomp_adjustment,
                "runtime default",
            ),
            Some(Ok(ProfileType::Localhost)) => {
                (self.config.reject_custom_seccomp_adjustment, "custom")
            }
            // A profile type we do not know: reject if any seccomp rule is on.
            Some(Err(_)) => (
                self.config.reject_unconfined_seccomp_adjustment
                    || self.config.reject_runtime_default_seccomp_adjustment
                    || self.config.reject_custom_seccomp_adjustment,
                "unknown-profile",
            ),
        };
        if !rejected {
            return Ok(());
        }
        let who = cx.blame(Field::SeccompPolicy);
        Err(Rejection::new(
            format!(
                "{} attempted restricted {kind} seccomp policy adjustment",
                plugins_phrase(&who)
            ),
            who,
        ))
    }

    fn check_namespaces(&self, cx: &Check<'_>) -> Result<(), Rejection> {
        if !self.config.reject_namespace_adjustment || !cx.touched(Field::Namespace) {
            return Ok(());
        }
        let detail: Vec<String> = cx
            .owners
            .map(|o| {
                o.compound_entries(Field::Namespace)
                    .map(|(ns, owner)| format!("{:?} (namespace {ns:?})", owner.plugin()))
                    .collect()
            })
            .unwrap_or_default();
        let who = cx.blame(Field::Namespace);
        let by = if detail.is_empty() {
            plugins_phrase(&who)
        } else {
            format!("plugin(s) {}", detail.join(", "))
        };
        Err(Rejection::new(
            format!("attempted restricted namespace adjustment by {by}"),
            who,
        ))
    }

    fn check_sysctl(&self, cx: &Check<'_>) -> Result<(), Rejection> {
        if !self.config.reject_sysctl_adjustment || !cx.touched(Field::Sysctl) {
            return Ok(());
        }
        let who = cx.blame(Field::Sysctl);
        // Upstream's wording: `plugin(s)` and the names unquoted.
        let by = if who.is_empty() {
            plugins_phrase(&who)
        } else {
            format!("plugin(s) {}", who.join(", "))
        };
        Err(Rejection::new(
            format!("attempted restricted sysctl adjustment by {by}"),
            who,
        ))
    }

    fn check_fields(&self, cx: &Check<'_>) -> Result<(), Rejection> {
        for &field in &self.reject_fields {
            let (touched, mut who, what) = if field == Field::Devices {
                devices_touched(cx)
            } else {
                (cx.touched(field), cx.blame(field), String::new())
            };
            if touched {
                who.sort();
                who.dedup();
                return Err(Rejection::new(
                    format!(
                        "attempted restricted {}{what} adjustment by {}",
                        field.as_str_name(),
                        plugins_phrase(&who)
                    ),
                    who,
                ));
            }
        }
        Ok(())
    }

    /// The `rejectFields` rules on container updates; `skip` is a
    /// container whose owners are an adjustment's, not updates.
    fn check_update_fields(
        &self,
        v: &UpdateValidation<'_>,
        skip: Option<&str>,
    ) -> Result<(), Rejection> {
        if self.reject_fields.is_empty() {
            return Ok(());
        }
        let owners = v.owners.map(Ownership::from_wire).unwrap_or_default();
        let sender: Vec<String> = v.plugin.map(str::to_owned).into_iter().collect();
        for &field in &self.reject_fields {
            let owned = owners
                .iter()
                .filter(|(id, _)| Some(*id) != skip)
                .map(|(id, o)| (id, owners_of(o, field)))
                .find(|(_, who)| !who.is_empty());
            let present = v.updates.iter().find(|u| {
                Some(u.container_id.as_str()) != skip
                    && u.linux
                        .as_ref()
                        .and_then(|l| l.resources.as_ref())
                        .is_some_and(|r| is_updated(r, field))
            });
            let (container, who) = match (owned, present) {
                (Some((id, who)), _) => (id.to_owned(), who),
                (None, Some(u)) => {
                    let who = owners
                        .container(&u.container_id)
                        .map(|o| owners_of(o, field))
                        .filter(|w| !w.is_empty())
                        .unwrap_or_else(|| sender.clone());
                    (u.container_id.clone(), who)
                }
                (None, None) => continue,
            };
            return Err(Rejection::new(
                format!(
                    "attempted restricted {} update of container {container:?} by {}",
                    field.as_str_name(),
                    plugins_phrase(&who)
                ),
                who,
            ));
        }
        Ok(())
    }

    fn check_required_plugins(
        &self,
        req: &ValidateContainerAdjustmentRequest,
    ) -> Result<(), Rejection> {
        let pod = req.pod.as_ref();
        let name = req.container.as_ref().map_or("", |c| c.name.as_str());
        let tolerate = self.config.tolerate_missing_plugins_annotation.as_str();
        if !tolerate.is_empty() {
            if let Some(v) = effective_annotation(pod, tolerate, name) {
                match parse_bool(v) {
                    Some(true) => return Ok(()),
                    Some(false) => {}
                    None => {
                        return Err(Rejection::new(
                            format!("invalid {tolerate} annotation {v:?}: not a boolean"),
                            Vec::new(),
                        ));
                    }
                }
            }
        }
        let mut required = self.config.required_plugins.clone();
        if let Some(v) = effective_annotation(pod, REQUIRED_PLUGINS_ANNOTATION, name) {
            let extra = parse_string_list(v).map_err(|e| {
                Rejection::new(
                    format!("invalid {REQUIRED_PLUGINS_ANNOTATION} annotation {v:?}: {e}"),
                    Vec::new(),
                )
            })?;
            required.extend(extra);
        }
        let mut missing: Vec<String> = Vec::new();
        for r in required {
            let present = req
                .plugins
                .iter()
                .any(|p| p.name == r || format!("{}-{}", p.index, p.name) == r);
            if !present && !missing.contains(&r) {
                missing.push(r);
            }
        }
        match missing.len() {
            0 => Ok(()),
            1 => Err(Rejection::new(
                format!("required plugin {:?} not present", missing.join(",")),
                missing,
            )),
            _ => Err(Rejection::new(
                format!("required plugins {:?} not present", missing.join(",")),
                missing,
            )),
        }
    }
}

impl Validator for DefaultValidator {
    fn validate(&self, request: &ValidateContainerAdjustmentRequest) -> Result<(), Rejection> {
        DefaultValidator::validate(self, request)
    }

    fn validate_updates(&self, request: &UpdateValidation<'_>) -> Result<(), Rejection> {
        DefaultValidator::validate_updates(self, request)
    }
}

/// Whether a container is given devices, by whom, and which kinds (for
/// the reason): `linux.devices` and CDI devices (with owners), and device
/// cgroup rules (`linux.resources.devices`, merged without an owner).
fn devices_touched(cx: &Check<'_>) -> (bool, Vec<String>, String) {
    let rules = cx
        .req
        .adjust
        .as_ref()
        .and_then(|a| a.linux.as_ref())
        .and_then(|l| l.resources.as_ref())
        .is_some_and(|r| !r.devices.is_empty());
    let kinds = [
        (cx.touched(Field::Devices), "devices"),
        (cx.touched(Field::CdiDevices), "CDI devices"),
        (rules, "device cgroup rules"),
    ];
    let named: Vec<&str> = kinds.iter().filter(|(t, _)| *t).map(|(_, n)| *n).collect();
    let mut who = cx.blame(Field::Devices);
    who.extend(cx.blame(Field::CdiDevices));
    let what = if named.is_empty() {
        String::new()
    } else {
        format!(" ({})", named.join(", "))
    };
    (!named.is_empty(), who, what)
}

/// The plugins owning `field` of one container, deduplicated, sorted.
fn owners_of(o: &ContainerOwners, field: Field) -> Vec<String> {
    let mut out: Vec<String> = o
        .owners_of(field)
        .into_iter()
        .map(|(_, owner)| owner.plugin().to_owned())
        .collect();
    out.sort();
    out.dedup();
    out
}

struct Check<'a> {
    req: &'a ValidateContainerAdjustmentRequest,
    owners: Option<&'a ContainerOwners>,
}

impl Check<'_> {
    /// Whether `field` of the container was changed: it has an owner, or the
    /// merged adjustment changes it.
    fn touched(&self, field: Field) -> bool {
        self.owners.is_some_and(|o| !o.owners_of(field).is_empty())
            || self
                .req
                .adjust
                .as_ref()
                .is_some_and(|a| is_adjusted(a, field))
    }

    /// Plugins owning `field`, deduplicated, sorted (`NN-name` sorts in call
    /// order).
    fn blame(&self, field: Field) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        if let Some(o) = self.owners {
            for (_, owner) in o.owners_of(field) {
                let p = owner.plugin().to_owned();
                if !out.contains(&p) {
                    out.push(p);
                }
            }
        }
        out.sort();
        out
    }
}

fn plugins_phrase(who: &[String]) -> String {
    match who {
        [] => "an unrecorded plugin".to_owned(),
        [one] => format!("plugin {one:?}"),
        many => format!("plugins {:?}", many.join(",")),
    }
}

fn parse_field(name: &str) -> Option<Field> {
    (1..=i32::MAX)
        .map_while(|n| Field::try_from(n).ok())
        .find(|f| f.as_str_name().eq_ignore_ascii_case(name))
}
