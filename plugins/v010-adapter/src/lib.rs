//! The NRI v0.1.0 adapter: runs old one-shot NRI v0.1.0 plugins
//! (executables called as `<plugin> invoke` with a JSON request on stdin
//! and a JSON result on stdout) from NRI events, as upstream's
//! `plugins/v010-adapter` does.
//!
//! - [`legacy`]: the v0.1.0 JSON types (`/etc/nri/conf.json`, request,
//!   result), with upstream's field names.
//! - [`Invoker`]: loads the configuration list and runs its plugins in
//!   order, each seeing the results of the earlier ones.
//! - [`V010Adapter`]: the NRI plugin. RunPodSandbox and StartContainer
//!   invoke with state `create`, StopPodSandbox and StopContainer with
//!   `delete`. Errors fail RunPodSandbox, StopPodSandbox and StartContainer
//!   (as upstream); StopContainer errors are logged only.

pub mod legacy;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nri_plugin::api::{
    Container, ContainerUpdate, LinuxNamespace, LinuxResources, PodSandbox, StopContainerResponse,
};
use nri_plugin::{ConfigureInfo, EventMask, HandlerError, HandlerResult, Plugin};
use serde_json::value::RawValue;
use tokio::io::AsyncWriteExt;

use legacy::{ConfigList, PluginResult, Request, Spec, State};

/// Default directory of v0.1.0 plugin executables (upstream's
/// `DefaultBinaryPath`).
pub const DEFAULT_BIN_DIR: &str = "/opt/nri/bin";
/// Default v0.1.0 configuration list (upstream's `DefaultConfPath`).
pub const DEFAULT_CONF_PATH: &str = "/etc/nri/conf.json";
/// Version put in requests when there is no configuration file
/// (upstream's `Version`).
pub const DEFAULT_VERSION: &str = "0.1";

/// Why an invocation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration list exists but cannot be read.
    #[error("cannot read {}", path.display())]
    ReadConfig {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The configuration list is not valid JSON of the expected shape.
    #[error("invalid NRI v0.1.0 configuration {}", path.display())]
    ParseConfig {
        /// The file.
        path: PathBuf,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
    /// A plugin of the list failed (the message names it, as upstream:
    /// `plugin: <type>: ...`).
    #[error("plugin: {plugin}: {reason}")]
    Plugin {
        /// The plugin's `type`.
        plugin: String,
        /// What went wrong.
        reason: String,
    },
}

/// Runs the v0.1.0 plugins of a configuration list.
#[derive(Debug, Clone)]
pub struct Invoker {
    /// Where plugin executables are looked up first.
    pub bin_dir: PathBuf,
    /// The configuration list (`conf.json`), read at every invocation so
    /// changes apply without a restart (as upstream, which reads it per event).
    pub conf_path: PathBuf,
    /// Time limit of one plugin run (the plugin is killed after it); `None`,
    /// the default: no limit, as upstream's adapter (the runtime's request
    /// deadline still bounds the event).
    pub timeout: Option<Duration>,
}

impl Default for Invoker {
    fn default() -> Self {
        Invoker {
            bin_dir: DEFAULT_BIN_DIR.into(),
            conf_path: DEFAULT_CONF_PATH.into(),
            timeout: None,
        }
    }
}

/// The task (pod or container) a request is about.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Task {
    /// Pod or container id.
    pub id: String,
    /// Its pid (0: none, left out of the request).
    pub pid: u32,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// Linux namespaces (type, path).
    pub namespaces: Vec<LinuxNamespace>,
    /// Resources, if any.
    pub resources: Option<LinuxResources>,
    /// Cgroups path.
    pub cgroups_path: String,
}

impl Task {
    /// The task of a pod sandbox.
    pub fn from_pod(pod: &PodSandbox) -> Task {
        let linux = pod.linux.as_ref();
        Task {
            id: pod.id.clone(),
            pid: pod.pid,
            annotations: pod.annotations.clone(),
            namespaces: linux.map(|l| l.namespaces.clone()).unwrap_or_default(),
            resources: linux.and_then(|l| l.resources.clone()),
            cgroups_path: linux.map(|l| l.cgroups_path.clone()).unwrap_or_default(),
        }
    }

