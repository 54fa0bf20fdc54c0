//! The collector of plugin results for one CreateContainer event.

use std::borrow::Borrow;

use nri_api::api::{
    Container, ContainerAdjustment, ContainerEviction, ContainerUpdate, CreateContainerRequest,
    CreateContainerResponse, PodSandbox,
};

use crate::adjust::merge_adjustment;
use crate::check::check_adjustment;
use crate::error::Error;
use crate::owners::Ownership;
use crate::plugin::PluginId;
use crate::updates::{Eviction, collect_evictions, merge_updates, note};

/// Collector of plugin results for one CreateContainer event, shaped like
/// upstream's `result` (containerd/nri `pkg/adaptation`): the request (the
/// pod, and the container as adjusted so far), the merged reply (one
/// adjustment, updates of other containers, evictions) and the owner of
/// every field.
///
/// For every plugin, in call order, the fan-out code sends
/// [`request`](Self::request) (the container as adjusted by earlier
/// plugins) and feeds the response to [`apply`](Self::apply). At the end,
/// [`into_response`](Self::into_response) (or the accessors) give the
/// runtime the merged reply; the validation request is built by
/// [`crate::validate::build_request`].
///
/// Every `apply` is all-or-nothing: when it returns an error, nothing of
/// that plugin's response was kept, so a failure policy may go on with the
/// next plugin. See [the crate docs](crate) for the canonical form of the
/// merged adjustment and the ownership rules.
///
/// `P` and `C` are how the pod and the pristine container are held: owned
/// (`CreateResult::new(pod, container)`) or borrowed from the caller for
/// the length of one event (`CreateResult::new(&pod, &container)`, as the
/// runtime's fan-out does), which spares copying them.
#[derive(Debug, Clone)]
pub struct CreateResult<P = PodSandbox, C = Container> {
    pod: P,
    pristine: C,
    /// The container as adjusted by the plugins applied so far; `None`
    /// until it is first asked for (so that with one plugin, or when only
    /// the last one adjusts it, it is never copied). Once it is there, each
    /// adjustment is written into it as it merges.
    container: Option<Container>,
    /// Every response that merged, in order: written into the container
    /// when it is first asked for, and replayed when a response fails to
    /// merge (see [`apply`](Self::apply)).
    applied: Vec<Applied>,
    reply: Reply,
    plugins: Vec<PluginId>,
}

/// One plugin's response that merged.
#[derive(Debug, Clone)]
struct Applied {
    plugin: PluginId,
    adjust: Option<ContainerAdjustment>,
    updates: Vec<ContainerUpdate>,
    evictions: Vec<ContainerEviction>,
}

/// What the plugins' responses merge into.
#[derive(Debug, Clone, Default)]
struct Reply {
    adjust: ContainerAdjustment,
    owners: Ownership,
    updates: Vec<ContainerUpdate>,
    evictions: Vec<Eviction>,
}

impl<P: Borrow<PodSandbox>, C: Borrow<Container>> CreateResult<P, C> {
    /// Starts collecting for the creation of `container` in `pod`.
    pub fn new(pod: P, container: C) -> Self {
        Self {
            pod,
            pristine: container,
            container: None,
            applied: Vec::new(),
            reply: Reply::default(),
            plugins: Vec::new(),
        }
    }

    /// The pod.
    pub fn pod(&self) -> &PodSandbox {
        self.pod.borrow()
    }

    /// The container as the runtime asked for it, before any plugin.
    pub fn pristine(&self) -> &Container {
        self.pristine.borrow()
    }

    /// The container as adjusted by the plugins applied so far: what the next
    /// plugin must see. (`&mut`: the container is copied, and the
    /// adjustments so far written into the copy, when it is first asked
    /// for; later adjustments are written into it as they merge.)
    pub fn container(&mut self) -> &Container {
        let pristine = self.pristine.borrow();
        if self.container.is_none() && self.applied.iter().any(|r| r.adjust.is_some()) {
            let mut container = pristine.clone();
            for r in &self.applied {
                if let Some(a) = &r.adjust {
                    reflect(&mut container, &r.plugin, a);
                }
            }
            self.container = Some(container);
        }
        self.container.as_ref().unwrap_or(pristine)
    }

    /// The CreateContainer request for the next plugin.
    pub fn request(&mut self) -> CreateContainerRequest {
        CreateContainerRequest {
            pod: Some(self.pod().clone()),
            container: Some(self.container().clone()),
        }
    }

