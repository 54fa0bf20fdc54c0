//! The request shape of the Go harness (`interop/peer/gen.go`), ported
//! field for field so both sides send the same bytes: a pod of about 1.4 KB
//! and a container of about 2.7 KB serialized.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use nri_api::api::{
    Container, ContainerState, LinuxContainer, LinuxCpu, LinuxMemory, LinuxNamespace,
    LinuxPodSandbox, LinuxResources, Mount, OptionalInt, OptionalInt64, OptionalUInt64, PodSandbox,
};

/// A deterministic 64-hex-digit ID derived from `(kind, n)`: the hex
/// SHA-256 of `"<kind>/<n>"`, as the Go harness's `HexID`.
pub fn hex_id(kind: &str, n: u64) -> String {
    let d = crate::sha256::digest(format!("{kind}/{n}").as_bytes());
    let mut s = String::with_capacity(64);
    for b in d {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// A deterministic RFC-4122-shaped UID for pod `n` (Go's `UID`).
pub fn uid(n: u64) -> String {
    let h = hex_id("uid", n);
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

fn map(kv: &[(&str, String)]) -> BTreeMap<String, String> {
    kv.iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

/// Pod number `i`: 10 labels, 10 annotations, runtime handler, cgroup
/// parent/path, 3 namespaces, pod resources (memory limit, CPU
/// shares/quota/period) and one IP.
pub fn pod(i: usize) -> PodSandbox {
    let id = hex_id("pod", i as u64);
    let uid = uid(i as u64);
    let name = format!("bench-app-{i}-7d9f8c6b5d-x{:04}", i % 10000);
    let ns = "bench-namespace".to_owned();
    let labels = map(&[
        ("app.kubernetes.io/name", format!("bench-app-{i}")),
        ("app.kubernetes.io/instance", format!("bench-app-{i}-prod")),
        ("app.kubernetes.io/version", "1.27.3".into()),
        ("app.kubernetes.io/component", "backend".into()),
        ("app.kubernetes.io/part-of", "bench-suite".into()),
        ("app.kubernetes.io/managed-by", "helm".into()),
        ("pod-template-hash", "7d9f8c6b5d".into()),
        ("io.kubernetes.pod.name", name.clone()),
        ("io.kubernetes.pod.namespace", ns.clone()),
        ("io.kubernetes.pod.uid", uid.clone()),
    ]);
    let annotations = map(&[
        (
            "kubernetes.io/config.seen",
            "2026-11-21T22:44:00.123456789Z".into(),
        ),
        ("kubernetes.io/config.source", "api".into()),
        ("prometheus.io/scrape", "true".into()),
        ("prometheus.io/port", "9090".into()),
        ("prometheus.io/path", "/metrics".into()),
        (
            "cluster-autoscaler.kubernetes.io/safe-to-evict",
            "true".into(),
        ),
        ("checksum/config", hex_id("cfg", i as u64)),
        ("deployment.kubernetes.io/revision", "42".into()),
        ("example.com/owner", "team-bench@example.com".into()),
        ("example.com/cost-center", "cc-1234-benchmarks".into()),
    ]);
    PodSandbox {
        id: id.clone(),
        name,
        uid: uid.clone(),
        namespace: ns,
        labels,
        annotations,
        runtime_handler: "runc".into(),
        linux: Some(LinuxPodSandbox {
            cgroup_parent: format!("kubepods-burstable-pod{uid}.slice"),
            cgroups_path: format!("kubepods-burstable-pod{uid}.slice:cri-containerd:{id}"),
            namespaces: vec![
                LinuxNamespace {
                    r#type: "network".into(),
                    path: format!("/var/run/netns/cni-{uid}"),
                },
                LinuxNamespace {
                    r#type: "ipc".into(),
                    path: String::new(),
                },
                LinuxNamespace {
                    r#type: "uts".into(),
                    path: String::new(),
                },
            ],
            pod_resources: Some(LinuxResources {
                memory: Some(LinuxMemory {
                    limit: Some(OptionalInt64 { value: 512 << 20 }),
                    ..Default::default()
                }),
                cpu: Some(LinuxCpu {
                    shares: Some(OptionalUInt64 { value: 512 }),
                    quota: Some(OptionalInt64 { value: 50000 }),
                    period: Some(OptionalUInt64 { value: 100000 }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ips: vec![format!("10.244.{}.{}", (i / 250) % 256, i % 250 + 2)],
        ..Default::default()
    }
}

fn bind(dest: &str, source: String, mode: &str) -> Mount {
    Mount {
        destination: dest.into(),
        r#type: "bind".into(),
        source,
        options: vec!["rbind".into(), "rprivate".into(), mode.into()],
    }
}

/// Container `j` (globally numbered `n`) of `pod`: 10 labels, 10
/// annotations, 3 args, 10 env vars, 5 kubelet-style bind mounts, 5
/// namespaces, memory limit+swap, CPU shares/quota/period/cpus/mems, one
/// unified key, oom_score_adj and a systemd-style cgroups path. State
/// CREATED.
pub fn container(pod: &PodSandbox, j: usize, n: u64) -> Container {
    let id = hex_id("ctr", n);
    let name = format!("bench-ctr-{j}");
    Container {
        id: id.clone(),
        pod_sandbox_id: pod.id.clone(),
        name: name.clone(),
        state: ContainerState::ContainerCreated as i32,
        labels: container_labels(pod, &name),
        annotations: container_annotations(pod),
        args: vec![
            "/app/server".into(),
            "--config=/etc/app/config.yaml".into(),
            "--port=8080".into(),
        ],
        env: container_env(pod),
        mounts: container_mounts(pod, &name),
        linux: Some(linux_container(pod, &id)),
        ..Default::default()
    }
}

/// The container's 10 labels: kubelet's and the app's.
fn container_labels(pod: &PodSandbox, name: &str) -> BTreeMap<String, String> {
    let app = pod
        .labels
        .get("app.kubernetes.io/name")
        .cloned()
        .unwrap_or_default();
    map(&[
        ("io.kubernetes.container.name", name.to_owned()),
        ("io.kubernetes.pod.name", pod.name.clone()),
        ("io.kubernetes.pod.namespace", pod.namespace.clone()),
        ("io.kubernetes.pod.uid", pod.uid.clone()),
        ("app.kubernetes.io/name", app),
        ("app.kubernetes.io/component", "backend".into()),
        ("app.kubernetes.io/version", "1.27.3".into()),
        ("tier", "backend".into()),
        ("track", "stable".into()),
        ("release", "bench-release".into()),
    ])
}

/// The container's 10 annotations: kubelet's and the CRI's.
fn container_annotations(pod: &PodSandbox) -> BTreeMap<String, String> {
    map(&[
        ("io.kubernetes.container.hash", "5f7b2a9c".into()),
        ("io.kubernetes.container.restartCount", "0".into()),
        (
            "io.kubernetes.container.terminationMessagePath",
            "/dev/termination-log".into(),
        ),
        (
            "io.kubernetes.container.terminationMessagePolicy",
            "File".into(),
        ),
        ("io.kubernetes.pod.terminationGracePeriod", "30".into()),
        (
            "io.kubernetes.container.ports",
            r#"[{"name":"http","containerPort":8080,"protocol":"TCP"}]"#.into(),
        ),
        ("io.kubernetes.cri.container-type", "container".into()),
        (
            "io.kubernetes.cri.image-name",
            "registry.example.com/bench/app:1.27.3".into(),
        ),
        ("io.kubernetes.cri.sandbox-id", pod.id.clone()),
        ("io.kubernetes.cri.sandbox-name", pod.name.clone()),
    ])
}

/// The container's 10 environment variables.
fn container_env(pod: &PodSandbox) -> Vec<String> {
    vec![
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
        format!("HOSTNAME={}", pod.name),
        "KUBERNETES_SERVICE_HOST=10.96.0.1".into(),
        "KUBERNETES_SERVICE_PORT=443".into(),
        "KUBERNETES_PORT=tcp://10.96.0.1:443".into(),
        "APP_MODE=production".into(),
        "APP_LOG_LEVEL=info".into(),
        "APP_LISTEN_ADDR=0.0.0.0:8080".into(),
        "APP_DB_URL=postgres://bench@db.bench-namespace.svc:5432/bench".into(),
        "GOMAXPROCS=2".into(),
    ]
}

/// The container's 5 kubelet-style bind mounts.
fn container_mounts(pod: &PodSandbox, name: &str) -> Vec<Mount> {
    let pod_dir = format!("/var/lib/kubelet/pods/{}", pod.uid);
    let sandboxes = "/var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes";
    vec![
        bind("/etc/hosts", format!("{pod_dir}/etc-hosts"), "rw"),
        bind(
            "/dev/termination-log",
            format!("{pod_dir}/containers/{name}/5f7b2a9c"),
            "rw",
        ),
        bind(
            "/etc/hostname",
            format!("{sandboxes}/{}/hostname", pod.id),
            "rw",
        ),
        bind(
            "/etc/resolv.conf",
            format!("{sandboxes}/{}/resolv.conf", pod.id),
            "rw",
        ),
        bind(
            "/var/run/secrets/kubernetes.io/serviceaccount",
            format!("{pod_dir}/volumes/kubernetes.io~projected/kube-api-access-x7k2p"),
            "ro",
        ),
    ]
}

/// The container's Linux part: 5 namespaces, memory and CPU resources,
/// one unified key, oom_score_adj and a systemd-style cgroups path.
fn linux_container(pod: &PodSandbox, id: &str) -> LinuxContainer {
    let ns = |t: &str| LinuxNamespace {
        r#type: t.into(),
        path: String::new(),
    };
    LinuxContainer {
        namespaces: vec![
            ns("pid"),
            ns("ipc"),
            ns("uts"),
            ns("mount"),
            LinuxNamespace {
                r#type: "network".into(),
                path: format!("/var/run/netns/cni-{}", pod.uid),
            },
        ],
        resources: Some(LinuxResources {
            memory: Some(LinuxMemory {
                limit: Some(OptionalInt64 { value: 256 << 20 }),
                swap: Some(OptionalInt64 { value: 256 << 20 }),
                ..Default::default()
            }),
            cpu: Some(LinuxCpu {
                shares: Some(OptionalUInt64 { value: 256 }),
                quota: Some(OptionalInt64 { value: 25000 }),
                period: Some(OptionalUInt64 { value: 100000 }),
                cpus: "0-1".into(),
                mems: "0".into(),
                ..Default::default()
            }),
            unified: map(&[("memory.oom.group", "1".into())]),
            ..Default::default()
        }),
        oom_score_adj: Some(OptionalInt { value: 996 }),
        cgroups_path: format!(
            "kubepods-burstable-pod{}.slice:cri-containerd:{id}",
            pod.uid
        ),
        ..Default::default()
    }
}

/// `pods` pods with `per_pod` RUNNING containers each, in the Go harness's
/// order: all pods, then containers pod by pod.
pub fn state(pods: usize, per_pod: usize) -> (Vec<PodSandbox>, Vec<Container>) {
    let mut ps = Vec::with_capacity(pods);
    let mut cs = Vec::with_capacity(pods * per_pod);
    let mut n = 0u64;
    for i in 0..pods {
        let p = pod(i);
        for j in 0..per_pod {
            let mut c = container(&p, j, n);
            c.state = ContainerState::ContainerRunning as i32;
            cs.push(c);
            n += 1;
        }
        ps.push(p);
    }
    (ps, cs)
}
