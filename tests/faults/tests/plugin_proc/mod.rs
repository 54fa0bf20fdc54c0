//! A sample plugin's real binary driven by a fake runtime (the real mux
//! and ttRPC crates) while its peak RSS is sampled: shared by the fault
//! tests that measure what a runtime's messages cost a plugin.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use nri_api::api::{Empty, RegisterPluginRequest};
use nri_api::{PLUGIN_SERVICE, RUNTIME_SERVICE, method};
use nri_fault_tests::peak_rss_kib;
use nri_mux::{Mux, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use nri_ttrpc::{CallOptions, Client, Methods, Server, Status};
use prost::Message;
use tokio::net::UnixListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::common::WAIT;

/// The binary `bin` of package `package` of this build (target dir and
/// profile of this test), as `cargo test --workspace` leaves it; built
/// first when it is missing, or always with `NRI_FAULTS_REBUILD` set (so
/// that a run of this crate alone never tests a stale binary). With
/// `NRI_FAULTS_PLUGIN_DIR` set, the binary of that directory instead (to
/// measure a release build: `target/release`).
pub fn sample_plugin(package: &'static str, bin: &'static str) -> PathBuf {
    if let Some(dir) = std::env::var_os("NRI_FAULTS_PLUGIN_DIR") {
        let path = Path::new(&dir).join(bin);
        assert!(path.is_file(), "{} (NRI_FAULTS_PLUGIN_DIR)", path.display());
        return path;
    }
    let exe = std::env::current_exe().unwrap();
    // <target>/<profile>/deps/<test>
    let profile = exe.parent().and_then(Path::parent).unwrap().to_owned();
    let target = profile.parent().unwrap();
    let path = profile.join(bin);
    if path.is_file() && std::env::var_os("NRI_FAULTS_REBUILD").is_none() {
        return path;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .env("CARGO_TARGET_DIR", target)
        .args(["build", "-q", "-p", package, "--bin", bin]);
    if profile.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    let status = cmd.status().unwrap();
    assert!(status.success(), "building {bin}: {status}");
    assert!(path.is_file(), "{}", path.display());
    path
}

/// Samples the peak RSS (`VmHWM`, KiB) of process `pid` until it is gone,
/// keeping the highest value read in `peak`.
///
/// Why sampling: the plugin exits right after it refuses a
/// synchronization (the error is not one its reconnect policy retries),
/// and an exited process has no `VmHWM` any more; the kernel's own record
/// (`ru_maxrss` from `wait4`) is no help either, as it includes the test
/// process's high-water mark, taken over when the child was spawned. The
/// test also reads `VmHWM` as soon as the plugin has answered, which comes
/// after the plugin has received and refused the message.
/// Sampling every millisecond is plenty: `VmHWM` is a high-water mark,
/// so a sample only has to come before the process is gone, and decoding
/// what the attacks send would take far longer than that.
pub fn sample_peak(pid: u32, peak: Arc<AtomicU64>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while let Some(kib) = peak_rss_kib(&pid.to_string()) {
            peak.fetch_max(kib, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(1));
        }
    })
}

/// What a plugin process did under [`drive`].
pub struct Run {
    pub status: ExitStatus,
    /// Peak RSS in KiB.
    pub peak: u64,
    pub log: String,
    /// How many of the calls were answered with success.
    pub answered: usize,
}

/// Runs the plugin binary `bin` (package, name) with `args` against a
/// runtime that registers and configures it, then makes `calls` in turn
/// (until one fails) and closes the connection; the plugin runs with
/// `-no-reconnect`, so it exits then.
pub async fn drive(
    bin: (&'static str, &'static str),
    args: &[&str],
    calls: Vec<(&str, Bytes)>,
) -> Run {
    drive_calls(bin, args, calls, false).await
}

/// As [`drive`], but every call is made whatever the answers before it
/// (a refused request is counted, not the end of the run).
pub async fn drive_all(
    bin: (&'static str, &'static str),
    args: &[&str],
    calls: Vec<(&str, Bytes)>,
) -> Run {
    drive_calls(bin, args, calls, true).await
}

