//! Apply NRI container adjustments and resource updates to an OCI runtime
//! spec ([`oci_spec::runtime::Spec`]).
//!
//! This is the Rust counterpart of containerd/nri's
//! `pkg/runtime-tools/generate`: a runtime gets one merged
//! [`ContainerAdjustment`] from its plugins when a container is created and
//! applies it to the container's spec with [`Applier::apply_adjustment`];
//! resource updates ([`LinuxResources`] from a `ContainerUpdate` or an
//! `UpdateContainer` reply) go through [`Applier::apply_update`].
//!
//! # Semantics
//!
//! * **Removal markers first.** For every keyed field (annotations, env,
//!   mounts, devices, namespaces, sysctl, net devices) entries whose key
//!   starts with `-` are removals and are applied before all additions, so
//!   an adjustment carrying both `-k` and `k` (which upstream's merge
//!   produces for "remove then set") always ends with `k` set. Upstream's Go
//!   generator walks Go maps in random order and may end with `k` removed.
//!   Removing something absent is a no-op.
//! * **Merge, not replace.** Only fields set in the adjustment or update are
//!   written; everything else in the spec keeps its value.
//! * **Atomic.** Both methods work on a copy: on error the spec is unchanged.
//! * **Typed errors, no panics.** Bad input (unknown namespace type, seccomp
//!   action, rlimit type, a mount without destination, ...) gives an
//!   [`Error`] naming the NRI field.
//!
//! Where each NRI field lands:
//!
//! | NRI field | OCI spec | rule |
//! |---|---|---|
//! | `annotations` | `annotations` | `-k` removes |
//! | `env` | `process.env` | set in place / append; `-K` removes |
//! | `args` | `process.args` | replace; a leading `""` is dropped |
//! | `hooks.*` | `hooks.*` | appended per phase |
//! | `mounts` | `mounts` | replace by destination; `-/dest` removes; sorted like upstream |
//! | `rlimits` | `process.rlimits` | replace by type |
//! | `CDI_devices` | via [`CdiInjector`] | see [`Unresolved`] |
//! | `linux.devices` | `linux.devices` + allow rule in `linux.resources.devices` | replace by path; `-/dev/x` removes |
//! | `linux.resources.*` | `linux.resources.*` | see [`Applier::apply_update`] |
//! | `linux.resources.blockio_class` | `linux.resources.blockIO` via [`BlockIoClassResolver`] | see [`Unresolved`] |
//! | `linux.resources.rdt_class` | `linux.intelRdt` (`closID`, or [`RdtClassResolver`]) | `""` removes |
//! | `linux.cgroups_path` | `linux.cgroupsPath` | |
//! | `linux.oom_score_adj` | `process.oomScoreAdj` | |
//! | `linux.io_priority` | `process.ioPriority` | class NONE removes |
//! | `linux.seccomp_policy` | `linux.seccomp` | replaced whole |
//! | `linux.namespaces` | `linux.namespaces` | add/replace by type; `-type` removes |
//! | `linux.sysctl` | `linux.sysctl` | `-key` removes |
//! | `linux.net_devices` | `linux.netDevices` | `-hostif` removes |
//! | `linux.scheduler` | `process.scheduler` | SCHED_NONE removes |
//! | `linux.rdt` | `linux.intelRdt` | `remove` drops it first |
//! | `linux.memory_policy` | `linux.memoryPolicy` | replaced whole |
//!
//! # Differences from upstream's generator
//!
//! * Removals before additions (above); rlimits replace by type instead of
//!   appending duplicates; hugepage limits replace by page size.
//! * All memory fields are applied (upstream applies only limit and swap).
//!   As upstream, a memory limit without a swap value sets swap = limit.
//! * Device allow rules: "rw" (+"m" for block devices), as upstream
//!   effectively produces; a "u" device gets a "c" rule, a FIFO none (the
//!   cgroup device controller knows only "a", "b", "c"); identical rules are
//!   not duplicated; removing or renumbering a device drops the exact allow
//!   rule granted for it unless another device node still needs it.
//! * The seccomp default errno is carried over (upstream drops it).
//! * Propagation: `rshared`/`rslave` mount options set the rootfs
//!   propagation as upstream does, but the host-side check of the mount
//!   source is left to the runtime (this crate does no I/O).
//! * Missing CDI injector or block I/O class resolver is an error by
//!   default (upstream ignores silently); see [`Unresolved`]. Without an
//!   RDT class resolver the class becomes `linux.intelRdt.closID`.
//! * Limits of `oci-spec` 0.10: a pids limit cannot be absent, so
//!   "unlimited" (any negative NRI limit) is written as -1; oci-spec
//!   misspells the scheduler flags `SCHED_FLAG_RESET_ON_FORK` and
//!   `SCHED_FLAG_DL_OVERRUN` when it serializes a spec, so write a spec
//!   with [`spec_json`], which corrects them (and sorts the capability
//!   sets, which oci-spec keeps unordered).
//!
//! # Example
//!
//! ```
//! use std::collections::BTreeMap;
//! use nri_api::api::{ContainerAdjustment, KeyValue, LinuxContainerAdjustment, LinuxCpu,
//!     LinuxResources, OptionalInt64, OptionalUInt64};
//! use nri_oci::{Applier, Unresolved};
//! use oci_spec::runtime::Spec;
//!
//! let applier = Applier::builder()
//!     .unresolved_cdi(Unresolved::Error)
//!     .build();
//! let mut spec = Spec::default();
//!
//! let adjust = ContainerAdjustment {
//!     annotations: BTreeMap::from([
//!         ("-stale".to_owned(), String::new()),
//!         ("owner".to_owned(), "nri".to_owned()),
//!     ]),
//!     env: vec![KeyValue { key: "-TERM".into(), value: String::new() },
//!               KeyValue { key: "GREETING".into(), value: "hello".into() }],
//!     linux: Some(LinuxContainerAdjustment {
//!         resources: Some(LinuxResources {
//!             cpu: Some(LinuxCpu { shares: OptionalUInt64::some(512u64), ..Default::default() }),
//!             ..Default::default()
//!         }),
//!         ..Default::default()
//!     }),
//!     ..Default::default()
//! };
//! applier.apply_adjustment(&mut spec, &adjust)?;
//!
//! let env = spec.process().as_ref().and_then(|p| p.env().clone()).unwrap_or_default();
//! assert!(env.contains(&"GREETING=hello".to_owned()));
//! assert!(!env.iter().any(|e| e.starts_with("TERM=")));
//!
//! // A later update merges: the CPU shares set above are kept.
//! let update = LinuxResources {
//!     cpu: Some(LinuxCpu { quota: OptionalInt64::some(50_000i64), ..Default::default() }),
//!     ..Default::default()
//! };
//! applier.apply_update(&mut spec, &update)?;
//! let cpu = spec.linux().as_ref().and_then(|l| l.resources().clone())
//!     .and_then(|r| r.cpu().clone()).unwrap_or_default();
//! assert_eq!((cpu.shares(), cpu.quota()), (Some(512), Some(50_000)));
//! # Ok::<(), nri_oci::Error>(())
//! ```

