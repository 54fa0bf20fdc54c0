//! The memory limit of the injectors' DaemonSets
//! (`deploy/<plugin>/daemonset.yaml`) against the plugin's peak RSS
//! (`VmHWM`) under the worst a runtime and a pod author can send it. Each
//! plugin's real binary runs with its DaemonSet's configuration (the
//! ConfigMap's `config.yaml`) against a fake runtime (the real mux and
//! ttRPC crates), in a process of its own per scenario:
//!
//! - `sync wide`: the largest synchronization the SDK accepts in count,
//!   20,000 pods and 20,000 containers of realistic size (labels,
//!   annotations, environment, mounts), about 60 MiB in messages of up to
//!   4 MiB;
//! - `sync dense`: the largest in decoded size, 15 messages of 4 MiB, each
//!   one container of one-letter environment variables (the entries that
//!   decode largest, 16 times their wire size, what the SDK lets a request
//!   decode to);
//! - `hostile pods`: CreateContainer (and RunPodSandbox) of a pod in the
//!   allowed namespace whose annotations, under every key the plugin
//!   reads, are at the decoders' bounds (aliases that build 1 MiB of text,
//!   10,000 nodes, nested anchors, 64 levels), then of a pod outside it;
//! - `largest request`: a CreateContainer of 4 MiB of one-letter
//!   environment variables.
//!
//! The peak of each plugin is printed; the test fails when one reaches its
//! DaemonSet's limit. The numbers behind the limits are in
//! `deploy/README.md` ("Memory limits"). To measure a release build:
//! `cargo build --release -p <package>` and
//! `NRI_FAULTS_PLUGIN_DIR=target/release cargo test -p nri-fault-tests
//! --test sample_plugin_memory -- --nocapture --test-threads 1`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;
mod plugin_proc;

use std::collections::BTreeMap;
use std::path::Path;

use bytes::Bytes;
use common::no_panics;
use nri_api::api::{
    Container, CreateContainerRequest, Event, Mount, PodSandbox, StateChangeEvent,
    SynchronizeRequest,
};
use nri_api::method;
use plugin_proc::{Run, daemonset_limit_kib, drive_all};
use prost::Message;

/// Largest message sent: the protocol's 4 MiB, less room for the ttRPC
/// envelope.
const MAX_REQUEST: usize = 4 * 1024 * 1024 - 4096;

/// A deployed sample plugin: its `deploy/` directory, package, binary,
/// the annotation keys it reads and a namespace its ConfigMap allows.
struct Deployed {
    dir: &'static str,
    package: &'static str,
    bin: &'static str,
    keys: &'static [&'static str],
    namespace: &'static str,
}

const PLUGINS: &[Deployed] = &[
    Deployed {
        dir: "device-injector",
        package: "nri-device-injector",
        bin: "device-injector",
        keys: &[
            "devices.noderesource.dev",
            "mounts.noderesource.dev",
            "cdi-devices.noderesource.dev",
            "io-priority.noderesource.dev",
            "network-devices.noderesource.dev",
            "scheduling-policy.noderesource.dev",
            "sysctl.noderesource.dev",
            "memory-policy.noderesource.dev",
        ],
        namespace: "gpu-jobs",
    },
    Deployed {
        dir: "network-device-injector",
        package: "nri-network-device-injector",
        bin: "network-device-injector",
        keys: &["netdevice.noderesource.dev"],
        namespace: "net-lab",
    },
    Deployed {
        dir: "ulimit-adjuster",
        package: "nri-ulimit-adjuster",
        bin: "ulimit-adjuster",
        keys: &["ulimits.noderesource.dev"],
        namespace: "batch",
    },
    Deployed {
        dir: "hook-injector",
        package: "nri-hook-injector",
        bin: "hook-injector",
        keys: &[],
        namespace: "gpu-jobs",
    },
];

