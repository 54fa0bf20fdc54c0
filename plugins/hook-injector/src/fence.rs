//! The hook-injector's allow-list: the `allow` section of its
//! configuration (see README.md, "Security").
//!
//! Hooks run on the host, started by the OCI runtime with its privileges;
//! the hook files are the administrator's, but a pod picks the hooks whose
//! conditions it meets, through its annotations, its command or its
//! mounts. The fence says which pods may get hooks (`namespaces`) and
//! which executables may be injected at all (`hookPaths`, path prefixes).
//! A hook outside it is never injected. When the pod asked for it through
//! an annotation (the hook's `when.annotations` matched), the creation
//! fails, as the other injectors fail a request outside their fence; when
//! the hook matched without one (`always`, a command, bind mounts) it is
//! left out with a warning, since the pod asked for nothing.

use nri_sample_common::fence::{
    ALLOW_KEY, ConfigError, Globs, PrefixKind, Prefixes, Refused, read_config,
};
use nri_sample_common::goyaml::{Field, Shape};
use serde::Deserialize;

use crate::hooks::{HookConfig, Target};

/// The `allow` section as written (absent keys `None`).
#[derive(Debug, Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct RawAllow {
    namespaces: Option<Vec<String>>,
    hook_paths: Option<Vec<String>>,
}

const CONFIG: Shape = Shape::Struct(&[Field::new(
    "allow",
    Shape::Struct(&[
        Field::new("namespaces", Shape::Seq(&Shape::Str)),
        Field::new("hookPaths", Shape::Seq(&Shape::Str)),
    ]),
)]);

/// The allow-list in force. The default allows everything (upstream).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fence {
    namespaces: Globs,
    hook_paths: Prefixes,
}

/// The pod a container belongs to, for the fence.
#[derive(Debug, Clone, Copy)]
pub struct Pod<'a> {
    /// Its namespace.
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
}

impl Fence {
    /// Reads the configuration (`allow`; the Go plugin takes none).
    ///
    /// # Errors
    ///
    /// [`ConfigError`]: not YAML, or an unknown key or a bad value in
    /// `allow`.
    pub fn configure(text: &str) -> Result<Fence, ConfigError> {
        let a = read_config::<RawAllow>(text, &CONFIG)?.allow;
        Ok(Fence {
            namespaces: Globs::new(a.namespaces),
            hook_paths: Prefixes::new(
                &format!("{ALLOW_KEY}.hookPaths"),
                a.hook_paths,
                PrefixKind::Path,
            )?,
        })
    }

    /// The rule `h` breaks for `pod`, if any.
    fn broken_rule(&self, pod: Pod<'_>, h: &HookConfig) -> Option<String> {
        if !self.namespaces.allows(pod.namespace) {
            return Some(format!(
                "{ALLOW_KEY}.namespaces {} (namespace {:?})",
                self.namespaces.describe(),
                pod.namespace
            ));
        }
        if !self.hook_paths.allows(&h.hook.path) {
            return Some(format!(
                "{ALLOW_KEY}.hookPaths {}",
                self.hook_paths.describe()
            ));
        }
        None
    }

    /// The hooks of `hooks` the container `target` of `pod` may get: those
    /// the fence allows, and those whose conditions cannot be evaluated
    /// (so the caller reports the error as before). A matching hook outside
    /// the fence is left out with a warning, or refused when an annotation
    /// selected it.
    ///
    /// # Errors
    ///
    /// [`Refused`] naming the pod, the annotation that selected the hook,
    /// its value and the rule.
    pub fn admit(
        &self,
        hooks: &[(String, HookConfig)],
        target: Target<'_>,
        pod: Pod<'_>,
    ) -> Result<Vec<(String, HookConfig)>, Refused> {
        let mut out = Vec::with_capacity(hooks.len());
        for (name, h) in hooks {
            let allowed = match h.when.matches(target) {
                Ok(false) => continue,
                Err(()) => true,
                Ok(true) => match self.broken_rule(pod, h) {
                    None => true,
                    Some(rule) => {
                        self.outside(name, h, target, pod, rule)?;
                        false
                    }
                },
            };
            if allowed {
                out.push((name.clone(), h.clone()));
            }
        }
        Ok(out)
    }

    fn outside(
        &self,
        name: &str,
        h: &HookConfig,
        target: Target<'_>,
        pod: Pod<'_>,
        rule: String,
    ) -> Result<(), Refused> {
        let by_annotation = h.when.annotations.iter().find_map(|(kp, vp)| {
            target
                .annotations
                .iter()
                .find(|(k, v)| kp.is_match(k) && vp.is_match(v))
        });
        let what = format!("hook file {name:?} ({:?})", h.hook.path);
        match by_annotation {
            Some((k, v)) => Err(Refused::new(
                format!("{}/{}", pod.namespace, pod.name),
                k.clone(),
                format!("{v:?}, which selects {what},"),
                rule,
            )),
            None => {
                tracing::warn!(
                    pod = %format!("{}/{}", pod.namespace, pod.name),
                    hook = %name,
                    path = %h.hook.path,
                    %rule,
                    "hook left out: outside the allow-list (no annotation asked for it)"
                );
                Ok(())
            }
        }
    }
}

#[cfg(test)]
#[path = "fence_tests.rs"]
mod tests;
