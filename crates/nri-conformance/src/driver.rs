//! The CRI driver: creates and tears down pods and containers through
//! `crictl`, with JSON configs like the e2e harness writes.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::Error;

/// How to reach the runtime's CRI service.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CriOptions {
    /// CRI endpoint, e.g. `unix:///run/containerd/containerd.sock`.
    pub endpoint: String,
    /// The `crictl` binary (default `crictl` from `PATH`).
    pub crictl: PathBuf,
    /// Workload image, already present on the node (nothing is pulled).
    pub image: String,
    /// Command the workload containers run (default `sleep 3600`).
    pub command: Vec<String>,
    /// Namespace of the pods made (default `nri-conformance`).
    pub namespace: String,
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
            namespace: "nri-conformance".into(),
            cgroup_parent: None,
            scratch_dir: std::env::temp_dir(),
            call_timeout: Duration::from_secs(60),
        }
    }
}

/// One crictl call and its outcome, for the report's trace.
#[derive(Debug, Clone)]
pub(crate) struct Crictl {
    opts: CriOptions,
    run_id: String,
    dir: PathBuf,
}

impl Crictl {
    pub(crate) fn new(opts: CriOptions, run_id: &str) -> Result<Self, Error> {
        let dir = opts.scratch_dir.join(format!("nri-conformance-{run_id}"));
        std::fs::create_dir_all(&dir).map_err(|source| Error::Io {
            what: format!("create {}", dir.display()),
            source,
        })?;
        Ok(Crictl {
            opts,
            run_id: run_id.to_owned(),
            dir,
        })
    }

    /// Removes the scratch dir.
    pub(crate) fn cleanup(&self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    /// Runs `crictl ARGS`; stdout trimmed on success, `Err(message)` with
    /// stderr on a non-zero exit. Failing to run crictl at all is an [`Error`].
    pub(crate) async fn call(&self, args: &[&str]) -> Result<Result<String, String>, Error> {
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

    /// Like [`Crictl::call`], but a failing crictl is an [`Error`] too.
    pub(crate) async fn must(&self, args: &[&str]) -> Result<String, Error> {
        self.call(args).await?.map_err(|stderr| Error::Crictl {
            args: args.join(" "),
            stderr,
        })
    }

    fn write(&self, name: &str, json: &serde_json::Value) -> Result<PathBuf, Error> {
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

    /// Runs a host-network pod named `name`; returns its sandbox id.
    pub(crate) async fn run_pod(&self, name: &str) -> Result<String, Error> {
        let uid = format!("{}-{name}", self.run_id);
        let mut linux = serde_json::json!({
            "security_context": {"namespace_options": {"network": 2, "pid": 1, "ipc": 0}}
        });
        if let Some(parent) = &self.opts.cgroup_parent {
            linux["cgroup_parent"] = format!("{parent}/pod{uid}").into();
        }
        let pod = serde_json::json!({
            "metadata": {"name": name, "namespace": self.opts.namespace, "uid": uid, "attempt": 0},
            "log_directory": path_str(&self.dir.join("logs").join(name)),
            "linux": linux,
        });
        let f = self.write(&format!("pod-{name}.json"), &pod)?;
        self.must(&["runp", &path_str(&f)]).await
    }

    /// Creates (not starts) container `name` in pod `pod` (made by
    /// [`Crictl::run_pod`] as `pod_name`): `Ok(Ok(id))`, or `Ok(Err(stderr))`
    /// when the runtime refused.
    pub(crate) async fn create(
        &self,
        pod: &str,
        pod_name: &str,
        name: &str,
    ) -> Result<Result<String, String>, Error> {
        let ctr = serde_json::json!({
            "metadata": {"name": name, "attempt": 0},
            "image": {"image": self.opts.image},
            "command": self.opts.command,
            "log_path": format!("{name}.log"),
            "linux": {},
        });
        let f = self.write(&format!("ctr-{pod_name}-{name}.json"), &ctr)?;
        let pf = self.pod_file(pod_name);
        self.call(&["create", pod, &path_str(&f), &path_str(&pf)])
            .await
    }

    /// Creates container `name`; a refusal is an [`Error`].
    pub(crate) async fn must_create(
        &self,
        pod: &str,
        pod_name: &str,
        name: &str,
    ) -> Result<String, Error> {
        self.create(pod, pod_name, name)
            .await?
            .map_err(|stderr| Error::Crictl {
                args: format!("create {name} in {pod_name}"),
                stderr,
            })
    }
}

fn path_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
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
