//! The annotation format of upstream's ulimit-adjuster and the adjustment
//! it gives.

use std::collections::BTreeMap;

use nri_plugin::api::ContainerAdjustment;
use nri_sample_common::fence::Refused;
use nri_sample_common::goyaml::{Field, MAX_EXCERPT_BYTES, Shape, excerpt};
use nri_sample_common::{AnnotationError, Source, decode_annotation};
use serde::{Deserialize, Serialize};

use crate::fence::Fence;

/// Current annotation key prefix.
pub const ULIMIT_KEY: &str = "ulimits.noderesource.dev";
/// Deprecated annotation key prefix, still read (after the current one).
pub const OLD_ULIMIT_KEY: &str = "ulimits.nri.containerd.io";
/// Prefix of the canonical rlimit names.
const RLIMIT_PREFIX: &str = "RLIMIT_";
/// The resource names upstream accepts (without `RLIMIT_`).
const VALID: [&str; 16] = [
    "AS",
    "CORE",
    "CPU",
    "DATA",
    "FSIZE",
    "LOCKS",
    "MEMLOCK",
    "MSGQUEUE",
    "NICE",
    "NOFILE",
    "NPROC",
    "RSS",
    "RTPRIO",
    "RTTIME",
    "SIGPENDING",
    "STACK",
];

/// Why an annotation was refused. Every variant names the annotation key.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum UlimitError {
    /// The value is not a YAML list of `{type, soft, hard}` as Go decodes
    /// it, or (strict mode) it has something Go ignores.
    #[error(transparent)]
    Parse(#[from] AnnotationError),
    /// Unknown resource name.
    #[error(
        "annotation {key:?}: failed to parse type: {raw:?} (expected one of RLIMIT_AS, RLIMIT_CORE, ..., RLIMIT_STACK, in any case, with or without RLIMIT_)"
    )]
    Type {
        /// The annotation key.
        key: String,
        /// The name as written.
        raw: String,
    },
    /// Soft limit above the hard limit.
    #[error(
        "annotation {key:?}: ulimit {rlimit:?} must have hard limit >= soft limit (hard {hard}, soft {soft})"
    )]
    SoftAboveHard {
        /// The annotation key.
        key: String,
        /// The canonical name.
        rlimit: String,
        /// Hard limit.
        hard: u64,
        /// Soft limit.
        soft: u64,
    },
    /// Outside the operator's allow-list (`allow` in the configuration).
    #[error(transparent)]
    Refused(#[from] Refused),
}

/// One entry of the annotation.
#[derive(Debug, Deserialize, Serialize, Default, Clone, PartialEq, Eq)]
#[serde(default)]
pub struct Ulimit {
    /// Resource name (`RLIMIT_NOFILE`, `nofile`, `rlimit_nofile`, ...).
    pub r#type: String,
    /// Hard limit (0 if missing).
    pub hard: u64,
    /// Soft limit (0 if missing).
    pub soft: u64,
}

const ULIMIT: Shape = Shape::Struct(&[
    Field::new("type", Shape::Str),
    Field::new("hard", Shape::Uint(64)),
    Field::new("soft", Shape::Uint(64)),
]);

/// Go's `strings.ToUpper`: each character to its single upper-case
/// character, if it has one.
fn go_upper(s: &str) -> String {
    s.chars()
        .map(|c| {
            let mut u = c.to_uppercase();
            match (u.next(), u.next()) {
                (Some(one), None) => one,
                _ => c,
            }
        })
        .collect()
}

/// The canonical `RLIMIT_*` name of `raw`, as upstream normalises it
/// (upper case, one `RLIMIT_` prefix removed, then added back).
pub fn canonical_type(raw: &str) -> Option<String> {
    let upper = go_upper(raw);
    let name = upper.strip_prefix(RLIMIT_PREFIX).unwrap_or(&upper);
    VALID
        .contains(&name)
        .then(|| format!("{RLIMIT_PREFIX}{name}"))
}

/// The annotation of container `ctr` (key and value), current key first.
/// Only container-scoped keys exist.
pub fn find_annotation<'a>(
    annotations: &'a BTreeMap<String, String>,
    ctr: &str,
) -> Option<(String, &'a str)> {
    [
        format!("{ULIMIT_KEY}/container.{ctr}"),
        format!("{OLD_ULIMIT_KEY}/container.{ctr}"),
    ]
    .into_iter()
    .find_map(|k| annotations.get(&k).map(|v| (k, v.as_str())))
}

