//! The differ sample plugin: shows what each plugin in the chain changes.
//!
//! As upstream's `plugins/differ`, one process registers one plugin
//! instance per index of a list (default `0,99`). The runtime calls
//! plugins in index order and hands each the pod and container as adjusted
//! by the plugins before it, so the instance at index *n* compares what it
//! receives with what the previous instance received for the same event
//! and object, and logs the difference: the changes of the plugins between
//! the two indices.
//!
//! Unlike upstream, which pairs recordings through one FIFO queue per index
//! (wrong as soon as two events are in flight), recordings are keyed by
//! event and object id; and the YAML configuration (`indices`, `logFile`,
//! `socketPath`, `verboseLevel`, `yaml`) is applied (upstream's `Configure`
//! has the wrong signature and is never called).
//!
//! - [`Config`], [`parse_indices`]: the settings.
//! - [`diff_values`], [`yaml_diff`]: the two diff formats.
//! - [`Shared`]: the recordings of all instances; [`DifferInstance`]: the
//!   [`Plugin`] of one index.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use nri_plugin::api::{
    Container, ContainerUpdate, CreateContainerResponse, Event, LinuxResources, PodSandbox,
    StopContainerResponse, UpdateContainerResponse,
};
use nri_plugin::{ConfigureInfo, EventMask, HandlerResult, Plugin, SyncChunk, SyncKind};
use serde::Deserialize;
use serde_json::Value;

/// Upstream's default indices.
pub const DEFAULT_INDICES: &str = "0,99";

/// At most this many unconsumed recordings are kept per index (an event a
/// later plugin failed never reaches the next instance); the oldest go first.
pub const MAX_PENDING: usize = 4096;

/// Why settings were refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Bad `indices`.
    #[error("invalid indices {value:?}: {reason}")]
    Indices {
        /// The value.
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// Configuration text of the wrong shape.
    #[error("failed to parse provided configuration: {reason}")]
    ConfigShape {
        /// What is wrong.
        reason: String,
    },
    /// Bad configuration text.
    #[error("failed to parse provided configuration: {source}")]
    Config {
        /// The decoding error.
        #[source]
        source: nri_sample_common::DecodeError,
    },
}

/// The differ's settings (upstream's flags and YAML keys).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Comma-separated indices (`indices`).
    pub indices: String,
    /// Log to this file instead of stderr (`logFile`).
    #[serde(rename = "logFile")]
    pub log_file: String,
    /// The runtime's socket for instances that dial it (`socketPath`).
    #[serde(rename = "socketPath")]
    pub socket_path: String,
    /// 0: changes only; 1: also the first instance's input; 2: also the
    /// objects before and after; 3: also Synchronize (`verboseLevel`).
    #[serde(rename = "verboseLevel")]
    pub verbose_level: i64,
    /// Print YAML line diffs instead of field changes (`yaml`).
    pub yaml: bool,
}

impl Config {
    /// The YAML keys (matched case-insensitively, as Go does).
    pub const KEYS: &'static [&'static str] =
        &["indices", "logFile", "socketPath", "verboseLevel", "yaml"];

    /// Parses a configuration text over `self` (keys absent from the text
    /// keep their value). Empty text changes nothing.
    ///
    /// # Errors
    ///
    /// [`Error::Config`], or [`Error::Indices`] for bad `indices`.
    pub fn merge_yaml(&self, text: &str) -> Result<Config, Error> {
        let value =
            nri_sample_common::parse_yaml(text).map_err(|source| Error::Config { source })?;
        let mut value = match value {
            Value::Null => return Ok(self.clone()),
            v => v,
        };
        nri_sample_common::fold_keys(&mut value, Self::KEYS);
        let shape = |e: serde_json::Error| Error::ConfigShape {
            reason: e.to_string(),
        };
        let mut base = serde_json::to_value(SerConfig::from(self)).map_err(shape)?;
        match (&mut base, value) {
            (Value::Object(b), Value::Object(v)) => b.extend(v),
            (_, other) => {
                return Err(Error::ConfigShape {
                    reason: format!("expected a mapping, got {other}"),
                });
            }
        }
        let merged: Config = serde_json::from_value(base).map_err(shape)?;
        if !merged.indices.is_empty() {
            parse_indices(&merged.indices)?;
        }
        Ok(merged)
    }
}

