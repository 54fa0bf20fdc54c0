//! Field ownership: which plugin changed which field of which container.
//!
//! The typed [`Ownership`] converts to and from the wire `OwningPlugins`
//! (`FieldOwners` per container id; simple fields keyed by the `Field` enum
//! number; compound fields keyed by field number, then by entry key). Owner
//! strings are `NN-name`; `-NN-name` means "removed by NN-name"; for OCI hooks
//! the value is the comma-joined list of every plugin that injected hooks.

use std::collections::BTreeMap;

use nri_api::api::{CompoundFieldOwners, Field, FieldOwners, OwningPlugins};

use crate::error::Error;

/// Prefix that marks a key (or an owner) as removed. Mirrors upstream's
/// removal marker (`api.MarkForRemoval`): `"-key"`, `"-/mnt/path"`,
/// `"-NN-name"`.
pub const REMOVAL_MARKER: char = '-';

/// Separator of the owner list of OCI hooks (upstream joins with `,`).
pub const HOOKS_OWNER_SEPARATOR: char = ',';

/// Whether `field` is compound, i.e. owned per key (annotation name, mount
/// destination, ...), as in upstream's `owners_generated.go`.
pub fn is_compound(field: Field) -> bool {
    matches!(
        field,
        Field::Annotations
            | Field::Mounts
            | Field::Devices
            | Field::CdiDevices
            | Field::Env
            | Field::HugepageLimits
            | Field::CgroupsUnified
            | Field::Rlimits
            | Field::Namespace
            | Field::Sysctl
            | Field::LinuxNetDevices
    )
}

/// Splits a removal marker off `key`: `"-foo"` gives `("foo", true)`.
pub(crate) fn split_removal(key: &str) -> (&str, bool) {
    match key.strip_prefix(REMOVAL_MARKER) {
        Some(k) => (k, true),
        None => (key, false),
    }
}

/// Adds the removal marker to `key`.
pub(crate) fn mark_removal(key: &str) -> String {
    let mut s = String::with_capacity(key.len() + 1);
    s.push(REMOVAL_MARKER);
    s.push_str(key);
    s
}

/// The owner of a field or of a key of a compound field.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    plugin: String,
    removed: bool,
}

impl Owner {
    /// A plugin that set the field.
    pub fn set(plugin: impl Into<String>) -> Self {
        Self {
            plugin: plugin.into(),
            removed: false,
        }
    }

    /// A plugin that removed the field.
    pub fn removed(plugin: impl Into<String>) -> Self {
        Self {
            plugin: plugin.into(),
            removed: true,
        }
    }

    /// The plugin (`NN-name`, without removal marker).
    pub fn plugin(&self) -> &str {
        &self.plugin
    }

    /// Whether the plugin removed (rather than set) the field.
    pub fn is_removal(&self) -> bool {
        self.removed
    }

    /// The wire form: `NN-name` or `-NN-name`.
    pub fn to_wire(&self) -> String {
        if self.removed {
            mark_removal(&self.plugin)
        } else {
            self.plugin.clone()
        }
    }

    /// Parses the wire form.
    pub fn from_wire(s: &str) -> Self {
        let (plugin, removed) = split_removal(s);
        Self {
            plugin: plugin.to_owned(),
            removed,
        }
    }
}

/// Owners of the fields of one container.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerOwners {
    simple: BTreeMap<Field, Owner>,
    compound: BTreeMap<Field, BTreeMap<String, Owner>>,
    hooks: Vec<String>,
}

impl ContainerOwners {
    /// Owner of a simple field (not OCI hooks: see [`Self::hooks`]).
    pub fn simple(&self, field: Field) -> Option<&Owner> {
        self.simple.get(&field)
    }

    /// Owner of one key of a compound field.
    pub fn compound(&self, field: Field, key: &str) -> Option<&Owner> {
        self.compound.get(&field).and_then(|m| m.get(key))
    }

    /// All owned keys of a compound field, in key order.
    pub fn compound_entries(&self, field: Field) -> impl Iterator<Item = (&str, &Owner)> {
        self.compound
            .get(&field)
            .into_iter()
            .flat_map(|m| m.iter().map(|(k, o)| (k.as_str(), o)))
    }

