//! The collector of plugin results for one CreateContainer event.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use nri_api::api::{
    Container, ContainerAdjustment, ContainerEviction, ContainerUpdate, CreateContainerRequest,
    CreateContainerResponse, Field, Hook, Hooks, LinuxContainer, LinuxContainerAdjustment,
    LinuxRdt, LinuxResources, PodSandbox,
};
use prost::Message;

use crate::check::check_adjustment;
use crate::error::Error;
use crate::owners::{Ownership, split_removal};
use crate::plugin::PluginId;
use crate::resources::{Targets, merge_resources};
use crate::updates::{Eviction, collect_evictions, merge_updates, note};

/// Collector of plugin results for one CreateContainer event.
///
/// Built from the pristine pod and container. For every plugin, in call
/// order, the fan-out code sends [`request`](Self::request) (the container as
/// adjusted by earlier plugins) and feeds the response to
/// [`apply`](Self::apply). At the end, [`into_response`](Self::into_response)
/// (or the accessors) give the runtime one merged adjustment, the merged
/// updates of other containers and the evictions; the validation request is
/// built by [`crate::validate::build_request`].
///
/// Every `apply` is all-or-nothing: when it returns an error, nothing of that
/// plugin's response was kept, so a failure policy may go on with the next
/// plugin. See [the module docs](super) for the canonical form of the merged
/// adjustment and the ownership rules.
///
/// `C` is how the pristine container is held: owned ([`CreateResult::new`])
/// or borrowed from the caller for the length of one event (the runtime's
/// fan-out), which spares a copy of it per event.
#[derive(Debug, Clone)]
pub struct CreateResult<C = Container> {
    pod: PodSandbox,
    pristine: C,
    state: CreateState,
    plugins: Vec<PluginId>,
    /// Bumped whenever an applied response changed the container the next
    /// plugin sees (lets the fan-out reuse an encoded request).
    revision: u64,
    /// The responses applied so far, in order: what `apply` replays onto
    /// the pristine state to undo a response that failed half-way.
    applied: Vec<Applied>,
    /// Set by the fan-out once no more requests will be built: the
    /// adjustments applied from then on are merged but not copied into the
    /// container (for a single adjusting plugin that spares a copy of the
    /// whole container), until someone asks for it.
    requests_done: bool,
    /// `state.container` misses adjustments (see `requests_done`);
    /// [`container`](Self::container) replays them into `replayed`.
    stale: bool,
    replayed: std::sync::OnceLock<Container>,
}

/// One applied response, kept to rebuild the state after a failed one.
/// The adjustment is kept encoded: a `ContainerAdjustment` is 1.1 KB by
/// value, and a list of them (grown per plugin) is a large allocation for
/// glibc's malloc, which then consolidates its free lists every event; a
/// rebuild, which decodes it again, is rare.
#[derive(Debug, Clone)]
struct Applied {
    plugin: PluginId,
    adjust: Option<Vec<u8>>,
    updates: Vec<ContainerUpdate>,
    evictions: Vec<ContainerEviction>,
}

#[derive(Debug, Clone, Default)]
struct CreateState {
    /// The adjusted container; `None` while no plugin adjusted it (copy on
    /// write: then it is the pristine one).
    container: Option<Container>,
    adjust: ContainerAdjustment,
    owners: Ownership,
    updates: Vec<ContainerUpdate>,
    evictions: Vec<Eviction>,
}

impl CreateResult {
    /// Starts collecting for the creation of `container` in `pod`.
    pub fn new(pod: PodSandbox, container: Container) -> Self {
        Self::holding(pod, container)
    }
}

impl<'a> CreateResult<&'a Container> {
    /// [`CreateResult::new`] with the container borrowed.
    pub fn borrowing(pod: PodSandbox, container: &'a Container) -> Self {
        Self::holding(pod, container)
    }
}

impl<C: Borrow<Container>> CreateResult<C> {
    fn holding(pod: PodSandbox, container: C) -> Self {
        Self {
            pod,
            state: CreateState::default(),
            pristine: container,
            plugins: Vec::new(),
            revision: 0,
            applied: Vec::new(),
            requests_done: false,
            stale: false,
            replayed: std::sync::OnceLock::new(),
        }
    }

    /// No more requests will be built from this result (the last plugin's
    /// response is next): later adjustments need not be copied into the
    /// container unless [`container`](Self::container) is asked for.
    pub fn requests_done(&mut self) {
        self.requests_done = true;
    }

