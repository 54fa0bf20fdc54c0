//! The scenario model: what `nri sim` replays, parsed from YAML.
//!
//! The format is documented in `docs/sim/format.md` of the repository.
//! [`Scenario::parse`] reports syntax and type errors with the file, line
//! and column from the YAML parser, and checks the scenario's consistency
//! with positions too: names that refer to nothing (plugins, events, pods,
//! containers, owner fields: [`Error::Unknown`] says what there is), steps
//! with no or several actions, bad durations and quantities.

mod check;
#[cfg(test)]
mod tests;
mod values;

pub use values::{
    PLUGIN_OPERATIONS, event_names, field_names, parse_duration, parse_event, parse_policy,
};
pub(crate) use values::{field_name, parse_quantity};

use serde::Deserialize;
use serde_saphyr::Spanned;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::{Error, Position};

/// A whole scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Scenario {
    /// Short name shown in the output.
    #[serde(default)]
    pub name: String,
    /// What the scenario shows.
    #[serde(default)]
    pub description: String,
    /// Settings of the embedded runtime.
    #[serde(default)]
    pub runtime: RuntimeSpec,
    /// Plugins the simulator starts.
    #[serde(default)]
    pub plugins: Vec<Spanned<PluginSpec>>,
    /// Pods (and their containers) the steps refer to.
    #[serde(default)]
    pub pods: Vec<Spanned<PodSpec>>,
    /// What happens, in order.
    #[serde(default)]
    pub steps: Vec<Spanned<Step>>,
    /// What must hold at the end.
    #[serde(default)]
    pub expect: Vec<Spanned<Expectation>>,
    /// Where the scenario came from (set by [`Scenario::parse`]).
    #[serde(skip)]
    pub file: String,
    /// Directory relative plugin paths are resolved against.
    #[serde(skip)]
    pub base_dir: PathBuf,
}

/// Settings of the embedded runtime.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RuntimeSpec {
    /// Time a plugin has to answer one request (default `2s`).
    pub request_timeout: Option<Spanned<String>>,
    /// Time a plugin has to register (default `5s`).
    pub registration_timeout: Option<Spanned<String>>,
    /// Consecutive timeouts after which a plugin is disconnected (default 3).
    pub strike_limit: Option<u32>,
    /// Policy of plugins without their own (`ignore`, `fail`, `required`).
    pub default_policy: Option<Spanned<String>>,
    /// Policies by plugin name (`name` or `NN-name`), for plugins the
    /// scenario does not start itself (`--plugin-dir`, `--plugin`).
    #[serde(default)]
    pub policies: BTreeMap<String, Spanned<String>>,
}

/// One plugin to start.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PluginSpec {
    /// Plugin name (registered as `NN-name`).
    pub name: String,
    /// Two-digit index (default: 10, 20, ... in file order).
    pub index: Option<Spanned<String>>,
    /// A bundled plugin kind (see `nri sim --list-bundled`).
    pub bundled: Option<Spanned<String>>,
    /// A plugin executable (relative paths: from the scenario's directory).
    pub path: Option<String>,
    /// Arguments of the executable.
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment of the process.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Settings of a bundled plugin (see the bundled plugin reference).
    #[serde(default)]
    pub config: BTreeMap<String, serde_json::Value>,
    /// Failure policy: `ignore`, `fail` (default) or `required`.
    pub policy: Option<Spanned<String>>,
    /// Per-event policy overrides (`EventName: policy`).
    #[serde(default)]
    pub event_policy: BTreeMap<String, Spanned<String>>,
    /// Request timeout for this plugin (e.g. `250ms`).
    pub timeout: Option<Spanned<String>>,
    /// Events a bundled plugin subscribes to (default: its own set).
    pub events: Option<Spanned<Vec<String>>>,
    /// `false`: not started with the runtime but by a `start-plugin` step.
    #[serde(default = "yes")]
    pub start: bool,
    /// An executable the embedded runtime launches itself from a plugin
    /// directory, as containerd launches pre-installed plugins (it gets
    /// `config-text` in Configure); not for plugin steps.
    #[serde(default)]
    pub launch: bool,
    /// The configuration file `NN-name.conf` of a launched plugin, passed
    /// to it in Configure.
    pub config_text: Option<String>,
}

