//! Least-privilege plugins: what each plugin may do ([`Grant`]), and who
//! it must be to get it.
//!
//! With grants configured ([`Config::grants`](crate::Config::grants)), a
//! plugin is admitted only under the first grant whose name patterns
//! match its name and whose identity requirements ([`GrantIdentity`])
//! its kernel identity meets; a plugin no grant names is refused (deny by
//! default). Every answer of an admitted plugin is checked against its
//! grant before it is merged: an adjustment kind, a container update or
//! eviction, an unsolicited `UpdateContainers`, or a change to a pod
//! outside the grant's [`PodSelector`] is refused for that plugin (its
//! failure policy decides the event), naming the field and the grant,
//! with an audit event. Without grants, everything is allowed.
//!
//! The format in the configuration file and the threat model are in
//! `docs/runtime/security.md` of the repository.

mod check;
mod enforce;
pub(crate) mod file;
mod kinds;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use nri_api::CapabilitySet;
use nri_merge::{Participant, PluginId, PluginIdentity};

pub(crate) use check::{Changes, Violation};
pub(crate) use enforce::Admission;
pub use kinds::{adjustment_kind_name, parse_adjustment_kinds};

/// What one plugin (or several, by name pattern) may do, and who it must
/// be to get it.
///
/// ```
/// use nri_api::{Capability, CapabilitySet};
/// use nri_runtime::{Grant, GrantIdentity};
///
/// let mut identity = GrantIdentity::default();
/// identity.uids = vec![0];
/// let logger = Grant::new(["logger"])
///     .allow(CapabilitySet::of(&[Capability::AdjustAnnotations]))
///     .identity(identity);
/// assert!(logger.matches_name(&"10-logger".parse()?));
/// # Ok::<(), nri_merge::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Grant {
    /// Plugin name patterns, each matched against the plugin's `NN-name`
    /// and its base name: `*` matches any run of characters, `?` one.
    pub plugins: Vec<String>,
    /// The role of the plugins admitted under this grant: their name in
    /// errors and audit events, and the key of the default validator's
    /// per-role overrides (`DefaultValidatorConfig::roles`).
    pub role: Option<String>,
    /// Who a plugin must be to be admitted under this grant.
    pub identity: GrantIdentity,
    /// What the plugin may do: the adjustment kinds (`ADJUST_*`
    /// capabilities), container updates in its answers
    /// ([`Capability::UpdateContainers`](nri_api::Capability::UpdateContainers);
    /// each update also needs the kinds of the resources it sets) and
    /// evictions ([`Capability::EvictContainers`](nri_api::Capability::EvictContainers)).
    pub allow: CapabilitySet,
    /// Whether the plugin may send `UpdateContainers` by itself (its
    /// updates and evictions also need `allow`).
    pub unsolicited: bool,
    /// The pods whose containers the plugin may change (adjust, update,
    /// evict); empty: every pod.
    pub pods: PodSelector,
}

