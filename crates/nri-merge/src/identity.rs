//! Who a plugin is, as the runtime knows it from the kernel or from the
//! file it started: [`PluginIdentity`], [`PodIdentity`], and the
//! [`Participants`] of one validation (each plugin's identity and role).
//!
//! The runtime library fills these in (see `docs/runtime/security.md` of
//! the repository for how each field is obtained); here they are plain
//! data, for validators and for reports.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

/// What the runtime knows about who a plugin is, beyond the name it gave.
///
/// Every field is optional: what the runtime could not learn is `None`
/// (a WebAssembly plugin has no process; the executable of a process in
/// another pid namespace cannot be read), and a grant that requires it
/// does not match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PluginIdentity {
    /// The user id the plugin runs as: the socket peer's (`SO_PEERCRED`),
    /// or the runtime's own for a plugin it launched.
    pub uid: Option<u32>,
    /// The group id, likewise.
    pub gid: Option<u32>,
    /// The process id, in the runtime's pid namespace: the socket peer's,
    /// or the process the runtime started.
    pub pid: Option<u32>,
    /// The executable: `/proc/<pid>/exe` of a socket peer, read when the
    /// connection was accepted; the file in the plugin directory of a
    /// launched or WebAssembly plugin.
    pub executable: Option<PathBuf>,
    /// The container of this runtime the plugin runs in, and its pod (a
    /// plugin deployed as a DaemonSet), matched from the plugin's cgroup.
    pub pod: Option<PodIdentity>,
}

impl PluginIdentity {
    /// An identity with these process credentials.
    pub fn process(uid: u32, gid: u32, pid: Option<u32>) -> Self {
        Self {
            uid: Some(uid),
            gid: Some(gid),
            pid,
            ..Self::default()
        }
    }

    /// The identity with `executable` set.
    #[must_use]
    pub fn with_executable(mut self, executable: impl Into<PathBuf>) -> Self {
        self.executable = Some(executable.into());
        self
    }

    /// The identity with `pod` set.
    #[must_use]
    pub fn with_pod(mut self, pod: PodIdentity) -> Self {
        self.pod = Some(pod);
        self
    }
}

/// `uid=0 gid=0 pid=42 exe=/usr/bin/x pod=ns/name container=id`, leaving
/// out what is unknown (`unknown` when nothing is known).
impl fmt::Display for PluginIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sep = "";
        let mut item = |f: &mut fmt::Formatter<'_>, args: fmt::Arguments<'_>| {
            let r = write!(f, "{sep}{args}");
            sep = " ";
            r
        };
        if let Some(uid) = self.uid {
            item(f, format_args!("uid={uid}"))?;
        }
        if let Some(gid) = self.gid {
            item(f, format_args!("gid={gid}"))?;
        }
        if let Some(pid) = self.pid {
            item(f, format_args!("pid={pid}"))?;
        }
        if let Some(exe) = &self.executable {
            item(f, format_args!("exe={}", exe.display()))?;
        }
        if let Some(p) = &self.pod {
            item(
                f,
                format_args!(
                    "pod={}/{} container={}",
                    p.namespace, p.name, p.container_id
                ),
            )?;
        }
        if sep.is_empty() {
            f.write_str("unknown")?;
        }
        Ok(())
    }
}

/// The container a plugin runs in and its pod, as the runtime knows them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PodIdentity {
    /// The container's id.
    pub container_id: String,
    /// The container's name.
    pub container_name: String,
    /// The pod's id.
    pub pod_id: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The pod's uid.
    pub uid: String,
    /// The pod's labels.
    pub labels: BTreeMap<String, String>,
}

impl PodIdentity {
    /// The identity of container `container` of `pod`.
    pub fn of(pod: &nri_api::api::PodSandbox, container: &nri_api::api::Container) -> Self {
        Self {
            container_id: container.id.clone(),
            container_name: container.name.clone(),
            pod_id: pod.id.clone(),
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            labels: pod.labels.clone(),
        }
    }
}

/// One plugin taking part in an event: its identity and the role of the
/// grant it was admitted under (see [`DefaultValidatorConfig::roles`]).
///
/// [`DefaultValidatorConfig::roles`]: crate::validate::DefaultValidatorConfig::roles
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Participant {
    /// Who the plugin is.
    pub identity: PluginIdentity,
    /// The role of its grant, if the grant has one.
    pub role: Option<String>,
}

impl Participant {
    /// A participant with this identity and role.
    pub fn new(identity: PluginIdentity, role: Option<String>) -> Self {
        Self { identity, role }
    }
}

/// The plugins of one event, by `NN-name`, for in-process validators
/// ([`Validator::validate_with`](crate::validate::Validator::validate_with)):
/// who owns a field (the owners of a validation request name plugins by
/// `NN-name`) and who that plugin is.
#[derive(Debug, Clone, Copy, Default)]
pub struct Participants<'a> {
    list: &'a [(&'a str, &'a Participant)],
}

impl<'a> Participants<'a> {
    /// Participants from `(NN-name, participant)` pairs.
    pub fn new(list: &'a [(&'a str, &'a Participant)]) -> Self {
        Self { list }
    }

    /// No participants known (every lookup is `None`).
    pub fn none() -> Self {
        Self { list: &[] }
    }

    /// The participant named `plugin` (`NN-name`; a removal marker's
    /// leading `-` is ignored).
    pub fn get(&self, plugin: &str) -> Option<&'a Participant> {
        let plugin = plugin.strip_prefix('-').unwrap_or(plugin);
        self.list
            .iter()
            .find(|(name, _)| *name == plugin)
            .map(|(_, p)| *p)
    }

    /// The role of plugin `plugin`, if it has one.
    pub fn role(&self, plugin: &str) -> Option<&'a str> {
        self.get(plugin).and_then(|p| p.role.as_deref())
    }

    /// Every participant, in the order given.
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, &'a Participant)> + 'a {
        self.list.iter().copied()
    }

    /// Whether no participant is known.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}
