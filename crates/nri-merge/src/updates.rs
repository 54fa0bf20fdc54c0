//! Container updates and evictions requested by plugins, and the collectors
//! for UpdateContainer and StopContainer.

use nri_api::api::{
    Container, ContainerEviction, ContainerUpdate, LinuxContainerUpdate, LinuxResources,
    PodSandbox, StopContainerResponse, UpdateContainerRequest, UpdateContainerResponse,
};

use crate::check::check_update;
use crate::error::Error;
use crate::owners::Ownership;
use crate::plugin::PluginId;
use crate::resources::{Targets, merge_resources};

/// An eviction requested by a plugin: the runtime should stop the container.
///
/// Upstream drops these; we hand them to the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Eviction {
    /// The container to evict.
    pub container_id: String,
    /// The reason the plugin gave.
    pub reason: String,
    /// The plugin that asked for it.
    pub plugin: PluginId,
}

impl Eviction {
    /// The wire form (without the plugin).
    pub fn to_wire(&self) -> ContainerEviction {
        ContainerEviction {
            container_id: self.container_id.clone(),
            reason: self.reason.clone(),
        }
    }
}

/// Appends `evictions` from `plugin` to `out`. Evictions naming no container
/// or `forbidden` (the container being created) are errors. A container
/// already evicted by an earlier plugin keeps its first reason.
pub(crate) fn collect_evictions(
    out: &mut Vec<Eviction>,
    plugin: &PluginId,
    evictions: &[ContainerEviction],
    forbidden: Option<&str>,
) -> Result<(), Error> {
    for e in evictions {
        if e.container_id.is_empty() {
            return Err(Error::InvalidUpdate {
                plugin: plugin.to_string(),
                container: String::new(),
                reason: "eviction without container id".into(),
            });
        }
        if forbidden == Some(e.container_id.as_str()) {
            return Err(Error::InvalidUpdate {
                plugin: plugin.to_string(),
                container: e.container_id.clone(),
                reason: "eviction of the container being created (fail the creation instead)"
                    .into(),
            });
        }
        if let Some(prev) = out.iter().find(|x| x.container_id == e.container_id) {
            tracing::debug!(
                container = e.container_id,
                plugin = %plugin,
                first = %prev.plugin,
                "container already evicted by an earlier plugin"
            );
            continue;
        }
        out.push(Eviction {
            container_id: e.container_id.clone(),
            reason: e.reason.clone(),
            plugin: plugin.clone(),
        });
    }
    Ok(())
}

/// The resources of the container an UpdateContainer event is about.
pub(crate) struct Target<'a> {
    pub(crate) id: &'a str,
    pub(crate) resources: &'a mut LinuxResources,
    pub(crate) touched: &'a mut bool,
}

/// Merges `updates` from `plugin` into `merged` (one entry per container, in
/// order of first appearance), claiming resource fields per target container.
///
/// Each update is merged on a copy: if it conflicts and has
/// `ignore_failure`, it is skipped as a whole (ownership included) and the
/// others still apply; otherwise the error is returned.
pub(crate) fn merge_updates(
    owners: &mut Ownership,
    merged: &mut Vec<ContainerUpdate>,
    plugin: &PluginId,
    updates: &[ContainerUpdate],
    forbidden: Option<&str>,
    mut target: Option<Target<'_>>,
) -> Result<(), Error> {
    let p = plugin.as_str();
    for u in updates {
        let id = u.container_id.as_str();
        if id.is_empty() {
            return Err(Error::InvalidUpdate {
                plugin: p.to_owned(),
                container: String::new(),
                reason: "update without container id".into(),
            });
        }
        if forbidden == Some(id) {
            return Err(Error::InvalidUpdate {
                plugin: p.to_owned(),
                container: u.container_id.clone(),
                reason: "update of the container being created (adjust it instead)".into(),
            });
        }
        check_update(plugin, u)?;
        let Some(src) = u.linux.as_ref().and_then(|l| l.resources.as_ref()) else {
            continue;
        };
        let mut staged_owners = owners.clone();
        let is_target = target.as_ref().is_some_and(|t| t.id == id);
        let mut staged = if is_target {
            target
                .as_ref()
                .map(|t| t.resources.clone())
                .unwrap_or_default()
        } else {
            merged
                .iter()
                .find(|m| m.container_id == id)
                .and_then(|m| m.linux.as_ref())
                .and_then(|l| l.resources.clone())
                .unwrap_or_default()
        };
        let res = merge_resources(
            &mut |field, key| staged_owners.claim(id, field, key, p),
            src,
            Targets {
                targets: vec![&mut staged],
                devices: false,
            },
        );
        if let Err(e) = res {
            if u.ignore_failure {
                tracing::warn!(plugin = %plugin, container = id, error = %e,
                    "skipping conflicting container update marked ignore_failure");
                continue;
            }
            return Err(e);
        }
        *owners = staged_owners;
        match target.as_mut() {
            Some(t) if is_target => {
                *t.resources = staged;
                *t.touched = true;
            }
            _ => {
                let linux = Some(LinuxContainerUpdate {
                    resources: Some(staged),
                });
                if let Some(m) = merged.iter_mut().find(|m| m.container_id == id) {
                    m.linux = linux;
                    m.ignore_failure = m.ignore_failure && u.ignore_failure;
                } else {
                    merged.push(ContainerUpdate {
                        container_id: u.container_id.clone(),
                        linux,
                        ignore_failure: u.ignore_failure,
                    });
                }
            }
        }
    }
    Ok(())
}

