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
mod plugin_proc;

use std::process::ExitStatus;

use bytes::Bytes;
use common::no_panics;
use nri_api::api::{
    Container, ContainerAdjustment, Hook, Hooks, KeyValue, Mount, PodSandbox, SynchronizeRequest,
    ValidateContainerAdjustmentRequest,
};
use nri_api::method;
use nri_fault_tests::empty_entries;
use plugin_proc::{daemonset_limit_kib, drive};
use prost::Message;

/// The plugin's peak RSS must stay under 64 MB (in KiB).
const PEAK_LIMIT_KIB: u64 = 64_000_000 / 1024;

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
    let limit = daemonset_limit_kib("default-validator");
    assert!(
        worst < limit,
        "peak RSS {worst} KiB over the DaemonSet limit of {limit} KiB"
    );
}
