//! Field owners in the runtime's validation request, as the validators
//! behind the proxy see them.
//!
//! The runtime records every field the proxy's answer changed as owned by
//! the proxy: a CreateContainer answer carries the adjustment, not who
//! made it, so the wire has no way to tell the runtime which plugin
//! behind the proxy changed what. Validators directly on the runtime keep
//! seeing the proxy as the owner. For the validators behind the proxy it
//! can do better: it merged its plugins' answers itself and knows their
//! owners, so in the request it hands them each field the runtime says
//! the proxy owns names the plugin behind it that set (or removed) that
//! field instead.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use nri_api::api::{Field, FieldOwners, OwningPlugins};

/// Creations whose owners are kept until the runtime's validation request
/// for them arrives (the runtime validates right after it merged the
/// plugins' answers, within the same CreateContainer; creations the
/// runtime does not validate, e.g. because another plugin failed them,
/// fall out of this window).
const KEPT: usize = 64;

/// Upstream removal marker of an owner string (`-NN-name`).
const REMOVED: char = '-';

/// Separator of the owner list of OCI hooks.
const HOOKS_SEPARATOR: char = ',';

/// The owners of the proxy's recent creations, by container id.
#[derive(Debug, Default)]
pub(crate) struct Recent {
    kept: Mutex<VecDeque<(String, FieldOwners)>>,
}

impl Recent {
    /// Keeps the owners of the creations in `owners` (the proxy's merge).
    pub(crate) fn keep(&self, owners: OwningPlugins) {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        for entry in owners.owners {
            if kept.len() == KEPT {
                kept.pop_front();
            }
            kept.push_back(entry);
        }
    }

    /// Takes the kept owners of container `id`.
    fn take(&self, id: &str) -> Option<FieldOwners> {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        let at = kept.iter().position(|(c, _)| c == id)?;
        kept.remove(at).map(|(_, o)| o)
    }

    /// Rewrites the owners of container `id` in the runtime's `owners`:
    /// each field owned by `own` (the proxy's `NN-name`) names the
    /// plugin behind the proxy that owns it, where the proxy's merge
    /// recorded one.
    pub(crate) fn rewrite(&self, owners: &mut OwningPlugins, id: &str, own: &str) {
        let Some(ours) = self.take(id) else {
            return;
        };
        let Some(theirs) = owners.owners.get_mut(id) else {
            return;
        };
        for (field, owner) in &mut theirs.simple {
            if let Some(behind) = ours.simple.get(field) {
                if *field == Field::OciHooks as i32 {
                    *owner = replace_in_list(owner, own, behind);
                } else if names(owner, own) {
                    owner.clone_from(behind);
                }
            }
        }
        for (field, entries) in &mut theirs.compound {
            let Some(behind) = ours.compound.get(field) else {
                continue;
            };
            for (key, owner) in &mut entries.owners {
                if let Some(b) = behind.owners.get(key)
                    && names(owner, own)
                {
                    owner.clone_from(b);
                }
            }
        }
    }
}

/// Whether `owner` (`NN-name` or `-NN-name`) is `own`.
fn names(owner: &str, own: &str) -> bool {
    owner.strip_prefix(REMOVED).unwrap_or(owner) == own
}

/// The OCI hooks owner list `list` with `own` replaced by `behind` (a
/// list itself).
fn replace_in_list(list: &str, own: &str, behind: &str) -> String {
    let parts: Vec<&str> = list
        .split(HOOKS_SEPARATOR)
        .map(|p| if p == own { behind } else { p })
        .collect();
    parts.join(&HOOKS_SEPARATOR.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nri_api::api::CompoundFieldOwners;

    fn owners(id: &str, simple: &[(Field, &str)], env: &[(&str, &str)]) -> OwningPlugins {
        let f = FieldOwners {
            simple: simple
                .iter()
                .map(|(f, o)| (*f as i32, (*o).into()))
                .collect(),
            compound: [(
                Field::Env as i32,
                CompoundFieldOwners {
                    owners: env
                        .iter()
                        .map(|(k, o)| ((*k).into(), (*o).into()))
                        .collect(),
                },
            )]
            .into(),
        };
        OwningPlugins {
            owners: [(id.to_owned(), f)].into(),
        }
    }

    #[test]
    fn fields_the_proxy_owns_name_the_plugin_behind_it() {
        let recent = Recent::default();
        recent.keep(owners(
            "c1",
            &[(Field::MemLimit, "10-a"), (Field::OciHooks, "11-b,12-c")],
            &[("A", "10-a"), ("GONE", "-11-b")],
        ));
        let mut up = owners(
            "c1",
            &[
                (Field::MemLimit, "50-proxy"),
                (Field::CpuShares, "20-direct"),
                (Field::OciHooks, "20-direct,50-proxy"),
            ],
            &[("A", "50-proxy"), ("GONE", "-50-proxy"), ("D", "20-direct")],
        );
        recent.rewrite(&mut up, "c1", "50-proxy");
        let c = &up.owners["c1"];
        assert_eq!(c.simple[&(Field::MemLimit as i32)], "10-a");
        assert_eq!(c.simple[&(Field::CpuShares as i32)], "20-direct");
        assert_eq!(c.simple[&(Field::OciHooks as i32)], "20-direct,11-b,12-c");
        let env = &c.compound[&(Field::Env as i32)].owners;
        assert_eq!(env["A"], "10-a");
        assert_eq!(env["GONE"], "-11-b");
        assert_eq!(env["D"], "20-direct");
        // Taken: a second request for the same container is left alone.
        let mut again = owners("c1", &[(Field::MemLimit, "50-proxy")], &[]);
        recent.rewrite(&mut again, "c1", "50-proxy");
        assert_eq!(
            again.owners["c1"].simple[&(Field::MemLimit as i32)],
            "50-proxy"
        );
    }

    #[test]
    fn only_the_latest_creations_are_kept() {
        let recent = Recent::default();
        for i in 0..=KEPT {
            recent.keep(owners(&format!("c{i}"), &[(Field::MemLimit, "10-a")], &[]));
        }
        let mut first = owners("c0", &[(Field::MemLimit, "50-proxy")], &[]);
        recent.rewrite(&mut first, "c0", "50-proxy");
        assert_eq!(
            first.owners["c0"].simple[&(Field::MemLimit as i32)],
            "50-proxy"
        );
        let last = format!("c{KEPT}");
        let mut latest = owners(&last, &[(Field::MemLimit, "50-proxy")], &[]);
        recent.rewrite(&mut latest, &last, "50-proxy");
        assert_eq!(
            latest.owners[&last].simple[&(Field::MemLimit as i32)],
            "10-a"
        );
    }
}