/// Collector of plugin results for one UpdateContainer event.
///
/// Starts from the resources the runtime was asked to apply; plugin updates of
/// the target container override them (with ownership), and later plugins see
/// the result in [`request`](Self::request). Updates of other containers and
/// evictions are collected alongside.
///
/// Every `apply` is all-or-nothing: if it returns an error, nothing of that
/// plugin's response was kept.
#[derive(Debug, Clone)]
pub struct UpdateResult {
    pod: PodSandbox,
    container: Container,
    state: UpdateState,
    plugins: Vec<PluginId>,
}

#[derive(Debug, Clone, Default)]
struct UpdateState {
    owners: Ownership,
    target: LinuxResources,
    touched: bool,
    updates: Vec<ContainerUpdate>,
    evictions: Vec<Eviction>,
}

impl UpdateResult {
    /// Starts collecting for an update of `container` to `requested`.
    pub fn new(pod: PodSandbox, container: Container, requested: Option<LinuxResources>) -> Self {
        Self {
            pod,
            container,
            state: UpdateState {
                target: requested.unwrap_or_default(),
                ..UpdateState::default()
            },
            plugins: Vec::new(),
        }
    }

    /// The request for the next plugin: the requested resources as updated
    /// by earlier plugins.
    pub fn request(&self) -> UpdateContainerRequest {
        UpdateContainerRequest {
            pod: Some(self.pod.clone()),
            container: Some(self.container.clone()),
            linux_resources: Some(self.state.target.clone()),
        }
    }

    /// Records one plugin's response.
    pub fn apply(
        &mut self,
        plugin: &PluginId,
        updates: Vec<ContainerUpdate>,
        evictions: Vec<ContainerEviction>,
    ) -> Result<(), Error> {
        let mut next = self.state.clone();
        let UpdateState {
            owners,
            target,
            touched,
            updates: merged,
            evictions: evicted,
        } = &mut next;
        merge_updates(
            owners,
            merged,
            plugin,
            &updates,
            None,
            Some(Target {
                id: &self.container.id,
                resources: target,
                touched,
            }),
        )?;
        collect_evictions(evicted, plugin, &evictions, None)?;
        self.state = next;
        note(&mut self.plugins, plugin);
        Ok(())
    }

    /// [`apply`](Self::apply) for a whole response.
    pub fn apply_response(
        &mut self,
        plugin: &PluginId,
        response: UpdateContainerResponse,
    ) -> Result<(), Error> {
        self.apply(plugin, response.update, response.evict)
    }

    /// The target container's resources: requested, then overridden by
    /// plugins.
    pub fn resources(&self) -> &LinuxResources {
        &self.state.target
    }

    /// Whether any plugin changed the target container's resources.
    pub fn target_touched(&self) -> bool {
        self.state.touched
    }

    /// Merged updates of containers other than the target.
    pub fn updates(&self) -> &[ContainerUpdate] {
        &self.state.updates
    }

    /// Evictions, in plugin order, one per container.
    pub fn evictions(&self) -> &[Eviction] {
        &self.state.evictions
    }

    /// Field owners (keyed by container id).
    pub fn owners(&self) -> &Ownership {
        &self.state.owners
    }

    /// Plugins whose response was applied, in call order.
    pub fn plugins(&self) -> &[PluginId] {
        &self.plugins
    }

