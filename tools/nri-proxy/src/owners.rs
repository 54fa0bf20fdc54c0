//! Field owners and the plugins that took part in the runtime's
//! validation request, as the validators behind the proxy see them.
//!
//! The proxy keeps, per recent creation, the plugins behind it that took
//! part in it (none when it answered the runtime without them) and who
//! set which field; the runtime's validation request for that container
//! lists those plugins in the proxy's place, so a `required-plugins` check
//! behind the proxy fails a creation the plugins never saw.
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

use nri_api::api::{Field, FieldOwners, OwningPlugins, PluginInstance};
use nri_runtime::PluginId;

/// Creations kept until the runtime's validation request
/// for them arrives (the runtime validates right after it merged the
/// plugins' answers, within the same CreateContainer; creations the
/// runtime does not validate, e.g. because another plugin failed them,
/// fall out of this window).
const KEPT: usize = 64;

/// Upstream removal marker of an owner string (`-NN-name`).
const REMOVED: char = '-';

/// Separator of the owner list of OCI hooks.
const HOOKS_SEPARATOR: char = ',';

/// What the proxy knows of one of its recent creations.
#[derive(Debug, Default)]
pub(crate) struct Handled {
    /// Who behind the proxy owns which field of the container.
    owners: Option<FieldOwners>,
    /// The plugins behind the proxy that took part (none when the proxy
    /// answered without them).
    pub(crate) plugins: Vec<PluginInstance>,
}

/// The proxy's recent creations, by container id.
#[derive(Debug, Default)]
pub(crate) struct Recent {
    kept: Mutex<VecDeque<(String, Handled)>>,
}

impl Recent {
    /// Keeps what the proxy knows of the creation of container `id`: the
    /// owners its merge recorded (`owners`) and the plugins that took part.
    pub(crate) fn keep(&self, id: &str, mut owners: OwningPlugins, plugins: Vec<PluginId>) {
        let handled = Handled {
            owners: owners.owners.remove(id),
            plugins: plugins
                .iter()
                .map(|p| PluginInstance {
                    name: p.name().to_owned(),
                    index: p.index().to_owned(),
                })
                .collect(),
        };
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.len() == KEPT {
            kept.pop_front();
        }
        kept.push_back((id.to_owned(), handled));
    }

    /// Takes what is kept of the creation of container `id`.
    pub(crate) fn take(&self, id: &str) -> Option<Handled> {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        let at = kept.iter().position(|(c, _)| c == id)?;
        kept.remove(at).map(|(_, h)| h)
    }
}

impl Handled {
    /// Rewrites the owners of container `id` in the runtime's `owners`:
    /// each field owned by `own` (the proxy's `NN-name`) names the plugin
    /// behind the proxy that owns it, where the proxy's merge recorded
    /// one.
    pub(crate) fn rewrite(&self, owners: &mut OwningPlugins, id: &str, own: &str) {
        let Some(ours) = &self.owners else {
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
#[allow(clippy::unwrap_used)]
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
        let a = PluginId::new("10", "a").unwrap();
        recent.keep(
            "c1",
            owners(
                "c1",
                &[(Field::MemLimit, "10-a"), (Field::OciHooks, "11-b,12-c")],
                &[("A", "10-a"), ("GONE", "-11-b")],
            ),
            vec![a],
        );
        let mut up = owners(
            "c1",
            &[
                (Field::MemLimit, "50-proxy"),
                (Field::CpuShares, "20-direct"),
                (Field::OciHooks, "20-direct,50-proxy"),
            ],
            &[("A", "50-proxy"), ("GONE", "-50-proxy"), ("D", "20-direct")],
        );
        let handled = recent.take("c1").unwrap();
        assert_eq!(handled.plugins.len(), 1);
        handled.rewrite(&mut up, "c1", "50-proxy");
        let c = &up.owners["c1"];
        assert_eq!(c.simple[&(Field::MemLimit as i32)], "10-a");
        assert_eq!(c.simple[&(Field::CpuShares as i32)], "20-direct");
        assert_eq!(c.simple[&(Field::OciHooks as i32)], "20-direct,11-b,12-c");
        let env = &c.compound[&(Field::Env as i32)].owners;
        assert_eq!(env["A"], "10-a");
        assert_eq!(env["GONE"], "-11-b");
        assert_eq!(env["D"], "20-direct");
        // Taken: nothing is kept for a second request.
        assert!(recent.take("c1").is_none());
    }

    #[test]
    fn only_the_latest_creations_are_kept() {
        let recent = Recent::default();
        for i in 0..=KEPT {
            let id = format!("c{i}");
            recent.keep(
                &id,
                owners(&id, &[(Field::MemLimit, "10-a")], &[]),
                Vec::new(),
            );
        }
        assert!(recent.take("c0").is_none());
        let last = format!("c{KEPT}");
        let mut latest = owners(&last, &[(Field::MemLimit, "50-proxy")], &[]);
        recent
            .take(&last)
            .unwrap()
            .rewrite(&mut latest, &last, "50-proxy");
        assert_eq!(
            latest.owners[&last].simple[&(Field::MemLimit as i32)],
            "10-a"
        );
    }
}
