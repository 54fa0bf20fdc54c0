//! End-to-end tests of Rust NRI plugins against a real containerd.
//!
//! A thin Rust wrapper around `tests/e2e/harness.sh` (see the README next to
//! it): [`Containerd`] owns a private WORK dir and the containerd running in
//! it (torn down by `Drop`, also when a test panics), [`PluginProcess`] owns
//! an externally started plugin and its log, [`plugin_binary`] finds (or
//! builds once) the plugin executables.
//!
//! # Gate
//!
//! Every test starts with [`e2e_enabled`]: unless `NRI_E2E=1` it prints why
//! and the test returns early; with `NRI_E2E=1` a harness that is not
//! available (not root, `scripts/setup-e2e.sh` not run) fails the test.
//! `scripts/test.sh` runs the set-up and sets `NRI_E2E=1`.
//!
//! # Robustness
//!
//! Nothing sleeps to synchronise: waits poll a condition against a generous
//! deadline ([`E2E_TIMEOUT`], scaled by `NRI_E2E_TIMEOUT_SCALE`). Each test
//! uses its own WORK (`/tmp/nri-e2e.XXXXXX`, well under the harness's
//! 40-byte limit), so tests may run in parallel. On failure the WORK dir is
//! kept and the tails of containerd's and the plugins' logs are printed.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::fs;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};

pub mod oci;

/// The containerd versions the harness provides, as `harness.sh start` takes them.
pub const VERSIONS: [&str; 3] = ["2.1", "2.3", "2.4"];

/// Base deadline for one containerd-facing step (a crictl call, a plugin
/// registering, a log line appearing). Generous on purpose: the suite must
/// pass on a loaded 2-core machine.
pub const E2E_TIMEOUT: Duration = Duration::from_secs(60);

/// The deadline for one step: [`E2E_TIMEOUT`] times `NRI_E2E_TIMEOUT_SCALE`
/// (a positive number, default 1).
pub fn timeout() -> Duration {
    let scale = std::env::var("NRI_E2E_TIMEOUT_SCALE")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .unwrap_or(1.0);
    E2E_TIMEOUT.mul_f64(scale)
}

/// Path of `tests/e2e/harness.sh`.
pub fn harness_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("harness.sh")
}

