//! The ulimit-adjuster's allow-list: the `allow` section of its
//! configuration (see README.md, "Security"). Absent lists leave the
//! plugin as upstream's: any rlimit a pod annotates is set.

use std::collections::BTreeMap;

use nri_sample_common::fence::{
    ALLOW_KEY, ConfigError, Globs, Refused, check_namespace, read_config,
};
use nri_sample_common::goyaml::{Field, Shape};
use serde::Deserialize;

use crate::ulimits::{Ulimit, canonical_type};

/// The value of a ceiling that stands for no limit (`RLIM_INFINITY`).
pub const UNLIMITED: u64 = u64::MAX;

/// The `allow` section as written (absent keys `None`).
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct RawAllow {
    namespaces: Option<Vec<String>>,
    rlimits: Option<BTreeMap<String, String>>,
}

const CONFIG: Shape = Shape::Struct(&[
    Field::new("strict", Shape::Bool),
    Field::new(
        "allow",
        Shape::Struct(&[
            Field::new("namespaces", Shape::Seq(&Shape::Str)),
            Field::new("rlimits", Shape::Map(&Shape::Str)),
        ]),
    ),
]);

/// The allow-list in force. The default allows everything (upstream).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fence {
    namespaces: Globs,
    /// Allowed rlimits (canonical names) and the highest hard limit each
    /// may have.
    rlimits: Option<BTreeMap<String, u64>>,
}

fn ceiling(key: &str, v: &str) -> Result<u64, ConfigError> {
    let v = v.trim();
    if v.eq_ignore_ascii_case("unlimited") || v.eq_ignore_ascii_case("infinity") {
        return Ok(UNLIMITED);
    }
    v.parse().map_err(|_| ConfigError::Value {
        key: key.to_owned(),
        reason: format!("{v:?} is not a whole number or `unlimited`"),
    })
}

/// Reads the configuration: `strict` (when given) and the fence.
///
/// # Errors
///
/// [`ConfigError`]: not YAML, an unknown key, an unknown rlimit name or a
/// ceiling that is not a number in `allow`.
pub fn configure(text: &str) -> Result<(Option<bool>, Fence), ConfigError> {
    let cfg = read_config::<RawAllow>(text, &CONFIG)?;
    let rlimits = match cfg.allow.rlimits {
        None => None,
        Some(map) => {
            let mut out = BTreeMap::new();
            for (name, max) in map {
                let key = format!("{ALLOW_KEY}.rlimits.{name}");
                let canon = canonical_type(&name).ok_or_else(|| ConfigError::Value {
                    key: key.clone(),
                    reason: format!("unknown rlimit {name:?}"),
                })?;
                if out.insert(canon.clone(), ceiling(&key, &max)?).is_some() {
                    return Err(ConfigError::Allow(format!(
                        "{canon} is given twice in {ALLOW_KEY}.rlimits"
                    )));
                }
            }
            Some(out)
        }
    };
    Ok((
        cfg.strict,
        Fence {
            namespaces: Globs::new(cfg.allow.namespaces),
            rlimits,
        },
    ))
}

fn show(n: u64) -> String {
    if n == UNLIMITED {
        "unlimited".to_owned()
    } else {
        n.to_string()
    }
}

impl Fence {
    /// Checks the namespace of pod `namespace/pod`, which has an annotation
    /// `key` (before it is decoded).
    ///
    /// # Errors
    ///
    /// [`Refused`] when the namespace is not allowed.
    pub fn check_namespace(&self, namespace: &str, pod: &str, key: &str) -> Result<(), Refused> {
        check_namespace(&self.namespaces, namespace, pod, key)
    }