    /// The merged adjustment so far (canonical form, see the crate docs).
    pub fn adjustment(&self) -> &ContainerAdjustment {
        &self.reply.adjust
    }

    /// Merged updates of other containers, one per container in order of
    /// first appearance.
    pub fn updates(&self) -> &[ContainerUpdate] {
        &self.reply.updates
    }

    /// Evictions, in plugin order, one per container.
    pub fn evictions(&self) -> &[Eviction] {
        &self.reply.evictions
    }

    /// Field owners, keyed by container id (the created container, and the
    /// containers updated by plugins).
    pub fn owners(&self) -> &Ownership {
        &self.reply.owners
    }

    /// Plugins that took part, in call order: every plugin whose response was
    /// applied, plus those given to [`note_plugin`](Self::note_plugin).
    pub fn plugins(&self) -> &[PluginId] {
        &self.plugins
    }

    /// Records that `plugin` took part without a response to apply (for
    /// instance an active plugin not subscribed to CreateContainer; upstream
    /// lists every active plugin in the validation request). Do not note a
    /// plugin whose call failed: then a validator requiring it rejects.
    pub fn note_plugin(&mut self, plugin: &PluginId) {
        note(&mut self.plugins, plugin);
    }

    /// Records one plugin's response: its adjustment of the container, its
    /// updates of other containers and its evictions.
    ///
    /// Errors: [`Error::Conflict`] when the plugin touches a field another
    /// plugin owns (or claims one key twice); [`Error::InvalidAdjustment`]
    /// for an adjustment no runtime can apply (a mount without destination,
    /// an unnamed env var, a negative limit...); [`Error::InvalidUpdate`] for an
    /// update or eviction of the container being created, or one without a
    /// container id. On error the collector is unchanged.
    pub fn apply(
        &mut self,
        plugin: &PluginId,
        adjust: Option<ContainerAdjustment>,
        updates: Vec<ContainerUpdate>,
        evictions: Vec<ContainerEviction>,
    ) -> Result<(), Error> {
        if let Some(a) = adjust.as_ref() {
            check_adjustment(plugin, a)?;
        }
        if adjust.is_some() || !updates.is_empty() || !evictions.is_empty() {
            let response = Applied {
                plugin: plugin.clone(),
                adjust,
                updates,
                evictions,
            };
            let pristine = self.pristine.borrow();
            // Merged in place. All or nothing: a response that fails to
            // merge may have left part of itself in the reply (and the
            // container), so they are rebuilt from the responses that
            // merged before it (rare: a conflict, an invalid update).
            if let Err(e) = (self.reply).merge(pristine, self.container.as_mut(), &response) {
                self.rebuild();
                return Err(e);
            }
            self.applied.push(response);
        }
        note(&mut self.plugins, plugin);
        Ok(())
    }

    /// [`apply`](Self::apply) for a whole response.
    pub fn apply_response(
        &mut self,
        plugin: &PluginId,
        response: CreateContainerResponse,
    ) -> Result<(), Error> {
        self.apply(plugin, response.adjust, response.update, response.evict)
    }

    /// Rebuilds the reply, and the container if it is there, from the
    /// responses that merged, in their order.
    fn rebuild(&mut self) {
        let pristine = self.pristine.borrow();
        let mut reply = Reply::default();
        let mut container = self.container.as_ref().map(|_| pristine.clone());
        for r in &self.applied {
            if let Err(e) = reply.merge(pristine, container.as_mut(), r) {
                // Cannot happen: each merged before, in this order, onto
                // the same start; keep what was merged rather than panic.
                tracing::error!(plugin = %r.plugin, error = %e, "nri-merge: replaying a response that merged failed");
            }
        }
        self.reply = reply;
        self.container = container;
    }

    /// The merged response for the runtime: adjustment, updates of other
    /// containers, evictions (upstream never fills `evict`; we do).
    pub fn into_response(self) -> CreateContainerResponse {
        CreateContainerResponse {
            adjust: Some(self.reply.adjust),
            update: self.reply.updates,
            evict: self.reply.evictions.iter().map(Eviction::to_wire).collect(),
        }
    }
}