use std::fmt;
use std::sync::Arc;

use nri_api::api::{ContainerAdjustment, LinuxResources};
use oci_spec::runtime::{LinuxBlockIo, LinuxIntelRdt, Spec};

mod devices;
mod error;
mod json;
mod linux;
mod mounts;
mod process;
mod resources;
mod seccomp;
mod util;

pub use error::{BoxError, Error};
pub use json::spec_json;

/// Annotation that records an unresolved block I/O class when the policy is
/// [`Unresolved::Annotate`]. The value is the class name.
pub const BLOCKIO_CLASS_ANNOTATION: &str = "blockio.nri.noderesource.dev/class";

/// Annotation that records unresolved CDI devices when the policy is
/// [`Unresolved::Annotate`]. It follows the CDI annotation convention
/// (`cdi.k8s.io/<name>`, value = comma-separated fully qualified device
/// names), so a CDI-aware component further down can still inject them.
pub const CDI_ANNOTATION: &str = "cdi.k8s.io/nri";

/// Injects CDI devices into a spec. The runtime owns the CDI registry, so
/// it supplies this; closures `Fn(&mut Spec, &[String]) -> Result<(), BoxError>`
/// implement it.
pub trait CdiInjector: Send + Sync {
    /// Injects the devices (fully qualified names, `vendor.com/class=name`)
    /// into `spec`.
    fn inject(&self, spec: &mut Spec, devices: &[String]) -> Result<(), BoxError>;
}

impl<F> CdiInjector for F
where
    F: Fn(&mut Spec, &[String]) -> Result<(), BoxError> + Send + Sync,
{
    fn inject(&self, spec: &mut Spec, devices: &[String]) -> Result<(), BoxError> {
        self(spec, devices)
    }
}