    /// The task of a container.
    pub fn from_container(ctr: &Container) -> Task {
        let linux = ctr.linux.as_ref();
        Task {
            id: ctr.id.clone(),
            pid: ctr.pid,
            annotations: ctr.annotations.clone(),
            namespaces: linux.map(|l| l.namespaces.clone()).unwrap_or_default(),
            resources: linux.and_then(|l| l.resources.clone()),
            cgroups_path: linux.map(|l| l.cgroups_path.clone()).unwrap_or_default(),
        }
    }
}

/// Builds the v0.1.0 request for `task` in pod `pod` (sandbox id and
/// labels), without `conf` and `results` (filled per plugin).
///
/// # Errors
///
/// Serializing the resources fails (cannot happen for these types; kept
/// as an error rather than a panic).
pub fn build_request(
    version: &str,
    state: State,
    task: &Task,
    pod: &PodSandbox,
) -> Result<Request, serde_json::Error> {
    let resources = legacy::oci_resources(task.resources.as_ref())?;
    Ok(Request {
        conf: None,
        version: version.to_owned(),
        state,
        id: task.id.clone(),
        sandbox_id: pod.id.clone(),
        pid: i64::from(task.pid),
        spec: Some(Spec {
            resources,
            namespaces: task
                .namespaces
                .iter()
                .map(|n| (n.r#type.clone(), n.path.clone()))
                .collect(),
            cgroups_path: task.cgroups_path.clone(),
            annotations: task.annotations.clone(),
        }),
        labels: pod.labels.clone(),
        results: Vec::new(),
    })
}

impl Invoker {
    /// Reads the configuration list; a missing file is an empty list.
    ///
    /// # Errors
    ///
    /// [`Error::ReadConfig`], [`Error::ParseConfig`].
    pub fn load_config(&self) -> Result<ConfigList, Error> {
        let data = match std::fs::read(&self.conf_path) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(ConfigList {
                    version: DEFAULT_VERSION.into(),
                    plugins: Vec::new(),
                });
            }
            Err(source) => {
                return Err(Error::ReadConfig {
                    path: self.conf_path.clone(),
                    source,
                });
            }
        };
        serde_json::from_slice(&data).map_err(|source| Error::ParseConfig {
            path: self.conf_path.clone(),
            source,
        })
    }

    /// Where the executable of plugin `name` is: a name with a `/` as
    /// given, else the bin dir, else `PATH`.
    pub fn resolve(&self, name: &str) -> Option<PathBuf> {
        if name.contains('/') {
            return Some(PathBuf::from(name));
        }
        if name.is_empty() || name == "." || name == ".." {
            return None;
        }
        let in_bin = self.bin_dir.join(name);
        if is_executable(&in_bin) {
            return Some(in_bin);
        }
        std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join(name))
                .find(|p| is_executable(p))
        })
    }

    /// Runs every plugin of the configuration list for `task` in `pod`,
    /// in order; returns their results.
    ///
    /// # Errors
    ///
    /// The first failure: configuration ([`Error::ReadConfig`],
    /// [`Error::ParseConfig`]) or a plugin ([`Error::Plugin`]: not found,
    /// cannot start, timed out, bad output, or its result's `error`).
    pub async fn invoke(
        &self,
        state: State,
        task: &Task,
        pod: &PodSandbox,
    ) -> Result<Vec<PluginResult>, Error> {
        let conf = self.load_config()?;
        if conf.plugins.is_empty() {
            return Ok(Vec::new());
        }
        let mut req =
            build_request(&conf.version, state, task, pod).map_err(|e| Error::Plugin {
                plugin: String::new(),
                reason: e.to_string(),
            })?;
        for p in &conf.plugins {
            req.conf = p.conf.clone();
            let result =
                self.invoke_one(&p.r#type, &req)
                    .await
                    .map_err(|reason| Error::Plugin {
                        plugin: p.r#type.clone(),
                        reason,
                    })?;
            req.results.push(result);
        }
        Ok(req.results)
    }

    async fn invoke_one(&self, name: &str, req: &Request) -> Result<PluginResult, String> {
        let exe = self.resolve(name).ok_or_else(|| {
            format!(
                "executable file not found in {} or $PATH",
                self.bin_dir.display()
            )
        })?;
        let payload = serde_json::to_vec(req).map_err(|e| e.to_string())?;
        let mut child = tokio::process::Command::new(&exe)
            .arg("invoke")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
        let mut stdin = child
            .stdin
            .take()
            .ok_or_else(|| "no stdin pipe".to_owned())?;
        let run = async move {
            // A plugin may exit without reading its input: ignore EPIPE.
            let _ = stdin.write_all(&payload).await;
            drop(stdin);
            child.wait_with_output().await
        };
        let out = match self.timeout {
            Some(limit) => tokio::time::timeout(limit, run)
                .await
                .map_err(|_| format!("timed out after {limit:?} (killed)"))?,
            None => run.await,
        }
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
        let mut msg = if out.stdout.is_empty() {
            "output: <empty>".to_owned()
        } else {
            format!("output: {:?}", String::from_utf8_lossy(&out.stdout))
        };
        if !out.status.success() {
            match out.status.code() {
                Some(c) => msg.push_str(&format!(" exit code: {c}")),
                None => msg.push_str(&format!(" {}", out.status)),
            }
        }
        let result: PluginResult = serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("failed to unmarshal plugin output {msg}: {e}"))?;
        if !result.error.is_empty() {
            return Err(result.error);
        }
        Ok(result)
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The adapter plugin.
#[derive(Debug, Default)]
pub struct V010Adapter {
    invoker: Invoker,
}

impl V010Adapter {
    /// An adapter running plugins with `invoker`.
    pub fn new(invoker: Invoker) -> Self {
        V010Adapter { invoker }
    }

    /// The invoker.
    pub fn invoker(&self) -> &Invoker {
        &self.invoker
    }

    async fn run(
        &self,
        what: &str,
        state: State,
        task: Task,
        pod: &PodSandbox,
    ) -> Result<(), Error> {
        let results = self.invoker.invoke(state, &task, pod).await?;
        if !results.is_empty() {
            tracing::info!(
                event = what,
                id = %task.id,
                plugins = ?results.iter().map(|r| r.plugin.as_str()).collect::<Vec<_>>(),
                "v0.1.0 plugins invoked"
            );
        }
        Ok(())
    }
}

fn handler_error(e: Error) -> HandlerError {
    tracing::error!(error = %e, "nri invoke failed");
    HandlerError::from(e)
}

#[nri_plugin::plugin]
impl Plugin for V010Adapter {
    async fn configure(&self, info: &ConfigureInfo) -> HandlerResult<Option<EventMask>> {
        tracing::info!(
            runtime = %info.runtime.name,
            version = %info.runtime.version,
            bin_dir = %self.invoker.bin_dir.display(),
            conf = %self.invoker.conf_path.display(),
            "connected"
        );
        if !info.config.trim().is_empty() {
            tracing::warn!("the adapter takes no configuration text; ignored");
        }
        Ok(None)
    }

    async fn shutdown(&self) {
        tracing::info!("runtime shutting down");
    }

    async fn run_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        tracing::info!(pod = %format!("{}/{}", pod.namespace, pod.name), "started pod");
        let task = Task::from_pod(&pod);
        self.run("RunPodSandbox", State::Create, task, &pod)
            .await
            .map_err(handler_error)
    }

    // Teardown (StopPodSandbox, StopContainer; RemovePodSandbox and
    // RemoveContainer have no method, so they are acknowledged) never
    // fails: an error would keep the event from the plugins after this
    // one, and the runtime cannot undo a stop anyway.
    async fn stop_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        tracing::info!(pod = %format!("{}/{}", pod.namespace, pod.name), "stopped pod");
        let task = Task::from_pod(&pod);
        if let Err(e) = self.run("StopPodSandbox", State::Delete, task, &pod).await {
            tracing::error!(error = %e, pod = %pod.id, "v0.1.0 plugins failed on delete (ignored)");
        }
        Ok(())
    }

    async fn start_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        tracing::info!(pod = %format!("{}/{}", pod.namespace, pod.name), container = %ctr.name, "starting container");
        let task = Task::from_container(&ctr);
        self.run("StartContainer", State::Create, task, &pod)
            .await
            .map_err(handler_error)
    }

    async fn stop_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<StopContainerResponse> {
        tracing::info!(pod = %format!("{}/{}", pod.namespace, pod.name), container = %ctr.name, "stopped container");
        let task = Task::from_container(&ctr);
        if let Err(e) = self.run("StopContainer", State::Delete, task, &pod).await {
            tracing::error!(error = %e, container = %ctr.id, "v0.1.0 plugins failed on delete (ignored)");
        }
        Ok(StopContainerResponse {
            update: Vec::<ContainerUpdate>::new(),
        })
    }
}

/// Keeps `RawValue` in the public API of [`legacy`] nameable.
pub type RawJson = Box<RawValue>;

#[cfg(test)]
mod tests;
