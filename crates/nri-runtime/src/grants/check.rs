//! What a plugin's answer changes, checked against its grant (pure; the
//! runtime's side, with the listing of pods, audit and metrics, is
//! `enforce.rs`).

use nri_api::api::{
    ContainerAdjustment, ContainerEviction, ContainerUpdate, LinuxContainerAdjustment, PodSandbox,
};
use nri_api::{Capability, CapabilitySet, adjustment_capabilities};

use super::GrantRef;
use super::kinds::{adjustment_kind_name, all_kinds, field_of};

/// What one answer (or unsolicited request) of a plugin changes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Changes<'a> {
    /// `CreateContainer`, `UpdateContainer`, `StopContainer`,
    /// `Synchronize`, `UpdateContainers`.
    pub(crate) operation: &'a str,
    /// The event's pod, if the event is about one.
    pub(crate) pod: Option<&'a PodSandbox>,
    /// The event's container id, if the event is about one.
    pub(crate) container: Option<&'a str>,
    /// The adjustment of the event's (new) container.
    pub(crate) adjust: Option<&'a ContainerAdjustment>,
    /// Container updates.
    pub(crate) updates: &'a [ContainerUpdate],
    /// Container evictions.
    pub(crate) evictions: &'a [ContainerEviction],
    /// Sent by the plugin by itself (`UpdateContainers`).
    pub(crate) unsolicited: bool,
}

impl<'a> Changes<'a> {
    /// An answer of `operation` about `pod` (and `container`).
    pub(crate) fn answer(
        operation: &'a str,
        pod: Option<&'a PodSandbox>,
        container: Option<&'a str>,
    ) -> Self {
        Changes {
            operation,
            pod,
            container,
            adjust: None,
            updates: &[],
            evictions: &[],
            unsolicited: false,
        }
    }

    /// Whether the answer changes nothing.
    pub(crate) fn is_empty(&self) -> bool {
        self.adjust.is_none() && self.updates.is_empty() && self.evictions.is_empty()
    }
}

/// An answer that goes beyond the plugin's grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violation {
    /// The field (`linux.sysctl`, `update`, `evict`, `pod`,
    /// `UpdateContainers`): the metric label and the audit's `field`.
    pub(crate) field: &'static str,
    /// The container it is about (empty: none).
    pub(crate) container: String,
    /// The whole story: the plugin, the operation, the field, the
    /// container and the grant.
    pub(crate) reason: String,
}

/// The capabilities a container update needs: updates, and the kinds of
/// the resources it sets.
fn update_capabilities(u: &ContainerUpdate) -> CapabilitySet {
    let mut set = CapabilitySet::from(Capability::UpdateContainers);
    if let Some(r) = u.linux.as_ref().and_then(|l| l.resources.as_ref()) {
        let as_adjustment = ContainerAdjustment {
            linux: Some(LinuxContainerAdjustment {
                resources: Some(r.clone()),
                ..Default::default()
            }),
            ..Default::default()
        };
        set = set.union(adjustment_capabilities(&as_adjustment));
    }
    set
}