    /// Replaces the pod (the fan-out starts without one and sets it only when
    /// validation needs it).
    pub fn set_pod(&mut self, pod: PodSandbox) {
        self.pod = pod;
    }

    /// Changes whenever [`container`](Self::container) may have changed.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The pod.
    pub fn pod(&self) -> &PodSandbox {
        &self.pod
    }

    /// The container as the runtime asked for it, before any plugin.
    pub fn pristine(&self) -> &Container {
        self.pristine.borrow()
    }

    /// The container as adjusted by the plugins applied so far: what the next
    /// plugin must see.
    pub fn container(&self) -> &Container {
        if self.stale {
            return self.replayed.get_or_init(|| {
                (self.replay().container).unwrap_or_else(|| self.pristine.borrow().clone())
            });
        }
        (self.state.container.as_ref()).unwrap_or(self.pristine.borrow())
    }

    /// The CreateContainer request for the next plugin.
    pub fn request(&self) -> CreateContainerRequest {
        CreateContainerRequest {
            pod: Some(self.pod.clone()),
            container: Some(self.container().clone()),
        }
    }

    /// The merged adjustment so far (canonical form, see the module docs).
    pub fn adjustment(&self) -> &ContainerAdjustment {
        &self.state.adjust
    }

    /// Merged updates of other containers, one per container in order of
    /// first appearance.
    pub fn updates(&self) -> &[ContainerUpdate] {
        &self.state.updates
    }

    /// Evictions, in plugin order, one per container.
    pub fn evictions(&self) -> &[Eviction] {
        &self.state.evictions
    }

    /// Field owners, keyed by container id (the created container, and the
    /// containers updated by plugins).
    pub fn owners(&self) -> &Ownership {
        &self.state.owners
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
        if adjust.is_none() && updates.is_empty() && evictions.is_empty() {
            // Nothing to merge, and nothing to keep for a rebuild.
            note(&mut self.plugins, plugin);
            return Ok(());
        }
        // Applied in place: copying the whole state first (the adjusted
        // container with its ~100 strings, the owners) cost more than the
        // merge itself for every adjusting plugin. A response that fails
        // half-way is undone by rebuilding the state from the responses
        // applied before it; failures are rare, merges are not.
        let adjusted = adjust.is_some();
        // Merging does not depend on the container's contents (it only
        // writes them), so after the last request an adjustment can be
        // merged against a scratch container instead of a copy.
        let scratch = self.requests_done && adjusted && self.state.container.is_none();
        if scratch {
            self.state.container = Some(Container::default());
            self.replayed = std::sync::OnceLock::new();
        }
        let res = self.state.apply(
            self.pristine.borrow(),
            plugin,
            adjust.as_ref(),
            updates.clone(),
            evictions.clone(),
        );
        if scratch {
            self.state.container = None;
        }
        if let Err(e) = res {
            self.rebuild();
            return Err(e);
        }
        if scratch {
            self.stale = true;
        }
        self.applied.push(Applied {
            plugin: plugin.clone(),
            adjust: adjust.map(|a| a.encode_to_vec()),
            updates,
            evictions,
        });
        if adjusted {
            self.revision += 1;
        }
        note(&mut self.plugins, plugin);
        Ok(())
    }

    /// Rebuilds the state from the pristine container and the responses
    /// applied so far (each of which applied cleanly to exactly that state
    /// before).
    fn rebuild(&mut self) {
        self.state = self.replay();
        self.stale = false;
        self.replayed = std::sync::OnceLock::new();
    }

    /// The state the responses applied so far make from the pristine
    /// container, with every adjustment in the container.
    fn replay(&self) -> CreateState {
        let mut state = CreateState::default();
        for a in &self.applied {
            // Our own encoding of a message that decoded before.
            let adjust = match a.adjust.as_deref().map(ContainerAdjustment::decode) {
                None => None,
                Some(Ok(adjust)) => Some(adjust),
                Some(Err(e)) => {
                    tracing::error!(plugin = %a.plugin, error = %e, "nri-runtime: decoding an applied adjustment failed");
                    None
                }
            };
            let res = state.apply(
                self.pristine.borrow(),
                &a.plugin,
                adjust.as_ref(),
                a.updates.clone(),
                a.evictions.clone(),
            );
            if let Err(e) = res {
                // Cannot happen: the same inputs in the same order applied
                // cleanly before. Keep what was rebuilt rather than panic.
                tracing::error!(plugin = %a.plugin, error = %e, "nri-runtime: replaying an applied response failed");
            }
        }
        state
    }