fn yes() -> bool {
    true
}

/// A pod and its containers.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PodSpec {
    /// Pod name (steps refer to it).
    pub name: String,
    /// Namespace (default `default`).
    #[serde(default)]
    pub namespace: Option<String>,
    /// Labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Runtime handler.
    #[serde(default)]
    pub runtime_handler: String,
    /// Linux namespaces of the pod sandbox by type (`network`, `ipc`,
    /// `uts`, ...) and path, as a runtime reports them to plugins (a pod
    /// without a `network` entry is on the host network).
    #[serde(default)]
    pub namespaces: BTreeMap<String, String>,
    /// Containers.
    #[serde(default)]
    pub containers: Vec<ContainerSpec>,
}

/// A container.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ContainerSpec {
    /// Container name (steps refer to it as `pod/container`).
    pub name: String,
    /// Command line.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Mounts.
    #[serde(default)]
    pub mounts: Vec<MountSpec>,
    /// Resources.
    #[serde(default)]
    pub resources: Option<ResourcesSpec>,
}

/// A mount.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct MountSpec {
    /// Path in the container.
    pub destination: String,
    /// Host path or volume.
    #[serde(default)]
    pub source: String,
    /// Type (default `bind`).
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// Options.
    #[serde(default)]
    pub options: Vec<String>,
}

/// Linux resources. Memory sizes take suffixes (`256Mi`, `1G`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ResourcesSpec {
    /// CPU settings.
    #[serde(default)]
    pub cpu: Option<CpuSpec>,
    /// Memory settings.
    #[serde(default)]
    pub memory: Option<MemorySpec>,
    /// PIDs limit.
    #[serde(default)]
    pub pids: Option<i64>,
}

/// CPU resources.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct CpuSpec {
    /// CPU shares.
    pub shares: Option<u64>,
    /// CFS quota.
    pub quota: Option<i64>,
    /// CFS period.
    pub period: Option<u64>,
    /// cpuset CPUs (`0-3`).
    pub cpus: Option<String>,
    /// cpuset memory nodes.
    pub mems: Option<String>,
}

/// Memory resources.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct MemorySpec {
    /// Limit (bytes, or with a suffix).
    pub limit: Option<Spanned<Quantity>>,
    /// Reservation.
    pub reservation: Option<Spanned<Quantity>>,
    /// Swap limit.
    pub swap: Option<Spanned<Quantity>>,
}

/// A number, or a string with a binary (`Ki`, `Mi`, `Gi`) or decimal
/// (`k`, `M`, `G`) suffix.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Quantity {
    /// Plain bytes.
    Number(i64),
    /// With a suffix.
    Text(String),
}

impl Quantity {
    /// The value in bytes, or why it is not a quantity.
    ///
    /// # Errors
    ///
    /// [`Error::BadValue`], [`Error::UnknownUnit`] or
    /// [`Error::QuantityTooLarge`].
    pub fn bytes(&self) -> Result<i64, crate::Error> {
        match self {
            Quantity::Number(n) => Ok(*n),
            Quantity::Text(s) => parse_quantity(s),
        }
    }
}

