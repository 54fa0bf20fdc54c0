//! Memory attacks on a plugin: a fake runtime (the real mux and ttRPC
//! crates) sends the real `ulimit-adjuster` binary a huge `Synchronize`.
//! The SDK must count the containers before decoding them and end the
//! connection with its typed error (`SyncTooLarge`, logged), and the
//! plugin's peak RSS must stay under 64 MB.
//!
//! - one message of a million empty containers (2 bytes each on the wire,
//!   about 1.4 KB each once decoded: 1.4 GB if decoded);
//! - two messages of 2 MiB of empty containers each, `more: true`;
//! - messages of 15,000 empty containers each, `more: true`: each within
//!   the 20,000-container cap, their sum is not, so the second is refused
//!   (the cap is on the whole synchronization, not on one message).
//!
//! The default validator is measured the same way while it validates the
//! largest adjustments a 4 MiB request can carry; its DaemonSet's memory
//! limit must stay above that peak.
//!
//! The plugin exits once it has refused (the error is not one its
//! reconnect policy retries), so its peak RSS (`VmHWM`) is sampled while
//! it runs (see `sample_peak`).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::{WAIT, no_panics};
use nri_api::api::{
    Container, ContainerAdjustment, Empty, Hook, Hooks, KeyValue, Mount, PodSandbox,
    RegisterPluginRequest, SynchronizeRequest, ValidateContainerAdjustmentRequest,
};
use nri_api::{PLUGIN_SERVICE, RUNTIME_SERVICE, method};
use nri_fault_tests::{empty_entries, peak_rss_kib};
use nri_mux::{Mux, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use nri_ttrpc::{CallOptions, Client, Methods, Server, Status};
use prost::Message;
use tokio::net::UnixListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The plugin's peak RSS must stay under 64 MB (in KiB).
const PEAK_LIMIT_KIB: u64 = 64_000_000 / 1024;

/// The binary `bin` of package `package` of this build (target dir and
/// profile of this test), as `cargo test --workspace` leaves it; built
/// first when it is missing, or always with `NRI_FAULTS_REBUILD` set (so
/// that a run of this crate alone never tests a stale binary). With
/// `NRI_FAULTS_PLUGIN_DIR` set, the binary of that directory instead (to
/// measure a release build: `target/release`).
fn sample_plugin(package: &'static str, bin: &'static str) -> PathBuf {
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
fn sample_peak(pid: u32, peak: Arc<AtomicU64>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while let Some(kib) = peak_rss_kib(&pid.to_string()) {
            peak.fetch_max(kib, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(1));
        }
    })
}

/// The key byte of `SynchronizeRequest.containers` (an empty entry
/// encodes as `key, 0`).
fn containers_key() -> u8 {
    let b = SynchronizeRequest {
        pods: vec![],
        containers: vec![Container::default()],
        more: false,
    }
    .encode_to_vec();
    assert_eq!(b.len(), 2, "{b:?}");
    b[0]
}

/// A `SynchronizeRequest` of `len` bytes of empty containers, encoded by
/// hand (building it with the structs would cost this test what it is
/// meant to cost the plugin).
fn huge_sync(len: usize, more: bool) -> Bytes {
    let mut b = empty_entries(containers_key(), len);
    if more {
        b.extend_from_slice(
            &SynchronizeRequest {
                pods: vec![],
                containers: vec![],
                more: true,
            }
            .encode_to_vec(),
        );
    }
    Bytes::from(b)
}

/// What a plugin process did under [`drive`].
struct Run {
    status: ExitStatus,
    /// Peak RSS in KiB.
    peak: u64,
    log: String,
    /// How many of the calls were answered with success.
    answered: usize,
}

/// Runs `ulimit-adjuster` against a runtime that registers and configures
/// it, then sends `messages` as its Synchronize; `accepted` of them must
/// be answered before one is refused.
async fn attack(messages: Vec<Bytes>, accepted: usize) -> (ExitStatus, u64, String) {
    let calls = messages
        .into_iter()
        .map(|m| (method::SYNCHRONIZE, m))
        .collect();
    let run = drive(("nri-ulimit-adjuster", "ulimit-adjuster"), &[], calls).await;
    eprintln!(
        "plugin peak RSS {} KiB; {} sync messages answered; status {}",
        run.peak, run.answered, run.status
    );
    assert_eq!(
        run.answered, accepted,
        "the messages before the one over the cap were answered, that one refused"
    );
    (run.status, run.peak, run.log)
}

