//! The scenario model: what `nri sim` replays, parsed from YAML.
//!
//! The format is documented in `docs/sim/format.md` of the repository.
//! [`Scenario::parse`] reports syntax and type errors with the file, line
//! and column from the YAML parser, and checks the scenario's consistency
//! (references to unknown pods, containers and plugins, steps with no or
//! several actions, bad durations and quantities) with positions too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_saphyr::Spanned;

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
    pub fn bytes(&self) -> Result<i64, String> {
        match self {
            Quantity::Number(n) => Ok(*n),
            Quantity::Text(s) => parse_quantity(s),
        }
    }
}

pub(crate) fn parse_quantity(s: &str) -> Result<i64, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '-'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: i64 = num
        .parse()
        .map_err(|_| format!("expected a quantity like 256Mi or 1G, got {s:?}"))?;
    let mult: i64 = match unit {
        "" => 1,
        "k" | "K" => 1000,
        "M" => 1000_i64.pow(2),
        "G" => 1000_i64.pow(3),
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        _ => {
            return Err(format!(
                "unknown unit {unit:?} in {s:?} (expected Ki, Mi, Gi, Ti, k, M, G)"
            ));
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("quantity {s:?} is too large"))
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
    pub owners: BTreeMap<String, String>,

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
    pub by: Option<String>,
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

/// Parses `100ms`, `2s`, `1.5s`, `1m`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let bad = || format!("expected a duration like 250ms, 2s or 1m, got {s:?}");
    let (num, mult_ms) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1000.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60_000.0)
    } else {
        return Err(bad());
    };
    let v: f64 = num.trim().parse().map_err(|_| bad())?;
    if !v.is_finite() || v < 0.0 {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(v * mult_ms / 1000.0))
}