    /// Plugins that injected OCI hooks, in plugin order.
    pub fn hooks(&self) -> &[String] {
        &self.hooks
    }

    /// Every owner of `field` (all keys of a compound field; every hook
    /// injector for OCI hooks), as `(key, owner)` pairs.
    pub fn owners_of(&self, field: Field) -> Vec<(Option<&str>, Owner)> {
        if field == Field::OciHooks {
            return self
                .hooks
                .iter()
                .map(|p| (None, Owner::set(p.clone())))
                .collect();
        }
        if is_compound(field) {
            return self
                .compound_entries(field)
                .map(|(k, o)| (Some(k), o.clone()))
                .collect();
        }
        self.simple
            .get(&field)
            .map(|o| (None, o.clone()))
            .into_iter()
            .collect()
    }

    /// Whether no field is owned.
    pub fn is_empty(&self) -> bool {
        self.simple.is_empty()
            && self.hooks.is_empty()
            && self.compound.values().all(|m| m.is_empty())
    }

    fn slot(&mut self, field: Field, key: Option<&str>) -> Option<&mut Owner> {
        match key {
            Some(k) => self.compound.get_mut(&field).and_then(|m| m.get_mut(k)),
            None => self.simple.get_mut(&field),
        }
    }

    fn put(&mut self, field: Field, key: Option<&str>, owner: Owner) {
        match key {
            Some(k) => {
                self.compound
                    .entry(field)
                    .or_default()
                    .insert(k.to_owned(), owner);
            }
            None => {
                self.simple.insert(field, owner);
            }
        }
    }

    fn to_wire(&self) -> FieldOwners {
        let mut simple: BTreeMap<i32, String> = self
            .simple
            .iter()
            .map(|(f, o)| (*f as i32, o.to_wire()))
            .collect();
        if !self.hooks.is_empty() {
            let sep = HOOKS_OWNER_SEPARATOR.to_string();
            simple.insert(Field::OciHooks as i32, self.hooks.join(&sep));
        }
        let compound = self
            .compound
            .iter()
            .filter(|(_, m)| !m.is_empty())
            .map(|(f, m)| {
                let owners = m.iter().map(|(k, o)| (k.clone(), o.to_wire())).collect();
                (*f as i32, CompoundFieldOwners { owners })
            })
            .collect();
        FieldOwners { simple, compound }
    }

    fn from_wire(w: &FieldOwners) -> Self {
        let mut out = Self::default();
        for (num, owner) in &w.simple {
            let Ok(field) = Field::try_from(*num) else {
                continue;
            };
            if field == Field::OciHooks {
                out.hooks = owner
                    .split(HOOKS_OWNER_SEPARATOR)
                    .filter(|p| !p.is_empty())
                    .map(str::to_owned)
                    .collect();
            } else {
                out.simple.insert(field, Owner::from_wire(owner));
            }
        }
        for (num, c) in &w.compound {
            let Ok(field) = Field::try_from(*num) else {
                continue;
            };
            let m = out.compound.entry(field).or_default();
            for (k, owner) in &c.owners {
                m.insert(k.clone(), Owner::from_wire(owner));
            }
        }
        out
    }
}

/// Field owners of every container touched by one event.
///
/// Rules (upstream's, made explicit):
///
/// - [`claim`](Self::claim): the first plugin to set a field (or a key of a
///   compound field) owns it. A later claim by any plugin - including the
///   same plugin a second time - is a [`Error::Conflict`], except when the
///   current owner is a *removal by the claiming plugin itself* (a plugin may
///   remove and then set a key in one adjustment).
/// - [`clear`](Self::clear): a removal records `-NN-name` unconditionally. This
///   is what lets a later plugin deliberately override an earlier plugin's
///   value by removing and re-setting it. A third plugin then setting the key
///   conflicts with the remover.
/// - [`claim_removal`](Self::claim_removal): a removal that must not override
///   another plugin (namespaces, as upstream): conflicts like a claim, records
///   `-NN-name`.
/// - OCI hooks accumulate ([`add_hooks`](Self::add_hooks)) and never conflict.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ownership {
    /// Sorted by container id. Usually one entry (the container being
    /// created or updated): a vector rather than a map, whose first node
    /// (eleven 96-byte slots) is a large allocation for glibc's malloc,
    /// which makes it consolidate its free lists every event.
    containers: Vec<(String, ContainerOwners)>,
}

