//! [`Cri`] through `crictl`, with JSON configs like the e2e harness writes.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::Error;
use crate::cri::{
    ContainerSpec, ContainerState, ContainerStatus, Cri, CriResult, PodSpec, PodState, PodStatus,
};

/// How to reach the runtime's CRI service through crictl.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CriOptions {
    /// CRI endpoint, e.g. `unix:///run/containerd/containerd.sock`.
    pub endpoint: String,
    /// The `crictl` binary (default `crictl` from `PATH`).
    pub crictl: PathBuf,
    /// Workload image, already present on the node (nothing is pulled); it
    /// needs `sh` and `sleep`.
    pub image: String,
    /// Command of the long-running workload containers (default `sleep 3600`).
    pub command: Vec<String>,
    /// Cgroup parent of the pods (`PARENT/pod<uid>`); default: the runtime's.
    pub cgroup_parent: Option<String>,
    /// Where the pod/container JSON files go (default: the temp dir).
    pub scratch_dir: PathBuf,
    /// Deadline of one crictl call.
    pub call_timeout: Duration,
}

impl CriOptions {
    /// Options for `endpoint` with workload `image`, other fields default.
    pub fn new(endpoint: impl Into<String>, image: impl Into<String>) -> Self {
        CriOptions {
            endpoint: endpoint.into(),
            crictl: PathBuf::from("crictl"),
            image: image.into(),
            command: vec!["sleep".into(), "3600".into()],
            cgroup_parent: None,
            scratch_dir: std::env::temp_dir(),
            call_timeout: Duration::from_secs(60),
        }
    }
}

/// The crictl driver of one run (its own scratch dir for JSON files).
#[derive(Debug, Clone)]
pub(crate) struct Crictl {
    opts: CriOptions,
    dir: PathBuf,
}

impl Crictl {
    pub(crate) fn new(opts: CriOptions, run_id: &str) -> Result<Self, Error> {
        let dir = opts.scratch_dir.join(format!("nri-conformance-{run_id}"));
        std::fs::create_dir_all(&dir).map_err(|source| Error::Io {
            what: format!("create {}", dir.display()),
            source,
        })?;
        Ok(Crictl { opts, dir })
    }

    /// Removes the scratch dir.
    pub(crate) fn cleanup(&self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    /// Runs `crictl ARGS`; stdout trimmed on success, `Err(message)` with
    /// the error from stderr on a non-zero exit. Failing to run crictl at
    /// all is an [`Error`].
    async fn call(&self, args: &[&str]) -> CriResult<String> {
        let mut cmd = tokio::process::Command::new(&self.opts.crictl);
        cmd.arg("--runtime-endpoint")
            .arg(&self.opts.endpoint)
            .arg("--image-endpoint")
            .arg(&self.opts.endpoint)
            .arg("--timeout")
            .arg(format!("{}s", self.opts.call_timeout.as_secs().max(1)))
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let t = Instant::now();
        let out = tokio::time::timeout(
            self.opts.call_timeout + Duration::from_secs(5),
            cmd.output(),
        )
        .await
        .map_err(|_| Error::CrictlTimeout {
            args: args.join(" "),
            timeout: self.opts.call_timeout,
        })?
        .map_err(|source| Error::Io {
            what: format!("run {}", self.opts.crictl.display()),
            source,
        })?;
        tracing::debug!(?args, ok = out.status.success(), elapsed = ?t.elapsed(), "crictl");
        if out.status.success() {
            Ok(Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned()))
        } else {
            Ok(Err(crictl_error(&String::from_utf8_lossy(&out.stderr))))
        }
    }

    async fn call_unit(&self, args: &[&str]) -> CriResult<()> {
        Ok(self.call(args).await?.map(|_| ()))
    }

    async fn call_json(&self, args: &[&str]) -> CriResult<Value> {
        Ok(match self.call(args).await? {
            Ok(out) => serde_json::from_str(&out)
                .map_err(|e| format!("crictl {}: unreadable JSON: {e}", args.join(" "))),
            Err(e) => Err(e),
        })
    }

    fn write(&self, name: &str, json: &Value) -> Result<PathBuf, Error> {
        let p = self.dir.join(name);
        std::fs::write(&p, json.to_string()).map_err(|source| Error::Io {
            what: format!("write {}", p.display()),
            source,
        })?;
        Ok(p)
    }

    fn pod_file(&self, name: &str) -> PathBuf {
        self.dir.join(format!("pod-{name}.json"))
    }

    /// Writes the pod's JSON config (also needed by `crictl create`).
    fn pod_config(&self, pod: &PodSpec) -> Result<PathBuf, Error> {
        let mut linux = serde_json::json!({
            "security_context": {"namespace_options": {"network": 2, "pid": 1, "ipc": 0}}
        });
        if let Some(parent) = &self.opts.cgroup_parent {
            linux["cgroup_parent"] = format!("{parent}/pod{}", pod.uid).into();
        }
        let json = serde_json::json!({
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid, "attempt": 0},
            "log_directory": path_str(&self.dir.join("logs").join(&pod.name)),
            "linux": linux,
        });
        let f = self.pod_file(&pod.name);
        self.write(&format!("pod-{}.json", pod.name), &json)?;
        Ok(f)
    }
}