impl Scenario {
    /// Parses and checks a scenario. `file` names it in errors; relative
    /// plugin paths are resolved against `base_dir`.
    pub fn parse(file: &str, base_dir: &Path, text: &str) -> Result<Scenario, Error> {
        let opts = serde_saphyr::options! { with_snippet: false };
        let mut sc: Scenario = serde_saphyr::from_str_with_options(text, opts).map_err(|e| {
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
        sc.check()?;
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

    /// The index of the `i`-th plugin (given, or 10, 20, ...).
    pub fn plugin_index(&self, i: usize) -> String {
        match self.plugins.get(i).and_then(|p| p.value.index.as_ref()) {
            Some(ix) => ix.value.clone(),
            None => format!("{:02}", ((i + 1) * 10).min(99)),
        }
    }

    /// Consistency checks with positions.
    fn check(&self) -> Result<(), Error> {
        let rt = &self.runtime;
        for d in [&rt.request_timeout, &rt.registration_timeout]
            .into_iter()
            .flatten()
        {
            parse_duration(&d.value).map_err(|m| self.invalid(&d.referenced, m))?;
        }
        if let Some(p) = &rt.default_policy {
            self.check_policy(p)?;
        }
        for p in rt.policies.values() {
            self.check_policy(p)?;
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, sp) in self.plugins.iter().enumerate() {
            let p = &sp.value;
            let at = &sp.referenced;
            nri_api::check_plugin_name(&p.name)
                .map_err(|e| self.invalid(at, format!("plugin name {:?}: {e}", p.name)))?;
            if !names.insert(p.name.clone()) {
                return Err(self.invalid(at, format!("plugin {:?} is listed twice", p.name)));
            }
            if let Some(ix) = &p.index {
                nri_api::check_plugin_index(&ix.value).map_err(|e| {
                    self.invalid(&ix.referenced, format!("plugin index {:?}: {e}", ix.value))
                })?;
            }
            let _ = i;
            match (&p.bundled, &p.path) {
                (Some(b), None) => {
                    if crate::bundled::Kind::parse(&b.value).is_none() {
                        return Err(self.invalid(
                            &b.referenced,
                            format!(
                                "unknown bundled plugin {:?}; expected one of: {}",
                                b.value,
                                crate::bundled::Kind::names().join(", ")
                            ),
                        ));
                    }
                    crate::bundled::check_config(&b.value, &p.config)
                        .map_err(|m| self.invalid(at, format!("plugin {:?}: {m}", p.name)))?;
                }
                (None, Some(_)) => {}
                _ => {
                    return Err(self.invalid(
                        at,
                        format!(
                            "plugin {:?}: expected exactly one of `bundled: KIND` or `path: EXECUTABLE`",
                            p.name
                        ),
                    ));
                }
            }
            if let Some(pol) = &p.policy {
                self.check_policy(pol)?;
            }
            for (ev, pol) in &p.event_policy {
                self.check_policy(pol)?;
                parse_event(ev).map_err(|m| self.invalid(&pol.referenced, m))?;
            }
            if let Some(t) = &p.timeout {
                parse_duration(&t.value).map_err(|m| self.invalid(&t.referenced, m))?;
            }
            if p.launch && p.path.is_none() {
                return Err(self.invalid(
                    at,
                    format!(
                        "plugin {:?}: `launch` applies to executables (`path`)",
                        p.name
                    ),
                ));
            }
            if p.launch && !p.start {
                return Err(self.invalid(
                    at,
                    format!(
                        "plugin {:?}: a launched plugin starts with the runtime",
                        p.name
                    ),
                ));
            }
            if p.config_text.is_some() && !p.launch {
                return Err(self.invalid(
                    at,
                    format!(
                        "plugin {:?}: `config-text` needs `launch: true` (only launched plugins get a configuration)",
                        p.name
                    ),
                ));
            }
            if let Some(evs) = &p.events {
                if p.path.is_some() {
                    return Err(self.invalid(
                        &evs.referenced,
                        "`events` applies to bundled plugins only (an executable subscribes itself)",
                    ));
                }
                for e in &evs.value {
                    parse_event(e).map_err(|m| self.invalid(&evs.referenced, m))?;
                }
            }
        }
        let mut pods = std::collections::BTreeSet::new();
        for sp in &self.pods {
            let p = &sp.value;
            if p.name.is_empty() || p.name.contains('/') {
                return Err(self.invalid(
                    &sp.referenced,
                    format!("pod name {:?} must be non-empty without '/'", p.name),
                ));
            }
            if !pods.insert(p.name.clone()) {
                return Err(
                    self.invalid(&sp.referenced, format!("pod {:?} is listed twice", p.name))
                );
            }
            let mut ctrs = std::collections::BTreeSet::new();
            for c in &p.containers {
                if !ctrs.insert(c.name.clone()) {
                    return Err(self.invalid(
                        &sp.referenced,
                        format!("pod {:?}: container {:?} is listed twice", p.name, c.name),
                    ));
                }
                if let Some(r) = &c.resources {
                    self.check_resources(r)?;
                }
            }
        }
        let mut labels = std::collections::BTreeSet::new();
        for s in &self.steps {
            self.check_step(s, &mut labels, false)?;
        }
        for e in &self.expect {
            self.check_expectation(e, &labels)?;
        }
        Ok(())
    }

    fn check_policy(&self, p: &Spanned<String>) -> Result<(), Error> {
        nri_runtime::FailurePolicy::parse(&p.value)
            .map(|_| ())
            .ok_or_else(|| {
                self.invalid(
                    &p.referenced,
                    format!(
                        "unknown failure policy {:?}; expected ignore, fail or required",
                        p.value
                    ),
                )
            })
    }

    fn check_resources(&self, r: &ResourcesSpec) -> Result<(), Error> {
        if let Some(m) = &r.memory {
            for q in [&m.limit, &m.reservation, &m.swap].into_iter().flatten() {
                q.value
                    .bytes()
                    .map_err(|msg| self.invalid(&q.referenced, msg))?;
            }
        }
        Ok(())
    }

    fn check_step(
        &self,
        s: &Spanned<Step>,
        labels: &mut std::collections::BTreeSet<String>,
        nested: bool,
    ) -> Result<(), Error> {
        let st = &s.value;
        let at = &s.referenced;
        let actions = st.actions();
        if actions.len() != 1 {
            return Err(self.invalid(
                at,
                format!(
                    "a step needs exactly one action ({}), found {}",
                    Step::ACTIONS.join(", "),
                    if actions.is_empty() {
                        "none".to_owned()
                    } else {
                        actions.join(" and ")
                    }
                ),
            ));
        }
        if let Some(l) = &st.label
            && !labels.insert(l.clone())
        {
            return Err(self.invalid(at, format!("step label {l:?} is used twice")));
        }
        if let Some(e) = &st.expect
            && !matches!(e.value.as_str(), "ok" | "fail")
        {
            return Err(self.invalid(
                &e.referenced,
                format!("expected `ok` or `fail`, got {:?}", e.value),
            ));
        }
        for pod in [
            &st.run_pod,
            &st.update_pod,
            &st.stop_pod,
            &st.remove_pod,
            &st.up,
            &st.down,
        ]
        .into_iter()
        .flatten()
        {
            if self.pod(&pod.value).is_none() {
                return Err(self.invalid(
                    &pod.referenced,
                    format!("unknown pod {:?} (declare it under `pods`)", pod.value),
                ));
            }
        }
        for c in [&st.create, &st.start, &st.update, &st.stop, &st.remove]
            .into_iter()
            .flatten()
        {
            if self.container(&c.value).is_none() {
                return Err(self.invalid(
                    &c.referenced,
                    format!(
                        "unknown container {:?}; expected POD/CONTAINER of a pod under `pods`",
                        c.value
                    ),
                ));
            }
        }
        for p in [&st.start_plugin, &st.kill_plugin, &st.restart_plugin]
            .into_iter()
            .flatten()
        {
            match self.plugin(&p.value) {
                None => {
                    return Err(self.invalid(
                        &p.referenced,
                        format!("unknown plugin {:?} (declare it under `plugins`)", p.value),
                    ));
                }
                Some((_, pl)) if pl.launch => {
                    return Err(self.invalid(
                        &p.referenced,
                        format!(
                            "plugin {:?} is launched by the runtime: it cannot be started, killed or restarted by a step",
                            p.value
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
        if let Some(d) = &st.sleep {
            parse_duration(&d.value).map_err(|m| self.invalid(&d.referenced, m))?;
        }
        if st.resources.is_some() && st.update.is_none() && st.update_pod.is_none() {
            return Err(self.invalid(at, "`resources` goes with `update` or `update-pod`"));
        }
        if let Some(r) = &st.resources {
            self.check_resources(r)?;
        }
        if let Some(group) = &st.parallel {
            if nested {
                return Err(self.invalid(at, "`parallel` cannot be nested"));
            }
            for g in group {
                self.check_step(g, labels, true)?;
            }
        }
        Ok(())
    }

    fn check_expectation(
        &self,
        e: &Spanned<Expectation>,
        labels: &std::collections::BTreeSet<String>,
    ) -> Result<(), Error> {
        let ex = &e.value;
        let at = &e.referenced;
        let kinds = [
            ex.container.is_some(),
            ex.plugin.is_some(),
            ex.step.is_some(),
            ex.conflict.is_some(),
        ];
        if kinds.iter().filter(|k| **k).count() != 1 {
            return Err(self.invalid(
                at,
                "an expectation needs exactly one of `container`, `plugin`, `step` or `conflict`",
            ));
        }
        if let Some(c) = &ex.container
            && self.container(&c.value).is_none()
        {
            return Err(self.invalid(
                &c.referenced,
                format!("unknown container {:?}; expected POD/CONTAINER", c.value),
            ));
        }
        for (list, key) in [(&ex.mounts, "destination"), (&ex.devices, "path")] {
            if list.iter().any(|i| i.key(key).is_none()) {
                return Err(self.invalid(
                    at,
                    format!("each entry of `mounts`/`devices` is a string or a map with `{key}`"),
                ));
            }
        }
        if let Some(r) = &ex.resources {
            self.check_resources(r)?;
        }
        if let Some(p) = &ex.plugin {
            if ex.event.is_some() != (ex.calls.is_some() || ex.min_calls.is_some()) {
                return Err(self.invalid(
                    at,
                    "a plugin expectation with `event` needs `calls` or `min-calls` (and they need `event`)",
                ));
            }
            if ex.event.is_none() && ex.registered.is_none() {
                return Err(self.invalid(
                    &p.referenced,
                    "a plugin expectation needs `event` with `calls`/`min-calls`, or `registered`",
                ));
            }
            if let Some(ev) = &ex.event
                && !matches!(ev.value.as_str(), "Synchronize" | "Configure" | "Shutdown")
            {
                parse_event(&ev.value).map_err(|m| self.invalid(&ev.referenced, m))?;
            }
        }
        if let Some(s) = &ex.step {
            if !labels.contains(&s.value) {
                return Err(self.invalid(
                    &s.referenced,
                    format!("no step has the label {:?}", s.value),
                ));
            }
            match &ex.outcome {
                Some(o) if matches!(o.value.as_str(), "ok" | "fail") => {}
                Some(o) => {
                    return Err(self.invalid(
                        &o.referenced,
                        format!("expected `ok` or `fail`, got {:?}", o.value),
                    ));
                }
                None => {
                    return Err(
                        self.invalid(&s.referenced, "a step expectation needs `outcome: ok|fail`")
                    );
                }
            }
        }
        Ok(())
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

/// Parses a failure policy (`ignore`, `fail`, `required`).
pub fn parse_policy(s: &str) -> Option<nri_runtime::FailurePolicy> {
    nri_runtime::FailurePolicy::parse(s)
}

/// Parses an event name (`CreateContainer`, case-insensitive).
pub fn parse_event(name: &str) -> Result<nri_api::api::Event, String> {
    let mask = nri_api::EventMask::parse(name).map_err(|e| e.to_string())?;
    let mut it = mask.iter();
    match (it.next(), it.next()) {
        (Some(e), None) => Ok(e),
        _ => Err(format!("expected one event name, got {name:?}")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Scenario, Error> {
        Scenario::parse("t.yaml", Path::new("."), text)
    }

    #[test]
    fn durations_and_quantities() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("-1s").is_err());
        assert_eq!(parse_quantity("256Mi"), Ok(256 << 20));
        assert_eq!(parse_quantity("1G"), Ok(1_000_000_000));
        assert!(parse_quantity("3Q").is_err());
    }

    #[test]
    fn minimal_scenario_parses() {
        let sc = parse(
            "name: x\npods:\n  - name: web\n    containers:\n      - name: app\nsteps:\n  - up: web\n  - down: web\n",
        )
        .unwrap();
        assert_eq!(sc.steps.len(), 2);
        assert!(sc.container("web/app").is_some());
        assert!(sc.container("web/nope").is_none());
    }

    #[test]
    fn syntax_error_has_line_and_column() {
        let err = parse("name: x\npods:\n  - name: web\n    containers: 3\n").unwrap_err();
        let Error::Parse { at, .. } = &err else {
            panic!("{err}")
        };
        assert_eq!(at.line, 4, "{err}");
        assert!(at.column > 0, "{err}");
        assert!(err.to_string().starts_with("t.yaml:4:"), "{err}");
    }

    #[test]
    fn unknown_key_is_reported() {
        let err = parse("name: x\nstepz: []\n").unwrap_err();
        assert!(err.to_string().contains("stepz"), "{err}");
        assert!(err.to_string().starts_with("t.yaml:2:"), "{err}");
    }

    #[test]
    fn unknown_pod_in_step_has_position() {
        let err =
            parse("pods:\n  - name: web\nsteps:\n  - run-pod: web\n  - run-pod: db\n").unwrap_err();
        assert!(err.is_scenario_error());
        let s = err.to_string();
        assert!(s.starts_with("t.yaml:5:"), "{s}");
        assert!(s.contains("unknown pod \"db\""), "{s}");
    }

    #[test]
    fn step_with_two_actions_is_refused() {
        let err = parse("pods:\n  - name: web\nsteps:\n  - run-pod: web\n    stop-pod: web\n")
            .unwrap_err();
        let s = err.to_string();
        assert!(s.contains("exactly one action"), "{s}");
        assert!(s.contains("run-pod and stop-pod"), "{s}");
        assert!(s.starts_with("t.yaml:4:"), "{s}");
    }

    #[test]
    fn plugin_checks() {
        let err = parse("plugins:\n  - name: a\n    bundled: nosuch\n").unwrap_err();
        assert!(err.to_string().contains("unknown bundled plugin"), "{err}");
        let err = parse("plugins:\n  - name: a\n").unwrap_err();
        assert!(err.to_string().contains("exactly one of"), "{err}");
        let err =
            parse("plugins:\n  - name: a\n    bundled: logger\n    policy: maybe\n").unwrap_err();
        assert!(err.to_string().starts_with("t.yaml:4:"), "{err}");
        let sc = parse("plugins:\n  - name: a\n    bundled: logger\n  - name: b\n    index: '05'\n    path: /bin/true\n").unwrap();
        assert_eq!(sc.plugin_index(0), "10");
        assert_eq!(sc.plugin_index(1), "05");
        assert!(sc.plugin("10-a").is_some());
    }

    #[test]
    fn expectation_checks() {
        let err =
            parse("steps:\n  - sleep: 1ms\n    label: s\nexpect:\n  - step: t\n    outcome: ok\n")
                .unwrap_err();
        assert!(err.to_string().contains("no step has the label"), "{err}");
        let err = parse("expect:\n  - conflict: true\n    plugin: a\n").unwrap_err();
        assert!(err.to_string().contains("exactly one of"), "{err}");
        parse("steps:\n  - sleep: 1ms\n    label: s\nexpect:\n  - step: s\n    outcome: ok\n  - conflict: false\n").unwrap();
    }
}
