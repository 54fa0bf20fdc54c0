//! Test helpers (feature `testing`): drive the Go runtime peer
//! `nri-go-runtime` of `interop/` (containerd/nri v0.12.5 adaptation) and
//! run a sample plugin binary against it.
//!
//! Peers are found in `$NRI_INTEROP_BIN` (default `<repo>/interop/bin`,
//! built by `scripts/build-go-peers.sh`). A missing peer fails the test when
//! `NRI_REQUIRE_INTEROP=1`, else [`go_peer`] prints why and returns `None`.
//!
//! These helpers panic on failure: they are for tests only.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

/// How long to wait for any answer of the Go runtime.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// The path of Go peer `name`, or `None` (after printing why) when it is
/// missing and `NRI_REQUIRE_INTEROP` is not `1`.
///
/// # Panics
///
/// When the peer is missing and `NRI_REQUIRE_INTEROP=1`.
pub fn go_peer(name: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("NRI_INTEROP_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../interop/bin"));
    let bin = dir.join(name);
    if bin.exists() {
        return Some(bin);
    }
    let why = format!(
        "Go peer {} missing (build with scripts/build-go-peers.sh)",
        bin.display()
    );
    if std::env::var("NRI_REQUIRE_INTEROP").is_ok_and(|v| v == "1") {
        panic!("{why}");
    }
    eprintln!("skipping: {why}");
    None
}

/// A running `nri-go-runtime`, driven by JSON lines. Killed on drop.
pub struct GoRuntime {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<Value>,
    asyncs: Vec<Value>,
    next_id: u64,
    /// The socket external plugins dial.
    pub socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for GoRuntime {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl GoRuntime {
    /// Starts the runtime on a fresh socket in a temp dir, with extra
    /// flags, and waits for its `started` line. `None` if the peer is
    /// missing (see [`go_peer`]).
    pub fn start(extra: &[&str]) -> Option<GoRuntime> {
        let bin = go_peer("nri-go-runtime")?;
        let dir = tempfile::Builder::new()
            .prefix("nri-sample")
            .tempdir()
            .unwrap();
        let socket = dir.path().join("nri.sock");
        let mut child = Command::new(bin)
            .arg("--socket")
            .arg(&socket)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("bad JSON line {line:?}: {e}"));
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        let mut rt = GoRuntime {
            child,
            stdin,
            lines,
            asyncs: Vec::new(),
            next_id: 0,
            socket,
            _dir: dir,
        };
        let started = rt.wait_async(|v| v["async"] == "started" || v["async"] == "error");
        assert_eq!(started["async"], "started", "{started}");
        Some(rt)
    }

    fn next_line(&mut self) -> Value {
        self.lines
            .recv_timeout(TIMEOUT)
            .expect("no output from the Go runtime in time (or it ended)")
    }

    /// Sends a command and returns its result line (async lines are kept
    /// for [`GoRuntime::wait_async`]).
    pub fn cmd(&mut self, mut c: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        c["id"] = json!(id);
        let mut line = c.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).unwrap();
        self.stdin.flush().unwrap();
        loop {
            let v = self.next_line();
            if v.get("async").is_some() {
                self.asyncs.push(v);
            } else if v["id"] == json!(id) {
                return v;
            }
        }
    }

    /// [`GoRuntime::cmd`], asserting `ok: true`.
    pub fn ok(&mut self, c: Value) -> Value {
        let r = self.cmd(c.clone());
        assert_eq!(r["ok"], json!(true), "command {c} failed: {r}");
        r
    }

    /// The first async line (seen or to come) matching `pred`.
    pub fn wait_async(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.asyncs.iter().position(&pred) {
            return self.asyncs.remove(i);
        }
        loop {
            let v = self.next_line();
            if v.get("async").is_some() {
                if pred(&v) {
                    return v;
                }
                self.asyncs.push(v);
            }
        }
    }

    /// Waits until `count` plugins are registered and synchronized.
    pub fn wait_plugins(&mut self, count: u64) {
        self.ok(json!({"cmd": "wait_plugins", "count": count, "timeout_ms": 20000}));
    }

