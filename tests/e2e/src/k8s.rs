//! [`Node`]: a one-node Kubernetes cluster (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler, a kubelet) on the harness's
//! containerd, run by `tests/e2e/k8s-node.sh`; the tests drive it with
//! `kubectl` as an operator does.
//!
//! # Gate
//!
//! [`k8s_enabled`] is [`crate::e2e_enabled`] plus the Kubernetes binaries:
//! it runs `scripts/setup-k8s.sh` once per test process, which waits for a
//! build already running (`scripts/test.sh` starts one in the background
//! at its beginning), builds them if nobody did (minutes, counted as a
//! build: left out of the budget like a plugin build) or finds them cached
//! at once.
//! `NRI_E2E_SKIP_K8S=1` skips the node's tests (saying so).
//!
//! # One node at a time
//!
//! The node uses host paths that the DaemonSets of `deploy/` mount
//! (containerd's NRI socket is `/var/run/nri/nri.sock`, the proxy's
//! directory `/var/run/nri-proxy`), so only one runs on a machine: [`Node`]
//! holds an exclusive lock on [`NODE_LOCK`] from before its start until
//! after its stop. The time a test waits for it is left out of its budget.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use crate::binaries::BuildTimer;
use crate::logs::{poll, tail};
use crate::process::{Output, run_with_deadline};
use crate::{e2e_enabled, timeout, workspace_root};

/// The containerd versions the node runs on (Kubernetes v1.34 supports
/// containerd 2.x; 2.1 keeps the crictl stand-ins, see the README).
pub const K8S_VERSIONS: [&str; 2] = ["2.3", "2.4"];

/// The lock file that keeps nodes one at a time.
pub const NODE_LOCK: &str = "/run/nri-rs-k8s-node.lock";

/// containerd's NRI socket on the node: the host path the DaemonSets mount.
pub const NODE_NRI_SOCKET: &str = "/var/run/nri/nri.sock";

/// Path of `tests/e2e/k8s-node.sh`.
pub fn node_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("k8s-node.sh")
}

thread_local! {
    /// Time this thread waited for another test's node since the last
    /// [`crate::check_budget`].
    pub(crate) static NODE_WAIT: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
}

/// Runs `scripts/setup-k8s.sh` once per process; its result is kept.
fn ensure_built() -> Result<(), String> {
    static BUILT: Mutex<Option<Result<(), String>>> = Mutex::new(None);
    let _building = BuildTimer(Instant::now());
    let mut guard = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    guard
        .get_or_insert_with(|| {
            let t0 = Instant::now();
            let mut cmd = Command::new("bash");
            cmd.arg(workspace_root().join("scripts/setup-k8s.sh"));
            // A cold build takes minutes on two cores; a loaded machine more.
            match run_with_deadline(cmd, &std::env::temp_dir(), Duration::from_secs(3600)) {
                Ok(out) if out.status.success() => {
                    eprintln!(
                        "[e2e] Kubernetes binaries ready after {:.1?} (scripts/setup-k8s.sh)",
                        t0.elapsed()
                    );
                    Ok(())
                }
                Ok(out) => Err(format!(
                    "scripts/setup-k8s.sh failed ({}):\n{}",
                    out.status,
                    tail_str(&out.stderr, 30)
                )),
                Err(e) => Err(format!("scripts/setup-k8s.sh: {e:#}")),
            }
        })
        .clone()
}