/// Maps a block I/O class name to block I/O settings (the runtime's class
/// configuration, e.g. goresctrl's blockio classes). Closures
/// `Fn(&str) -> Result<LinuxBlockIo, BoxError>` implement it.
pub trait BlockIoClassResolver: Send + Sync {
    /// Settings for `class`; they replace `linux.resources.blockIO`.
    fn resolve(&self, class: &str) -> Result<LinuxBlockIo, BoxError>;
}

impl<F> BlockIoClassResolver for F
where
    F: Fn(&str) -> Result<LinuxBlockIo, BoxError> + Send + Sync,
{
    fn resolve(&self, class: &str) -> Result<LinuxBlockIo, BoxError> {
        self(class)
    }
}

/// Maps an RDT class name to Intel RDT settings. Without one, the class name
/// is used as `linux.intelRdt.closID`. Closures
/// `Fn(&str) -> Result<LinuxIntelRdt, BoxError>` implement it.
pub trait RdtClassResolver: Send + Sync {
    /// Settings for `class`; they replace `linux.intelRdt`.
    fn resolve(&self, class: &str) -> Result<LinuxIntelRdt, BoxError>;
}

impl<F> RdtClassResolver for F
where
    F: Fn(&str) -> Result<LinuxIntelRdt, BoxError> + Send + Sync,
{
    fn resolve(&self, class: &str) -> Result<LinuxIntelRdt, BoxError> {
        self(class)
    }
}

/// What to do with a request that needs a runtime callback (CDI injector,
/// block I/O class resolver) when none is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Unresolved {
    /// Fail with a typed error ([`Error::CdiUnresolved`],
    /// [`Error::BlockIoClassUnresolved`]). The default: a plugin asked for
    /// something, and silently dropping it hides the failure.
    #[default]
    Error,
    /// Log a warning and go on (what upstream's generator does).
    Ignore,
    /// Record the request in an annotation ([`CDI_ANNOTATION`],
    /// [`BLOCKIO_CLASS_ANNOTATION`]) for a later stage to act on.
    Annotate,
}

/// Applies NRI adjustments and updates to OCI specs. Cheap to clone;
/// `Send + Sync`. Build one with [`Applier::builder`].
#[derive(Clone, Default)]
pub struct Applier {
    cdi: Option<Arc<dyn CdiInjector>>,
    blockio: Option<Arc<dyn BlockIoClassResolver>>,
    rdt: Option<Arc<dyn RdtClassResolver>>,
    unresolved_cdi: Unresolved,
    unresolved_blockio: Unresolved,
}

impl fmt::Debug for Applier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Applier")
            .field("cdi_injector", &self.cdi.is_some())
            .field("blockio_class_resolver", &self.blockio.is_some())
            .field("rdt_class_resolver", &self.rdt.is_some())
            .field("unresolved_cdi", &self.unresolved_cdi)
            .field("unresolved_blockio_class", &self.unresolved_blockio)
            .finish()
    }
}

/// Builder for [`Applier`]. Every option has a default: no callbacks, and
/// [`Unresolved::Error`] for both policies.
#[derive(Default, Debug)]
#[must_use]
pub struct ApplierBuilder {
    inner: Applier,
}

impl ApplierBuilder {
    /// Sets the CDI injector.
    pub fn cdi_injector(mut self, injector: impl CdiInjector + 'static) -> Self {
        self.inner.cdi = Some(Arc::new(injector));
        self
    }

    /// Sets the block I/O class resolver.
    pub fn blockio_class_resolver(mut self, resolver: impl BlockIoClassResolver + 'static) -> Self {
        self.inner.blockio = Some(Arc::new(resolver));
        self
    }

    /// Sets the RDT class resolver.
    pub fn rdt_class_resolver(mut self, resolver: impl RdtClassResolver + 'static) -> Self {
        self.inner.rdt = Some(Arc::new(resolver));
        self
    }

    /// What to do with CDI devices when no injector is set.
    pub fn unresolved_cdi(mut self, policy: Unresolved) -> Self {
        self.inner.unresolved_cdi = policy;
        self
    }

    /// What to do with a block I/O class when no resolver is set.
    pub fn unresolved_blockio_class(mut self, policy: Unresolved) -> Self {
        self.inner.unresolved_blockio = policy;
        self
    }

