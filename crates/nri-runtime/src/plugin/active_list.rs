//! The list of active plugins an event takes, and how the runtime knows
//! when every event that took a list has ended.

use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::Plugin;

/// The plugins active at one moment, in order (index, then name): what an
/// event takes when it starts (copy-on-write, shared by every event that
/// starts before the list changes).
#[derive(Debug, Default)]
pub(crate) struct ActiveList {
    plugins: Vec<Arc<Plugin>>,
    /// Newer instances of plugins that were active and are taking over
    /// from them, synchronizing (see `registry/handover.rs`): events of
    /// this list are delivered to them after their Synchronize.
    pub(crate) successors: Vec<Arc<Plugin>>,
    /// This list's link in the chain of lists (see [`Retirement`]).
    link: Arc<Retirement>,
}

/// One list's link in the chain of active lists: dropped (and its token
/// cancelled) once its list and every earlier list have been dropped,
/// that is once every event that took one of them has ended. Each link
/// holds the next one, so a link outlives the links before it; the chain
/// alive is as long as the oldest list still held by an event.
#[derive(Debug, Default)]
struct Retirement {
    done: CancellationToken,
    next: Mutex<Option<Arc<Retirement>>>,
}

impl Drop for Retirement {
    fn drop(&mut self) {
        self.done.cancel();
    }
}

impl ActiveList {
    /// The list that follows `prev` (the registry's current list).
    pub(crate) fn new(
        plugins: Vec<Arc<Plugin>>,
        successors: Vec<Arc<Plugin>>,
        prev: &ActiveList,
    ) -> Self {
        let link = Arc::new(Retirement::default());
        *crate::lock(&prev.link.next) = Some(link.clone());
        Self {
            plugins,
            successors,
            link,
        }
    }

    /// Cancelled once this list and every list before it are dropped,
    /// that is once every event that took one of them has ended (the
    /// registry holds the current list).
    pub(crate) fn retirement(&self) -> CancellationToken {
        self.link.done.clone()
    }
}

impl std::ops::Deref for ActiveList {
    type Target = Vec<Arc<Plugin>>;

    fn deref(&self) -> &Self::Target {
        &self.plugins
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list's retirement waits for every earlier list, not only its own:
    /// an event that took an older list still has the older instance in it.
    #[test]
    fn retirement_waits_for_every_earlier_list() {
        let l0 = Arc::new(ActiveList::default());
        let l1 = Arc::new(ActiveList::new(Vec::new(), Vec::new(), &l0));
        let l2 = Arc::new(ActiveList::new(Vec::new(), Vec::new(), &l1));
        let t1 = l1.retirement();
        let t2 = l2.retirement();
        drop(l1);
        assert!(
            !t1.is_cancelled(),
            "an event still holds the list before it"
        );
        drop(l0);
        assert!(t1.is_cancelled());
        assert!(!t2.is_cancelled(), "the current list is still held");
        drop(l2);
        assert!(t2.is_cancelled());
    }
}