/// One step: exactly one action, with an optional label and expected
/// outcome.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Step {
    /// A name for the step (expectations can refer to it).
    pub label: Option<String>,
    /// Expected outcome: `ok` or `fail` (an expectation).
    pub expect: Option<Spanned<String>>,
    /// RunPodSandbox.
    pub run_pod: Option<Spanned<String>>,
    /// UpdatePodSandbox (+ PostUpdatePodSandbox), with `resources`.
    pub update_pod: Option<Spanned<String>>,
    /// StopPodSandbox.
    pub stop_pod: Option<Spanned<String>>,
    /// RemovePodSandbox.
    pub remove_pod: Option<Spanned<String>>,
    /// CreateContainer (+ PostCreateContainer) of `pod/container`.
    pub create: Option<Spanned<String>>,
    /// StartContainer (+ PostStartContainer).
    pub start: Option<Spanned<String>>,
    /// UpdateContainer (+ PostUpdateContainer), with `resources`.
    pub update: Option<Spanned<String>>,
    /// StopContainer.
    pub stop: Option<Spanned<String>>,
    /// RemoveContainer.
    pub remove: Option<Spanned<String>>,
    /// RunPodSandbox, then create and start every container of the pod.
    pub up: Option<Spanned<String>>,
    /// Stop and remove every container of the pod, then stop and remove it.
    pub down: Option<Spanned<String>>,
    /// Steps run at the same time.
    pub parallel: Option<Vec<Spanned<Step>>>,
    /// Start a plugin declared with `start: false` (waits for registration).
    pub start_plugin: Option<Spanned<String>>,
    /// Kill a plugin (SIGKILL): a crash.
    pub kill_plugin: Option<Spanned<String>>,
    /// Kill a plugin and start it again.
    pub restart_plugin: Option<Spanned<String>>,
    /// Wait (`100ms`, `1s`).
    pub sleep: Option<Spanned<String>>,
    /// Resources of `update` / `update-pod`.
    pub resources: Option<ResourcesSpec>,
}

/// Something that must hold at the end of the run.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Expectation {
    /// About the final OCI spec of `pod/container`.
    pub container: Option<Spanned<String>>,
    /// Environment variables with these values.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Environment variables that must not be set.
    #[serde(default)]
    pub env_absent: Vec<String>,
    /// Annotations with these values.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Mounts that must exist: a destination, or a map of the mount's OCI
    /// fields (`destination` required; listed `options` must be among the
    /// mount's).
    #[serde(default)]
    pub mounts: Vec<SpecItem>,
    /// Devices that must exist: a path, or a map of the device's OCI fields
    /// (`path` required; `type`, `major`, `minor`, `fileMode`, `uid`,
    /// `gid`).
    #[serde(default)]
    pub devices: Vec<SpecItem>,
    /// Resources the final spec has (the format of a container's
    /// `resources`; only the given values are checked).
    pub resources: Option<ResourcesSpec>,
    /// Values at paths of the final OCI spec, paths as the spec diff prints
    /// them (`linux.resources.memory.limit`, `mounts[/data].options`,
    /// `hooks.prestart`): scalars equal (a quantity such as `256Mi` for a
    /// number), maps by their given keys, lists by their given items.
    #[serde(default)]
    pub spec: BTreeMap<String, serde_json::Value>,
    /// Rlimits (`RLIMIT_NOFILE` or `nofile`) with soft/hard values.
    #[serde(default)]
    pub rlimits: BTreeMap<String, RlimitSpec>,
    /// Field owners: `env/KEY`, `annotations/KEY`, `mounts/DEST`,
    /// `devices/PATH`, `rlimits/TYPE` -> plugin name.
    #[serde(default)]
    pub owners: BTreeMap<String, Spanned<String>>,

    /// About calls of plugin `plugin`.
    pub plugin: Option<Spanned<String>>,
    /// Event (or `Synchronize`, `Configure`, `Shutdown`) counted.
    pub event: Option<Spanned<String>>,
    /// Exact number of calls.
    pub calls: Option<u64>,
    /// Minimum number of calls.
    pub min_calls: Option<u64>,
    /// The plugin is registered at the end (`true`) or not (`false`).
    pub registered: Option<bool>,

    /// About the outcome of the step with this label.
    pub step: Option<Spanned<String>>,
    /// `ok` or `fail`.
    pub outcome: Option<Spanned<String>>,

    /// A conflict was reported (`true`), or none (`false`).
    pub conflict: Option<bool>,
    /// ... caused by this plugin (name or `NN-name`).
    pub by: Option<Spanned<String>>,
}

