//! The built-in default validator.

use nri_api::api::{Field, ValidateContainerAdjustmentRequest, security_profile::ProfileType};
use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use super::presence::{is_adjusted, is_updated};
use super::roles::{DefaultValidatorRole, RuleBook, Rules, parse_fields};
use super::yaml::parse_string_list;
use super::{
    REQUIRED_PLUGINS_ANNOTATION, Rejection, UpdateValidation, Validator, effective_annotation,
    parse_bool,
};
use crate::error::Error;
use crate::{ContainerOwners, Ownership, Participants, PluginId};

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
    /// Our addition: overrides of the `reject*` settings for the plugins
    /// of a role (the role of the grant a plugin was admitted under; see
    /// `docs/runtime/security.md`), by role name (`roles`). A change is
    /// rejected when a plugin that owns it may not make it under its
    /// role's rules (the global ones for a plugin without a role); a
    /// change no plugin is recorded for is judged by the global rules.
    #[serde(rename = "roles")]
    pub roles: BTreeMap<String, DefaultValidatorRole>,
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
    rules: RuleBook,
    id: PluginId,
}

impl DefaultValidator {
    /// Index under which the validator takes part (upstream: `00`).
    pub const INDEX: &'static str = "00";
    /// Base name of the validator (upstream: `default-validator`).
    pub const NAME: &'static str = "default-validator";