#[allow(clippy::too_many_lines)]
async fn drive_calls(
    bin: (&'static str, &'static str),
    args: &[&str],
    calls: Vec<(&str, Bytes)>,
    keep_going: bool,
) -> Run {
    let bin = tokio::task::spawn_blocking(move || sample_plugin(bin.0, bin.1))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let log = dir.path().join("plugin.log");
    let mut cmd = Command::new(bin);
    cmd.args(args);
    // The differ registers at `-indices` (`-idx` is a pre-launched one's).
    if !args.contains(&"-indices") {
        cmd.arg("-idx").arg("10");
    }
    let child = cmd
        .arg("-socket-path")
        .arg(&socket)
        .arg("-no-reconnect")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let pid = child.id();
    let peak = Arc::new(AtomicU64::new(0));
    let sampler = sample_peak(pid, peak.clone());
    let mut child = child;
    let waited = tokio::task::spawn_blocking(move || child.wait());
    let read_peak = || {
        if let Some(kib) = peak_rss_kib(&pid.to_string()) {
            peak.fetch_max(kib, Ordering::Relaxed);
        }
    };

    let (stream, _) = tokio::time::timeout(WAIT, listener.accept())
        .await
        .expect("the plugin connects")
        .unwrap();
    let mux = Mux::new_paused(stream);
    let to_plugin = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    let from_plugin = mux.open(RUNTIME_SERVICE_CONN).unwrap();
    let (tx, mut registered) = mpsc::unbounded_channel();
    let methods = Methods::new().add_message(
        method::REGISTER_PLUGIN,
        move |_ctx, req: RegisterPluginRequest| {
            let _ = tx.send(req);
            async { Ok::<_, Status>(Empty {}) }
        },
    );
    let mut server = Server::new();
    server.register(RUNTIME_SERVICE, methods).unwrap();
    let stop = CancellationToken::new();
    let serving = tokio::spawn({
        let stop = stop.clone();
        async move { server.serve(from_plugin, stop).await }
    });
    mux.start();
    let client = Client::new(to_plugin);
    tokio::time::timeout(WAIT, registered.recv())
        .await
        .expect("the plugin registers")
        .unwrap();
    let opts = || CallOptions::new(Duration::from_secs(20));
    let configure = nri_api::api::ConfigureRequest {
        runtime_name: "hostile-runtime".into(),
        runtime_version: "v9.9.9".into(),
        registration_timeout: 5000,
        request_timeout: 2000,
        nri_version: "v0.12.2".into(),
        ..Default::default()
    };
    client
        .call(
            PLUGIN_SERVICE,
            method::CONFIGURE,
            Bytes::from(configure.encode_to_vec()),
            opts(),
        )
        .await
        .expect("configured");
    let mut answered = 0;
    for (m, payload) in calls {
        let r = client.call(PLUGIN_SERVICE, m, payload, opts()).await;
        read_peak();
        match r {
            Ok(_) => answered += 1,
            Err(e) => {
                eprintln!("{m}: {e}");
                if !keep_going {
                    break;
                }
            }
        }
    }
    stop.cancel();
    client.close();
    mux.close();
    let status = tokio::time::timeout(WAIT, waited)
        .await
        .expect("the plugin exits")
        .unwrap()
        .unwrap();
    tokio::task::spawn_blocking(move || sampler.join())
        .await
        .unwrap()
        .unwrap();
    let peak = peak.load(Ordering::Relaxed);
    let _ = serving.await;
    let log = std::fs::read_to_string(&log).unwrap();
    Run {
        status,
        peak,
        log,
        answered,
    }
}

/// Memory limit of a plugin's DaemonSet (`deploy/<plugin>/daemonset.yaml`),
/// in KiB: the first `memory:` under `limits:`, in `Mi`.
pub fn daemonset_limit_kib(plugin: &str) -> u64 {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(plugin)
        .join("daemonset.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap();
    let limit = yaml
        .lines()
        .skip_while(|l| l.trim() != "limits:")
        .find_map(|l| l.trim().strip_prefix("memory:"))
        .expect("a memory limit");
    let mib: u64 = limit.trim().strip_suffix("Mi").unwrap().parse().unwrap();
    mib * 1024
}