    /// Checks the rlimits annotated through `key` for pod `namespace/pod`.
    ///
    /// # Errors
    ///
    /// [`Refused`]: the pod's namespace, an rlimit not listed, or a hard
    /// limit above its ceiling (the soft limit is at most the hard one).
    pub fn check(
        &self,
        namespace: &str,
        pod: &str,
        key: &str,
        list: &[Ulimit],
    ) -> Result<(), Refused> {
        if list.is_empty() {
            return Ok(());
        }
        check_namespace(&self.namespaces, namespace, pod, key)?;
        let Some(allowed) = &self.rlimits else {
            return Ok(());
        };
        let rule = || {
            let items: Vec<String> = allowed
                .iter()
                .map(|(k, v)| format!("{k}: {}", show(*v)))
                .collect();
            format!("{ALLOW_KEY}.rlimits {{{}}}", items.join(", "))
        };
        for u in list {
            let value = format!(
                "{} (soft {}, hard {})",
                u.r#type,
                show(u.soft),
                show(u.hard)
            );
            match allowed.get(&u.r#type) {
                None => {
                    return Err(Refused::new(
                        format!("{namespace}/{pod}"),
                        key,
                        value,
                        rule(),
                    ));
                }
                Some(max) if u.hard > *max => {
                    return Err(Refused::new(
                        format!("{namespace}/{pod}"),
                        key,
                        value,
                        rule(),
                    ));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::ulimits::{UlimitError, adjustment};

    const FENCED: &str = "allow:\n  namespaces: [batch]\n  rlimits:\n    nofile: 65536\n    RLIMIT_CORE: 0\n    memlock: unlimited\n";
    const KEY: &str = "ulimits.noderesource.dev/container.c";

    fn run(
        f: &Fence,
        ns: &str,
        v: &str,
    ) -> Result<nri_plugin::api::ContainerAdjustment, UlimitError> {
        let a = BTreeMap::from([(KEY.to_owned(), v.to_owned())]);
        adjustment(&a, ns, "p", "c", false, f)
    }

    #[test]
    fn allowed() {
        let (_, f) = configure(FENCED).unwrap();
        for v in [
            "- {type: nofile, hard: 65536, soft: 1024}",
            "- {type: RLIMIT_NOFILE, hard: 10}",
            "- {type: core, hard: 0}",
            "- {type: memlock, hard: 18446744073709551615, soft: 18446744073709551615}",
            "",
        ] {
            run(&f, "batch", v).unwrap_or_else(|e| panic!("{v}: {e}"));
        }
        // No annotation, any namespace: untouched.
        assert!(run(&f, "default", "").unwrap().rlimits.is_empty());
    }

    #[test]
    fn refused() {
        let (_, f) = configure(FENCED).unwrap();
        let cases = [
            (
                "batch",
                "- {type: nofile, hard: 65537, soft: 1}",
                "RLIMIT_NOFILE (soft 1, hard 65537)",
            ),
            (
                "batch",
                "- {type: nproc, hard: 10}",
                "RLIMIT_NPROC (soft 0, hard 10)",
            ),
            (
                "batch",
                "[{type: nofile, hard: 1}, {type: core, hard: 1}]",
                "RLIMIT_CORE",
            ),
            (
                "default",
                "- {type: nofile, hard: 1}",
                "namespace \"default\"",
            ),
        ];
        for (ns, v, value) in cases {
            let Err(UlimitError::Refused(r)) = run(&f, ns, v) else {
                panic!("{v} not refused");
            };
            assert_eq!(r.pod, format!("{ns}/p"));
            assert_eq!(r.annotation, KEY);
            assert!(r.value.starts_with(value), "{}", r.value);
            if ns == "batch" {
                assert_eq!(
                    r.rule,
                    "allow.rlimits {RLIMIT_CORE: 0, RLIMIT_MEMLOCK: unlimited, RLIMIT_NOFILE: 65536}"
                );
            } else {
                assert_eq!(r.rule, "allow.namespaces [batch]");
            }
        }
    }

    /// The namespace is checked before the annotation is decoded.
    #[test]
    fn the_namespace_is_checked_before_decoding() {
        let (_, f) = configure(FENCED).unwrap();
        let heavy = format!("[{}]", "{type: nofile, extra: 1}, ".repeat(2_000));
        for v in ["- [", "[]", "{type: nofile}", heavy.as_str()] {
            let Err(UlimitError::Refused(r)) = run(&f, "default", v) else {
                panic!("{v} not refused for its namespace");
            };
            assert_eq!(r.value, "namespace \"default\"");
        }
        // A blank value asks for nothing.
        assert!(run(&f, "default", " ").unwrap().rlimits.is_empty());
    }

    #[test]
    fn default_is_upstream() {
        for text in ["", "strict: true", "allow: {}"] {
            let (_, f) = configure(text).unwrap();
            assert_eq!(f, Fence::default());
            let v = "- {type: nofile, hard: 18446744073709551615}\n- {type: core, hard: 1}";
            assert_eq!(run(&f, "default", v).unwrap().rlimits.len(), 2);
        }
    }

    /// The example of the DaemonSet's ConfigMap (deploy/ulimit-adjuster).
    #[test]
    fn the_deploy_example_is_a_valid_fence() {
        let cm = include_str!("../../../deploy/ulimit-adjuster/configmap.yaml");
        let doc = nri_sample_common::parse_yaml(cm).unwrap();
        let (_, f) = configure(doc["data"]["config.yaml"].as_str().unwrap()).unwrap();
        assert!(run(&f, "batch", "- {type: nofile, hard: 4096}").is_ok());
        assert!(run(&f, "batch", "- {type: memlock, hard: 1}").is_err());
    }

    #[test]
    fn bad_configuration() {
        for bad in [
            "allow: {rlimits: {files: 1}}",
            "allow: {rlimits: {nofile: lots}}",
            "allow: {rlimits: {nofile: 1, RLIMIT_NOFILE: 2}}",
            "allow: {rlimit: {}}",
            "allow: {rlimits: [nofile]}",
        ] {
            assert!(configure(bad).is_err(), "{bad}");
        }
    }
}