fn path_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn pod_state(s: &str) -> PodState {
    if s == "SANDBOX_READY" {
        PodState::Ready
    } else {
        PodState::NotReady
    }
}

fn container_state(s: &str) -> ContainerState {
    match s {
        "CONTAINER_CREATED" => ContainerState::Created,
        "CONTAINER_RUNNING" => ContainerState::Running,
        "CONTAINER_EXITED" => ContainerState::Exited,
        _ => ContainerState::Unknown,
    }
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn pod_from(v: &Value) -> PodStatus {
    PodStatus {
        id: str_at(v, &["id"]).to_owned(),
        name: str_at(v, &["metadata", "name"]).to_owned(),
        state: pod_state(str_at(v, &["state"])),
    }
}

fn container_from(v: &Value) -> ContainerStatus {
    ContainerStatus {
        id: str_at(v, &["id"]).to_owned(),
        name: str_at(v, &["metadata", "name"]).to_owned(),
        state: container_state(str_at(v, &["state"])),
    }
}

impl Cri for Crictl {
    async fn run_pod(&self, pod: &PodSpec) -> CriResult<String> {
        let f = self.pod_config(pod)?;
        self.call(&["runp", &path_str(&f)]).await
    }

    async fn create_container(
        &self,
        pod_id: &str,
        pod: &PodSpec,
        ctr: &ContainerSpec,
    ) -> CriResult<String> {
        let json = serde_json::json!({
            "metadata": {"name": ctr.name, "attempt": 0},
            "image": {"image": self.opts.image},
            "command": ctr.command.as_ref().unwrap_or(&self.opts.command),
            "log_path": format!("{}.log", ctr.name),
            "linux": {},
        });
        let f = self.write(&format!("ctr-{}-{}.json", pod.name, ctr.name), &json)?;
        let pf = self.pod_file(&pod.name);
        self.call(&["create", pod_id, &path_str(&f), &path_str(&pf)])
            .await
    }

    async fn start_container(&self, id: &str) -> CriResult<()> {
        self.call_unit(&["start", id]).await
    }

    async fn update_container(&self, id: &str, cpu_shares: u64) -> CriResult<()> {
        self.call_unit(&["update", "--cpu-share", &cpu_shares.to_string(), id])
            .await
    }

    async fn stop_container(&self, id: &str) -> CriResult<()> {
        self.call_unit(&["stop", "-t", "0", id]).await
    }

    async fn remove_container(&self, id: &str) -> CriResult<()> {
        self.call_unit(&["rm", id]).await
    }

    async fn stop_pod(&self, id: &str) -> CriResult<()> {
        self.call_unit(&["stopp", id]).await
    }

    async fn remove_pod(&self, id: &str) -> CriResult<()> {
        self.call_unit(&["rmp", id]).await
    }

    async fn list_pods(&self) -> CriResult<Vec<PodStatus>> {
        Ok(self.call_json(&["pods", "-o", "json"]).await?.map(|v| {
            v.get("items")
                .and_then(Value::as_array)
                .map(|a| a.iter().map(pod_from).collect())
                .unwrap_or_default()
        }))
    }

    async fn pod_status(&self, id: &str) -> CriResult<PodStatus> {
        Ok(self
            .call_json(&["inspectp", "-o", "json", id])
            .await?
            .map(|v| pod_from(v.get("status").unwrap_or(&Value::Null))))
    }

    async fn list_containers(&self, pod_id: &str) -> CriResult<Vec<ContainerStatus>> {
        Ok(self
            .call_json(&["ps", "-a", "-o", "json", "--pod", pod_id])
            .await?
            .map(|v| {
                v.get("containers")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().map(container_from).collect())
                    .unwrap_or_default()
            }))
    }

    async fn container_status(&self, id: &str) -> CriResult<ContainerStatus> {
        Ok(self
            .call_json(&["inspect", "-o", "json", id])
            .await?
            .map(|v| container_from(v.get("status").unwrap_or(&Value::Null))))
    }
}

/// The error message of a failed crictl call: the `msg="..."` of its last
/// `level=fatal` line (unescaped), else its last non-empty line.
pub(crate) fn crictl_error(stderr: &str) -> String {
    let last = stderr
        .lines()
        .rev()
        .find(|l| l.contains("level=fatal"))
        .or_else(|| stderr.lines().rev().find(|l| !l.trim().is_empty()))
        .unwrap_or_default();
    match last.split_once("msg=\"") {
        Some((_, rest)) => {
            let rest = rest.rsplit_once('"').map_or(rest, |(m, _)| m);
            rest.replace("\\\"", "\"")
        }
        None => last.trim().to_owned(),
    }
}