impl Ownership {
    /// Empty ownership.
    pub fn new() -> Self {
        Self::default()
    }

    /// Owners of one container, if any field of it is owned.
    pub fn container(&self, id: &str) -> Option<&ContainerOwners> {
        let i = self.find(id).ok()?;
        self.containers.get(i).map(|(_, c)| c)
    }

    fn find(&self, id: &str) -> Result<usize, usize> {
        self.containers
            .binary_search_by(|(k, _)| k.as_str().cmp(id))
    }

    /// Iterates over containers and their owners.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &ContainerOwners)> {
        self.containers.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Owner of a simple field (`key == None`) or of a key of a compound
    /// field.
    pub fn owner(&self, container: &str, field: Field, key: Option<&str>) -> Option<&Owner> {
        let c = self.container(container)?;
        match key {
            Some(k) => c.compound(field, k),
            None => c.simple(field),
        }
    }

    /// Claims a field (simple: `key == None`; compound: `Some(key)`) for
    /// `plugin`. See the type docs for the conflict rule.
    pub fn claim(
        &mut self,
        container: &str,
        field: Field,
        key: Option<&str>,
        plugin: &str,
    ) -> Result<(), Error> {
        self.check(container, field, key, plugin)?;
        self.entry(container).put(field, key, Owner::set(plugin));
        Ok(())
    }

    /// Records a removal by `plugin` after the same conflict check as
    /// [`claim`](Self::claim).
    pub fn claim_removal(
        &mut self,
        container: &str,
        field: Field,
        key: Option<&str>,
        plugin: &str,
    ) -> Result<(), Error> {
        self.check(container, field, key, plugin)?;
        self.entry(container)
            .put(field, key, Owner::removed(plugin));
        Ok(())
    }

    /// Records a removal by `plugin` unconditionally (overriding any owner).
    pub fn clear(&mut self, container: &str, field: Field, key: Option<&str>, plugin: &str) {
        let entry = self.entry(container);
        if let Some(prev) = entry.slot(field, key) {
            if prev.plugin() != plugin && !prev.is_removal() {
                tracing::debug!(
                    container,
                    field = field.as_str_name(),
                    key,
                    previous = prev.plugin(),
                    plugin,
                    "plugin removes a value set by an earlier plugin"
                );
            }
        }
        entry.put(field, key, Owner::removed(plugin));
    }

    /// Adds `plugin` to the OCI hook injectors of `container`.
    pub fn add_hooks(&mut self, container: &str, plugin: &str) {
        self.entry(container).hooks.push(plugin.to_owned());
    }

    /// The wire form.
    pub fn to_wire(&self) -> OwningPlugins {
        OwningPlugins {
            owners: self
                .containers
                .iter()
                .filter(|(_, c)| !c.is_empty())
                .map(|(id, c)| (id.clone(), c.to_wire()))
                .collect(),
        }
    }

    /// Parses the wire form. Unknown field numbers are skipped.
    pub fn from_wire(w: &OwningPlugins) -> Self {
        let mut containers: Vec<_> = w
            .owners
            .iter()
            .map(|(id, f)| (id.clone(), ContainerOwners::from_wire(f)))
            .collect();
        containers.sort_by(|a, b| a.0.cmp(&b.0));
        Self { containers }
    }

    fn entry(&mut self, container: &str) -> &mut ContainerOwners {
        let i = match self.find(container) {
            Ok(i) => i,
            Err(i) => {
                self.containers
                    .insert(i, (container.to_owned(), ContainerOwners::default()));
                i
            }
        };
        &mut self.containers[i].1
    }

    fn check(
        &self,
        container: &str,
        field: Field,
        key: Option<&str>,
        plugin: &str,
    ) -> Result<(), Error> {
        let Some(owner) = self.owner(container, field, key) else {
            return Ok(());
        };
        if owner.is_removal() && owner.plugin() == plugin {
            return Ok(());
        }
        Err(Error::Conflict {
            field,
            key: key.map(str::to_owned),
            container: container.to_owned(),
            first_plugin: owner.plugin().to_owned(),
            second_plugin: plugin.to_owned(),
        })
    }
}
