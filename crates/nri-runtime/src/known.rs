//! The containers the runtime knows, which bound the updates and evictions
//! one message of a plugin may carry (see `peer.rs`).
//!
//! A container is known from when its creation guard is released after a
//! successful CreateContainer (the runtime has stored it then), or from a
//! listing that has it, until its RemoveContainer (noted when the event
//! starts and again when it ends: a listing asked for in between still has
//! the container, which the runtime forgets after the event). Each listing (for a
//! plugin's Synchronize) is the runtime's truth as of when it was asked
//! for, and reconciles the set:
//!
//! * a container removed after the listing was asked for is not added
//!   back by it, though the listing may still have it;
//! * a container known since before the listing was asked for that the
//!   listing does not have is forgotten: the runtime no longer has it (it
//!   gave up on it without saying so, or removed it without an event).
//!
//! So the set is what the runtime has, give or take the creations and
//! removals since the last listing.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use nri_api::api::Container;

#[derive(Debug, Default)]
struct State {
    /// Known containers, with the epoch at which each became known.
    ids: HashMap<String, u64>,
    /// Bumped when a listing is asked for: a listing's epoch.
    epoch: u64,
    /// Listings asked for and not yet reconciled (or given up).
    listings: usize,
    /// While listings are outstanding: containers removed, with the epoch
    /// of their removal.
    removed: HashMap<String, u64>,
}

/// The ids of the containers the runtime knows.
#[derive(Debug, Default)]
pub(crate) struct KnownContainers(Mutex<State>);

/// A listing asked for: reconcile with [`KnownContainers::listed`], or drop
/// it (the listing failed).
#[derive(Debug)]
pub(crate) struct Listing {
    known: Arc<KnownContainers>,
    epoch: u64,
}

impl Drop for Listing {
    fn drop(&mut self) {
        let mut st = self.known.lock();
        st.listings = st.listings.saturating_sub(1);
        if st.listings == 0 {
            st.removed.clear();
        }
    }
}

