//! [`Containerd`]: a private containerd run by `harness.sh`, and the
//! crictl steps the tests take against it.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use crate::logs::{poll, tail};
use crate::plugin_process::PluginProcess;
use crate::process::{Output, run_with_deadline};
use crate::{harness_path, timeout};

/// Options for [`Containerd::container`].
#[derive(Debug, Clone, Default)]
pub struct ContainerOpts {
    /// CRI annotations (`-a K=V`).
    pub annotations: Vec<(String, String)>,
    /// Environment (`-e K=V`).
    pub env: Vec<(String, String)>,
    /// Command; default `sleep 3600`.
    pub command: Vec<String>,
    /// Create only.
    pub no_start: bool,
}

impl ContainerOpts {
    /// Adds a CRI annotation.
    pub fn annotation(mut self, k: &str, v: &str) -> Self {
        self.annotations.push((k.into(), v.into()));
        self
    }
    /// Adds an environment variable.
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }
    /// Sets the command.
    pub fn command(mut self, cmd: &[&str]) -> Self {
        self.command = cmd.iter().map(|s| (*s).to_owned()).collect();
        self
    }
}

/// A private containerd under its own WORK dir. `Drop` runs `harness.sh
/// stop`; the WORK dir is removed if the test called [`Containerd::passed`]
/// (and `NRI_E2E_KEEP_WORK` is not 1); otherwise (a panic, an early `?`
/// return) the test failed: the log tails are printed and WORK is kept.
pub struct Containerd {
    work: PathBuf,
    version: String,
    label: String,
    started: bool,
    passed: bool,
    /// Extra logs to show on failure (plugin logs).
    extra_logs: Mutex<Vec<PathBuf>>,
    t0: Instant,
}

