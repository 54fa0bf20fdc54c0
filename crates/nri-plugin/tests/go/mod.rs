//! Helpers for tests against the Go peers of interop/ (built by
//! `scripts/build-go-peers.sh` into `$NRI_INTEROP_BIN`, default
//! `<repo>/interop/bin`): the Go runtime driven by JSON lines, a Go stub
//! plugin whose JSON lines are collected, and running a Rust plugin.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nri_plugin::{Error, Plugin, PluginHandle, Stub};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub const GO_TIMEOUT: Duration = Duration::from_secs(30);

pub use nri_test_support::go_peer;

/// A running Go runtime peer, driven by JSON lines.
pub struct GoRuntime {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::UnboundedReceiver<Value>,
    reader: JoinHandle<()>,
    pub asyncs: Vec<Value>,
    next_id: u64,
}

impl Drop for GoRuntime {
    fn drop(&mut self) {
        self.reader.abort();
        let _ = self.child.start_kill();
    }
}

impl GoRuntime {
    pub async fn start(bin: &Path, socket: &Path, extra: &[&str]) -> GoRuntime {
        Self::spawn(bin, socket, extra, Stdio::inherit()).await
    }

    /// [`start`](Self::start), with the runtime's log (stderr) lines
    /// handed over instead of printed.
    pub async fn start_logged(
        bin: &Path,
        socket: &Path,
        extra: &[&str],
    ) -> (GoRuntime, mpsc::UnboundedReceiver<String>) {
        let mut rt = Self::spawn(bin, socket, extra, Stdio::piped()).await;
        let stderr = rt.child.stderr.take().unwrap();
        let (tx, log) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut rd = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = rd.next_line().await {
                eprintln!("[go runtime] {line}");
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        (rt, log)
    }

    async fn spawn(bin: &Path, socket: &Path, extra: &[&str], stderr: Stdio) -> GoRuntime {
        let mut child = tokio::process::Command::new(bin)
            .arg("--socket")
            .arg(socket)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::unbounded_channel();
        let reader = tokio::spawn(async move {
            let mut rd = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = rd.next_line().await {
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
            reader,
            asyncs: Vec::new(),
            next_id: 0,
        };
        let started = rt
            .wait_async(|v| v["async"] == "started" || v["async"] == "error")
            .await;
        assert_eq!(started["async"], "started", "{started}");
        rt
    }

    pub async fn next_line(&mut self) -> Value {
        tokio::time::timeout(GO_TIMEOUT, self.lines.recv())
            .await
            .expect("timed out waiting for the Go runtime")
            .expect("Go runtime output ended")
    }

    /// Sends a command and returns its result line (async lines are kept).
    pub async fn cmd(&mut self, mut c: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        c["id"] = json!(id);
        let mut line = c.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        loop {
            let v = self.next_line().await;
            if v.get("async").is_some() {
                self.asyncs.push(v);
            } else if v["id"] == json!(id) {
                return v;
            }
        }
    }

    pub async fn ok(&mut self, c: Value) -> Value {
        let r = self.cmd(c.clone()).await;
        assert_eq!(r["ok"], json!(true), "command {c} failed: {r}");
        r
    }

    /// The first async line (seen or to come) matching `pred`.
    pub async fn wait_async(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.asyncs.iter().position(&pred) {
            return self.asyncs.remove(i);
        }
        loop {
            let v = self.next_line().await;
            if v.get("async").is_some() && pred(&v) {
                return v;
            }
            if v.get("async").is_some() {
                self.asyncs.push(v);
            }
        }
    }

    pub async fn wait_plugins(&mut self, count: u64) {
        self.ok(json!({"cmd": "wait_plugins", "count": count, "timeout_ms": 20000}))
            .await;
    }

    pub async fn stop(mut self) {
        let _ = self.cmd(json!({"cmd": "stop"})).await;
        let _ = tokio::time::timeout(GO_TIMEOUT, self.child.wait()).await;
    }
}

pub type Running<P> = JoinHandle<(Result<(), Error>, Stub<P>)>;

pub fn spawn_plugin<P: Plugin>(stub: Stub<P>) -> (PluginHandle, Running<P>) {
    let handle = stub.handle();
    let task = tokio::spawn(async move {
        let r = stub.run().await;
        (r, stub)
    });
    (handle, task)
}

/// A running `nri-go-plugin`; its stdout JSON lines are collected.
pub struct GoPlugin {
    child: Child,
    lines: mpsc::UnboundedReceiver<Value>,
    reader: JoinHandle<()>,
    /// Every line read so far.
    pub seen: Vec<Value>,
}

impl Drop for GoPlugin {
    fn drop(&mut self) {
        self.reader.abort();
        let _ = self.child.start_kill();
    }
}

impl GoPlugin {
    /// Starts `nri-go-plugin --socket SOCKET ARGS...`.
    pub fn start(bin: &Path, socket: &Path, args: &[&str]) -> GoPlugin {
        let mut child = tokio::process::Command::new(bin)
            .arg("--socket")
            .arg(socket)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::unbounded_channel();
        let reader = tokio::spawn(async move {
            let mut rd = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = rd.next_line().await {
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("bad JSON line {line:?}: {e}"));
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        GoPlugin {
            child,
            lines,
            reader,
            seen: Vec::new(),
        }
    }

    /// The first line (seen or to come) whose `event` is `event`.
    pub async fn wait_event(&mut self, event: &str) -> Value {
        self.wait_for(event, |v| v["event"] == event).await
    }

    /// The first line (seen or to come) matching `pred`; `what` names it
    /// in the failure message.
    pub async fn wait_for(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(v) = self.seen.iter().find(|v| pred(v)) {
            return v.clone();
        }
        loop {
            let v = tokio::time::timeout(GO_TIMEOUT, self.lines.recv())
                .await
                .unwrap_or_else(|_| panic!("timed out waiting for {what}: {:?}", self.seen))
                .unwrap_or_else(|| panic!("Go plugin output ended before {what}: {:?}", self.seen));
            self.seen.push(v.clone());
            if pred(&v) {
                return v;
            }
        }
    }
}