#[derive(serde::Serialize)]
struct SerConfig<'a> {
    indices: &'a str,
    #[serde(rename = "logFile")]
    log_file: &'a str,
    #[serde(rename = "socketPath")]
    socket_path: &'a str,
    #[serde(rename = "verboseLevel")]
    verbose_level: i64,
    yaml: bool,
}

impl<'a> From<&'a Config> for SerConfig<'a> {
    fn from(c: &'a Config) -> Self {
        SerConfig {
            indices: &c.indices,
            log_file: &c.log_file,
            socket_path: &c.socket_path,
            verbose_level: c.verbose_level,
            yaml: c.yaml,
        }
    }
}

/// Parses `indices` (`"0,45,99"`): numbers 0..=99, at least two distinct;
/// returned sorted (the order the runtime calls them in).
///
/// # Errors
///
/// [`Error::Indices`].
pub fn parse_indices(s: &str) -> Result<Vec<u8>, Error> {
    let bad = |reason: String| Error::Indices {
        value: s.to_owned(),
        reason,
    };
    let mut out = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        let n: u8 = part
            .parse()
            .ok()
            .filter(|n| *n <= 99)
            .ok_or_else(|| bad(format!("{part:?} is not an index 0..99")))?;
        if !out.contains(&n) {
            out.push(n);
        }
    }
    if out.len() < 2 {
        return Err(bad("there must be at least two indices".into()));
    }
    out.sort_unstable();
    Ok(out)
}

/// One change between two JSON values (upstream's changelog entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// `create`, `update` or `delete`.
    pub kind: &'static str,
    /// Dotted path (`linux.resources.memory.limit.value`, `env.2`).
    pub path: String,
    /// The value before (`<nil>` when created).
    pub from: String,
    /// The value after (`<nil>` when deleted).
    pub to: String,
}

fn leaf_text(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "<nil>".into(),
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    }
}

fn flatten(prefix: &str, v: &Value, out: &mut BTreeMap<String, Value>) {
    let join = |k: &str| {
        if prefix.is_empty() {
            k.to_owned()
        } else {
            format!("{prefix}.{k}")
        }
    };
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, v) in m {
                flatten(&join(k), v, out);
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for (i, v) in a.iter().enumerate() {
                flatten(&join(&i.to_string()), v, out);
            }
        }
        // Empty containers, nulls and defaults are "not set".
        Value::Object(_) | Value::Array(_) | Value::Null => {}
        Value::String(s) if s.is_empty() => {}
        Value::Bool(false) => {}
        Value::Number(n) if n.as_f64() == Some(0.0) => {}
        leaf => {
            out.insert(prefix.to_owned(), leaf.clone());
        }
    }
}

/// The field changes from `before` to `after`, sorted by path. Unset,
/// empty and zero values count as absent (protobuf semantics).
pub fn diff_values(before: &Value, after: &Value) -> Vec<Change> {
    let (mut a, mut b) = (BTreeMap::new(), BTreeMap::new());
    flatten("", before, &mut a);
    flatten("", after, &mut b);
    let mut out = Vec::new();
    for (path, old) in &a {
        match b.get(path) {
            None => out.push(Change {
                kind: "delete",
                path: path.clone(),
                from: leaf_text(Some(old)),
                to: leaf_text(None),
            }),
            Some(new) if new != old => out.push(Change {
                kind: "update",
                path: path.clone(),
                from: leaf_text(Some(old)),
                to: leaf_text(Some(new)),
            }),
            Some(_) => {}
        }
    }
    for (path, new) in &b {
        if !a.contains_key(path) {
            out.push(Change {
                kind: "create",
                path: path.clone(),
                from: leaf_text(None),
                to: leaf_text(Some(new)),
            });
        }
    }
    out.sort_by(|x, y| x.path.cmp(&y.path));
    out
}

