//! The requests after a plugin that only appended to the container: the
//! previous request followed by what was appended ([`append_delta`]),
//! instead of the whole container encoded again
//! ([`CreatePayload::request`](super::CreatePayload::request)).

use nri_api::api::{Container, ContainerAdjustment, Hooks};
use nri_api::is_marked_for_removal;

/// What applying `a` to `current` adds, as a container to merge into it,
/// when the adjustment only appends: annotations set, env variables and
/// mounts whose keys `current` does not have, OCI hooks and CDI devices.
/// A protobuf decoder merges a second occurrence of a message field into
/// the first (repeated fields are concatenated, map entries set, the last
/// value wins), so the encoding of `current` followed by this container
/// decodes to exactly the container `CreateResult::apply` makes from
/// `current` and `a`. `None` when `a` removes, replaces or reorders
/// anything, or changes another field: then the whole container has to be
/// encoded again.
pub(crate) fn append_delta(current: &Container, a: &ContainerAdjustment) -> Option<Container> {
    let ContainerAdjustment {
        annotations,
        mounts,
        env,
        hooks,
        linux,
        rlimits,
        cdi_devices,
        args,
    } = a;
    if linux.is_some() || !rlimits.is_empty() || !args.is_empty() {
        return None;
    }
    if annotations
        .keys()
        .any(|k| is_marked_for_removal(k).is_some())
    {
        return None;
    }
    // Each key new to the container and given once (what `apply` appends
    // at the end rather than moving or replacing).
    let env_ok = env.iter().enumerate().all(|(i, e)| {
        let k = e.key.as_str();
        // A key with '=' never matches an entry's key: not worth a case.
        !k.contains('=')
            && is_marked_for_removal(k).is_none()
            && !current.env.iter().any(|x| env_has_key(x, k))
            && !env.iter().take(i).any(|p| p.key == k)
    });
    let mounts_ok = mounts.iter().enumerate().all(|(i, m)| {
        let k = m.destination.as_str();
        is_marked_for_removal(k).is_none()
            && !current.mounts.iter().any(|x| x.destination == k)
            && !mounts.iter().take(i).any(|p| p.destination == k)
    });
    if !env_ok || !mounts_ok {
        return None;
    }
    Some(Container {
        annotations: annotations.clone(),
        mounts: mounts.clone(),
        env: env
            .iter()
            .map(|e| format!("{}={}", e.key, e.value))
            .collect(),
        hooks: hooks.as_ref().filter(|h| **h != Hooks::default()).cloned(),
        cdi_devices: cdi_devices.clone(),
        ..Default::default()
    })
}

/// `env_key(entry) == key` for a `key` without '=', without scanning the
/// whole entry.
fn env_has_key(entry: &str, key: &str) -> bool {
    entry == key || (entry.as_bytes().get(key.len()) == Some(&b'=') && entry.starts_with(key))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeMap;

    use nri_api::api::{
        CdiDevice, CreateContainerRequest, Hook, KeyValue, LinuxContainerAdjustment, Mount,
        PodSandbox,
    };
    use nri_merge::{CreateResult, PluginId};
    use proptest::prelude::*;
    use prost::Message;

    use super::*;

    fn pid(i: usize) -> PluginId {
        PluginId::new(format!("{:02}", 10 + i), format!("p{i}")).unwrap()
    }

    /// One plugin's adjustment, over small key sets so keys collide with
    /// the container's and other plugins' (and some are removals).
    fn adjustment() -> impl Strategy<Value = ContainerAdjustment> {
        let key = "-?[a-c]";
        (
            proptest::collection::btree_map(key, "[x-z]", 0..3),
            proptest::collection::vec((key, "[x-z]"), 0..3),
            proptest::collection::vec(key, 0..3),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(annotations, env, mounts, hook, cdi, args)| {
                let mut a = ContainerAdjustment {
                    annotations,
                    env: env
                        .into_iter()
                        .map(|(key, value)| KeyValue { key, value })
                        .collect(),
                    mounts: mounts
                        .into_iter()
                        .map(|d| Mount {
                            destination: format!("{}/m", d),
                            source: "/src".into(),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                };
                if hook {
                    a.hooks = Some(Hooks {
                        prestart: vec![Hook {
                            path: "/bin/h".into(),
                            ..Default::default()
                        }],
                        ..Default::default()
                    });
                }
                if cdi {
                    a.cdi_devices.push(CdiDevice {
                        name: "vendor.com/dev=x".into(),
                    });
                }
                if args {
                    a.args = vec!["/bin/sh".into()];
                }
                a
            })
    }

    fn pristine() -> Container {
        Container {
            id: "ctr".into(),
            env: vec!["a=1".into(), "PATH=/bin".into(), "c".into()],
            annotations: BTreeMap::from([("b".into(), "1".into())]),
            mounts: vec![Mount {
                destination: "c/m".into(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn request_bytes(c: &Container) -> Vec<u8> {
        CreateContainerRequest {
            pod: None,
            container: Some(c.clone()),
        }
        .encode_to_vec()
    }

    proptest! {
        /// Whenever an adjustment counts as an append, the request before
        /// it followed by its delta decodes to the container `apply` makes.
        #[test]
        fn an_append_delta_merges_into_the_applied_container(
            adjustments in proptest::collection::vec(adjustment(), 1..5)
        ) {
            let mut r = CreateResult::new(PodSandbox::default(), pristine());
            for (i, a) in adjustments.iter().enumerate() {
                let before = request_bytes(r.container());
                let delta = append_delta(r.container(), a);
                if r.apply(&pid(i), Some(a.clone()), vec![], vec![]).is_err() {
                    continue;
                }
                if let Some(d) = delta {
                    let mut bytes = before;
                    prost::encoding::message::encode(2, &d, &mut bytes);
                    let got = CreateContainerRequest::decode(&bytes[..]).unwrap();
                    prop_assert_eq!(got.container.as_ref(), Some(r.container()));
                }
            }
        }
    }

    #[test]
    fn only_appends_have_a_delta() {
        let c = pristine();
        let env = |k: &str| ContainerAdjustment {
            env: vec![KeyValue {
                key: k.into(),
                value: "v".into(),
            }],
            ..Default::default()
        };
        assert!(append_delta(&c, &env("new")).is_some());
        // An existing variable is moved to the end, a removal removes.
        assert!(append_delta(&c, &env("a")).is_none());
        assert!(append_delta(&c, &env("-new")).is_none());
        let ann = |k: &str| ContainerAdjustment {
            annotations: BTreeMap::from([(k.into(), "v".into())]),
            ..Default::default()
        };
        // Setting an annotation, new or not, is a merge.
        assert!(append_delta(&c, &ann("b")).is_some());
        assert!(append_delta(&c, &ann("-b")).is_none());
        let args = ContainerAdjustment {
            args: vec!["x".into()],
            ..Default::default()
        };
        assert!(append_delta(&c, &args).is_none());
        let linux = ContainerAdjustment {
            linux: Some(LinuxContainerAdjustment::default()),
            ..Default::default()
        };
        assert!(append_delta(&c, &linux).is_none());
    }
}