impl GrantRef {
    /// Checks `ch` against the grant as far as it can be without knowing
    /// the pods of other containers; returns the containers (of updates
    /// and evictions, not the event's) whose pod must be looked up for the
    /// grant's [`PodSelector`](super::PodSelector).
    pub(crate) fn check<'c>(
        &self,
        plugin: &str,
        ch: &Changes<'c>,
    ) -> Result<Vec<&'c str>, Violation> {
        let g = &self.grant;
        let op = ch.operation;
        if ch.unsolicited && !g.unsolicited {
            return Err(Violation {
                field: "UpdateContainers",
                container: String::new(),
                reason: format!(
                    "{op} from plugin {plugin}: {self} does not allow unsolicited container updates ({})",
                    self.allowed()
                ),
            });
        }
        let event_container = ch.container.unwrap_or("");
        if let Some(a) = ch.adjust {
            let used = adjustment_capabilities(a);
            if let Some(c) = used.difference(g.allow).iter().next() {
                return Err(self.outside(plugin, op, c, event_container));
            }
            if !used.is_empty() {
                self.check_pod(plugin, op, event_container, ch.pod)?;
            }
        }
        let mut lookup = Vec::new();
        for u in ch.updates {
            let used = update_capabilities(u);
            // Updating at all first, then what the update sets.
            let outside = used.difference(g.allow);
            let first = [Capability::UpdateContainers]
                .into_iter()
                .filter(|c| outside.contains(*c))
                .chain(outside.iter())
                .next();
            if let Some(c) = first {
                return Err(self.outside(plugin, op, c, &u.container_id));
            }
            self.scope(plugin, ch, &u.container_id, &mut lookup)?;
        }
        for e in ch.evictions {
            if !g.allow.contains(Capability::EvictContainers) {
                let c = Capability::EvictContainers;
                return Err(self.outside(plugin, op, c, &e.container_id));
            }
            self.scope(plugin, ch, &e.container_id, &mut lookup)?;
        }
        Ok(lookup)
    }

    /// The pod check of a change to `container`: the event's container is
    /// checked against the event's pod now, another is added to `lookup`.
    fn scope<'c>(
        &self,
        plugin: &str,
        ch: &Changes<'c>,
        container: &'c str,
        lookup: &mut Vec<&'c str>,
    ) -> Result<(), Violation> {
        if self.grant.pods.is_any() {
            return Ok(());
        }
        if ch.container == Some(container) && ch.pod.is_some() {
            return self.check_pod(plugin, ch.operation, container, ch.pod);
        }
        if !lookup.contains(&container) {
            lookup.push(container);
        }
        Ok(())
    }

    /// Whether the grant's pods include `pod`, the pod of `container`
    /// (`None`: the runtime does not know the container).
    pub(crate) fn check_pod(
        &self,
        plugin: &str,
        op: &str,
        container: &str,
        pod: Option<&PodSandbox>,
    ) -> Result<(), Violation> {
        let sel = &self.grant.pods;
        if sel.is_any() {
            return Ok(());
        }
        let reason = match pod {
            Some(p) if sel.selects(&p.namespace, &p.labels) => return Ok(()),
            Some(p) => format!(
                "{op} answer of plugin {plugin} changes container {container:?} of pod {}/{}, outside the pods of {self} ({sel})",
                p.namespace, p.name
            ),
            None => format!(
                "{op} answer of plugin {plugin} changes container {container:?}, which the runtime does not list; {self} allows only {sel}"
            ),
        };
        Err(Violation {
            field: "pod",
            container: container.to_owned(),
            reason,
        })
    }

    fn outside(&self, plugin: &str, op: &str, c: Capability, container: &str) -> Violation {
        let field = field_of(c);
        let what = match c {
            Capability::UpdateContainers => format!("updates container {container:?}"),
            Capability::EvictContainers => format!("evicts container {container:?}"),
            _ => format!("sets {field} ({c}) of container {container:?}"),
        };
        Violation {
            field,
            container: container.to_owned(),
            reason: format!(
                "{op} answer of plugin {plugin} {what}, which {self} does not allow ({})",
                self.allowed()
            ),
        }
    }

    /// `it allows: annotations, rlimits; updates, no evictions, no
    /// unsolicited updates`.
    fn allowed(&self) -> String {
        let g = &self.grant;
        let kinds: Vec<&str> = g
            .allow
            .intersection(all_kinds())
            .iter()
            .map(adjustment_kind_name)
            .collect();
        let kinds = if kinds.is_empty() {
            "no adjustment".to_owned()
        } else {
            kinds.join(", ")
        };
        let yes_no = |yes: bool, what: &str| {
            if yes {
                what.to_owned()
            } else {
                format!("no {what}")
            }
        };
        format!(
            "it allows: {kinds}; {}, {}, {}",
            yes_no(g.allow.contains(Capability::UpdateContainers), "updates"),
            yes_no(g.allow.contains(Capability::EvictContainers), "evictions"),
            yes_no(g.unsolicited, "unsolicited updates"),
        )
    }
}