/// Drops unset fields (nulls, empty strings/lists/maps, zeros, `false`)
/// so YAML dumps show what is set, as Go's `omitempty` dumps do.
pub fn prune(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), prune(v)))
                .filter(|(_, v)| !is_unset(v))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(prune).collect()),
        v => v.clone(),
    }
}

fn is_unset(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
    }
}

/// The YAML of a value (pruned), for dumps and YAML diffs.
pub fn to_yaml(v: &Value) -> String {
    serde_saphyr::to_string(&prune(v)).unwrap_or_else(|e| format!("<cannot dump: {e}>"))
}

/// A line diff of the YAML dumps of `before` and `after`: changed lines
/// prefixed with `-`/`+`, with up to one line of context (` `), and `...`
/// between hunks. Empty when they are equal.
pub fn yaml_diff(before: &Value, after: &Value) -> Vec<String> {
    let a = to_yaml(before);
    let b = to_yaml(after);
    let a: Vec<&str> = a.lines().collect();
    let b: Vec<&str> = b.lines().collect();
    // Longest common subsequence table (objects are small).
    let (n, m) = (a.len(), b.len());
    let mut lcs = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let mut ops: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            ops.push((' ', a[i]));
            i += 1;
            j += 1;
        } else if j < m && (i == n || lcs[i][j + 1] >= lcs[i + 1][j]) {
            ops.push(('+', b[j]));
            j += 1;
        } else {
            ops.push(('-', a[i]));
            i += 1;
        }
    }
    let changed: Vec<bool> = ops.iter().map(|(c, _)| *c != ' ').collect();
    if !changed.contains(&true) {
        return Vec::new();
    }
    let near = |k: usize| {
        changed[k] || (k > 0 && changed[k - 1]) || changed.get(k + 1).copied().unwrap_or(false)
    };
    let mut out = Vec::new();
    let mut skipped = false;
    for (k, (c, line)) in ops.iter().enumerate() {
        if near(k) {
            if skipped && !out.is_empty() {
                out.push("...".to_owned());
            }
            skipped = false;
            out.push(format!("{c} {line}"));
        } else {
            skipped = true;
        }
    }
    out
}

/// What an event carried, as recorded by one instance.
#[derive(Debug, Clone)]
struct Seen {
    pod: Value,
    container: Option<Value>,
}

#[derive(Debug, Default)]
struct Pending {
    /// (event, object id) -> recording, with insertion order for eviction.
    map: BTreeMap<(Event, String), Seen>,
    order: VecDeque<(Event, String)>,
}

impl Pending {
    fn put(&mut self, key: (Event, String), seen: Seen) {
        if self.map.insert(key.clone(), seen).is_none() {
            self.order.push_back(key);
        }
        while self.map.len() > MAX_PENDING {
            match self.order.pop_front() {
                Some(old) => {
                    self.map.remove(&old);
                }
                None => break,
            }
        }
    }

    fn take(&mut self, key: &(Event, String)) -> Option<Seen> {
        let seen = self.map.remove(key)?;
        self.order.retain(|k| k != key);
        Some(seen)
    }
}

/// State shared by all instances of one differ process.
#[derive(Debug, Default)]
pub struct Shared {
    config: Mutex<Config>,
    /// The indices, sorted.
    indices: Mutex<Vec<u8>>,
    /// Recordings left by each index for the next one.
    pending: Mutex<BTreeMap<u8, Pending>>,
    /// Log lines are also sent here (tests).
    sink: Mutex<Option<std::sync::mpsc::Sender<String>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// Shared state for instances at `indices` (sorted).
    pub fn new(config: Config, indices: Vec<u8>) -> Arc<Shared> {
        Arc::new(Shared {
            config: Mutex::new(config),
            indices: Mutex::new(indices),
            ..Default::default()
        })
    }

    /// The settings in use.
    pub fn config(&self) -> Config {
        lock(&self.config).clone()
    }

    /// Replaces the settings.
    pub fn set_config(&self, config: Config) {
        *lock(&self.config) = config;
    }