    /// Creates a validator. Fails if `reject_fields` (or a role's) names
    /// an unknown field.
    pub fn new(config: DefaultValidatorConfig) -> Result<Self, Error> {
        let global = Rules {
            hooks: config.reject_oci_hook_adjustment,
            runtime_default_seccomp: config.reject_runtime_default_seccomp_adjustment,
            unconfined_seccomp: config.reject_unconfined_seccomp_adjustment,
            custom_seccomp: config.reject_custom_seccomp_adjustment,
            namespaces: config.reject_namespace_adjustment,
            sysctl: config.reject_sysctl_adjustment,
            fields: parse_fields(&config.reject_fields, "rejectFields")?,
        };
        let rules = RuleBook::new(global, &config.roles)?;
        Ok(Self {
            config,
            rules,
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

    /// Accepts or rejects a merged adjustment, without knowing who the
    /// plugins are (every plugin is judged by the global rules).
    pub fn validate(&self, req: &ValidateContainerAdjustmentRequest) -> Result<(), Rejection> {
        self.validate_with(req, Participants::none())
    }

    /// Accepts or rejects a merged adjustment; each plugin that owns a
    /// change is judged by its role's rules (`participants` gives its
    /// role).
    pub fn validate_with(
        &self,
        req: &ValidateContainerAdjustmentRequest,
        participants: Participants<'_>,
    ) -> Result<(), Rejection> {
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
            participants,
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
                    participants,
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
        let Some(who) = cx.restricted(&self.rules, Field::OciHooks, |r| r.hooks) else {
            return Ok(());
        };
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
        let (rule, kind): (fn(&Rules) -> bool, &str) = match profile {
            None | Some(Ok(ProfileType::Unconfined)) => (|r| r.unconfined_seccomp, "unconfined"),
            Some(Ok(ProfileType::RuntimeDefault)) => {
                (|r| r.runtime_default_seccomp, "runtime default")
            }
            Some(Ok(ProfileType::Localhost)) => (|r| r.custom_seccomp, "custom"),
            // A profile type we do not know: reject if any seccomp rule is on.
            Some(Err(_)) => (
                |r| r.unconfined_seccomp || r.runtime_default_seccomp || r.custom_seccomp,
                "unknown-profile",
            ),
        };
        let Some(who) = cx.restricted(&self.rules, Field::SeccompPolicy, rule) else {
            return Ok(());
        };
        Err(Rejection::new(
            format!(
                "{} attempted restricted {kind} seccomp policy adjustment",
                plugins_phrase(&who)
            ),
            who,
        ))
    }

    fn check_namespaces(&self, cx: &Check<'_>) -> Result<(), Rejection> {
        let Some(who) = cx.restricted(&self.rules, Field::Namespace, |r| r.namespaces) else {
            return Ok(());
        };
        let detail: Vec<String> = cx
            .owners
            .map(|o| {
                o.compound_entries(Field::Namespace)
                    .filter(|(_, owner)| who.iter().any(|w| w == owner.plugin()))
                    .map(|(ns, owner)| format!("{:?} (namespace {ns:?})", owner.plugin()))
                    .collect()
            })
            .unwrap_or_default();
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
        let Some(who) = cx.restricted(&self.rules, Field::Sysctl, |r| r.sysctl) else {
            return Ok(());
        };
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
        for field in self.rules.all_fields() {
            let rule = |r: &Rules| r.fields.contains(&field);
            let (who, what) = if field == Field::Devices {
                devices_restricted(cx, &self.rules, rule)
            } else {
                (cx.restricted(&self.rules, field, rule), String::new())
            };
            if let Some(mut who) = who {
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
        let fields = self.rules.all_fields();
        if fields.is_empty() {
            return Ok(());
        }
        let owners = v.owners.map(Ownership::from_wire).unwrap_or_default();
        let sender: Vec<String> = v.plugin.map(str::to_owned).into_iter().collect();
        let book = &self.rules;
        let p = &v.participants;
        for field in fields {
            let rule = |r: &Rules| r.fields.contains(&field);
            let owned = owners
                .iter()
                .filter(|(id, _)| Some(*id) != skip)
                .find_map(|(id, o)| {
                    let who = owners_of(o, field);
                    let changed = !who.is_empty();
                    book.restricted(p, who, changed, rule).map(|w| (id, w))
                });
            let present = || {
                v.updates.iter().find_map(|u| {
                    let touched = Some(u.container_id.as_str()) != skip
                        && u.linux
                            .as_ref()
                            .and_then(|l| l.resources.as_ref())
                            .is_some_and(|r| is_updated(r, field));
                    if !touched {
                        return None;
                    }
                    let who = owners
                        .container(&u.container_id)
                        .map(|o| owners_of(o, field))
                        .filter(|w| !w.is_empty())
                        .unwrap_or_else(|| sender.clone());
                    book.restricted(p, who, true, rule)
                        .map(|w| (u.container_id.as_str(), w))
                })
            };
            let Some((container, who)) = owned.or_else(present) else {
                continue;
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

    fn validate_with(
        &self,
        request: &ValidateContainerAdjustmentRequest,
        participants: Participants<'_>,
    ) -> Result<(), Rejection> {
        DefaultValidator::validate_with(self, request, participants)
    }

    fn validate_updates(&self, request: &UpdateValidation<'_>) -> Result<(), Rejection> {
        DefaultValidator::validate_updates(self, request)
    }
}

/// Whether a container is given devices by a plugin `rule` restricts
/// (see [`RuleBook::restricted`]), and which kinds (for the reason):
/// `linux.devices` and CDI devices (with owners), and device cgroup
/// rules (`linux.resources.devices`, merged without an owner, so judged
/// by the global rule).
fn devices_restricted(
    cx: &Check<'_>,
    book: &RuleBook,
    rule: impl Fn(&Rules) -> bool + Copy,
) -> (Option<Vec<String>>, String) {
    let rules = cx
        .req
        .adjust
        .as_ref()
        .and_then(|a| a.linux.as_ref())
        .and_then(|l| l.resources.as_ref())
        .is_some_and(|r| !r.devices.is_empty());
    let devices = cx.restricted(book, Field::Devices, rule);
    let cdi = cx.restricted(book, Field::CdiDevices, rule);
    let rules = rules && rule(&book.global);
    let kinds = [
        (devices.is_some(), "devices"),
        (cdi.is_some(), "CDI devices"),
        (rules, "device cgroup rules"),
    ];
    let named: Vec<&str> = kinds.iter().filter(|(t, _)| *t).map(|(_, n)| *n).collect();
    if named.is_empty() {
        return (None, String::new());
    }
    let mut who = devices.unwrap_or_default();
    who.extend(cdi.unwrap_or_default());
    (Some(who), format!(" ({})", named.join(", ")))
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
    participants: Participants<'a>,
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

    /// The plugins whose change of `field` `rule` forbids (see
    /// [`RuleBook::restricted`]); `None` when the change is allowed or
    /// there is none.
    fn restricted(
        &self,
        book: &RuleBook,
        field: Field,
        rule: impl Fn(&Rules) -> bool,
    ) -> Option<Vec<String>> {
        if !book.anyone(&rule) || !self.touched(field) {
            return None;
        }
        book.restricted(&self.participants, self.blame(field), true, rule)
    }
}

fn plugins_phrase(who: &[String]) -> String {
    match who {
        [] => "an unrecorded plugin".to_owned(),
        [one] => format!("plugin {one:?}"),
        many => format!("plugins {:?}", many.join(",")),
    }
}