/// The workspace root (where `Cargo.toml` with `[workspace]` is).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Whether the e2e tests run (see the crate docs). `test` names the caller
/// for the skip message.
///
/// # Panics
///
/// When `NRI_E2E=1` and `harness.sh available` fails: the tests were asked
/// for and cannot run, which is a failure, not a skip.
pub fn e2e_enabled(test: &str) -> bool {
    if std::env::var("NRI_E2E").as_deref() != Ok("1") {
        eprintln!(
            "{test}: skipped: NRI_E2E is not 1 (run `bash scripts/setup-e2e.sh` and set NRI_E2E=1, \
             or use scripts/test.sh)"
        );
        return false;
    }
    static AVAILABLE: Mutex<Option<std::result::Result<(), String>>> = Mutex::new(None);
    let mut guard = AVAILABLE.lock().unwrap_or_else(|e| e.into_inner());
    let result =
        guard.get_or_insert_with(
            || match Command::new(harness_path()).arg("available").output() {
                Ok(out) if out.status.success() => Ok(()),
                Ok(out) => Err(format!(
                    "harness.sh available failed ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                )),
                Err(e) => Err(format!("cannot run {}: {e}", harness_path().display())),
            },
        );
    if let Err(why) = result {
        panic!("{test}: NRI_E2E=1 but the e2e harness is not available: {why}");
    }
    true
}

/// Output of a finished command.
#[derive(Debug, Clone)]
pub struct Output {
    /// Exit status.
    pub status: ExitStatus,
    /// Standard output (lossy UTF-8).
    pub stdout: String,
    /// Standard error (lossy UTF-8).
    pub stderr: String,
}

impl Output {
    /// The status code, or -1 if killed by a signal.
    pub fn code(&self) -> i32 {
        self.status.code().unwrap_or(-1)
    }
}

/// Runs `cmd` to completion with a deadline, collecting its output through
/// files in `scratch` (no reader threads). The command runs in its own
/// process group; on timeout the whole group is killed.
pub fn run_with_deadline(mut cmd: Command, scratch: &Path, deadline: Duration) -> Result<Output> {
    use std::os::unix::process::CommandExt as _;
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    fs::create_dir_all(scratch)?;
    let out_path = scratch.join(format!("cmd-{}-{n}.out", std::process::id()));
    let err_path = scratch.join(format!("cmd-{}-{n}.err", std::process::id()));
    let desc = format!("{cmd:?}");
    cmd.stdin(Stdio::null())
        .stdout(fs::File::create(&out_path)?)
        .stderr(fs::File::create(&err_path)?)
        .process_group(0);
    let mut child = cmd.spawn().with_context(|| format!("spawn {desc}"))?;
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break Some(st);
        }
        if start.elapsed() > deadline {
            kill_group(&child);
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read = |p: &Path| -> String {
        let mut s = Vec::new();
        let _ = fs::File::open(p).and_then(|mut f| f.read_to_end(&mut s));
        let _ = fs::remove_file(p);
        String::from_utf8_lossy(&s).into_owned()
    };
    let stdout = read(&out_path);
    let stderr = read(&err_path);
    match status {
        Some(status) => Ok(Output {
            status,
            stdout,
            stderr,
        }),
        None => {
            bail!("{desc} did not finish within {deadline:?}\nstdout: {stdout}\nstderr: {stderr}")
        }
    }
}

/// Kills the process group led by `child` (SIGKILL), best effort.
fn kill_group(child: &Child) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", child.id())])
        .stderr(Stdio::null())
        .status();
}

// ---------------------------------------------------------------- binaries

/// Where cargo put this test binary's siblings: `<target>/<profile>`
/// (the test runs from `<target>/<profile>/deps/<name>-<hash>`).
pub fn profile_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let deps = exe
        .parent()
        .ok_or_else(|| anyhow!("{} has no parent", exe.display()))?;
    let dir = if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent()
            .ok_or_else(|| anyhow!("{} has no parent", deps.display()))?
    } else {
        deps
    };
    Ok(dir.to_path_buf())
}

/// Which target of a package holds a plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// A `[[bin]]` target: `<target>/<profile>/<name>`.
    Bin,
    /// An example: `<target>/<profile>/examples/<name>`.
    Example,
}

/// Locates a plugin executable built by `cargo test --workspace` (which
/// builds every bin and example of the workspace): bins at
/// `<target>/<profile>/<name>`, examples at `<target>/<profile>/examples/<name>`,
/// next to this test binary. If it is missing (e.g. only this crate was
/// built), it is built once with `$CARGO build -p <package> [--bin|--example]
/// <name>` into the same target dir and profile. Set `NRI_E2E_REBUILD=1` to
/// always run that build (it is a no-op when up to date) and so never test a
/// stale binary.
pub fn plugin_binary(package: &str, target: Target, name: &str) -> Result<PathBuf> {
    static BUILT: Mutex<Option<HashSet<(String, Target, String)>>> = Mutex::new(None);
    // The time spent here (building, or waiting for another test's build)
    // is not the test's: `check_budget` leaves it out.
    let _building = BuildTimer(Instant::now());
    let profile = profile_dir()?;
    let path = match target {
        Target::Bin => profile.join(name),
        Target::Example => profile.join("examples").join(name),
    };
    let key = (package.to_owned(), target, name.to_owned());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let built = built.get_or_insert_with(HashSet::new);
    let rebuild = std::env::var("NRI_E2E_REBUILD").as_deref() == Ok("1");
    if (path.is_file() && !rebuild) || built.contains(&key) {
        if path.is_file() {
            return Ok(path);
        }
        bail!("{} missing even after building it", path.display());
    }
    let target_dir = profile
        .parent()
        .ok_or_else(|| anyhow!("{} has no parent", profile.display()))?;
    let profile_name = profile
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| anyhow!("bad profile dir {}", profile.display()))?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace_root())
        .env("CARGO_TARGET_DIR", target_dir)
        .args(["build", "-p", package]);
    match profile_name {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    cmd.arg(match target {
        Target::Bin => "--bin",
        Target::Example => "--example",
    })
    .arg(name);
    eprintln!("[e2e] building {package} {target:?} {name}: {cmd:?}");
    let t0 = Instant::now();
    let out = run_with_deadline(cmd, &std::env::temp_dir(), Duration::from_secs(900))?;
    built.insert(key);
    if !out.status.success() {
        bail!("cargo build of {package} {name} failed:\n{}", out.stderr);
    }
    eprintln!("[e2e] built {name} in {:.1?}", t0.elapsed());
    if !path.is_file() {
        bail!("{} missing after building it", path.display());
    }
    Ok(path)
}