impl Reply {
    /// Merges one plugin's response, writing its adjustment into
    /// `container` when that is given. On error this reply (and the
    /// container) may be partly changed.
    fn merge(
        &mut self,
        pristine: &Container,
        container: Option<&mut Container>,
        r: &Applied,
    ) -> Result<(), Error> {
        let id = pristine.id.as_str();
        if let Some(a) = &r.adjust {
            // What merging gives (owners, merged adjustment) does not
            // depend on the container it writes to: when the container is
            // not there yet, a scratch one takes the writes.
            let mut scratch = Container::default();
            let container = container.unwrap_or(&mut scratch);
            let plugin = r.plugin.as_str();
            merge_adjustment(&mut self.owners, &mut self.adjust, container, id, plugin, a)?;
        }
        merge_updates(
            &mut self.owners,
            &mut self.updates,
            &r.plugin,
            &r.updates,
            Some(id),
            None,
        )?;
        collect_evictions(&mut self.evictions, &r.plugin, &r.evictions, Some(id))
    }
}

/// Writes an adjustment that merged cleanly into `container`, the container
/// later plugins see: the same walk as the merge, with owners and a merged
/// adjustment of its own that are dropped. It cannot conflict: against
/// owners that only hold its own claims, every claim that passed against
/// the event's owners passes again.
fn reflect(container: &mut Container, plugin: &PluginId, a: &ContainerAdjustment) {
    let mut owners = Ownership::new();
    let mut merged = ContainerAdjustment::default();
    let id = container.id.clone();
    if let Err(e) = merge_adjustment(&mut owners, &mut merged, container, &id, plugin.as_str(), a) {
        // Cannot happen (see above); keep what was written rather than panic.
        tracing::error!(plugin = %plugin, error = %e, "nri-merge: reflecting a merged adjustment failed");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeMap;

    use nri_api::api::{
        Container, ContainerAdjustment, LinuxContainer, LinuxNamespace, LinuxRdt, Mount,
    };

    use super::*;

    fn pristine() -> Container {
        Container {
            id: "ctr".into(),
            env: vec!["A=1".into(), "B=2".into()],
            args: vec!["sleep".into()],
            annotations: BTreeMap::from([("a".into(), "1".into())]),
            mounts: vec![Mount {
                destination: "/m".into(),
                ..Default::default()
            }],
            linux: Some(LinuxContainer {
                namespaces: vec![LinuxNamespace {
                    r#type: "network".into(),
                    path: "/proc/1/ns/net".into(),
                }],
                sysctl: BTreeMap::from([("net.x".into(), "1".into())]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Responses of several plugins touching every kind of field, with
    /// removals of the container's entries and of earlier plugins' ones.
    fn responses() -> Vec<ContainerAdjustment> {
        let mut a = ContainerAdjustment::default();
        a.add_annotation("b", "2")
            .remove_annotation("a")
            .add_env("C", "3")
            .remove_env("A")
            .remove_mount("/m")
            .add_mount(Mount {
                destination: "/n".into(),
                ..Default::default()
            })
            .set_args(["sh"])
            .set_linux_memory_limit(1 << 20)
            .remove_namespace("network")
            .set_linux_sysctl("net.y", "2")
            .add_cdi_device("vendor.com/dev=0");
        let mut b = ContainerAdjustment::default();
        b.remove_annotation("b")
            .add_env("E", "9")
            .remove_env("C")
            .add_rlimit("RLIMIT_NOFILE", 10, 5)
            .remove_linux_sysctl("net.x")
            .set_linux_cpu_shares(3);
        b.linux.get_or_insert_with(Default::default).rdt = Some(LinuxRdt {
            remove: true,
            ..Default::default()
        });
        let mut c = ContainerAdjustment::default();
        c.add_annotation("c", "3").add_env("D", "4");
        vec![a, b, c]
    }

    /// The container later plugins see is what one walk per response over
    /// the event's owners, merged adjustment and a copy of the container
    /// makes: reflecting with owners of its own changes nothing.
    #[test]
    fn the_reflected_container_is_the_one_a_single_walk_makes() {
        let p = pristine();
        let mut r = CreateResult::new(PodSandbox::default(), &p);
        let (mut owners, mut merged, mut walked) =
            (Ownership::new(), ContainerAdjustment::default(), p.clone());
        for (i, a) in responses().into_iter().enumerate() {
            let plugin = PluginId::new(format!("{}0", i + 1), "p").unwrap();
            let name = plugin.to_string();
            merge_adjustment(&mut owners, &mut merged, &mut walked, "ctr", &name, &a).unwrap();
            r.apply(&plugin, Some(a), vec![], vec![]).unwrap();
            assert_eq!(r.container(), &walked, "after plugin {plugin}");
        }
        assert_eq!(r.adjustment(), &merged);
        assert_eq!(r.owners(), &owners);
    }
}