    /// Builds the applier.
    pub fn build(self) -> Applier {
        self.inner
    }
}

impl Applier {
    /// A builder with default options.
    pub fn builder() -> ApplierBuilder {
        ApplierBuilder::default()
    }

    /// Applies a (merged) container adjustment to `spec`.
    ///
    /// Order: annotations, env, args, hooks, CDI devices, devices, cgroups
    /// path, OOM score, I/O priority, scheduler, seccomp, namespaces,
    /// sysctl, net devices, memory policy, resources (then block I/O and RDT
    /// class), RDT, mounts, rlimits. Within each keyed field, removals come
    /// before additions. On error `spec` is left unchanged.
    pub fn apply_adjustment(
        &self,
        spec: &mut Spec,
        adjust: &ContainerAdjustment,
    ) -> Result<(), Error> {
        let mut work = spec.clone();
        self.adjust(&mut work, adjust)?;
        *spec = work;
        Ok(())
    }

    /// Merges a resource update into `linux.resources` (and `linux.intelRdt`
    /// for an RDT class): every field set in `resources` replaces the
    /// spec's value, unset fields keep theirs. Hugepage limits replace by
    /// page size, unified entries by key; device rules are appended. A memory
    /// limit without a swap value also sets swap to the limit (as upstream's
    /// generator does). On error `spec` is left unchanged.
    pub fn apply_update(&self, spec: &mut Spec, resources: &LinuxResources) -> Result<(), Error> {
        let mut work = spec.clone();
        resources::resources(self, &mut work, resources)?;
        *spec = work;
        Ok(())
    }

    fn adjust(&self, spec: &mut Spec, a: &ContainerAdjustment) -> Result<(), Error> {
        process::annotations(spec, &a.annotations)?;
        process::env(spec, &a.env)?;
        process::args(spec, &a.args);
        process::hooks(spec, a.hooks.as_ref())?;
        self.cdi_devices(spec, &a.cdi_devices)?;
        if let Some(l) = &a.linux {
            devices::devices(spec, &l.devices)?;
            linux::cgroups_path(spec, &l.cgroups_path);
            process::oom_score_adj(spec, l.oom_score_adj.as_ref())?;
            process::io_priority(spec, l.io_priority.as_ref())?;
            process::scheduler(spec, l.scheduler.as_ref())?;
            seccomp::seccomp(spec, l.seccomp_policy.as_ref())?;
            linux::namespaces(spec, &l.namespaces)?;
            linux::sysctl(spec, &l.sysctl)?;
            linux::net_devices(spec, &l.net_devices)?;
            linux::memory_policy(spec, l.memory_policy.as_ref())?;
            if let Some(r) = &l.resources {
                resources::resources(self, spec, r)?;
            }
            linux::rdt(spec, l.rdt.as_ref());
        }
        mounts::mounts(spec, &a.mounts)?;
        process::rlimits(spec, &a.rlimits)?;
        Ok(())
    }

    fn cdi_devices(
        &self,
        spec: &mut Spec,
        devices: &[nri_api::api::CdiDevice],
    ) -> Result<(), Error> {
        if devices.is_empty() {
            return Ok(());
        }
        let mut names = Vec::with_capacity(devices.len());
        for d in devices {
            if d.name.is_empty() {
                return Err(Error::MissingField {
                    field: "CDI_devices",
                    what: "CDI device name",
                });
            }
            if !names.contains(&d.name) {
                names.push(d.name.clone());
            }
        }
        if let Some(injector) = &self.cdi {
            return injector
                .inject(spec, &names)
                .map_err(|source| Error::CdiInjection {
                    devices: names.clone(),
                    source,
                });
        }
        match self.unresolved_cdi {
            Unresolved::Error => Err(Error::CdiUnresolved { devices: names }),
            Unresolved::Ignore => {
                tracing::warn!(devices = ?names, "no CDI injector, CDI devices ignored");
                Ok(())
            }
            Unresolved::Annotate => {
                let map = spec.annotations_mut().get_or_insert_with(Default::default);
                let mut all: Vec<String> = map
                    .get(CDI_ANNOTATION)
                    .map(|v| {
                        v.split(',')
                            .filter(|s| !s.is_empty())
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default();
                for n in names {
                    if !all.contains(&n) {
                        all.push(n);
                    }
                }
                map.insert(CDI_ANNOTATION.to_owned(), all.join(","));
                Ok(())
            }
        }
    }
}

// The README's example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
