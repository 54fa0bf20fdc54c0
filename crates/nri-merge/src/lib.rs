//! The merge core of NRI (Node Resource Interface): merging the results
//! of several plugins for one event, with field ownership and conflict
//! detection, and validating the merged result ([`validate`]).
//!
//! Pure logic: nothing here does I/O or needs an async runtime. The
//! runtime library (`nri-runtime`) calls it from its event fan-out; the
//! default validator plugin uses [`validate`] on its own.
//!
//! - [`CreateResult`]: CreateContainer (adjustment of the new container,
//!   updates of other containers, evictions).
//! - [`UpdateResult`]: UpdateContainer (the target's resources, updates of
//!   other containers, evictions).
//! - [`StopResult`]: StopContainer (updates of other containers).
//! - [`merge_unsolicited`]: one plugin's unsolicited updates.
//!
//! # Ownership
//!
//! Each field of a container (or each key of a compound field: annotation
//! name, mount destination, env var, device path, CDI device name, hugepage
//! size, unified cgroup key, rlimit type, namespace type, sysctl, host network
//! interface) belongs to the first plugin that changes it. A later change by
//! another plugin is an [`Error::Conflict`] naming the
//! field, the key, the container and both plugins. The rules, including the
//! exceptions (removal followed by a set, hooks), are on [`Ownership`]. The
//! owners convert to the wire `OwningPlugins` with [`Ownership::to_wire`].
//!
//! # The merged adjustment (canonical form)
//!
//! Removal markers (`"-key"` map keys, `"-/dest"` mount destinations, `"-KEY"`
//! env keys, `"-/dev/path"` device paths, `"-type"` namespace types,
//! `LinuxRdt.remove`) are applied before additions, within one plugin and
//! across plugins. The merged adjustment holds **at most one entry per key**,
//! the last word on it:
//!
//! - a key removed and then set (by the same plugin, or set by a later plugin
//!   after its own removal) appears only as the addition; the runtime replaces
//!   any existing entry with that key;
//! - a key only removed appears only as its removal marker - also when the
//!   container already had it before any plugin ran, so the runtime removes
//!   it (upstream loses such removals for env and devices);
//! - a key set by one plugin and removed by a later one appears only as the
//!   marker.
//!
//! So a merged map never holds both `"-k"` and `"k"`, and the order in which a
//! runtime walks the merged lists and maps cannot change the outcome. A
//! runtime applying the result should still apply removal markers before
//! additions. Sub-messages (`hooks`, `linux`, `linux.resources`, `linux.rdt`)
//! are present only when a plugin touched them (upstream always fills them);
//! `linux.rdt` is `{remove: true}` when the last word was a removal.
//!
//! Other points where we deliberately differ from upstream: pure removals
//! record the remover as owner (`-NN-name`) for every kind of field, so a
//! validator sees them; pids in plugin container updates are honoured;
//! evictions are collected and returned; CDI devices and RDT settings are
//! reflected in the container seen by later plugins; every `apply` is
//! all-or-nothing.

mod adjust;
mod check;
mod create;
pub mod error;
pub mod identity;
mod owners;
mod plugin;
mod resources;
mod updates;
pub mod validate;

pub use create::CreateResult;
pub use error::Error;
pub use identity::{Participant, Participants, PluginIdentity, PodIdentity};
pub use owners::{
    ContainerOwners, HOOKS_OWNER_SEPARATOR, Owner, Ownership, REMOVAL_MARKER, is_compound,
};
pub use plugin::PluginId;
pub use updates::{Eviction, StopResult, UpdateResult, check_unsolicited, merge_unsolicited};