/// The rlimits annotated for container `ctr` of pod `pod` (key, canonical
/// entries), or `None` without an annotation. Only container-scoped keys
/// exist. With `strict`, what Go ignores (unknown or repeated keys) is
/// refused.
///
/// # Errors
///
/// [`UlimitError`] naming the key and the problem.
pub fn parse_ulimits(
    annotations: &BTreeMap<String, String>,
    pod: &str,
    ctr: &str,
    strict: bool,
) -> Result<Option<(String, Vec<Ulimit>)>, UlimitError> {
    let Some((key, value)) = find_annotation(annotations, ctr) else {
        return Ok(None);
    };
    // Upstream: an empty value means nothing to do.
    if value.is_empty() {
        return Ok(None);
    }
    let src = Source {
        pod,
        container: ctr,
        annotation: &key,
        value,
    };
    let mut list: Vec<Ulimit> = decode_annotation(&src, &Shape::Seq(&ULIMIT), &Vec::new(), strict)?;
    for u in &mut list {
        u.r#type = canonical_type(&u.r#type).ok_or_else(|| UlimitError::Type {
            key: key.clone(),
            raw: excerpt(&u.r#type, MAX_EXCERPT_BYTES).into_owned(),
        })?;
    }
    if let Some(u) = list.iter().find(|u| u.hard < u.soft) {
        return Err(UlimitError::SoftAboveHard {
            key: key.clone(),
            rlimit: u.r#type.clone(),
            hard: u.hard,
            soft: u.soft,
        });
    }
    Ok(Some((key, list)))
}