impl Grant {
    /// A grant for the plugins matching `patterns` that allows nothing.
    pub fn new<S: Into<String>>(patterns: impl IntoIterator<Item = S>) -> Self {
        Self {
            plugins: patterns.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// With `allow` what the plugin may do.
    #[must_use]
    pub fn allow(mut self, allow: CapabilitySet) -> Self {
        self.allow = allow;
        self
    }

    /// With the identity requirements.
    #[must_use]
    pub fn identity(mut self, identity: GrantIdentity) -> Self {
        self.identity = identity;
        self
    }

    /// With the pods whose containers the plugin may change.
    #[must_use]
    pub fn pods(mut self, pods: PodSelector) -> Self {
        self.pods = pods;
        self
    }

    /// With a role.
    #[must_use]
    pub fn role(mut self, role: impl Into<String>) -> Self {
        self.role = Some(role.into());
        self
    }

    /// With unsolicited `UpdateContainers` allowed (or not).
    #[must_use]
    pub fn unsolicited(mut self, allowed: bool) -> Self {
        self.unsolicited = allowed;
        self
    }

    /// Whether one of the grant's patterns matches plugin `id` (its
    /// `NN-name` or its base name).
    pub fn matches_name(&self, id: &PluginId) -> bool {
        self.plugins
            .iter()
            .any(|p| glob(p, id.as_str()) || glob(p, id.name()))
    }

    /// Why `identity` does not meet the grant's requirements, or `None`
    /// when it does.
    pub fn identity_mismatch(&self, identity: &PluginIdentity) -> Option<String> {
        self.identity.mismatch(identity)
    }
}

/// Who a plugin must be: every requirement given must hold (an empty list
/// or `None` requires nothing).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct GrantIdentity {
    /// The plugin's uid must be one of these.
    pub uids: Vec<u32>,
    /// The plugin's gid must be one of these.
    pub gids: Vec<u32>,
    /// The plugin's executable must match one of these patterns (`*`
    /// matches any run of characters, `/` included; `?` one).
    pub executables: Vec<String>,
    /// The plugin must run in a container of this runtime, in a pod these
    /// select.
    pub pod: Option<PodSelector>,
}

impl GrantIdentity {
    fn mismatch(&self, id: &PluginIdentity) -> Option<String> {
        if !self.uids.is_empty() && !id.uid.is_some_and(|u| self.uids.contains(&u)) {
            return Some(format!(
                "its uid {} is not one of {:?}",
                or_unknown(id.uid),
                self.uids
            ));
        }
        if !self.gids.is_empty() && !id.gid.is_some_and(|g| self.gids.contains(&g)) {
            return Some(format!(
                "its gid {} is not one of {:?}",
                or_unknown(id.gid),
                self.gids
            ));
        }
        if !self.executables.is_empty() {
            let Some(exe) = &id.executable else {
                return Some(format!(
                    "its executable is unknown (pid {}), and the grant requires one of {:?}",
                    or_unknown(id.pid),
                    self.executables
                ));
            };
            let exe = exe.to_string_lossy();
            if !self.executables.iter().any(|p| glob(p, &exe)) {
                return Some(format!(
                    "its executable {exe} matches none of {:?}",
                    self.executables
                ));
            }
        }
        if let Some(sel) = &self.pod {
            let Some(pod) = &id.pod else {
                return Some("it does not run in a container of this runtime".to_owned());
            };
            if let Some(why) = sel.mismatch(&pod.namespace, &pod.labels) {
                return Some(format!("its pod {}/{}: {why}", pod.namespace, pod.name));
            }
        }
        None
    }
}

fn or_unknown(v: Option<u32>) -> String {
    v.map_or_else(|| "unknown".to_owned(), |v| v.to_string())
}

/// Pods by namespace and labels: a pod is selected when its namespace is
/// one of `namespaces` (any, if empty) and it has every label of
/// `labels` with that value.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct PodSelector {
    /// Namespaces (empty: any).
    pub namespaces: Vec<String>,
    /// Labels a pod must have, with these values.
    pub labels: BTreeMap<String, String>,
}

impl PodSelector {
    /// Pods of these namespaces.
    pub fn namespaces<S: Into<String>>(namespaces: impl IntoIterator<Item = S>) -> Self {
        Self {
            namespaces: namespaces.into_iter().map(Into::into).collect(),
            labels: BTreeMap::new(),
        }
    }

    /// With label `key` required to be `value`.
    #[must_use]
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// Whether every pod is selected.
    pub fn is_any(&self) -> bool {
        self.namespaces.is_empty() && self.labels.is_empty()
    }

    /// Whether a pod of `namespace` with `labels` is selected.
    pub fn selects(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        self.mismatch(namespace, labels).is_none()
    }

    fn mismatch(&self, namespace: &str, labels: &BTreeMap<String, String>) -> Option<String> {
        if !self.namespaces.is_empty() && !self.namespaces.iter().any(|n| n == namespace) {
            return Some(format!(
                "namespace {namespace:?} is not one of {:?}",
                self.namespaces
            ));
        }
        for (k, v) in &self.labels {
            match labels.get(k) {
                Some(have) if have == v => {}
                Some(have) => return Some(format!("label {k}={have:?}, not {v:?}")),
                None => return Some(format!("no label {k} (wanted {v:?})")),
            }
        }
        None
    }
}