    /// Replaces the index list (sorted); recordings are dropped.
    pub fn set_indices(&self, indices: Vec<u8>) {
        *lock(&self.indices) = indices;
        lock(&self.pending).clear();
    }

    /// The index list.
    pub fn indices(&self) -> Vec<u8> {
        lock(&self.indices).clone()
    }

    /// Also sends every log line to `tx` (for tests).
    pub fn set_sink(&self, tx: std::sync::mpsc::Sender<String>) {
        *lock(&self.sink) = Some(tx);
    }

    fn log(&self, line: String) {
        tracing::info!("{line}");
        if let Some(tx) = lock(&self.sink).as_ref() {
            let _ = tx.send(line);
        }
    }

    fn dump(&self, idx: u8, what: &str, tag: &str, v: &Value) {
        self.log(format!("[{idx:02}] {what}: {tag}:"));
        for line in to_yaml(v).lines() {
            self.log(format!("[{idx:02}] {what}:    {line}"));
        }
    }

    fn neighbours(&self, idx: u8) -> (Option<u8>, Option<u8>) {
        let list = lock(&self.indices);
        let pos = list.iter().position(|i| *i == idx);
        match pos {
            Some(p) => (
                p.checked_sub(1).and_then(|q| list.get(q).copied()),
                list.get(p + 1).copied(),
            ),
            None => (None, None),
        }
    }

    /// Handles event `event` seen by the instance at `idx`.
    pub fn observe(&self, idx: u8, event: Event, pod: &PodSandbox, container: Option<&Container>) {
        let cfg = self.config();
        let what = event.pretty_name();
        let pod_v = serde_json::to_value(pod).unwrap_or(Value::Null);
        let ctr_v = container.map(|c| serde_json::to_value(c).unwrap_or(Value::Null));
        let id = container.map_or(pod.id.clone(), |c| c.id.clone());
        let key = (event, id);
        let (prev, next) = self.neighbours(idx);
        match prev {
            None => {
                if cfg.verbose_level > 0 {
                    self.dump(idx, what, "pod", &pod_v);
                    if let Some(c) = &ctr_v {
                        self.dump(idx, what, "container", c);
                    }
                }
            }
            Some(p) => {
                let earlier = lock(&self.pending).get_mut(&p).and_then(|q| q.take(&key));
                match earlier {
                    None => tracing::debug!(
                        idx,
                        event = what,
                        "no recording from the previous index (it was not registered yet, or this is a new object)"
                    ),
                    Some(seen) => {
                        self.report(idx, what, "pod", &cfg, &seen.pod, &pod_v);
                        if let (Some(before), Some(after)) = (&seen.container, &ctr_v) {
                            self.report(idx, what, "container", &cfg, before, after);
                        }
                    }
                }
            }
        }
        if next.is_some() {
            lock(&self.pending).entry(idx).or_default().put(
                key,
                Seen {
                    pod: pod_v,
                    container: ctr_v,
                },
            );
        }
    }

    fn report(&self, idx: u8, what: &str, obj: &str, cfg: &Config, before: &Value, after: &Value) {
        if cfg.verbose_level > 1 {
            self.log(format!("[{idx:02}] Original values for {obj}"));
            self.dump(idx, what, obj, before);
        }
        if cfg.yaml {
            let lines = yaml_diff(before, after);
            if lines.is_empty() {
                self.log(format!("[{idx:02}] {what}: {obj}: <no changes>"));
            }
            for l in lines {
                self.log(format!("[{idx:02}] {what}: {obj}: {l}"));
            }
        } else {
            let changes = diff_values(before, after);
            if changes.is_empty() {
                self.log(format!("[{idx:02}] {what}: {obj}: <no changes>"));
            }
            for c in &changes {
                self.log(format!(
                    "[{idx:02}] {what}: {obj}: {}: {}: From: {} -> To: {}",
                    c.kind, c.path, c.from, c.to
                ));
            }
        }
        if cfg.verbose_level > 1 {
            self.log(format!("[{idx:02}] Values after changes for {obj}"));
            self.dump(idx, what, obj, after);
        }
    }
}