/// The adjustment for container `ctr` of pod `namespace/pod` with
/// `annotations`: one rlimit per entry, in order, if `fence` allows them
/// all. Empty without an annotation. The pod's namespace is checked
/// against the fence before the annotation is decoded.
///
/// # Errors
///
/// See [`parse_ulimits`]; [`UlimitError::Refused`] outside the fence.
pub fn adjustment(
    annotations: &BTreeMap<String, String>,
    namespace: &str,
    pod: &str,
    ctr: &str,
    strict: bool,
    fence: &Fence,
) -> Result<ContainerAdjustment, UlimitError> {
    let mut adjust = ContainerAdjustment::default();
    if let Some((key, value)) = find_annotation(annotations, ctr) {
        if !value.trim().is_empty() {
            fence.check_namespace(namespace, pod, &key)?;
        }
    }
    if let Some((key, list)) = parse_ulimits(annotations, pod, ctr, strict)? {
        fence.check(namespace, pod, &key, &list)?;
        tracing::debug!(
            %key,
            rlimits = %nri_sample_common::listing(
                list.iter()
                    .map(|u| format!("{} (soft {}, hard {})", u.r#type, u.soft, u.hard))
            ),
            "adjust rlimits"
        );
        for u in list {
            adjust.add_rlimit(u.r#type, u.hard, u.soft);
        }
    }
    Ok(adjust)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn unfenced(
        a: &BTreeMap<String, String>,
        pod: &str,
        ctr: &str,
        strict: bool,
    ) -> Result<ContainerAdjustment, UlimitError> {
        adjustment(a, "default", pod, ctr, strict, &Fence::default())
    }

    fn ann(k: &str, v: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(k.to_owned(), v.to_owned())])
    }

    #[test]
    fn names_normalised() {
        assert_eq!(canonical_type("nofile").as_deref(), Some("RLIMIT_NOFILE"));
        assert_eq!(
            canonical_type("rlimit_memlock").as_deref(),
            Some("RLIMIT_MEMLOCK")
        );
        assert_eq!(
            canonical_type("RLIMIT_NPROC").as_deref(),
            Some("RLIMIT_NPROC")
        );
        assert_eq!(canonical_type("ULIMIT_NOFILE"), None);
        assert_eq!(canonical_type("RLIMIT_RLIMIT_NOFILE"), None);
        assert_eq!(canonical_type(""), None);
        // Go's ToUpper maps the long s to S.
        assert_eq!(
            canonical_type("\u{17f}tack").as_deref(),
            Some("RLIMIT_STACK")
        );
    }

    #[test]
    fn go_number_rules_and_lenient_keys() {
        let k = "ulimits.noderesource.dev/container.c";
        let a = ann(k, "- {type: nofile, hard: 4096.0, soft: 1e3, max: 9}");
        let adj = unfenced(&a, "p", "c", false).unwrap();
        assert_eq!((adj.rlimits[0].hard, adj.rlimits[0].soft), (4096, 1000));
        let e = unfenced(&a, "p", "c", true).unwrap_err();
        assert!(e.to_string().contains("max"), "{e}");
        let a = ann(k, "- {type: nofile, hard: 2, hard: 3}");
        assert_eq!(unfenced(&a, "p", "c", false).unwrap().rlimits[0].hard, 3);
        assert!(unfenced(&a, "p", "c", true).is_err());
        for bad in [
            "- {type: nofile, hard: 1.5}",
            "- {type: nofile, hard: '1'}",
            "- {type: 1}",
        ] {
            assert!(unfenced(&ann(k, bad), "p", "c", false).is_err(), "{bad}");
        }
    }

    #[test]
    fn sample_annotation_legacy_key() {
        let a = ann(
            "ulimits.nri.containerd.io/container.sleep",
            "- type: memlock\n  hard: 987654\n  soft: 645321\n- type: RLIMIT_NOFILE\n  hard: 4096\n  soft: 1024\n- type: nproc\n  hard: 9000\n",
        );
        let adj = unfenced(&a, "p", "sleep", false).unwrap();
        let got: Vec<_> = adj
            .rlimits
            .iter()
            .map(|r| (r.r#type.as_str(), r.hard, r.soft))
            .collect();
        assert_eq!(
            got,
            [
                ("RLIMIT_MEMLOCK", 987654, 645321),
                ("RLIMIT_NOFILE", 4096, 1024),
                ("RLIMIT_NPROC", 9000, 0)
            ]
        );
        assert!(
            unfenced(&a, "p", "other", false)
                .unwrap()
                .rlimits
                .is_empty()
        );
    }

    #[test]
    fn current_key_wins() {
        let mut a = ann(
            "ulimits.nri.containerd.io/container.c",
            "- {type: core, hard: 1}",
        );
        a.insert(
            "ulimits.noderesource.dev/container.c".into(),
            "- {type: cpu, hard: 2, soft: 2}".into(),
        );
        let adj = unfenced(&a, "p", "c", false).unwrap();
        assert_eq!(adj.rlimits.len(), 1);
        assert_eq!(adj.rlimits[0].r#type, "RLIMIT_CPU");
    }

    #[test]
    fn pod_keys_are_not_read() {
        let a = ann("ulimits.noderesource.dev/pod", "- {type: core, hard: 1}");
        assert!(unfenced(&a, "p", "c", false).unwrap().rlimits.is_empty());
        let a = ann("ulimits.noderesource.dev/container.c", "");
        assert!(unfenced(&a, "p", "c", false).unwrap().rlimits.is_empty());
    }

    #[test]
    fn errors_name_the_key() {
        let k = "ulimits.noderesource.dev/container.c";
        let e = unfenced(&ann(k, "- type: foo\n  hard: 1"), "p", "c", false).unwrap_err();
        assert_eq!(
            e,
            UlimitError::Type {
                key: k.into(),
                raw: "foo".into()
            }
        );
        assert!(e.to_string().contains(k));
        let e = unfenced(
            &ann(k, "- {type: nofile, hard: 1, soft: 2}"),
            "p",
            "c",
            false,
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                UlimitError::SoftAboveHard {
                    hard: 1,
                    soft: 2,
                    ..
                }
            ),
            "{e}"
        );
        for bad in [
            "- {type: nofile, hard: -1}",
            "{type: nofile}",
            "- [",
            "- {type: nofile, hard: lots}",
        ] {
            let e = unfenced(&ann(k, bad), "p", "c", false).unwrap_err();
            assert!(matches!(e, UlimitError::Parse { .. }), "{bad}: {e}");
            assert!(e.to_string().contains(k), "{e}");
        }
    }
}