/// Runs the plugin binary `bin` (package, name) with `args` against a
/// runtime that registers and configures it, then makes `calls` in turn
/// (until one fails) and closes the connection; the plugin runs with
/// `-no-reconnect`, so it exits then.
#[allow(clippy::too_many_lines)]
async fn drive(bin: (&'static str, &'static str), args: &[&str], calls: Vec<(&str, Bytes)>) -> Run {
    let bin = tokio::task::spawn_blocking(move || sample_plugin(bin.0, bin.1))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let log = dir.path().join("plugin.log");
    let child = Command::new(bin)
        .args(args)
        .arg("-idx")
        .arg("10")
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
                break;
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

fn assert_refused(name: &str, status: ExitStatus, peak: u64, log: &str) {
    assert!(!status.success(), "{name}: the plugin failed: {status}");
    assert!(
        log.contains("synchronization too large"),
        "{name}: the typed error is logged:\n{log}"
    );
    assert!(
        peak < PEAK_LIMIT_KIB,
        "{name}: plugin peak RSS {peak} KiB >= {PEAK_LIMIT_KIB} KiB"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_sync_of_a_million_empty_containers_is_refused_undecoded() {
    let guard = no_panics();
    let (status, peak, log) = attack(vec![huge_sync(2_000_000, false)], 0).await;
    guard.check();
    assert_refused("a million containers", status, peak, &log);
    assert!(
        log.contains("1000000 containers"),
        "the error says how many:\n{log}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn two_2mib_sync_chunks_are_refused_undecoded() {
    let guard = no_panics();
    let chunk = huge_sync(2 << 20, true);
    let (status, peak, log) = attack(vec![chunk.clone(), chunk], 0).await;
    guard.check();
    assert_refused("two 2 MiB chunks", status, peak, &log);
}

#[tokio::test(flavor = "current_thread")]
async fn the_sync_cap_counts_across_chunks() {
    let guard = no_panics();
    // 15,000 empty containers a message: under the cap of 20,000 alone.
    let chunk = huge_sync(30_000, true);
    let (status, peak, log) = attack(vec![chunk.clone(), chunk.clone(), chunk], 1).await;
    guard.check();
    assert_refused("15,000-container chunks", status, peak, &log);
    assert!(
        log.contains("30000 containers"),
        "the error counts both messages:\n{log}"
    );
}

// ------------------------------------------------------ default-validator

/// Memory limit of the default validator's DaemonSet
/// (`deploy/default-validator/daemonset.yaml`), in KiB: the first
/// `memory:` under `limits:`, in `Mi`.
fn validator_limit_kib() -> u64 {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/default-validator/daemonset.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap();
    let limit = yaml
        .lines()
        .skip_while(|l| l.trim() != "limits:")
        .find_map(|l| l.trim().strip_prefix("memory:"))
        .expect("a memory limit");
    let mib: u64 = limit.trim().strip_suffix("Mi").unwrap().parse().unwrap();
    mib * 1024
}

/// Largest request the test sends: the protocol's 4 MiB, less room for
/// the ttRPC envelope.
const MAX_REQUEST: usize = 4 * 1024 * 1024 - 4096;

/// A validation request whose adjustment holds as many copies of `entry`
/// (added by `add`) as fit in [`MAX_REQUEST`], plus one OCI hook.
fn validation<T: Clone>(entry: T, add: impl Fn(&mut ContainerAdjustment, Vec<T>)) -> Bytes {
    let mut adjust = ContainerAdjustment::default();
    add(&mut adjust, vec![entry.clone()]);
    let one = adjust.encoded_len();
    let mut adjust = ContainerAdjustment {
        hooks: Some(Hooks {
            prestart: vec![Hook {
                path: "/bin/true".into(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    add(&mut adjust, vec![entry; (MAX_REQUEST - 1024) / one]);
    let req = ValidateContainerAdjustmentRequest {
        pod: Some(PodSandbox {
            id: "pod".into(),
            name: "pod".into(),
            namespace: "default".into(),
            ..Default::default()
        }),
        container: Some(Container {
            id: "ctr".into(),
            pod_sandbox_id: "pod".into(),
            name: "ctr".into(),
            ..Default::default()
        }),
        adjust: Some(adjust),
        ..Default::default()
    };
    let b = req.encode_to_vec();
    assert!(b.len() <= MAX_REQUEST, "{}", b.len());
    Bytes::from(b)
}

/// The default validator's peak RSS while it validates the largest
/// adjustments the protocol's 4 MiB cap lets through its SDK's decoded
/// size check (16 times the wire size): an adjustment of one OCI hook and
/// as many environment variables (key `k`), as many (`k`, `v`) pairs, or as
/// many one-letter mounts as fit, each with the ConfigMap's rules (the
/// hook is rejected). Its DaemonSet's memory limit is sized from this.
#[tokio::test(flavor = "current_thread")]
async fn the_default_validator_validates_the_largest_adjustments_within_its_limit() {
    let guard = no_panics();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "enable: true\nrejectOCIHookAdjustment: true\nrejectNamespaceAdjustment: true\n\
         rejectSysctlAdjustment: true\n",
    )
    .unwrap();
    let kv = |k: &str, v: &str| KeyValue {
        key: k.into(),
        value: v.into(),
    };
    let shapes = [
        ("env k", validation(kv("k", ""), |a, e| a.env = e)),
        ("env k=v", validation(kv("k", "v"), |a, e| a.env = e)),
        (
            "mounts",
            validation(
                Mount {
                    destination: "d".into(),
                    r#type: "t".into(),
                    source: "s".into(),
                    options: vec![],
                },
                |a, m| a.mounts = m,
            ),
        ),
    ];
    let mut worst = 0;
    for (name, request) in shapes {
        let len = request.len();
        let calls = vec![
            (
                method::SYNCHRONIZE,
                Bytes::from(SynchronizeRequest::default().encode_to_vec()),
            ),
            (method::VALIDATE_CONTAINER_ADJUSTMENT, request),
        ];
        let args = ["-config", config.to_str().unwrap()];
        let run = drive(("nri-default-validator", "default-validator"), &args, calls).await;
        eprintln!(
            "default-validator, {name} ({len} bytes): peak RSS {} KiB, {} calls answered",
            run.peak, run.answered
        );
        assert_eq!(
            run.answered, 2,
            "{name}: validated (not refused):\n{}",
            run.log
        );
        worst = worst.max(run.peak);
    }
    guard.check();
    let limit = validator_limit_kib();
    assert!(
        worst < limit,
        "peak RSS {worst} KiB over the DaemonSet limit of {limit} KiB"
    );
}
