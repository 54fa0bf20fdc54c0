//! Mounts.

use std::cmp::Ordering;
use std::path::Path;

use nri_api::api;
use oci_spec::runtime::{Mount, Spec};

use crate::Error;
use crate::util::{self, non_empty, non_empty_vec, split_marker};

/// Number of '/' in the lexically cleaned path (Go's `filepath.Clean`),
/// the primary sort key upstream uses for mounts.
fn depth(dest: &str) -> usize {
    let rooted = dest.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for p in dest.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|l| *l != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            p => parts.push(p),
        }
    }
    if rooted {
        parts.len().max(1)
    } else {
        parts.len().saturating_sub(1)
    }
}

fn dest_str(m: &Mount) -> String {
    m.destination().to_string_lossy().into_owned()
}

/// Upstream's mount order: fewer path separators first, then destination.
fn order(a: &Mount, b: &Mount) -> Ordering {
    let (da, db) = (dest_str(a), dest_str(b));
    depth(&da).cmp(&depth(&db)).then_with(|| da.cmp(&db))
}

fn same_dest(m: &Mount, dest: &str) -> bool {
    m.destination() == Path::new(dest)
}

/// Removes every mount whose destination is marked for removal, then adds
/// or replaces (by destination) the new mounts, then sorts all mounts the
/// way upstream does (stable: parents before children). A new mount with
/// `rshared` (`rslave`) propagation makes the rootfs propagation `rshared`
/// (at least `rslave`), as upstream does; checking the host side of the
/// mount is left to the runtime.
pub(crate) fn mounts(spec: &mut Spec, adj: &[api::Mount]) -> Result<(), Error> {
    if adj.is_empty() {
        return Ok(());
    }
    let mut removals = Vec::new();
    let mut additions: Vec<Mount> = Vec::new();
    for m in adj {
        if m.destination.is_empty() {
            return Err(Error::MissingField {
                field: "mounts",
                what: "mount destination",
            });
        }
        let (dest, removal) = split_marker("mounts.destination", &m.destination)?;
        if removal {
            removals.push(dest);
            continue;
        }
        let mut o = Mount::default();
        o.set_destination(dest.into())
            .set_typ(non_empty(&m.r#type))
            .set_source(non_empty(&m.source).map(Into::into))
            .set_options(non_empty_vec(&m.options));
        // A later addition for the same destination wins.
        additions.retain(|a| !same_dest(a, dest));
        additions.push(o);
    }

    let mut propagation: Option<&'static str> = None;
    for m in &additions {
        for opt in m.options().iter().flatten() {
            match opt.as_str() {
                "rshared" => propagation = Some("rshared"),
                "rslave" if propagation != Some("rshared") => propagation = Some("rslave"),
                _ => {}
            }
        }
    }

    let list = spec.mounts_mut().get_or_insert_with(Vec::new);
    list.retain(|m| !removals.iter().any(|d| same_dest(m, d)));
    for add in additions {
        list.retain(|m| m.destination() != add.destination());
        list.push(add);
    }
    list.sort_by(order);

    if let Some(p) = propagation {
        let linux = util::linux(spec);
        let current = linux.rootfs_propagation().as_deref();
        let keep = p == "rslave" && matches!(current, Some("rshared" | "rslave"));
        if !keep {
            linux.set_rootfs_propagation(Some(p.to_owned()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::depth;

    #[test]
    fn depth_matches_go_clean_then_count() {
        assert_eq!(depth("/"), 1);
        assert_eq!(depth("/proc"), 1);
        assert_eq!(depth("/dev/pts"), 2);
        assert_eq!(depth("/dev//pts/"), 2);
        assert_eq!(depth("/a/./b/../c"), 2);
        assert_eq!(depth("/../a"), 1);
        assert_eq!(depth("a"), 0);
        assert_eq!(depth("a/b"), 1);
        assert_eq!(depth("../a"), 1);
    }
}