/// What a pre-launched instance reports from its `Configure`: the
/// configuration text (for the process to start the other indices).
pub type ConfigSender = tokio::sync::mpsc::UnboundedSender<String>;

/// The plugin instance at one index.
#[derive(Debug)]
pub struct DifferInstance {
    idx: u8,
    shared: Arc<Shared>,
    log: Option<nri_sample_common::LogOutput>,
    on_config: Option<ConfigSender>,
}

impl DifferInstance {
    /// The instance at `idx`. `log` switches the log file when the
    /// configuration names one; `on_config` receives the configuration
    /// text of each `Configure`.
    pub fn new(
        idx: u8,
        shared: Arc<Shared>,
        log: Option<nri_sample_common::LogOutput>,
        on_config: Option<ConfigSender>,
    ) -> Self {
        DifferInstance {
            idx,
            shared,
            log,
            on_config,
        }
    }

    /// Its index.
    pub fn index(&self) -> u8 {
        self.idx
    }
}

#[nri_plugin::plugin]
impl Plugin for DifferInstance {
    async fn configure(&self, info: &ConfigureInfo) -> HandlerResult<Option<EventMask>> {
        tracing::info!(idx = self.idx, config = %info.config, "got configuration data");
        if !info.config.trim().is_empty() {
            let merged = self.shared.config().merge_yaml(&info.config)?;
            if let Some(out) = &self.log {
                if !merged.log_file.is_empty() {
                    out.set_file(std::path::Path::new(&merged.log_file))?;
                }
            }
            self.shared.set_config(merged);
        }
        if let Some(tx) = &self.on_config {
            let _ = tx.send(info.config.clone());
        }
        Ok(None)
    }

    // One message of the synchronization at a time (the instances are
    // built with `SyncMode::Streaming`): decoded only to be dumped.
    async fn synchronize_chunk(
        &self,
        chunk: SyncChunk,
        _kind: SyncKind,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        if self.shared.config().verbose_level > 2 {
            let (pods, containers) = chunk.into_vecs()?;
            let v = serde_json::json!({"pods": pods, "containers": containers});
            self.shared.dump(self.idx, "Synchronize", "state", &v);
        }
        Ok(Vec::new())
    }

    async fn shutdown(&self) {
        self.shared.log(format!("[{:02}] Shutdown", self.idx));
    }

    async fn run_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.shared
            .observe(self.idx, Event::RunPodSandbox, &pod, None);
        Ok(())
    }

    async fn stop_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.shared
            .observe(self.idx, Event::StopPodSandbox, &pod, None);
        Ok(())
    }

    async fn remove_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.shared
            .observe(self.idx, Event::RemovePodSandbox, &pod, None);
        Ok(())
    }

    async fn create_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        self.shared
            .observe(self.idx, Event::CreateContainer, &pod, Some(&ctr));
        Ok(CreateContainerResponse::default())
    }

    async fn post_create_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        self.shared
            .observe(self.idx, Event::PostCreateContainer, &pod, Some(&ctr));
        Ok(())
    }

    async fn start_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        self.shared
            .observe(self.idx, Event::StartContainer, &pod, Some(&ctr));
        Ok(())
    }

    async fn post_start_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        self.shared
            .observe(self.idx, Event::PostStartContainer, &pod, Some(&ctr));
        Ok(())
    }

    async fn update_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
        _resources: Option<LinuxResources>,
    ) -> HandlerResult<UpdateContainerResponse> {
        self.shared
            .observe(self.idx, Event::UpdateContainer, &pod, Some(&ctr));
        Ok(UpdateContainerResponse::default())
    }

    async fn post_update_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        self.shared
            .observe(self.idx, Event::PostUpdateContainer, &pod, Some(&ctr));
        Ok(())
    }

    async fn stop_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<StopContainerResponse> {
        self.shared
            .observe(self.idx, Event::StopContainer, &pod, Some(&ctr));
        Ok(StopContainerResponse::default())
    }

    async fn remove_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        self.shared
            .observe(self.idx, Event::RemoveContainer, &pod, Some(&ctr));
        Ok(())
    }
}

#[cfg(test)]
mod tests;