    /// Runs a pod (`RunPodSandbox`) with these annotations.
    pub fn run_pod(&mut self, id: &str, name: &str, annotations: Value) {
        self.ok(json!({"cmd": "RunPodSandbox", "pod": {
            "id": id, "name": name, "uid": format!("uid-{id}"), "namespace": "default",
            "annotations": annotations,
        }}));
    }

    /// Creates a container in pod `pod_id`; `container` is merged into a
    /// minimal container (`id`, `name`, `pod_sandbox_id`). Returns the
    /// whole result line (`ok`, `error`, `response.adjust`).
    pub fn create_container(&mut self, pod_id: &str, id: &str, name: &str, extra: Value) -> Value {
        let mut ctr = json!({"id": id, "name": name, "pod_sandbox_id": pod_id});
        if let (Some(c), Value::Object(e)) = (ctr.as_object_mut(), extra) {
            c.extend(e);
        }
        self.cmd(json!({"cmd": "CreateContainer", "pod_id": pod_id, "container": ctr}))
    }

    /// Sends `stop` and waits for the runtime to exit.
    pub fn stop(mut self) {
        let _ = self.cmd(json!({"cmd": "stop"}));
        let _ = self.child.wait();
    }
}

/// A plugin process, killed on drop.
pub struct PluginProcess {
    /// The child process.
    pub child: Child,
}

impl PluginProcess {
    /// Starts `bin` as an external plugin on `socket` with `args`.
    pub fn external(bin: &str, socket: &Path, args: &[&str]) -> PluginProcess {
        let child = Command::new(bin)
            .arg("-socket-path")
            .arg(socket)
            .args(args)
            .env_remove("NRI_PLUGIN_SOCKET")
            .env_remove("NRI_PLUGIN_NAME")
            .env_remove("NRI_PLUGIN_IDX")
            .stdin(Stdio::null())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        PluginProcess { child }
    }

    /// Whether the process is still running.
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

/// The merged adjustment of a `CreateContainer` result line (asserting it
/// succeeded).
pub fn adjustment(result: &Value) -> &Value {
    assert_eq!(
        result["ok"],
        json!(true),
        "CreateContainer failed: {result}"
    );
    &result["response"]["adjust"]
}

/// Installs `bin` as a pre-launched plugin `NN-name` in a new plugin dir
/// (a wrapper script passing `args`), with `config` as its `NN-name.conf`
/// in a new config dir. Returns the temp dir holding both, and the
/// runtime flags to use them.
pub fn prelaunch_dirs(
    bin: &str,
    plugin_file: &str,
    args: &[&str],
    config: Option<&str>,
) -> (tempfile::TempDir, Vec<String>) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix("nri-prelaunch")
        .tempdir()
        .unwrap();
    let plugins = dir.path().join("plugins");
    let conf = dir.path().join("conf.d");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::create_dir_all(&conf).unwrap();
    let script = plugins.join(plugin_file);
    let quoted: Vec<String> = std::iter::once(bin)
        .chain(args.iter().copied())
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect();
    std::fs::write(
        &script,
        format!("#!/bin/sh\nexec {} \"$@\"\n", quoted.join(" ")),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    if let Some(c) = config {
        std::fs::write(conf.join(format!("{plugin_file}.conf")), c).unwrap();
    }
    let flags = vec![
        "--plugin-dir".to_owned(),
        plugins.display().to_string(),
        "--config-dir".to_owned(),
        conf.display().to_string(),
        "--no-listen".to_owned(),
    ];
    (dir, flags)
}

/// An in-process plugin served on its own thread (with its own
/// current-thread tokio runtime); stopped and joined on drop.
pub struct ThreadPlugin {
    handle: nri_plugin::PluginHandle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ThreadPlugin {
    /// Starts `plugin` as `<index>-<name>`, dialing the runtime at `socket`.
    pub fn start<P: nri_plugin::Plugin>(plugin: P, name: &str, index: &str, socket: &Path) -> Self {
        let stub = nri_plugin::Builder::new(plugin)
            .name(name)
            .index(index)
            .socket_path(socket)
            .build()
            .unwrap();
        let handle = stub.handle();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let _ = rt.block_on(stub.run());
        });
        ThreadPlugin {
            handle,
            thread: Some(thread),
        }
    }
}

impl Drop for ThreadPlugin {
    fn drop(&mut self) {
        self.handle.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