/// An entry of a list in the final spec: its key (mount destination,
/// device path), or a map of the fields it must have.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum SpecItem {
    /// Only the key.
    Key(String),
    /// Fields (OCI names), the key among them.
    Fields(BTreeMap<String, serde_json::Value>),
}

impl SpecItem {
    /// The key: the string, or the string field `key` of the map.
    pub fn key(&self, key: &str) -> Option<&str> {
        match self {
            SpecItem::Key(k) => Some(k),
            SpecItem::Fields(m) => m.get(key).and_then(serde_json::Value::as_str),
        }
    }
}

/// Soft and hard limit.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RlimitSpec {
    /// Soft limit.
    pub soft: Option<u64>,
    /// Hard limit.
    pub hard: Option<u64>,
}
/// What [`Scenario::parse_with`] knows besides the scenario: plugins given
/// on the command line, which the scenario's names may refer to.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ParseOptions {
    /// Plugins started outside the scenario (`--plugin`), by name or
    /// `NN-name`.
    pub extra_plugins: Vec<String>,
    /// A plugin directory (`--plugin-dir`) is used: names of plugins the
    /// scenario does not declare may be there. They are not refused here;
    /// the run reports each one the directory does not have as a plugin
    /// problem.
    pub plugin_dir: bool,
}

impl ParseOptions {
    /// Plugins started outside the scenario, by name or `NN-name`.
    pub fn extra_plugins(mut self, names: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.extra_plugins = names.into_iter().map(Into::into).collect();
        self
    }

    /// Whether a plugin directory is used.
    pub fn plugin_dir(mut self, used: bool) -> Self {
        self.plugin_dir = used;
        self
    }
}

impl Scenario {
    /// Parses and checks a scenario with no plugins from outside it (see
    /// [`Scenario::parse_with`]).
    ///
    /// # Errors
    ///
    /// [`Error::Parse`] (syntax, types, unknown keys), [`Error::Invalid`]
    /// (inconsistent values), [`Error::Unknown`] (names that refer to
    /// nothing), each with its position.
    pub fn parse(file: &str, base_dir: &Path, text: &str) -> Result<Scenario, Error> {
        Scenario::parse_with(file, base_dir, text, &ParseOptions::default())
    }

    /// Parses and checks a scenario. `file` names it in errors; relative
    /// plugin paths are resolved against `base_dir`; `opts` says which
    /// plugins besides its own its names may refer to.
    ///
    /// # Errors
    ///
    /// As [`Scenario::parse`].
    pub fn parse_with(
        file: &str,
        base_dir: &Path,
        text: &str,
        opts: &ParseOptions,
    ) -> Result<Scenario, Error> {
        let yaml = serde_saphyr::options! { with_snippet: false };
        let mut sc: Scenario = serde_saphyr::from_str_with_options(text, yaml).map_err(|e| {
            let (line, column) = e
                .location()
                .map(|l| (l.line(), l.column()))
                .unwrap_or((0, 0));
            let mut message = e.without_snippet().to_string();
            // The position is in front already.
            let suffix = format!(" at line {line}, column {column}");
            if let Some(m) = message.strip_suffix(&suffix) {
                message = m.to_owned();
            }
            Error::Parse {
                at: Position {
                    file: file.to_owned(),
                    line,
                    column,
                },
                message,
            }
        })?;
        sc.file = file.to_owned();
        sc.base_dir = base_dir.to_owned();
        sc.check(opts)?;
        Ok(sc)
    }