impl KnownContainers {
    fn lock(&self) -> MutexGuard<'_, State> {
        crate::lock(&self.0)
    }

    /// The runtime has the container (it released the creation guard of a
    /// successful CreateContainer).
    pub(crate) fn created(&self, id: &str) {
        let mut st = self.lock();
        let epoch = st.epoch;
        st.removed.remove(id);
        st.ids.entry(id.to_owned()).or_insert(epoch);
    }

    /// The container was removed (RemoveContainer).
    pub(crate) fn removed(&self, id: &str) {
        let mut st = self.lock();
        st.ids.remove(id);
        if st.listings > 0 {
            let epoch = st.epoch;
            st.removed.insert(id.to_owned(), epoch);
        }
    }

    /// A listing is about to be asked for.
    pub(crate) fn begin_listing(self: &Arc<Self>) -> Listing {
        let mut st = self.lock();
        st.epoch += 1;
        st.listings += 1;
        Listing {
            known: self.clone(),
            epoch: st.epoch,
        }
    }

    /// Reconciles the set with what `listing` returned (see the module
    /// documentation).
    pub(crate) fn listed(&self, listing: Listing, containers: &[Container]) {
        let listed: HashSet<&str> = containers.iter().map(|c| c.id.as_str()).collect();
        let mut st = self.lock();
        let since = listing.epoch;
        st.ids
            .retain(|id, added| *added >= since || listed.contains(id.as_str()));
        for id in listed {
            let removed_since = st.removed.get(id).is_some_and(|r| *r >= since);
            if !removed_since && !st.ids.contains_key(id) {
                st.ids.insert(id.to_owned(), since);
            }
        }
        drop(st);
        drop(listing);
    }

    /// How many containers are known.
    pub(crate) fn count(&self) -> usize {
        self.lock().ids.len()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    fn ctr(id: &str) -> Container {
        Container {
            id: id.into(),
            ..Default::default()
        }
    }

    fn ids(k: &KnownContainers) -> BTreeSet<String> {
        k.lock().ids.keys().cloned().collect()
    }

    #[test]
    fn a_removal_during_a_listing_is_not_undone_by_it() {
        let k = Arc::new(KnownContainers::default());
        k.created("c");
        let listing = k.begin_listing();
        // The runtime listed c, then removed it.
        let snapshot = [ctr("c")];
        k.removed("c");
        k.listed(listing, &snapshot);
        assert_eq!(k.count(), 0);
    }

    #[test]
    fn a_container_the_runtime_no_longer_has_is_forgotten_by_a_listing() {
        let k = Arc::new(KnownContainers::default());
        k.created("kept");
        k.created("abandoned");
        let listing = k.begin_listing();
        // Created while the listing ran: not in it, but kept.
        k.created("new");
        k.listed(listing, &[ctr("kept")]);
        assert_eq!(ids(&k), ["kept", "new"].map(String::from).into());
    }

    /// One step of a generated history.
    #[derive(Debug, Clone)]
    enum Op {
        /// The runtime stores container `n` and releases its guard.
        Create(u8),
        /// The runtime gives up on container `n` after its CreateContainer
        /// (drops the guard without storing it, no RemoveContainer).
        Abandon(u8),
        /// RemoveContainer of `n`.
        Remove(u8),
        /// A listing is asked for (at most a few outstanding).
        Ask,
        /// The runtime takes the snapshot of outstanding listing `i`.
        Snap(u8),
        /// Outstanding listing `i` is reconciled (or, if `fail`, given up).
        Done(u8, bool),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..8).prop_map(Op::Create),
            1 => (0u8..8).prop_map(Op::Abandon),
            3 => (0u8..8).prop_map(Op::Remove),
            2 => Just(Op::Ask),
            2 => (0u8..3).prop_map(Op::Snap),
            2 => ((0u8..3), any::<bool>()).prop_map(|(i, f)| Op::Done(i, f)),
        ]
    }

    proptest! {
        /// Whatever the interleaving of creations, creations the runtime
        /// gave up on without saying so, removals and listings (several
        /// outstanding, some failing): a container removed is never known
        /// again until it is created again (no listing brings it back),
        /// and once things settle one listing makes the set exactly what
        /// the runtime has.
        #[test]
        fn the_known_set_follows_the_runtime(ops in proptest::collection::vec(op(), 0..60)) {
            let k = Arc::new(KnownContainers::default());
            let mut stored: BTreeSet<String> = BTreeSet::new();
            let mut removed: BTreeSet<String> = BTreeSet::new();
            // Outstanding listings: the listing and, once taken, its snapshot.
            let mut outstanding: Vec<(Listing, Option<Vec<Container>>)> = Vec::new();
            for op in ops {
                match op {
                    Op::Create(n) => {
                        let id = format!("c{n}");
                        stored.insert(id.clone());
                        removed.remove(&id);
                        k.created(&id);
                    }
                    Op::Abandon(n) => {
                        let id = format!("c{n}");
                        if !stored.contains(&id) {
                            removed.remove(&id);
                            k.created(&id);
                        }
                    }
                    Op::Remove(n) => {
                        let id = format!("c{n}");
                        stored.remove(&id);
                        removed.insert(id.clone());
                        k.removed(&id);
                    }
                    Op::Ask if outstanding.len() < 3 => {
                        outstanding.push((k.begin_listing(), None));
                    }
                    Op::Ask => {}
                    Op::Snap(i) => {
                        if let Some((_, snap @ None)) = outstanding.get_mut(usize::from(i)) {
                            *snap = Some(stored.iter().map(|id| ctr(id)).collect());
                        }
                    }
                    Op::Done(i, fail) => {
                        let i = usize::from(i);
                        if i < outstanding.len() && outstanding[i].1.is_some() {
                            let (listing, snap) = outstanding.remove(i);
                            if fail {
                                drop(listing);
                            } else {
                                k.listed(listing, &snap.unwrap_or_default());
                            }
                        }
                    }
                }
                let known = ids(&k);
                prop_assert!(
                    known.is_disjoint(&removed),
                    "removed containers known again: {:?}",
                    known.intersection(&removed).collect::<Vec<_>>()
                );
            }
            // Settle: the outstanding listings end (failed, or taken now).
            for (listing, snap) in outstanding.drain(..) {
                match snap {
                    Some(s) => k.listed(listing, &s),
                    None => drop(listing),
                }
            }
            prop_assert!(k.lock().removed.is_empty(), "no removal kept once no listing is outstanding");
            let listing = k.begin_listing();
            let snap: Vec<Container> = stored.iter().map(|id| ctr(id)).collect();
            k.listed(listing, &snap);
            prop_assert_eq!(ids(&k), stored);
        }
    }
}