    /// [`apply`](Self::apply) for a whole response.
    pub fn apply_response(
        &mut self,
        plugin: &PluginId,
        response: CreateContainerResponse,
    ) -> Result<(), Error> {
        self.apply(plugin, response.adjust, response.update, response.evict)
    }

    /// The merged response for the runtime: adjustment, updates of other
    /// containers, evictions (upstream never fills `evict`; we do).
    pub fn into_response(self) -> CreateContainerResponse {
        CreateContainerResponse {
            adjust: Some(self.state.adjust),
            update: self.state.updates,
            evict: self.state.evictions.iter().map(Eviction::to_wire).collect(),
        }
    }
}

fn linux(c: &mut Container) -> &mut LinuxContainer {
    c.linux.get_or_insert_with(LinuxContainer::default)
}

fn adj_linux(a: &mut ContainerAdjustment) -> &mut LinuxContainerAdjustment {
    a.linux
        .get_or_insert_with(LinuxContainerAdjustment::default)
}

fn env_key(e: &str) -> &str {
    e.split_once('=').map_or(e, |(k, _)| k)
}

/// How a removal marker in a keyed list takes ownership.
#[derive(Clone, Copy)]
enum Removal {
    /// Unconditionally (`Ownership::clear`): may override another plugin.
    Clear,
    /// With a conflict check (`Ownership::claim_removal`).
    Claim,
}

struct Ctx<'a> {
    owners: &'a mut Ownership,
    id: &'a str,
    plugin: &'a str,
}

impl Ctx<'_> {
    /// Merges a list whose entries are keyed (`key`) and may carry a removal
    /// marker. Removals are processed before additions; the merged list keeps
    /// at most one entry per key (the last word: addition or marker).
    fn keyed_list<T: Clone>(
        &mut self,
        field: Field,
        removal: Removal,
        src: &[T],
        key: impl Fn(&T) -> &str,
        merged: &mut Vec<T>,
        mut reflect: impl FnMut(&str, Option<&T>),
    ) -> Result<(), Error> {
        let same_key = |x: &T, k: &str| split_removal(key(x)).0 == k;
        for d in src.iter().filter(|d| split_removal(key(d)).1) {
            let k = split_removal(key(d)).0;
            match removal {
                Removal::Clear => self.owners.clear(self.id, field, Some(k), self.plugin),
                Removal::Claim => {
                    self.owners
                        .claim_removal(self.id, field, Some(k), self.plugin)?;
                }
            }
            merged.retain(|x| !same_key(x, k));
            merged.push(d.clone());
            reflect(k, None);
        }
        for a in src.iter().filter(|a| !split_removal(key(a)).1) {
            let k = key(a);
            self.owners.claim(self.id, field, Some(k), self.plugin)?;
            merged.retain(|x| !same_key(x, k));
            merged.push(a.clone());
            reflect(k, Some(a));
        }
        Ok(())
    }

    /// Merges a map whose keys may carry a removal marker (`"-key"`).
    /// Removals first; the merged map never holds both `"-k"` and `"k"`.
    fn keyed_map<V: Clone + Default>(
        &mut self,
        field: Field,
        src: &BTreeMap<String, V>,
        container: &mut BTreeMap<String, V>,
        merged: &mut BTreeMap<String, V>,
    ) -> Result<(), Error> {
        for (marked, _) in src.iter().filter(|(k, _)| split_removal(k).1) {
            let k = split_removal(marked).0;
            self.owners.clear(self.id, field, Some(k), self.plugin);
            container.remove(k);
            merged.remove(k);
            merged.insert(marked.clone(), V::default());
        }
        for (k, v) in src.iter().filter(|(k, _)| !split_removal(k).1) {
            self.owners.claim(self.id, field, Some(k), self.plugin)?;
            container.insert(k.clone(), v.clone());
            merged.remove(&crate::owners::mark_removal(k));
            merged.insert(k.clone(), v.clone());
        }
        Ok(())
    }

    fn simple<T: Clone>(
        &mut self,
        field: Field,
        src: &Option<T>,
        container: &mut Option<T>,
        merged: &mut Option<T>,
    ) -> Result<(), Error> {
        if let Some(v) = src {
            self.owners.claim(self.id, field, None, self.plugin)?;
            *container = Some(v.clone());
            *merged = Some(v.clone());
        }
        Ok(())
    }
}