thread_local! {
    /// Time this thread spent in [`plugin_binary`] since the last
    /// [`check_budget`].
    static BUILD_TIME: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
}

/// Adds the time since its start to [`BUILD_TIME`] when dropped.
struct BuildTimer(Instant);

impl Drop for BuildTimer {
    fn drop(&mut self) {
        let spent = self.0.elapsed();
        BUILD_TIME.with(|t| t.set(t.get() + spent));
    }
}

// ---------------------------------------------------------------- logs

/// Removes ANSI escape sequences (`ESC [ ... letter`).
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Polls `cond` every 50 ms until it returns `Some` or `deadline` passes.
pub fn poll<T>(
    what: &str,
    deadline: Duration,
    mut cond: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = cond()? {
            return Ok(v);
        }
        if start.elapsed() > deadline {
            bail!("timed out after {deadline:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The last `n` lines of a file (empty if unreadable).
pub fn tail(path: &Path, n: usize) -> String {
    let text = fs::read(path)
        .map(|b| strip_ansi(&String::from_utf8_lossy(&b)))
        .unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// NRI event names as our logger plugins print them, in lifecycle order.
pub const EVENT_NAMES: [&str; 15] = [
    "RunPodSandbox",
    "UpdatePodSandbox",
    "PostUpdatePodSandbox",
    "CreateContainer",
    "ValidateContainerAdjustment",
    "PostCreateContainer",
    "StartContainer",
    "PostStartContainer",
    "UpdateContainer",
    "PostUpdateContainer",
    "StopContainer",
    "RemoveContainer",
    "StopPodSandbox",
    "RemovePodSandbox",
    "Synchronize",
];

/// The event names found in `log` on lines that contain `marker`, in order
/// (the first whole word on the line that is an event name, see
/// [`EVENT_NAMES`]).
pub fn events_in_log(log: &str, marker: &str) -> Vec<String> {
    strip_ansi(log)
        .lines()
        .filter(|l| l.contains(marker))
        .filter_map(|l| {
            l.split(|c: char| !c.is_ascii_alphanumeric())
                .find(|w| EVENT_NAMES.contains(w))
                .map(str::to_owned)
        })
        .collect()
}

/// The events of a log that prints each event over several lines, every
/// line prefixed `<Event>:` (the sample `logger`): the first event name
/// followed by `:` on each line, runs of the same event collapsed into one.
/// (Lines merely listing event names, e.g. the subscription, do not count.)
pub fn event_blocks(log: &str) -> Vec<String> {
    let mut out: Vec<String> = strip_ansi(log)
        .lines()
        .filter_map(|l| {
            EVENT_NAMES
                .iter()
                .filter_map(|e| l.find(&format!(" {e}:")).map(|i| (i, *e)))
                .min()
                .map(|(_, e)| e.to_owned())
        })
        .collect();
    out.dedup();
    out
}

/// Whether `want` is a subsequence of `got`.
pub fn is_subsequence(want: &[&str], got: &[String]) -> bool {
    let mut it = got.iter();
    want.iter().all(|w| it.any(|g| g == w))
}

// ---------------------------------------------------------------- containerd

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

/// An external plugin process; killed (and reaped) on `Drop`.
pub struct PluginProcess {
    name: String,
    child: Child,
    log: PathBuf,
}

impl PluginProcess {
    /// Its log file (stdout and stderr).
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Its log so far, ANSI codes removed.
    pub fn log(&self) -> String {
        fs::read(&self.log)
            .map(|b| strip_ansi(&String::from_utf8_lossy(&b)))
            .unwrap_or_default()
    }

    /// Waits until its log has a line containing all of `needles`; returns
    /// that line. Fails early if the plugin exits.
    pub fn wait_for(&mut self, needles: &[&str]) -> Result<String> {
        let what = format!("plugin {} to log a line with {needles:?}", self.name);
        let log = self.log.clone();
        let name = self.name.clone();
        let child = &mut self.child;
        poll(&what, timeout(), || {
            let text = fs::read(&log)
                .map(|b| strip_ansi(&String::from_utf8_lossy(&b)))
                .unwrap_or_default();
            if let Some(l) = text.lines().find(|l| needles.iter().all(|n| l.contains(n))) {
                return Ok(Some(l.to_owned()));
            }
            if let Some(st) = child.try_wait()? {
                bail!("plugin {name} exited ({st}) while waiting for {needles:?}:\n{text}");
            }
            Ok(None)
        })
    }

    /// Waits until the events logged on lines containing `marker` include
    /// `want` as a subsequence; returns all of them.
    pub fn wait_events(&mut self, marker: &str, want: &[&str]) -> Result<Vec<String>> {
        let what = format!("plugin {} to log events {want:?} for {marker}", self.name);
        let r = poll(&what, timeout(), || {
            let got = events_in_log(&self.log(), marker);
            Ok(is_subsequence(want, &got).then_some(got))
        });
        r.map_err(|e| anyhow!("{e}; events seen: {:?}", events_in_log(&self.log(), marker)))
    }

    /// Waits until the event blocks of the whole log (see [`event_blocks`])
    /// include `want` as a subsequence; returns all of them. For plugins
    /// that print each event over several lines, all prefixed with the event
    /// name.
    pub fn wait_event_blocks(&mut self, want: &[&str]) -> Result<Vec<String>> {
        let what = format!("plugin {} to log events {want:?}", self.name);
        let r = poll(&what, timeout(), || {
            let got = event_blocks(&self.log());
            Ok(is_subsequence(want, &got).then_some(got))
        });
        r.map_err(|e| anyhow!("{e}; events seen: {:?}", event_blocks(&self.log())))
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for PluginProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Prints one timing line the suite's report greps for.
pub fn report_timing(test: &str, t: Duration) {
    eprintln!("[e2e timing] {test}: {:.1} s", t.as_secs_f64());
}

/// `budget` scaled like every e2e deadline (`NRI_E2E_TIMEOUT_SCALE`).
pub fn scaled(budget: Duration) -> Duration {
    budget.mul_f64(timeout().as_secs_f64() / E2E_TIMEOUT.as_secs_f64())
}

/// Reports `test`'s wall time and fails the test when it is over its
/// `budget` (scaled, see [`scaled`]): the suite's cost is part of what it
/// checks. Time the test's thread spent building plugins in
/// [`plugin_binary`] (a build `cargo test --workspace` has not done
/// already) is left out of the comparison and reported apart.
///
/// # Panics
///
/// When `took`, less the build time, is over the scaled budget.
pub fn check_budget(test: &str, took: Duration, budget: Duration) {
    let building = BUILD_TIME.with(|t| t.replace(Duration::ZERO));
    let ran = took.saturating_sub(building);
    report_timing(test, took);
    if building >= Duration::from_secs(1) {
        eprintln!(
            "[e2e timing] {test}: {:.1} s of it building plugins",
            building.as_secs_f64()
        );
    }
    let budget = scaled(budget);
    assert!(
        ran <= budget,
        "{test} took {:.1} s (not counting {:.1} s of plugin builds), over its budget of {:.0} s",
        ran.as_secs_f64(),
        building.as_secs_f64(),
        budget.as_secs_f64()
    );
}