/// The `config.yaml` of the plugin's ConfigMap, if it has one: the block
/// under `config.yaml: |`, unindented.
fn configmap_config(dir: &str) -> Option<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(dir)
        .join("configmap.yaml");
    let yaml = std::fs::read_to_string(path).ok()?;
    let mut lines = yaml.lines().skip_while(|l| l.trim() != "config.yaml: |");
    lines.next()?;
    let block: Vec<&str> = lines
        .take_while(|l| l.is_empty() || l.starts_with("    "))
        .collect();
    let indent = block
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()?;
    Some(
        block
            .iter()
            .map(|l| l.get(indent..).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

/// A `SynchronizeRequest` per group of items that fits in [`MAX_REQUEST`],
/// `more` on all but the last.
fn sync_messages(pods: Vec<PodSandbox>, containers: Vec<Container>) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut cur = SynchronizeRequest::default();
    // The encoded size of `cur` so far (an item: its length, a tag and a
    // length prefix of at most 4 bytes).
    let mut len = 0;
    let mut push = |cur: &mut SynchronizeRequest, item: usize| {
        if len + item + 8 > MAX_REQUEST {
            cur.more = true;
            out.push(Bytes::from(std::mem::take(cur).encode_to_vec()));
            len = 0;
        }
        len += item + 5;
    };
    for p in pods {
        push(&mut cur, p.encoded_len());
        cur.pods.push(p);
    }
    for c in containers {
        push(&mut cur, c.encoded_len());
        cur.containers.push(c);
    }
    out.push(Bytes::from(cur.encode_to_vec()));
    out
}

fn pod(i: usize, namespace: &str, annotations: BTreeMap<String, String>) -> PodSandbox {
    PodSandbox {
        id: format!("{i:064x}"),
        name: format!("pod-{i}"),
        uid: format!("{i:032x}"),
        namespace: namespace.into(),
        labels: (0..8)
            .map(|l| (format!("app.kubernetes.io/label-{l}"), format!("value-{i}")))
            .collect(),
        annotations,
        ..Default::default()
    }
}

fn container(i: usize, pod: &PodSandbox, env: Vec<String>) -> Container {
    Container {
        id: format!("{:064x}", i + (1 << 40)),
        pod_sandbox_id: pod.id.clone(),
        name: "c".into(),
        labels: pod.labels.clone(),
        annotations: pod.annotations.clone(),
        args: vec!["/bin/server".into(), "--port=8080".into()],
        env,
        mounts: (0..4)
            .map(|m| Mount {
                destination: format!("/var/run/secrets/{m}"),
                r#type: "bind".into(),
                source: format!("/var/lib/kubelet/pods/{i}/volumes/{m}"),
                options: vec!["rbind".into(), "ro".into()],
            })
            .collect(),
        ..Default::default()
    }
}

/// 20,000 pods and 20,000 containers of realistic size.
fn sync_wide() -> Vec<Bytes> {
    let annotations: BTreeMap<String, String> = (0..4)
        .map(|a| (format!("example.com/annotation-{a}"), "x".repeat(40)))
        .collect();
    let pods: Vec<PodSandbox> = (0..20_000)
        .map(|i| pod(i, "default", annotations.clone()))
        .collect();
    let env: Vec<String> = (0..16)
        .map(|e| format!("ENV_{e}={}", "v".repeat(24)))
        .collect();
    let containers = pods
        .iter()
        .enumerate()
        .map(|(i, p)| container(i, p, env.clone()))
        .collect();
    let m = sync_messages(pods, containers);
    let total: usize = m.iter().map(Bytes::len).sum();
    assert!(total < 64 << 20, "within the SDK's 64 MiB: {total}");
    m
}

/// `n` one-letter environment variables.
fn env_k(n: usize) -> Vec<String> {
    vec!["k".to_owned(); n]
}

/// How many one-letter environment variables fill a message of
/// `MAX_REQUEST` around `base`.
fn env_fill(base: usize) -> usize {
    // Tag, length and the letter: 3 bytes each.
    (MAX_REQUEST - base - 1024) / 3
}

/// 15 messages, each one container of 4 MiB of one-letter variables.
fn sync_dense() -> Vec<Bytes> {
    let p = pod(0, "default", BTreeMap::new());
    let n = env_fill(4096);
    (0..15)
        .map(|i| {
            let req = SynchronizeRequest {
                pods: if i == 0 { vec![p.clone()] } else { vec![] },
                containers: vec![container(i, &p, env_k(n))],
                more: i < 14,
            };
            let b = req.encode_to_vec();
            assert!(b.len() <= MAX_REQUEST, "{}", b.len());
            Bytes::from(b)
        })
        .collect()
}

/// Annotation values at the decoders' bounds (each under their 256 KiB
/// input bound).
fn hostile_values() -> Vec<(&'static str, String)> {
    let big = "x".repeat(200_000);
    let mut nested = format!("a0: &a0 [{}]\n", "xxxxxxxxxx, ".repeat(10));
    for i in 1..9 {
        nested.push_str(&format!(
            "a{i}: &a{i} [{}]\n",
            format!("*a{}, ", i - 1).repeat(10)
        ));
    }
    vec![
        (
            "1 MiB of text through aliases",
            format!(
                "- {{path: &s /dev/nvidia{big}, source: *s, destination: *s, type: c, name: *s}}\n\
                 - {{path: *s}}\n- {{path: *s}}\n- {{path: *s}}\n"
            ),
        ),
        (
            "10,000 nodes",
            format!(
                "[{}]",
                "{path: /dev/nvidia0, type: c, major: 195}, ".repeat(1_400)
            ),
        ),
        ("nested anchors", nested),
        ("64 levels", "[".repeat(64) + &"]".repeat(64)),
        (
            "4,500 keys",
            format!(
                "{{{}}}",
                (0..4_500)
                    .map(|i| format!("net.core.k{i}: v, "))
                    .collect::<String>()
            ),
        ),
    ]
}

/// `CreateContainer` (and the pod's `RunPodSandbox`) of a pod in
/// `namespace` whose annotations carry `value` under every key the plugin
/// reads (container scope: the pod scope is the same decoding).
fn hostile_pod(d: &Deployed, namespace: &str, i: usize, value: &str) -> Vec<(&'static str, Bytes)> {
    let mut annotations = BTreeMap::new();
    for k in d.keys {
        annotations.insert(format!("{k}/container.c"), value.to_owned());
    }
    // network-device-injector reads the pod scope only.
    if d.keys == ["netdevice.noderesource.dev"] {
        annotations = BTreeMap::from([(format!("{}/pod", d.keys[0]), value.to_owned())]);
    }
    let p = pod(i, namespace, annotations);
    let mut c = container(i, &p, vec![]);
    c.annotations.clear();
    let run = StateChangeEvent {
        event: Event::RunPodSandbox.into(),
        pod: Some(p.clone()),
        container: None,
    };
    let create = CreateContainerRequest {
        pod: Some(p),
        container: Some(c),
    };
    let create = create.encode_to_vec();
    assert!(create.len() <= MAX_REQUEST, "{}", create.len());
    vec![
        (method::STATE_CHANGE, Bytes::from(run.encode_to_vec())),
        (method::CREATE_CONTAINER, Bytes::from(create)),
    ]
}

/// A `CreateContainer` of 4 MiB of one-letter environment variables.
fn largest_request() -> Bytes {
    let p = pod(0, "default", BTreeMap::new());
    let c = container(0, &p, env_k(env_fill(p.encoded_len() * 2)));
    let b = CreateContainerRequest {
        pod: Some(p),
        container: Some(c),
    }
    .encode_to_vec();
    assert!(b.len() <= MAX_REQUEST, "{}", b.len());
    Bytes::from(b)
}

fn empty_sync() -> (&'static str, Bytes) {
    (
        method::SYNCHRONIZE,
        Bytes::from(SynchronizeRequest::default().encode_to_vec()),
    )
}

/// Runs `d` with its DaemonSet's configuration through `calls`.
async fn run(d: &Deployed, config: &Path, calls: Vec<(&'static str, Bytes)>) -> Run {
    let config = config.to_str().unwrap().to_owned();
    let mut args: Vec<&str> = Vec::new();
    if configmap_config(d.dir).is_some() {
        args.extend(["-config", &config]);
    }
    if d.dir == "differ" {
        args.extend(["-indices", "10"]);
    }
    drive_all((d.package, d.bin), &args, calls).await
}

#[tokio::test(flavor = "current_thread")]
async fn every_sample_plugin_stays_under_its_daemonset_memory_limit() {
    let guard = no_panics();
    let dir = tempfile::tempdir().unwrap();
    let wide = sync_wide();
    let dense = sync_dense();
    let largest = largest_request();
    let values = hostile_values();
    let mut over = Vec::new();
    for d in PLUGINS {
        let config = dir.path().join(format!("{}.yaml", d.dir));
        std::fs::write(&config, configmap_config(d.dir).unwrap_or_default()).unwrap();
        let sync = |m: &[Bytes]| m.iter().map(|b| (method::SYNCHRONIZE, b.clone())).collect();
        let mut hostile = vec![empty_sync()];
        for (i, (_, v)) in values.iter().enumerate() {
            hostile.extend(hostile_pod(d, d.namespace, 2 * i, v));
            hostile.extend(hostile_pod(d, "elsewhere", 2 * i + 1, v));
        }
        let scenarios: Vec<(&str, Vec<(&'static str, Bytes)>)> = vec![
            ("sync wide", sync(&wide)),
            ("sync dense", sync(&dense)),
            ("hostile pods", hostile),
            (
                "largest request",
                vec![empty_sync(), (method::CREATE_CONTAINER, largest.clone())],
            ),
        ];
        let limit = daemonset_limit_kib(d.dir);
        for (name, calls) in scenarios {
            let n = calls.len();
            let r = run(d, &config, calls).await;
            eprintln!(
                "{}: {name}: peak RSS {} KiB ({} of {n} calls answered; limit {limit} KiB)",
                d.dir, r.peak, r.answered
            );
            assert!(
                r.answered > 0,
                "{} {name}: the plugin served:\n{}",
                d.dir,
                r.log
            );
            if r.peak >= limit {
                over.push(format!("{} {name}: {} KiB >= {limit} KiB", d.dir, r.peak));
            }
        }
    }
    guard.check();
    assert!(over.is_empty(), "over the DaemonSet limits: {over:#?}");
}