fn has_hooks(h: &Hooks) -> bool {
    !(h.prestart.is_empty()
        && h.create_runtime.is_empty()
        && h.create_container.is_empty()
        && h.start_container.is_empty()
        && h.poststart.is_empty()
        && h.poststop.is_empty())
}

fn append_hooks(dst: &mut Hooks, src: &Hooks) {
    let lists: [(&mut Vec<Hook>, &Vec<Hook>); 6] = [
        (&mut dst.prestart, &src.prestart),
        (&mut dst.create_runtime, &src.create_runtime),
        (&mut dst.create_container, &src.create_container),
        (&mut dst.start_container, &src.start_container),
        (&mut dst.poststart, &src.poststart),
        (&mut dst.poststop, &src.poststop),
    ];
    for (d, s) in lists {
        d.extend(s.iter().cloned());
    }
}

impl CreateState {
    /// Merges one plugin's response into this state. On error the state
    /// may be partly changed (the caller rebuilds it).
    fn apply(
        &mut self,
        pristine: &Container,
        plugin: &PluginId,
        adjust: Option<&ContainerAdjustment>,
        updates: Vec<ContainerUpdate>,
        evictions: Vec<ContainerEviction>,
    ) -> Result<(), Error> {
        let id = pristine.id.as_str();
        if let Some(a) = adjust {
            self.adjust_container(pristine, id, &plugin.to_string(), a)?;
        }
        merge_updates(
            &mut self.owners,
            &mut self.updates,
            plugin,
            updates,
            Some(id),
            None,
        )?;
        collect_evictions(&mut self.evictions, plugin, evictions, Some(id))
    }