impl Containerd {
    /// Creates a fresh WORK dir (`/tmp/nri-e2e.XXXXXX`) for containerd
    /// `version` ("2.1", "2.3" or "2.4"); install pre-launched plugins with
    /// [`Self::install_plugin`], then call [`Self::start`].
    pub fn new(version: &str, label: &str) -> Result<Self> {
        let out = Command::new("mktemp")
            .args(["-d", "/tmp/nri-e2e.XXXXXX"])
            .output()?;
        if !out.status.success() {
            bail!("mktemp failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let work = PathBuf::from(String::from_utf8(out.stdout)?.trim());
        if work.as_os_str().len() > 40 {
            bail!("WORK {} longer than 40 bytes", work.display());
        }
        eprintln!("[e2e {label}] containerd {version} in {}", work.display());
        Ok(Self {
            work,
            version: version.to_owned(),
            label: label.to_owned(),
            started: false,
            passed: false,
            extra_logs: Mutex::new(Vec::new()),
            t0: Instant::now(),
        })
    }

    /// The WORK dir.
    pub fn work(&self) -> &Path {
        &self.work
    }

    /// The containerd version asked for ("2.1", "2.3", "2.4").
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The socket external plugins connect to.
    pub fn nri_socket(&self) -> PathBuf {
        self.work.join("nri.sock")
    }

    /// containerd's log file.
    pub fn log_path(&self) -> PathBuf {
        self.work.join("containerd.log")
    }

    /// Copies `binary` to `WORK/nri/plugins/<idx>-<name>` and writes `config`
    /// (if any) to `WORK/nri/conf.d/<idx>-<name>.conf`; containerd launches
    /// it at start with the socket on fd 3.
    pub fn install_plugin(
        &self,
        idx: &str,
        name: &str,
        binary: &Path,
        config: Option<&str>,
    ) -> Result<PathBuf> {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = self.work.join("nri/plugins");
        fs::create_dir_all(&dir)?;
        let dst = dir.join(format!("{idx}-{name}"));
        fs::copy(binary, &dst).with_context(|| format!("copy {}", binary.display()))?;
        fs::set_permissions(&dst, fs::Permissions::from_mode(0o755))?;
        if let Some(cfg) = config {
            let cdir = self.work.join("nri/conf.d");
            fs::create_dir_all(&cdir)?;
            fs::write(cdir.join(format!("{idx}-{name}.conf")), cfg)?;
        }
        Ok(dst)
    }

    fn harness(&self, args: &[&str]) -> Result<Output> {
        let mut cmd = Command::new(harness_path());
        cmd.args(args);
        run_with_deadline(cmd, &self.work.join("tmp"), timeout())
    }

    /// Runs `harness.sh ARGS...`, failing on a non-zero status; returns
    /// trimmed stdout.
    pub fn run(&self, args: &[&str]) -> Result<String> {
        let out = self.harness(args)?;
        if !out.status.success() {
            bail!(
                "harness.sh {} failed ({}):\n{}",
                args.join(" "),
                out.status,
                out.stderr.trim_end()
            );
        }
        Ok(out.stdout.trim().to_owned())
    }

    fn w(&self) -> &str {
        self.work.to_str().unwrap_or_default()
    }

    /// Starts containerd (and its pre-launched plugins).
    pub fn start(&mut self) -> Result<()> {
        let t = Instant::now();
        self.started = true;
        let (v, w) = (self.version.clone(), self.w().to_owned());
        self.run(&["start", &v, &w])?;
        eprintln!(
            "[e2e {}] containerd started in {:.1?}",
            self.label,
            t.elapsed()
        );
        Ok(())
    }

    /// Restarts containerd alone (`harness.sh restart`): pods, containers
    /// and shims keep running, containerd's log starts anew.
    pub fn restart(&mut self) -> Result<()> {
        let t = Instant::now();
        let w = self.w().to_owned();
        self.run(&["restart", &w])?;
        eprintln!(
            "[e2e {}] containerd restarted in {:.1?}",
            self.label,
            t.elapsed()
        );
        Ok(())
    }

    /// Waits until containerd's log has a line matching the extended regex
    /// `ere`; returns it.
    pub fn wait_log(&self, ere: &str) -> Result<String> {
        let secs = timeout().as_secs().max(1).to_string();
        self.run(&["wait-log", self.w(), ere, &secs])
    }

    /// Waits until containerd logs that the plugin named `name` (any index)
    /// is synchronized (external: `plugin "NN-name" connected and
    /// synchronized`; pre-launched: `pre-installed NRI plugin "NN-name"
    /// synchronization success`): from then on it sees every event.
    pub fn wait_plugin_synchronized(&self, name: &str) -> Result<String> {
        let id = format!(".{{0,2}}[0-9]+-{name}.{{0,2}}");
        self.wait_log(&format!(
            "plugin {id} connected and synchronized|pre-installed NRI plugin {id} synchronization success"
        ))
    }

    /// Runs a host-network pod; returns its id.
    pub fn pod(&self, name: &str, annotations: &[(&str, &str)]) -> Result<String> {
        self.pod_args(name, annotations, &[])
    }

    /// Runs a pod with its own network namespace (set up by the harness's
    /// CNI bridge) under runtime handler `runtime` (the harness defines
    /// `runc`, the default, and `runc-netdev`, a runc with OCI
    /// `linux.netDevices`); returns its id.
    pub fn pod_in_netns(
        &self,
        name: &str,
        annotations: &[(&str, &str)],
        runtime: &str,
    ) -> Result<String> {
        self.pod_args(name, annotations, &["--netns", "--runtime", runtime])
    }

    fn pod_args(&self, name: &str, annotations: &[(&str, &str)], extra: &[&str]) -> Result<String> {
        let mut args = vec!["pod".to_owned(), self.w().to_owned(), name.to_owned()];
        for (k, v) in annotations {
            args.push("-a".into());
            args.push(format!("{k}={v}"));
        }
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        self.run(&args.iter().map(String::as_str).collect::<Vec<_>>())
    }

    /// Creates (and unless `no_start`, starts) a busybox container in `pod`.
    pub fn container(&self, pod: &str, name: &str, opts: &ContainerOpts) -> Result<String> {
        let mut args = vec![
            "container".to_owned(),
            self.w().to_owned(),
            pod.to_owned(),
            name.to_owned(),
        ];
        for (k, v) in &opts.annotations {
            args.push("-a".into());
            args.push(format!("{k}={v}"));
        }
        for (k, v) in &opts.env {
            args.push("-e".into());
            args.push(format!("{k}={v}"));
        }
        if opts.no_start {
            args.push("--no-start".into());
        }
        if !opts.command.is_empty() {
            args.push("--".into());
            args.extend(opts.command.iter().cloned());
        }
        self.run(&args.iter().map(String::as_str).collect::<Vec<_>>())
    }

    /// The output lines of container `ctr` of pod `pod` (names, as given to
    /// [`Self::pod`] and [`Self::container`]) logged so far: the message
    /// part of each CRI log line (`TIME STREAM TAG message`).
    pub fn container_log(&self, pod: &str, ctr: &str) -> Vec<String> {
        let path = self.work.join(format!("logs/pods/{pod}/{ctr}.log"));
        fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.splitn(4, ' ').nth(3).map(str::to_owned))
            .collect()
    }

    /// Waits until container `ctr` of pod `pod` has logged at least `n`
    /// lines; returns them.
    pub fn wait_container_log(&self, pod: &str, ctr: &str, n: usize) -> Result<Vec<String>> {
        poll(&format!("{n} log lines of {pod}/{ctr}"), timeout(), || {
            let lines = self.container_log(pod, ctr);
            Ok((lines.len() >= n).then_some(lines))
        })
    }

    /// Runs `cmd` in a container; returns its output (whatever the status).
    pub fn exec(&self, id: &str, cmd: &[&str]) -> Result<Output> {
        let mut args = vec!["exec", self.w(), id];
        args.extend_from_slice(cmd);
        self.harness(&args)
    }

    /// Runs `cmd` in a container and requires status 0; returns stdout.
    pub fn exec_ok(&self, id: &str, cmd: &[&str]) -> Result<String> {
        let out = self.exec(id, cmd)?;
        if !out.status.success() {
            bail!(
                "exec {cmd:?} in {id}: {}\nstdout: {}\nstderr: {}",
                out.status,
                out.stdout,
                out.stderr
            );
        }
        Ok(out.stdout)
    }

    /// `crictl inspect`/`inspectp` JSON.
    pub fn inspect(&self, id: &str) -> Result<serde_json::Value> {
        let s = self.run(&["inspect", self.w(), id])?;
        serde_json::from_str(&s).with_context(|| format!("inspect {id}: not JSON: {s}"))
    }

    /// Raw crictl.
    pub fn crictl(&self, args: &[&str]) -> Result<String> {
        let mut a = vec!["crictl", self.w()];
        a.extend_from_slice(args);
        self.run(&a)
    }

    /// Stops and removes a container.
    pub fn rm(&self, id: &str) -> Result<()> {
        self.run(&["rm", self.w(), id]).map(drop)
    }

    /// Stops and removes a pod.
    pub fn rmp(&self, id: &str) -> Result<()> {
        self.run(&["rmp", self.w(), id]).map(drop)
    }

    /// Starts an external plugin `binary ARGS...` with extra `env`; its
    /// stdout and stderr go to `WORK/plugin-<name>.log` (also shown when the
    /// test fails). `NO_COLOR=1` and `RUST_LOG=info` unless given.
    pub fn spawn_plugin(
        &self,
        name: &str,
        binary: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<PluginProcess> {
        let log = self.work.join(format!("plugin-{name}.log"));
        let file = fs::File::create(&log)?;
        let mut cmd = Command::new(binary);
        cmd.args(args)
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file);
        let child = cmd
            .spawn()
            .with_context(|| format!("spawn {}", binary.display()))?;
        self.extra_logs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(log.clone());
        Ok(PluginProcess {
            name: name.to_owned(),
            child,
            log,
        })
    }

    /// Marks the test as passed: `Drop` then removes WORK quietly.
    pub fn passed(&mut self) {
        self.passed = true;
    }

    /// Elapsed time since [`Self::new`].
    pub fn elapsed(&self) -> Duration {
        self.t0.elapsed()
    }

    /// Prints the log tails (containerd and plugins).
    pub fn dump_logs(&self) {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "[e2e {}] containerd log tail ({}):\n{}",
            self.label,
            self.log_path().display(),
            tail(&self.log_path(), 40)
        );
        for p in self
            .extra_logs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = writeln!(
                s,
                "[e2e {}] {} tail:\n{}",
                self.label,
                p.display(),
                tail(p, 40)
            );
        }
        eprintln!("{s}");
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let failed = std::thread::panicking() || !self.passed;
        if failed {
            self.dump_logs();
        }
        if self.started {
            let w = self.w().to_owned();
            match self.harness(&["stop", &w]) {
                Ok(o) if o.status.success() => {}
                Ok(o) => eprintln!("[e2e {}] harness stop failed: {}", self.label, o.stderr),
                Err(e) => eprintln!("[e2e {}] harness stop: {e:#}", self.label),
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