    /// The line `n` (1-based) of a scenario file and a caret under column
    /// `col`, for error messages; `None` if unknown.
    pub fn snippet(text: &str, line: u64, col: u64) -> Option<String> {
        let l = text
            .lines()
            .nth(usize::try_from(line).ok()?.checked_sub(1)?)?;
        let pad = " ".repeat(usize::try_from(col.saturating_sub(1)).ok()?);
        Some(format!("{line:>4} | {l}\n     | {pad}^"))
    }

    /// The position of a location in this scenario's file.
    pub fn pos(&self, loc: &serde_saphyr::Location) -> Position {
        Position {
            file: self.file.clone(),
            line: loc.line(),
            column: loc.column(),
        }
    }

    fn invalid(&self, loc: &serde_saphyr::Location, message: impl Into<String>) -> Error {
        Error::Invalid {
            at: self.pos(loc),
            message: message.into(),
        }
    }

    /// Looks up a pod by name.
    pub fn pod(&self, name: &str) -> Option<&PodSpec> {
        self.pods.iter().map(|p| &p.value).find(|p| p.name == name)
    }

    /// Looks up `pod/container`.
    pub fn container(&self, target: &str) -> Option<(&PodSpec, &ContainerSpec)> {
        let (pod, ctr) = target.split_once('/')?;
        let pod = self.pod(pod)?;
        let c = pod.containers.iter().find(|c| c.name == ctr)?;
        Some((pod, c))
    }

    /// Looks up a plugin by name (or `NN-name`).
    pub fn plugin(&self, name: &str) -> Option<(usize, &PluginSpec)> {
        self.plugins
            .iter()
            .map(|p| &p.value)
            .enumerate()
            .find(|(i, p)| {
                p.name == name || format!("{}-{}", self.plugin_index(*i), p.name) == name
            })
    }

    /// The plugin names the scenario refers to outside `plugins` and plugin
    /// steps: in expectations (`plugin`, `by`, the plugins of `owners`)
    /// and the keys of `runtime.policies`.
    pub fn plugin_refs(&self) -> Vec<String> {
        let mut names: Vec<String> = self.runtime.policies.keys().cloned().collect();
        for e in &self.expect {
            let e = &e.value;
            names.extend(e.plugin.iter().chain(&e.by).map(|p| p.value.clone()));
            names.extend(e.owners.values().map(|p| p.value.clone()));
        }
        names
    }

    /// The index of the `i`-th plugin (given, or 10, 20, ...).
    pub fn plugin_index(&self, i: usize) -> String {
        match self.plugins.get(i).and_then(|p| p.value.index.as_ref()) {
            Some(ix) => ix.value.clone(),
            None => format!("{:02}", ((i + 1) * 10).min(99)),
        }
    }
}

impl Step {
    /// The action keys of a step.
    pub const ACTIONS: [&'static str; 17] = [
        "run-pod",
        "update-pod",
        "stop-pod",
        "remove-pod",
        "create",
        "start",
        "update",
        "stop",
        "remove",
        "up",
        "down",
        "parallel",
        "start-plugin",
        "kill-plugin",
        "restart-plugin",
        "sleep",
        "(none)",
    ];

    /// The action keys present in this step.
    pub fn actions(&self) -> Vec<&'static str> {
        let present = [
            self.run_pod.is_some(),
            self.update_pod.is_some(),
            self.stop_pod.is_some(),
            self.remove_pod.is_some(),
            self.create.is_some(),
            self.start.is_some(),
            self.update.is_some(),
            self.stop.is_some(),
            self.remove.is_some(),
            self.up.is_some(),
            self.down.is_some(),
            self.parallel.is_some(),
            self.start_plugin.is_some(),
            self.kill_plugin.is_some(),
            self.restart_plugin.is_some(),
            self.sleep.is_some(),
        ];
        present
            .iter()
            .zip(Self::ACTIONS)
            .filter(|(p, _)| **p)
            .map(|(_, a)| a)
            .collect()
    }
}
