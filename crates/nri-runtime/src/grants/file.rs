//! The `grants:` section of the runtime's configuration file (format in
//! `docs/runtime/config.md`).

use std::collections::BTreeMap;

use nri_api::Capability;
use serde::Deserialize;

use super::{Grant, GrantIdentity, PodSelector, check_name_pattern, parse_adjustment_kinds};

/// One grant in the file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct FileGrant {
    plugins: Vec<String>,
    role: Option<String>,
    #[serde(default)]
    identity: FileIdentity,
    #[serde(default)]
    adjust: Vec<String>,
    #[serde(default)]
    updates: bool,
    #[serde(default)]
    evictions: bool,
    #[serde(default)]
    unsolicited: bool,
    #[serde(default)]
    pods: FilePods,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileIdentity {
    #[serde(default)]
    uids: Vec<u32>,
    #[serde(default)]
    gids: Vec<u32>,
    #[serde(default)]
    executables: Vec<String>,
    pod: Option<FilePods>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FilePods {
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

impl From<FilePods> for PodSelector {
    fn from(p: FilePods) -> Self {
        PodSelector {
            namespaces: p.namespaces,
            labels: p.labels,
        }
    }
}

impl FileGrant {
    /// The grant, or what is wrong with entry `index` of the list.
    pub(crate) fn into_grant(self, index: usize) -> Result<Grant, String> {
        let at = |m: String| format!("grants[{index}]: {m}");
        if self.plugins.is_empty() {
            return Err(at("`plugins` lists no plugin name pattern".to_owned()));
        }
        for p in &self.plugins {
            check_name_pattern(p).map_err(at)?;
        }
        if self.identity.executables.iter().any(String::is_empty) {
            return Err(at("an empty executable pattern".to_owned()));
        }
        if self.role.as_deref().is_some_and(str::is_empty) {
            return Err(at("an empty role".to_owned()));
        }
        let mut allow = parse_adjustment_kinds(&self.adjust).map_err(at)?;
        if self.updates {
            allow.insert(Capability::UpdateContainers);
        }
        if self.evictions {
            allow.insert(Capability::EvictContainers);
        }
        Ok(Grant {
            plugins: self.plugins,
            role: self.role,
            identity: GrantIdentity {
                uids: self.identity.uids,
                gids: self.identity.gids,
                executables: self.identity.executables,
                pod: self.identity.pod.map(Into::into),
            },
            allow,
            unsolicited: self.unsolicited,
            pods: self.pods.into(),
        })
    }
}

/// The default validator's overrides for the plugins of one role
/// (`default-validator: roles:`), with our kebab-case keys.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct FileRole {
    reject_oci_hook_adjustment: Option<bool>,
    reject_runtime_default_seccomp_adjustment: Option<bool>,
    reject_unconfined_seccomp_adjustment: Option<bool>,
    reject_custom_seccomp_adjustment: Option<bool>,
    reject_namespace_adjustment: Option<bool>,
    reject_sysctl_adjustment: Option<bool>,
    reject_fields: Option<Vec<String>>,
}

impl From<FileRole> for nri_merge::validate::DefaultValidatorRole {
    fn from(f: FileRole) -> Self {
        let mut r = Self::default();
        r.reject_oci_hook_adjustment = f.reject_oci_hook_adjustment;
        r.reject_runtime_default_seccomp_adjustment = f.reject_runtime_default_seccomp_adjustment;
        r.reject_unconfined_seccomp_adjustment = f.reject_unconfined_seccomp_adjustment;
        r.reject_custom_seccomp_adjustment = f.reject_custom_seccomp_adjustment;
        r.reject_namespace_adjustment = f.reject_namespace_adjustment;
        r.reject_sysctl_adjustment = f.reject_sysctl_adjustment;
        r.reject_fields = f.reject_fields;
        r
    }
}