impl fmt::Display for PodSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_any() {
            return f.write_str("any pod");
        }
        let mut sep = "";
        if !self.namespaces.is_empty() {
            write!(f, "namespaces {:?}", self.namespaces)?;
            sep = ", ";
        }
        if !self.labels.is_empty() {
            let labels: Vec<String> = self
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            write!(f, "{sep}labels {}", labels.join(","))?;
        }
        Ok(())
    }
}

/// A grant as configured, with its place in the list (for reports).
#[derive(Debug, Clone)]
pub(crate) struct GrantRef {
    pub(crate) index: usize,
    pub(crate) grant: Arc<Grant>,
}

/// `grant #2 (role "gpu"; plugins gpu-*)`.
impl fmt::Display for GrantRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "grant #{}", self.index)?;
        match &self.grant.role {
            Some(r) => write!(f, " (role {r:?}; plugins {})", self.grant.plugins.join(",")),
            None => write!(f, " (plugins {})", self.grant.plugins.join(",")),
        }
    }
}

/// The grants of a runtime, in order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Grants {
    /// `None`: no grants configured, everything is allowed.
    list: Option<Vec<Arc<Grant>>>,
}

impl Grants {
    pub(crate) fn new(list: Option<&[Grant]>) -> Self {
        Self {
            list: list.map(|l| l.iter().cloned().map(Arc::new).collect()),
        }
    }

    /// The grant plugin `id` with `identity` is admitted under (`None`
    /// when no grants are configured), or why it is refused.
    pub(crate) fn admit(
        &self,
        id: &PluginId,
        identity: PluginIdentity,
    ) -> Result<Admission, String> {
        let Some(list) = &self.list else {
            return Ok(Admission::new(Participant::new(identity, None), None));
        };
        let mut reasons = Vec::new();
        for (index, grant) in list.iter().enumerate() {
            if !grant.matches_name(id) {
                continue;
            }
            let r = GrantRef {
                index,
                grant: grant.clone(),
            };
            match grant.identity_mismatch(&identity) {
                None => {
                    let role = grant.role.clone();
                    return Ok(Admission::new(Participant::new(identity, role), Some(r)));
                }
                Some(why) => reasons.push(format!("{r}: {why}")),
            }
        }
        if reasons.is_empty() {
            return Err(format!(
                "no grant names plugin {id} (grants are configured: a plugin without one is refused)"
            ));
        }
        Err(format!(
            "its identity ({identity}) meets no grant for its name: {}",
            reasons.join("; ")
        ))
    }
}

/// Checks the patterns of a grant: non-empty, and only characters of
/// plugin names (`A-Za-z0-9_.+-`) and `*` `?`.
pub(crate) fn check_name_pattern(p: &str) -> Result<(), String> {
    if p.is_empty() {
        return Err("an empty plugin name pattern".to_owned());
    }
    match p
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "_.+-*?".contains(*c)))
    {
        Some(c) => Err(format!(
            "plugin name pattern {p:?} has {c:?}: a pattern has the characters of plugin names (A-Za-z0-9_.+-) and * or ?"
        )),
        None => Ok(()),
    }
}

/// Glob match: `*` any run of characters (also none), `?` exactly one;
/// everything else literally.
pub(crate) fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(c) if *c == '?' || *c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        for (p, t, m) in [
            ("logger", "logger", true),
            ("logger", "loggers", false),
            ("*", "", true),
            ("*-logger", "10-logger", true),
            ("1?-*", "10-x", true),
            ("1?-*", "20-x", false),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "aXbY", false),
            ("/usr/bin/*", "/usr/bin/sub/dir", true),
            ("*.wasm", "/opt/nri/plugins/10-x.wasm", true),
            ("", "", true),
            ("", "x", false),
        ] {
            assert_eq!(glob(p, t), m, "{p} ~ {t}");
        }
    }

    #[test]
    fn name_patterns_are_checked() {
        assert!(check_name_pattern("10-logger").is_ok());
        assert!(check_name_pattern("*-dev?ce").is_ok());
        assert!(check_name_pattern("").is_err());
        assert!(check_name_pattern("a/b").is_err());
        assert!(check_name_pattern("a b").is_err());
    }
}