    /// Applies one plugin's adjustment. Order of fields as upstream
    /// (annotations, mounts, env, args, hooks, linux..., rlimits, CDI), which
    /// decides which conflict is reported first.
    fn adjust_container(
        &mut self,
        pristine: &Container,
        id: &str,
        plugin: &str,
        a: &ContainerAdjustment,
    ) -> Result<(), Error> {
        let CreateState {
            container,
            adjust,
            owners,
            ..
        } = self;
        let container = container.get_or_insert_with(|| pristine.clone());
        let mut cx = Ctx { owners, id, plugin };

        if !a.annotations.is_empty() {
            cx.keyed_map(
                Field::Annotations,
                &a.annotations,
                &mut container.annotations,
                &mut adjust.annotations,
            )?;
        }

        let c_mounts = &mut container.mounts;
        cx.keyed_list(
            Field::Mounts,
            Removal::Clear,
            &a.mounts,
            |m| m.destination.as_str(),
            &mut adjust.mounts,
            |k, m| {
                c_mounts.retain(|x| x.destination != k);
                c_mounts.extend(m.cloned());
            },
        )?;

        let c_env = &mut container.env;
        cx.keyed_list(
            Field::Env,
            Removal::Clear,
            &a.env,
            |e| e.key.as_str(),
            &mut adjust.env,
            |k, e| {
                c_env.retain(|x| env_key(x) != k);
                if let Some(e) = e {
                    c_env.push(format!("{k}={}", e.value));
                }
            },
        )?;

        if let Some((first, rest)) = a.args.split_first() {
            // A leading "" means: replace the arguments, overriding an
            // earlier plugin's (upstream's UpdateArgs form).
            let args = if first.is_empty() {
                cx.owners.clear(id, Field::Args, None, plugin);
                rest
            } else {
                a.args.as_slice()
            };
            cx.owners.claim(id, Field::Args, None, plugin)?;
            container.args = args.to_vec();
            adjust.args = args.to_vec();
        }

        if let Some(h) = a.hooks.as_ref().filter(|h| has_hooks(h)) {
            append_hooks(adjust.hooks.get_or_insert_with(Hooks::default), h);
            append_hooks(container.hooks.get_or_insert_with(Hooks::default), h);
            cx.owners.add_hooks(id, plugin);
        }

        if let Some(l) = a.linux.as_ref() {
            Self::adjust_linux(&mut cx, l, linux(container), adjust)?;
        }

        let c_rlimits = &mut container.rlimits;
        for r in &a.rlimits {
            cx.owners
                .claim(id, Field::Rlimits, Some(&r.r#type), plugin)?;
            c_rlimits.retain(|x| x.r#type != r.r#type);
            c_rlimits.push(r.clone());
            adjust.rlimits.retain(|x| x.r#type != r.r#type);
            adjust.rlimits.push(r.clone());
        }

        for d in &a.cdi_devices {
            cx.owners
                .claim(id, Field::CdiDevices, Some(&d.name), plugin)?;
            adjust.cdi_devices.push(d.clone());
            // Unlike upstream, later plugins see injected CDI devices.
            container.cdi_devices.push(d.clone());
        }
        Ok(())
    }

    fn adjust_linux(
        cx: &mut Ctx<'_>,
        l: &LinuxContainerAdjustment,
        cl: &mut LinuxContainer,
        adjust: &mut ContainerAdjustment,
    ) -> Result<(), Error> {
        if !l.devices.is_empty() {
            let c_devices = &mut cl.devices;
            cx.keyed_list(
                Field::Devices,
                Removal::Clear,
                &l.devices,
                |d| d.path.as_str(),
                &mut adj_linux(adjust).devices,
                |k, d| {
                    c_devices.retain(|x| x.path != k);
                    c_devices.extend(d.cloned());
                },
            )?;
        }

        if let Some(r) = l
            .resources
            .as_ref()
            .filter(|r| **r != LinuxResources::default())
        {
            let (id, plugin) = (cx.id, cx.plugin);
            let owners = &mut *cx.owners;
            merge_resources(
                &mut |field, key| owners.claim(id, field, key, plugin),
                r,
                Targets {
                    targets: vec![
                        cl.resources.get_or_insert_with(LinuxResources::default),
                        adj_linux(adjust)
                            .resources
                            .get_or_insert_with(LinuxResources::default),
                    ],
                    devices: true,
                },
            )?;
        }

        if !l.cgroups_path.is_empty() {
            cx.owners
                .claim(cx.id, Field::CgroupsPath, None, cx.plugin)?;
            cl.cgroups_path = l.cgroups_path.clone();
            adj_linux(adjust).cgroups_path = l.cgroups_path.clone();
        }

        if l.oom_score_adj.is_some() {
            cx.simple(
                Field::OomScoreAdj,
                &l.oom_score_adj,
                &mut cl.oom_score_adj,
                &mut adj_linux(adjust).oom_score_adj,
            )?;
        }
        if l.io_priority.is_some() {
            cx.simple(
                Field::IoPriority,
                &l.io_priority,
                &mut cl.io_priority,
                &mut adj_linux(adjust).io_priority,
            )?;
        }
        if l.seccomp_policy.is_some() {
            cx.simple(
                Field::SeccompPolicy,
                &l.seccomp_policy,
                &mut cl.seccomp_policy,
                &mut adj_linux(adjust).seccomp_policy,
            )?;
        }

        if !l.namespaces.is_empty() {
            // Removing a namespace conflicts like setting one (upstream
            // claims for both): a plugin cannot silently undo another
            // plugin's namespace.
            let c_ns = &mut cl.namespaces;
            cx.keyed_list(
                Field::Namespace,
                Removal::Claim,
                &l.namespaces,
                |n| n.r#type.as_str(),
                &mut adj_linux(adjust).namespaces,
                |k, n| {
                    c_ns.retain(|x| x.r#type != k);
                    c_ns.extend(n.cloned());
                },
            )?;
        }

        if !l.sysctl.is_empty() {
            cx.keyed_map(
                Field::Sysctl,
                &l.sysctl,
                &mut cl.sysctl,
                &mut adj_linux(adjust).sysctl,
            )?;
        }
        if !l.net_devices.is_empty() {
            cx.keyed_map(
                Field::LinuxNetDevices,
                &l.net_devices,
                &mut cl.net_devices,
                &mut adj_linux(adjust).net_devices,
            )?;
        }

        if l.scheduler.is_some() {
            cx.simple(
                Field::LinuxSched,
                &l.scheduler,
                &mut cl.scheduler,
                &mut adj_linux(adjust).scheduler,
            )?;
        }

        if let Some(rdt) = l.rdt.as_ref() {
            Self::adjust_rdt(cx, rdt, cl, adj_linux(adjust))?;
        }

        if let Some(mp) = l.memory_policy.as_ref() {
            // The container message has no memory policy to reflect it in.
            cx.owners
                .claim(cx.id, Field::MemoryPolicy, None, cx.plugin)?;
            adj_linux(adjust).memory_policy = Some(mp.clone());
        }
        Ok(())
    }

    fn adjust_rdt(
        cx: &mut Ctx<'_>,
        rdt: &LinuxRdt,
        cl: &mut LinuxContainer,
        al: &mut LinuxContainerAdjustment,
    ) -> Result<(), Error> {
        if rdt.remove {
            for f in [
                Field::RdtClosId,
                Field::RdtSchemata,
                Field::RdtEnableMonitoring,
            ] {
                cx.owners.clear(cx.id, f, None, cx.plugin);
            }
            al.rdt = Some(LinuxRdt {
                remove: true,
                ..LinuxRdt::default()
            });
            cl.rdt = None;
        }
        if let Some(v) = rdt.clos_id.as_ref() {
            cx.owners.claim(cx.id, Field::RdtClosId, None, cx.plugin)?;
            let r = al.rdt.get_or_insert_with(LinuxRdt::default);
            r.clos_id = Some(v.clone());
            r.remove = false;
            cl.rdt.get_or_insert_with(LinuxRdt::default).clos_id = Some(v.clone());
        }
        if let Some(v) = rdt.schemata.as_ref() {
            cx.owners
                .claim(cx.id, Field::RdtSchemata, None, cx.plugin)?;
            let r = al.rdt.get_or_insert_with(LinuxRdt::default);
            r.schemata = Some(v.clone());
            r.remove = false;
            cl.rdt.get_or_insert_with(LinuxRdt::default).schemata = Some(v.clone());
        }
        if let Some(v) = rdt.enable_monitoring.as_ref() {
            cx.owners
                .claim(cx.id, Field::RdtEnableMonitoring, None, cx.plugin)?;
            let r = al.rdt.get_or_insert_with(LinuxRdt::default);
            r.enable_monitoring = Some(*v);
            r.remove = false;
            cl.rdt
                .get_or_insert_with(LinuxRdt::default)
                .enable_monitoring = Some(*v);
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use nri_api::api::{CdiDevice, Hook, KeyValue, Mount};
    use proptest::prelude::*;

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

    proptest! {
        /// After `requests_done` adjustments are merged against a scratch
        /// container: the merged result, the owners and the container (when
        /// asked for, at any point) are those of the ordinary path.
        #[test]
        fn merging_after_the_last_request_changes_nothing_visible(
            adjustments in proptest::collection::vec(adjustment(), 1..5),
            at in 0usize..5,
            peek in any::<bool>(),
        ) {
            let mut plain = CreateResult::new(PodSandbox::default(), pristine());
            let mut lazy = CreateResult::new(PodSandbox::default(), pristine());
            for (i, a) in adjustments.iter().enumerate() {
                if i == at.min(adjustments.len() - 1) {
                    lazy.requests_done();
                }
                let r1 = plain.apply(&pid(i), Some(a.clone()), vec![], vec![]);
                let r2 = lazy.apply(&pid(i), Some(a.clone()), vec![], vec![]);
                prop_assert_eq!(r1.is_ok(), r2.is_ok());
                if peek {
                    prop_assert_eq!(plain.container(), lazy.container());
                }
            }
            prop_assert_eq!(plain.adjustment(), lazy.adjustment());
            prop_assert_eq!(plain.owners(), lazy.owners());
            prop_assert_eq!(plain.container(), lazy.container());
            prop_assert_eq!(plain.request(), lazy.request());
            prop_assert_eq!(plain.into_response(), lazy.into_response());
        }
    }

    #[test]
    fn after_the_last_request_the_container_is_not_copied() {
        let mut r = CreateResult::borrowing(PodSandbox::default(), &PRISTINE);
        r.requests_done();
        let a = ContainerAdjustment {
            env: vec![KeyValue {
                key: "X".into(),
                value: "1".into(),
            }],
            ..Default::default()
        };
        r.apply(&pid(0), Some(a), vec![], vec![]).unwrap();
        assert!(r.state.container.is_none());
        assert!(r.container().env.contains(&"X=1".to_owned()));
        assert_eq!(r.adjustment().env.len(), 1);
    }

    static PRISTINE: std::sync::LazyLock<Container> = std::sync::LazyLock::new(pristine);
}