fn tail_str(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Whether the node's tests run: [`e2e_enabled`], not `NRI_E2E_SKIP_K8S=1`,
/// and the Kubernetes binaries built (see the module docs).
///
/// # Panics
///
/// When the tests were asked for (`NRI_E2E=1`) and cannot run: the harness
/// is unavailable or the build failed.
pub fn k8s_enabled(test: &str) -> bool {
    if !e2e_enabled(test) {
        return false;
    }
    if std::env::var("NRI_E2E_SKIP_K8S").as_deref() == Ok("1") {
        eprintln!("{test}: skipped: NRI_E2E_SKIP_K8S=1 (no Kubernetes node)");
        return false;
    }
    if let Err(why) = ensure_built() {
        panic!("{test}: NRI_E2E=1 but the Kubernetes binaries are not available: {why}");
    }
    true
}

/// [`crate::run_e2e`] for a test that needs the one-node cluster: skipped
/// unless [`k8s_enabled`].
///
/// # Panics
///
/// When `body` fails, or the test is over its budget.
pub fn run_k8s(test: &str, budget: Duration, body: impl FnOnce() -> anyhow::Result<()>) {
    if k8s_enabled(test) {
        crate::run_timed(test, budget, body);
    }
}

/// A running one-node cluster under its own WORK dir. `Drop` stops it
/// (`k8s-node.sh stop`); WORK is removed if the test called
/// [`Node::passed`] (and `NRI_E2E_KEEP_WORK` is not 1); otherwise the log
/// tails are printed and WORK is kept.
pub struct Node {
    work: PathBuf,
    label: String,
    kubectl: PathBuf,
    passed: bool,
    stopped: bool,
    t0: Instant,
    // Dropped after `drop` has stopped the node.
    _lock: fs::File,
}

impl Node {
    /// Starts containerd `version` ("2.3" or "2.4") and the node in a fresh
    /// WORK dir (`/tmp/nri-e2e.XXXXXX`), after waiting for any other node
    /// of this machine to stop.
    ///
    /// # Errors
    ///
    /// The node did not come up (the logs' tails are in the error).
    pub fn start(version: &str, label: &str) -> Result<Self> {
        let waited = Instant::now();
        let lock = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(NODE_LOCK)
            .with_context(|| format!("open {NODE_LOCK}"))?;
        lock.lock().with_context(|| format!("lock {NODE_LOCK}"))?;
        let waited = waited.elapsed();
        NODE_WAIT.with(|t| t.set(t.get() + waited));
        if waited > Duration::from_secs(1) {
            eprintln!("[e2e {label}] waited {waited:.1?} for another node to stop");
        }
        let out = Command::new("mktemp")
            .args(["-d", "/tmp/nri-e2e.XXXXXX"])
            .output()?;
        if !out.status.success() {
            bail!("mktemp failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let work = PathBuf::from(String::from_utf8(out.stdout)?.trim());
        eprintln!(
            "[e2e {label}] Kubernetes node on containerd {version} in {}",
            work.display()
        );
        let mut node = Node {
            work,
            label: label.to_owned(),
            kubectl: PathBuf::new(),
            passed: false,
            stopped: false,
            t0: Instant::now(),
            _lock: lock,
        };
        let t = Instant::now();
        let w = node.w().to_owned();
        // The node's own deadlines (NRI_K8S_START_TIMEOUT) come first.
        node.script(&["start", version, &w], timeout() * 4)?;
        eprintln!("[e2e {label}] node ready in {:.1?}", t.elapsed());
        node.kubectl = PathBuf::from(
            node.env("NRI_K8S_KUBECTL")?
                .context("no NRI_K8S_KUBECTL in the node's env")?,
        );
        Ok(node)
    }

    fn w(&self) -> &str {
        self.work.to_str().unwrap_or_default()
    }

    fn script(&self, args: &[&str], deadline: Duration) -> Result<String> {
        let mut cmd = Command::new(node_script());
        cmd.args(args);
        let out = run_with_deadline(cmd, &self.work.join("tmp"), deadline)?;
        if !out.status.success() {
            bail!(
                "k8s-node.sh {} failed ({}):\n{}",
                args.join(" "),
                out.status,
                out.stderr.trim_end()
            );
        }
        Ok(out.stdout.trim().to_owned())
    }

    /// The WORK dir (the harness's; the node's state is in `WORK/k8s`).
    pub fn work(&self) -> &Path {
        &self.work
    }

    /// A value of `k8s-node.sh env` (the node's and the harness's facts).
    ///
    /// # Errors
    ///
    /// The script failed.
    pub fn env(&self, key: &str) -> Result<Option<String>> {
        let env = self.script(&["env", self.w()], timeout())?;
        Ok(env
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(str::to_owned))
    }

    /// The admin's kubeconfig.
    pub fn kubeconfig(&self) -> PathBuf {
        self.work.join("k8s/admin.conf")
    }

    /// containerd's log.
    pub fn containerd_log(&self) -> PathBuf {
        self.work.join("containerd.log")
    }

    /// Runs `script` with `sh -c` in `dir` as an operator's shell on the
    /// node: `KUBECONFIG` set to the admin's, `kubectl` first on `PATH`.
    /// Docs' commands run through this as written.
    ///
    /// # Errors
    ///
    /// The command could not be run or did not finish in time.
    pub fn sh_in(&self, dir: &Path, script: &str) -> Result<Output> {
        let bin = self.kubectl.parent().unwrap_or(Path::new("/"));
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script])
            .current_dir(dir)
            .env("KUBECONFIG", self.kubeconfig())
            .env("PATH", path);
        run_with_deadline(cmd, &self.work.join("tmp"), timeout() * 3)
    }

    /// [`Self::sh_in`] in the workspace root, requiring status 0; returns
    /// stdout.
    ///
    /// # Errors
    ///
    /// A non-zero status (with the output) or [`Self::sh_in`]'s.
    pub fn sh(&self, script: &str) -> Result<String> {
        let out = self.sh_in(&workspace_root(), script)?;
        if !out.status.success() {
            bail!(
                "`{script}` failed ({}):\nstdout: {}\nstderr: {}",
                out.status,
                out.stdout.trim_end(),
                out.stderr.trim_end()
            );
        }
        Ok(out.stdout)
    }

    /// `kubectl ARGS...` as the admin (no shell); the output whatever the
    /// status.
    ///
    /// # Errors
    ///
    /// kubectl could not be run or did not finish in time.
    pub fn kubectl_output(&self, args: &[&str]) -> Result<Output> {
        let mut cmd = Command::new(&self.kubectl);
        cmd.arg("--kubeconfig")
            .arg(self.kubeconfig())
            .args(args)
            .current_dir(workspace_root());
        run_with_deadline(cmd, &self.work.join("tmp"), timeout() * 3)
    }

    /// `kubectl ARGS...` requiring status 0; returns stdout.
    ///
    /// # Errors
    ///
    /// A non-zero status (with stderr) or [`Self::kubectl_output`]'s.
    pub fn kubectl(&self, args: &[&str]) -> Result<String> {
        let out = self.kubectl_output(args)?;
        if !out.status.success() {
            bail!(
                "kubectl {} failed ({}):\n{}",
                args.join(" "),
                out.status,
                out.stderr.trim_end()
            );
        }
        Ok(out.stdout)
    }

    /// `kubectl apply -f -` of `manifest`.
    ///
    /// # Errors
    ///
    /// kubectl failed.
    pub fn apply(&self, manifest: &str) -> Result<()> {
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let file = self.work.join(format!("tmp/manifest-{n}.yaml"));
        fs::create_dir_all(self.work.join("tmp"))?;
        fs::write(&file, manifest)?;
        self.kubectl(&["apply", "-f", file.to_str().unwrap_or_default()])
            .map(drop)
    }

    /// `kubectl ARGS... -o json`, parsed.
    ///
    /// # Errors
    ///
    /// kubectl failed or its output is not JSON.
    pub fn get_json(&self, args: &[&str]) -> Result<serde_json::Value> {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        let s = self.kubectl(&a)?;
        serde_json::from_str(&s).with_context(|| format!("kubectl {args:?}: not JSON"))
    }

    /// Imports an image archive into the node's containerd (namespace
    /// `k8s.io`, where the kubelet finds it).
    ///
    /// # Errors
    ///
    /// `ctr images import` failed.
    pub fn import_image(&self, tar: &Path) -> Result<()> {
        let mut cmd = Command::new(crate::harness_path());
        cmd.args(["ctr", self.w(), "images", "import"]).arg(tar);
        let out = run_with_deadline(cmd, &self.work.join("tmp"), timeout())?;
        if !out.status.success() {
            bail!(
                "ctr images import {} failed:\n{}",
                tar.display(),
                out.stderr
            );
        }
        Ok(())
    }

    /// crictl against the node's containerd (`harness.sh crictl WORK
    /// ARGS...`); stdout.
    ///
    /// # Errors
    ///
    /// crictl failed.
    pub fn crictl(&self, args: &[&str]) -> Result<String> {
        let mut cmd = Command::new(crate::harness_path());
        cmd.args(["crictl", self.w()]).args(args);
        let out = run_with_deadline(cmd, &self.work.join("tmp"), timeout())?;
        if !out.status.success() {
            bail!("crictl {} failed:\n{}", args.join(" "), out.stderr);
        }
        Ok(out.stdout)
    }

    /// The OCI spec of the running container `name` of the pod `pod` (as
    /// the kubelet made it; `crictl inspect`'s `.info.runtimeSpec`).
    ///
    /// # Errors
    ///
    /// No such container, or crictl failed.
    pub fn runtime_spec(&self, pod: &str, name: &str) -> Result<serde_json::Value> {
        let ids = self.crictl(&["ps", "-q", "--pod", pod, "--name", &format!("^{name}$")])?;
        let id = ids
            .lines()
            .next()
            .with_context(|| format!("no running container {name} in pod {pod}"))?;
        let v: serde_json::Value =
            serde_json::from_str(&self.crictl(&["inspect", "-o", "json", id])?)?;
        Ok(v["info"]["runtimeSpec"].clone())
    }

    /// The sandbox id of the pod `name` in `namespace`.
    ///
    /// # Errors
    ///
    /// No ready sandbox of that pod, or crictl failed.
    pub fn sandbox(&self, namespace: &str, name: &str) -> Result<String> {
        let ids = self.crictl(&[
            "pods",
            "-q",
            "--namespace",
            namespace,
            "--name",
            &format!("^{name}$"),
            "--state",
            "ready",
        ])?;
        ids.lines()
            .next()
            .map(str::to_owned)
            .with_context(|| format!("no ready sandbox of pod {namespace}/{name}"))
    }

    /// Waits (up to [`timeout`] times `factor`) until `cond` gives a value.
    ///
    /// # Errors
    ///
    /// `cond` failed or the deadline passed.
    pub fn wait<T>(
        &self,
        what: &str,
        factor: u32,
        cond: impl FnMut() -> Result<Option<T>>,
    ) -> Result<T> {
        poll(what, timeout() * factor, cond)
    }

    /// Stops the node now (`k8s-node.sh stop`: the kubelet, the control
    /// plane, then containerd and everything under WORK); `Drop` does it
    /// otherwise.
    ///
    /// # Errors
    ///
    /// The stop failed (something was left behind).
    pub fn stop(&mut self) -> Result<()> {
        self.stopped = true;
        let w = self.w().to_owned();
        self.script(&["stop", &w], timeout()).map(drop)
    }

    /// Marks the test as passed: `Drop` then removes WORK quietly.
    pub fn passed(&mut self) {
        self.passed = true;
    }

    /// Prints the tails of the node's logs and containerd's.
    pub fn dump_logs(&self) {
        let mut s = String::new();
        for name in [
            "kubelet",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "etcd",
        ] {
            let p = self.work.join(format!("k8s/{name}.log"));
            let _ = writeln!(
                s,
                "[e2e {}] {} tail:\n{}",
                self.label,
                p.display(),
                tail(&p, 25)
            );
        }
        let _ = writeln!(
            s,
            "[e2e {}] containerd log tail:\n{}",
            self.label,
            tail(&self.containerd_log(), 40)
        );
        eprintln!("{s}");
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let failed = std::thread::panicking() || !self.passed;
        if failed {
            if let Ok(out) = self.kubectl_output(&["get", "pods", "-A", "-o", "wide"]) {
                eprintln!("[e2e {}] pods:\n{}", self.label, out.stdout);
            }
            self.dump_logs();
        }
        if !self.stopped {
            let w = self.w().to_owned();
            if let Err(e) = self.script(&["stop", &w], timeout()) {
                eprintln!("[e2e {}] node stop: {e:#}", self.label);
            }
        }
        let keep = failed || std::env::var("NRI_E2E_KEEP_WORK").as_deref() == Ok("1");
        if keep {
            eprintln!("[e2e {}] WORK kept: {}", self.label, self.work.display());
        } else if let Err(e) = fs::remove_dir_all(&self.work) {
            eprintln!("[e2e {}] removing {}: {e}", self.label, self.work.display());
        }
        eprintln!(
            "[e2e {}] {} in {:.1?}",
            self.label,
            if failed { "FAILED" } else { "done" },
            self.t0.elapsed()
        );
    }
}