    /// The merged response: updates of other containers first, then **always
    /// as the last element** the target container's update carrying the full
    /// resources to apply (requested plus plugin changes; see
    /// [`target_touched`](Self::target_touched)). Containerd uses the last
    /// element as the resources to apply. Evictions are in `evict`.
    pub fn into_response(self) -> UpdateContainerResponse {
        let mut update = self.state.updates;
        update.push(ContainerUpdate {
            container_id: self.container.id,
            linux: Some(LinuxContainerUpdate {
                resources: Some(self.state.target),
            }),
            ignore_failure: false,
        });
        UpdateContainerResponse {
            update,
            evict: self.state.evictions.iter().map(Eviction::to_wire).collect(),
        }
    }
}

/// Collector of plugin results for one StopContainer event: updates of
/// (other) containers only; all-or-nothing per plugin.
#[derive(Debug, Clone, Default)]
pub struct StopResult {
    owners: Ownership,
    updates: Vec<ContainerUpdate>,
    plugins: Vec<PluginId>,
}

impl StopResult {
    /// Starts collecting.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one plugin's updates.
    pub fn apply(&mut self, plugin: &PluginId, updates: Vec<ContainerUpdate>) -> Result<(), Error> {
        let mut owners = self.owners.clone();
        let mut merged = self.updates.clone();
        merge_updates(&mut owners, &mut merged, plugin, &updates, None, None)?;
        self.owners = owners;
        self.updates = merged;
        note(&mut self.plugins, plugin);
        Ok(())
    }

    /// [`apply`](Self::apply) for a whole response.
    pub fn apply_response(
        &mut self,
        plugin: &PluginId,
        response: StopContainerResponse,
    ) -> Result<(), Error> {
        self.apply(plugin, response.update)
    }

    /// Merged updates, one per container in order of first appearance.
    pub fn updates(&self) -> &[ContainerUpdate] {
        &self.updates
    }

    /// Field owners (keyed by container id).
    pub fn owners(&self) -> &Ownership {
        &self.owners
    }

    /// Plugins whose response was applied, in call order.
    pub fn plugins(&self) -> &[PluginId] {
        &self.plugins
    }

    /// The merged response.
    pub fn into_response(self) -> StopContainerResponse {
        StopContainerResponse {
            update: self.updates,
        }
    }
}

/// Merges unsolicited updates (Runtime.UpdateContainers, Synchronize
/// responses) of one plugin into one update per container, in order of first
/// appearance. A later update of the same field replaces an earlier one
/// (there is a single sender, so there is no ownership); `ignore_failure` is
/// the logical AND. Updates without a container id are dropped.
/// Structurally invalid updates are the caller's to refuse first (see
/// [`check_unsolicited`]).
pub fn merge_unsolicited(updates: Vec<ContainerUpdate>) -> Vec<ContainerUpdate> {
    let mut out: Vec<ContainerUpdate> = Vec::new();
    for u in updates {
        if u.container_id.is_empty() {
            continue;
        }
        let Some(src) = u.linux.as_ref().and_then(|l| l.resources.as_ref()) else {
            continue;
        };
        let pos = match out.iter().position(|m| m.container_id == u.container_id) {
            Some(pos) => pos,
            None => {
                out.push(ContainerUpdate {
                    container_id: u.container_id.clone(),
                    linux: Some(LinuxContainerUpdate {
                        resources: Some(LinuxResources::default()),
                    }),
                    ignore_failure: u.ignore_failure,
                });
                out.len() - 1
            }
        };
        let Some(m) = out.get_mut(pos) else { continue };
        m.ignore_failure = m.ignore_failure && u.ignore_failure;
        let dst = m
            .linux
            .get_or_insert_with(LinuxContainerUpdate::default)
            .resources
            .get_or_insert_with(LinuxResources::default);
        // A single sender: no ownership, later values replace earlier ones.
        let merged = merge_resources(
            &mut |_, _| Ok(()),
            src,
            Targets {
                targets: vec![dst],
                devices: false,
            },
        );
        debug_assert!(merged.is_ok(), "claims that always succeed cannot fail");
    }
    out
}

/// Refuses a plugin's unsolicited updates if any of them cannot be applied
/// (for instance a negative memory limit).
///
/// Errors: [`Error::InvalidUpdate`] naming the plugin, the container and
/// the problem.
pub fn check_unsolicited(plugin: &PluginId, updates: &[ContainerUpdate]) -> Result<(), Error> {
    updates.iter().try_for_each(|u| check_update(plugin, u))
}

pub(crate) fn note(plugins: &mut Vec<PluginId>, plugin: &PluginId) {
    if !plugins.contains(plugin) {
        plugins.push(plugin.clone());
    }
}
