//! The default validator's rules per plugin: its global `reject*`
//! settings, overridden for the plugins of a role
//! ([`DefaultValidatorRole`]).

use std::collections::BTreeMap;

use nri_api::api::Field;
use serde::{Deserialize, Serialize};

use crate::Participants;
use crate::error::Error;

/// Overrides of the [`DefaultValidator`](super::DefaultValidator)'s
/// `reject*` settings for the plugins of one role (the role of the grant
/// a plugin was admitted under): a setting left out (`None`) is the
/// global one. An override may relax a rule (a trusted role may inject
/// OCI hooks where nobody else may) or tighten it.
///
/// Deserializes from the same keys as [`DefaultValidatorConfig`](super::DefaultValidatorConfig)
/// (`rejectOCIHookAdjustment`, ..., and the snake-case aliases).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct DefaultValidatorRole {
    /// Overrides `rejectOCIHookAdjustment`.
    #[serde(
        rename = "rejectOCIHookAdjustment",
        alias = "reject_oci_hook_adjustment"
    )]
    pub reject_oci_hook_adjustment: Option<bool>,
    /// Overrides `rejectRuntimeDefaultSeccompAdjustment`.
    #[serde(
        rename = "rejectRuntimeDefaultSeccompAdjustment",
        alias = "reject_runtime_default_seccomp_adjustment"
    )]
    pub reject_runtime_default_seccomp_adjustment: Option<bool>,
    /// Overrides `rejectUnconfinedSeccompAdjustment`.
    #[serde(
        rename = "rejectUnconfinedSeccompAdjustment",
        alias = "reject_unconfined_seccomp_adjustment"
    )]
    pub reject_unconfined_seccomp_adjustment: Option<bool>,
    /// Overrides `rejectCustomSeccompAdjustment`.
    #[serde(
        rename = "rejectCustomSeccompAdjustment",
        alias = "reject_custom_seccomp_adjustment"
    )]
    pub reject_custom_seccomp_adjustment: Option<bool>,
    /// Overrides `rejectNamespaceAdjustment`.
    #[serde(
        rename = "rejectNamespaceAdjustment",
        alias = "reject_namespace_adjustment"
    )]
    pub reject_namespace_adjustment: Option<bool>,
    /// Overrides `rejectSysctlAdjustment`.
    #[serde(rename = "rejectSysctlAdjustment", alias = "reject_sysctl_adjustment")]
    pub reject_sysctl_adjustment: Option<bool>,
    /// Replaces `rejectFields` (the fields the role's plugins may not
    /// change; an empty list: none).
    #[serde(rename = "rejectFields", alias = "reject_fields")]
    pub reject_fields: Option<Vec<String>>,
}

/// The settings a rule reads, resolved for one plugin.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Rules {
    pub(super) hooks: bool,
    pub(super) runtime_default_seccomp: bool,
    pub(super) unconfined_seccomp: bool,
    pub(super) custom_seccomp: bool,
    pub(super) namespaces: bool,
    pub(super) sysctl: bool,
    pub(super) fields: Vec<Field>,
}

/// The global rules and those of each role.
#[derive(Debug, Clone, Default)]
pub(super) struct RuleBook {
    pub(super) global: Rules,
    roles: BTreeMap<String, Rules>,
}

impl RuleBook {
    /// The rule book of a configuration. Fails on an unknown field name.
    pub(super) fn new(
        global: Rules,
        roles: &BTreeMap<String, DefaultValidatorRole>,
    ) -> Result<Self, Error> {
        let mut book = RuleBook {
            global,
            roles: BTreeMap::new(),
        };
        for (name, role) in roles {
            let g = &book.global;
            let fields = match &role.reject_fields {
                Some(names) => parse_fields(names, &format!("roles.{name}.rejectFields"))?,
                None => g.fields.clone(),
            };
            let rules = Rules {
                hooks: role.reject_oci_hook_adjustment.unwrap_or(g.hooks),
                runtime_default_seccomp: role
                    .reject_runtime_default_seccomp_adjustment
                    .unwrap_or(g.runtime_default_seccomp),
                unconfined_seccomp: role
                    .reject_unconfined_seccomp_adjustment
                    .unwrap_or(g.unconfined_seccomp),
                custom_seccomp: role
                    .reject_custom_seccomp_adjustment
                    .unwrap_or(g.custom_seccomp),
                namespaces: role.reject_namespace_adjustment.unwrap_or(g.namespaces),
                sysctl: role.reject_sysctl_adjustment.unwrap_or(g.sysctl),
                fields,
            };
            book.roles.insert(name.clone(), rules);
        }
        Ok(book)
    }

    /// The rules of plugin `plugin` (`NN-name`): its role's, else the
    /// global ones.
    pub(super) fn of(&self, participants: &Participants<'_>, plugin: &str) -> &Rules {
        participants
            .role(plugin)
            .and_then(|r| self.roles.get(r))
            .unwrap_or(&self.global)
    }

    /// Whether `rule` holds for anyone: globally or in some role.
    pub(super) fn anyone(&self, rule: impl Fn(&Rules) -> bool) -> bool {
        rule(&self.global) || self.roles.values().any(rule)
    }

    /// Every field some rule rejects, each once, global ones first.
    pub(super) fn all_fields(&self) -> Vec<Field> {
        let mut out = self.global.fields.clone();
        for r in self.roles.values() {
            for f in &r.fields {
                if !out.contains(f) {
                    out.push(*f);
                }
            }
        }
        out
    }

    /// Of `owners` (plugins, `NN-name`), those whose rules say `rule`;
    /// `None` when that is nobody. With no owner (a change no plugin is
    /// recorded for), the global rule decides, blaming nobody.
    pub(super) fn restricted(
        &self,
        participants: &Participants<'_>,
        owners: Vec<String>,
        changed: bool,
        rule: impl Fn(&Rules) -> bool,
    ) -> Option<Vec<String>> {
        if owners.is_empty() {
            return (changed && rule(&self.global)).then(Vec::new);
        }
        let who: Vec<String> = owners
            .into_iter()
            .filter(|o| rule(self.of(participants, o)))
            .collect();
        (!who.is_empty()).then_some(who)
    }
}

/// Parses `Field` enum names (case-insensitive); `key` names the setting
/// in errors.
pub(super) fn parse_fields(names: &[String], key: &str) -> Result<Vec<Field>, Error> {
    names
        .iter()
        .map(|name| {
            parse_field(name).ok_or_else(|| Error::InvalidConfig {
                reason: format!("{key}: unknown field {name:?}"),
            })
        })
        .collect()
}

fn parse_field(name: &str) -> Option<Field> {
    (1..=i32::MAX)
        .map_while(|n| Field::try_from(n).ok())
        .find(|f| f.as_str_name().eq_ignore_ascii_case(name))
}
