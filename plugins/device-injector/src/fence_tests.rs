#![allow(clippy::unwrap_used)]
use std::collections::BTreeMap;

use nri_plugin::api::{ContainerAdjustment, LinuxNamespace};

use super::*;
use crate::inject::{InjectError, adjustment};

/// A restrictive allow-list, as in the DaemonSet's example.
const FENCED: &str = r#"
allow:
  namespaces: [gpu-jobs, "ml-*"]
  devices:
    - {type: c, major: 195, minor: 0-254, path: "/dev/nvidia*"}
    - {path: /dev/fuse, type: c, major: 10, minor: 229}
  mountSources: [/srv/datasets, tmpfs]
  mountTypes: [bind, tmpfs]
  mountOptions: ["size=*", "mode=0755"]
  cdiDevices: ["nvidia.com/gpu=*"]
  sysctls: [net.core.somaxconn, net.ipv4.ip_unprivileged_port_start]
  networkDevices: ["sriov-*"]
  ioPriorityClasses: [IOPRIO_CLASS_BE, IOPRIO_CLASS_IDLE]
  schedulingPolicies: [SCHED_OTHER, SCHED_BATCH, SCHED_IDLE]
"#;

fn run(
    fence: &Fence,
    namespace: &str,
    key: &str,
    value: &str,
) -> Result<ContainerAdjustment, InjectError> {
    let a = BTreeMap::from([(key.to_owned(), value.to_owned())]);
    adjustment(&Request {
        annotations: &a,
        pod: "p",
        namespace,
        linux_namespaces: &POD_NAMESPACES,
        container: "c",
        strict: false,
        fence,
    })
}

/// A pod with its own network, IPC and UTS namespaces.
static POD_NAMESPACES: std::sync::LazyLock<Vec<LinuxNamespace>> = std::sync::LazyLock::new(|| {
    ["network", "ipc", "uts"]
        .map(|t| LinuxNamespace {
            r#type: t.into(),
            path: String::new(),
        })
        .to_vec()
});

fn fenced() -> Fence {
    configure(FENCED).unwrap().1
}

fn refused(r: Result<ContainerAdjustment, InjectError>) -> Refused {
    match r {
        Err(InjectError::Refused(r)) => r,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

const DEV: &str = "devices.noderesource.dev/container.c";
const MNT: &str = "mounts.noderesource.dev/pod";
const CDI: &str = "cdi-devices.noderesource.dev/container.c";
const SYSCTL: &str = "sysctl.noderesource.dev/container.c";
const NET: &str = "network-devices.noderesource.dev/container.c";
const IO: &str = "io-priority.noderesource.dev/container.c";
const SCHED: &str = "scheduling-policy.noderesource.dev/container.c";
const MPOL: &str = "memory-policy.noderesource.dev/container.c";

#[test]
fn allowed_requests_are_injected() {
    let f = fenced();
    let ok = [
        (DEV, "- {path: /dev/nvidia0, type: c, major: 195, minor: 0}"),
        (DEV, "- {path: /dev/fuse, type: c, major: 10, minor: 229}"),
        (
            MNT,
            "- {source: /srv/datasets/imagenet, destination: /data, type: bind, options: [ro]}",
        ),
        (
            MNT,
            "- {source: tmpfs, destination: /scratch, type: tmpfs, options: [size=64m, mode=0755, nosuid]}",
        ),
        (CDI, "[nvidia.com/gpu=0]"),
        (SYSCTL, "{net.core.somaxconn: 256}"),
        (SYSCTL, "{net/core/somaxconn: 256}"),
        (NET, "- {hostIf: sriov-vf3, name: net1}"),
        (IO, "{class: IOPRIO_CLASS_BE, priority: 4}"),
        (SCHED, "{policy: SCHED_BATCH}"),
        (MPOL, "{mode: MPOL_INTERLEAVE, nodes: '0-1'}"),
    ];
    for ns in ["gpu-jobs", "ml-train"] {
        for (k, v) in ok {
            let a = run(&f, ns, k, v).unwrap_or_else(|e| panic!("{ns} {k}={v}: {e}"));
            assert_ne!(a, ContainerAdjustment::default(), "{k}={v}");
        }
    }
}

#[test]
#[allow(clippy::too_many_lines)]
fn requests_outside_are_refused_with_pod_annotation_value_and_rule() {
    let f = fenced();
    let cases = [
        (
            DEV,
            "- {path: /dev/mem, type: c, major: 1, minor: 1}",
            "device \"/dev/mem\" (c 1:1)",
            "allow.devices",
        ),
        // The right path with other numbers is refused: numbers decide access.
        (
            DEV,
            "- {path: /dev/nvidia0, type: c, major: 1, minor: 1}",
            "(c 1:1)",
            "allow.devices",
        ),
        (
            DEV,
            "- {path: /dev/nvidia0, type: b, major: 195, minor: 0}",
            "(b 195:0)",
            "allow.devices",
        ),
        (
            DEV,
            "- {path: /dev/nvidiactl, type: c, major: 195, minor: 255}",
            "195:255",
            "allow.devices",
        ),
        (
            MNT,
            "- {source: /, destination: /host, type: bind, options: [rbind, rw]}",
            "mount source \"/\"",
            "allow.mountSources [/srv/datasets, tmpfs]",
        ),
        (
            MNT,
            "- {source: /srv/datasets/../../etc, destination: /x, type: bind}",
            "/srv/datasets/../../etc",
            "allow.mountSources",
        ),
        // Inside once cleaned, but the runtime resolves `link` first.
        (
            MNT,
            "- {source: /srv/datasets/link/../imagenet, destination: /x, type: bind}",
            "/srv/datasets/link/../imagenet",
            "allow.mountSources",
        ),
        (
            MNT,
            "- {source: /srv/datasets-private, destination: /x, type: bind}",
            "datasets-private",
            "allow.mountSources",
        ),
        (
            CDI,
            "[vendor.com/net=0]",
            "CDI device \"vendor.com/net=0\"",
            "allow.cdiDevices [nvidia.com/gpu=*]",
        ),
        (
            SYSCTL,
            "{kernel.core_pattern: '|/tmp/x'}",
            "sysctl \"kernel.core_pattern\"",
            "a sysctl of the pod's own namespaces",
        ),
        (
            SYSCTL,
            "{kernel/core_pattern: '|/tmp/x'}",
            "sysctl \"kernel/core_pattern\"",
            "a sysctl of the pod's own namespaces",
        ),
        (
            SYSCTL,
            "{net.core.rmem_max: 1}",
            "net.core.rmem_max",
            "allow.sysctls",
        ),
        (
            NET,
            "- {hostIf: eth0, name: net1}",
            "host interface \"eth0\"",
            "allow.networkDevices [sriov-*]",
        ),
        (
            IO,
            "{class: IOPRIO_CLASS_RT, priority: 0}",
            "I/O priority class \"IOPRIO_CLASS_RT\"",
            "allow.ioPriorityClasses",
        ),
        (
            SCHED,
            "{policy: SCHED_FIFO, priority: 99}",
            "scheduling policy \"SCHED_FIFO\"",
            "allow.schedulingPolicies",
        ),
    ];
    for (k, v, value, rule) in cases {
        let r = refused(run(&f, "gpu-jobs", k, v));
        assert_eq!(r.pod, "gpu-jobs/p", "{v}");
        assert_eq!(r.annotation, k, "{v}");
        assert!(r.value.contains(value), "{v}: {}", r.value);
        assert!(r.rule.starts_with(rule), "{v}: {}", r.rule);
        let text = InjectError::Refused(r).to_string();
        assert!(text.contains("gpu-jobs/p") && text.contains(k), "{text}");
    }
}

#[test]
fn pods_outside_the_namespaces_are_refused_for_every_setting() {
    let f = fenced();
    for (k, v) in [
        (DEV, "- {path: /dev/nvidia0, type: c, major: 195, minor: 0}"),
        (MNT, "- {source: tmpfs, destination: /scratch, type: tmpfs}"),
        (CDI, "[nvidia.com/gpu=0]"),
        (SYSCTL, "{net.core.somaxconn: 256}"),
        (NET, "- {hostIf: sriov-vf3, name: net1}"),
        (IO, "{class: IOPRIO_CLASS_BE, priority: 4}"),
        (SCHED, "{policy: SCHED_OTHER}"),
        (MPOL, "{mode: MPOL_INTERLEAVE, nodes: '0-1'}"),
    ] {
        let r = refused(run(&f, "default", k, v));
        assert_eq!(r.pod, "default/p");
        assert_eq!(r.value, "namespace \"default\"");
        assert_eq!(r.rule, "allow.namespaces [gpu-jobs, ml-*]");
        assert_eq!(r.annotation, k);
    }
    // A pod that asks for nothing is not affected.
    assert!(run(&f, "default", "other/key", "x").is_ok());
    assert!(run(&f, "default", DEV, "").is_ok());
    assert!(run(&f, "default", DEV, " \n").is_ok());
}

/// The namespace is checked before the annotation is decoded: a pod
/// outside the list cannot make the plugin decode anything, so a value
/// that would not decode (or would cost the most the decoder allows) is
/// refused for its namespace, and so is one that decodes to nothing.
#[test]
fn the_namespace_is_checked_before_decoding() {
    let f = fenced();
    let heavy = format!("[{}]", "{path: /dev/x, extra: 1}, ".repeat(1_500));
    for (k, v) in [
        (DEV, "- ["),
        (DEV, "[]"),
        (DEV, heavy.as_str()),
        (MNT, "{not: a list}"),
        (SYSCTL, "[1, 2]"),
        (IO, "class: [x]"),
        (SCHED, "policy: {a: b}"),
        (NET, "- {hostIf: [x]}"),
        (MPOL, "mode: MPOL_FOO"),
    ] {
        let r = refused(run(&f, "default", k, v));
        assert_eq!(r.value, "namespace \"default\"", "{k}: {v}");
    }
}

#[test]
fn without_an_allow_list_everything_goes_as_upstream() {
    for text in ["", "strict: false", "allow: {}", "allow:"] {
        let (_, f) = configure(text).unwrap();
        for (k, v) in [
            (DEV, "- {path: /dev/mem, type: c, major: 1, minor: 1}"),
            (
                MNT,
                "- {source: /, destination: /host, type: bind, options: [rbind, rw]}",
            ),
            (CDI, "[vendor.com/net=0]"),
            (SYSCTL, "{kernel.core_pattern: '|/tmp/x'}"),
            (NET, "- {hostIf: eth0, name: net1}"),
            (IO, "{class: IOPRIO_CLASS_RT, priority: 0}"),
            (SCHED, "{policy: SCHED_FIFO, priority: 99}"),
        ] {
            let fenced = run(&f, "default", k, v).unwrap();
            let plain = run(&Fence::default(), "default", k, v).unwrap();
            assert_eq!(fenced, plain, "{text:?}: {k}");
        }
    }
}

#[test]
fn one_list_fences_only_its_setting() {
    let (_, f) = configure("allow: {sysctls: [net.core]}").unwrap();
    assert!(
        run(
            &f,
            "default",
            DEV,
            "- {path: /dev/mem, type: c, major: 1, minor: 1}"
        )
        .is_ok()
    );
    assert!(run(&f, "default", SYSCTL, "{net.core.somaxconn: 1}").is_ok());
    assert!(run(&f, "default", SYSCTL, "{vm.overcommit_memory: 1}").is_err());
    // An empty list allows nothing.
    let (_, f) = configure("allow: {devices: []}").unwrap();
    assert!(
        run(
            &f,
            "default",
            DEV,
            "- {path: /dev/null, type: c, major: 1, minor: 3}"
        )
        .is_err()
    );
}

#[test]
fn bad_allow_lists_are_configuration_errors() {
    for bad in [
        "allow: {device: []}",
        "allow: {devices: [{major: x}]}",
        "allow: {devices: [{minor: 5-1}]}",
        "allow: {devices: [{type: q}]}",
        "allow: {devices: [{}]}",
        "allow: {sysctls: ['kernel..x']}",
        "allow: {namespaces: default}",
        "{broken",
    ] {
        assert!(configure(bad).is_err(), "{bad}");
    }
    let (strict, _) =
        configure("strict: true\nallow: {devices: [{type: c, major: 1, minor: '*'}]}").unwrap();
    assert_eq!(strict, Some(true));
}

/// The example of the DaemonSet's ConfigMap (deploy/device-injector) reads,
/// fences and lets the GPU case through.
#[test]
fn the_deploy_example_is_a_valid_fence() {
    let cm = include_str!("../../../deploy/device-injector/configmap.yaml");
    let doc = nri_sample_common::parse_yaml(cm).unwrap();
    let text = doc["data"]["config.yaml"].as_str().unwrap();
    let (_, f) = configure(text).unwrap();
    assert!(
        run(
            &f,
            "gpu-jobs",
            DEV,
            "- {path: /dev/nvidia0, type: c, major: 195, minor: 0}"
        )
        .is_ok()
    );
    assert!(
        run(
            &f,
            "gpu-jobs",
            DEV,
            "- {path: /dev/mem, type: c, major: 1, minor: 1}"
        )
        .is_err()
    );
    assert!(run(&f, "default", CDI, "[nvidia.com/gpu=0]").is_err());
}

/// The deploy example's fence (mount sources under one directory) is a
/// fence on what is mounted, not only on the source it names: the kernel
/// ignores the source of `proc` or `sysfs`, an `overlay` takes its layers
/// from its options, and options can name other paths or change what
/// the source means.
#[test]
fn the_mount_fence_covers_what_is_mounted() {
    let cm = include_str!("../../../deploy/device-injector/configmap.yaml");
    let doc = nri_sample_common::parse_yaml(cm).unwrap();
    let (_, f) = configure(doc["data"]["config.yaml"].as_str().unwrap()).unwrap();
    let ok = |m: &str| run(&f, "gpu-jobs", MNT, &format!("- {m}"));
    ok("{source: /srv/datasets/a, destination: /data, type: bind, options: [rbind, ro, nosuid, nodev]}")
        .unwrap();
    for bad in [
        "{source: /srv/datasets, destination: /p, type: proc}",
        "{source: /srv/datasets, destination: /s, type: sysfs}",
        "{source: /srv/datasets, destination: /o, type: overlay, options: [lowerdir=/]}",
        "{source: /srv/datasets, destination: /o, type: overlay, options: ['lowerdir=/,upperdir=/tmp/u,workdir=/tmp/w']}",
        "{source: /srv/datasets, destination: /c, type: cgroup2}",
        "{source: /srv/datasets, destination: /d, type: devtmpfs}",
        "{source: /srv/datasets, destination: /t, type: tmpfs}",
        // A bind option makes the runtime bind the source whatever the type.
        "{source: /srv/datasets, destination: /p, type: proc, options: [rbind]}",
        "{source: /srv/datasets, destination: /x, type: '', options: [rbind]}",
        // Options that name another path or source, or change its meaning.
        "{source: /srv/datasets, destination: /x, type: bind, options: [bind, lowerdir=/]}",
        "{source: /srv/datasets, destination: /x, type: bind, options: ['ro,lowerdir=/']}",
        "{source: /srv/datasets, destination: /x, type: bind, options: [idmap]}",
        "{source: /srv/datasets, destination: /x, type: bind, options: ['context=system_u:object_r:container_file_t:s0']}",
        "{source: /srv/datasets, destination: /x, type: bind, options: [loop]}",
        "{source: /srv/datasets, destination: /x, type: bind, options: ['x-mount.idmap=0:0:1']}",
        // Propagation back to the host is not a default.
        "{source: /srv/datasets, destination: /x, type: bind, options: [rshared]}",
        // A relative bind source is resolved against the bundle.
        "{source: datasets, destination: /x, type: bind}",
        // Destinations: absolute, no `..`.
        "{source: /srv/datasets, destination: x, type: bind}",
        "{source: /srv/datasets, destination: /a/../../b, type: bind}",
    ] {
        let r = refused(ok(bad));
        assert_eq!(r.annotation, MNT, "{bad}");
        eprintln!("{bad}: {r}");
    }
}

/// What the operator lists widens the mount fence, never past options that
/// name a path or change what the source means.
#[test]
fn listed_mount_types_and_options() {
    let f = fenced();
    let mount = |m: &str| run(&f, "gpu-jobs", MNT, &format!("- {m}"));
    for bad in [
        "{source: tmpfs, destination: /t, type: tmpfs, options: [size=1m, uid=0]}",
        "{source: tmpfs, destination: /t, type: tmpfs, options: ['size=1m,lowerdir=/']}",
        "{source: tmpfs, destination: /t, type: tmpfs, options: [mode=0777]}",
        "{source: /srv/datasets, destination: /o, type: overlay, options: [lowerdir=/srv/datasets]}",
        // tmpfs is listed, but a bind option binds the source.
        "{source: tmpfs, destination: /t, type: tmpfs, options: [bind]}",
        "{source: /etc, destination: /t, type: tmpfs, options: [rbind]}",
    ] {
        refused(mount(bad));
    }
    for bad in [
        "allow: {mountOptions: ['lowerdir=*']}",
        "allow: {mountOptions: ['upperdir=/x']}",
        "allow: {mountOptions: [idmap]}",
        "allow: {mountOptions: ['size=1m,mode=1']}",
        "allow: {mountOptions: ['x-*']}",
        "allow: {mountTypes: ['']}",
        "allow: {mountTypes: ['bind,proc']}",
    ] {
        assert!(configure(bad).is_err(), "{bad}");
    }
    // A glob that matches everything still cannot allow those options.
    let (_, f) = configure("allow: {mountTypes: [bind, overlay], mountOptions: ['*']}").unwrap();
    let mount = |m: &str| run(&f, "default", MNT, &format!("- {m}"));
    mount("{source: /x, destination: /x, type: bind, options: [rshared, noatime]}").unwrap();
    refused(mount(
        "{source: overlay, destination: /o, type: overlay, options: ['lowerdir=/']}",
    ));
    // Without any mount key, mounts are as upstream's.
    let (_, f) = configure("allow: {namespaces: [default]}").unwrap();
    run(
        &f,
        "default",
        MNT,
        "- {source: /, destination: /o, type: overlay, options: ['lowerdir=/']}",
    )
    .unwrap();
}

/// A device fence is a fence on what the runtime makes of the device:
/// types and numbers that are wildcards in the device cgroup or that the
/// kernel truncates, paths with `..`, and file-type bits in the mode are
/// refused whatever the rules say.
#[test]
fn devices_outside_what_a_rule_can_describe() {
    let (_, f) = configure(
        "allow:\n  devices:\n    - {path: /dev/foo, type: '*', major: '*', minor: '*'}\n    - {path: '/dev/nvidia*', type: c, major: 195, minor: '*'}\n",
    )
    .unwrap();
    let dev = |d: &str| run(&f, "default", DEV, &format!("- {d}"));
    dev("{path: /dev/foo, type: c, major: 1, minor: 3}").unwrap();
    dev("{path: /dev/nvidia0, type: c, major: 195, minor: 0, file_mode: 0666}").unwrap();
    for bad in [
        // `a` and an empty type are the device cgroup's wildcard type.
        "{path: /dev/foo, type: a, major: 1, minor: 3}",
        "{path: /dev/foo, type: '', major: 1, minor: 3}",
        "{path: /dev/foo, type: x, major: 1, minor: 3}",
        // -1 is the device cgroup's wildcard number.
        "{path: /dev/foo, type: c, major: -1, minor: -1}",
        "{path: /dev/nvidia0, type: c, major: 195, minor: -1}",
        // Beyond the kernel's 12-bit major and 20-bit minor: truncated.
        "{path: /dev/foo, type: c, major: 4097, minor: 1}",
        "{path: /dev/nvidia0, type: c, major: 195, minor: 1048576}",
        // A path that leaves the pattern's tree.
        "{path: /dev/nvidia0/../mem, type: c, major: 195, minor: 0}",
        "{path: nvidia0, type: c, major: 195, minor: 0}",
        // File-type bits in the mode (0060000 is a block device).
        "{path: /dev/nvidia0, type: c, major: 195, minor: 0, file_mode: 0060666}",
        "{path: /dev/nvidia0, type: c, major: 195, minor: 0, file_mode: 04777}",
    ] {
        refused(dev(bad));
    }
    // A rule names its type and its major numbers (* to allow any).
    for bad in [
        "allow: {devices: [{path: '/dev/nvidia*'}]}",
        "allow: {devices: [{path: '/dev/nvidia*', type: c}]}",
        "allow: {devices: [{path: '/dev/nvidia*', major: 195}]}",
    ] {
        assert!(configure(bad).is_err(), "{bad}");
    }
}

/// A sysctl fence allows only sysctls of the pod's own namespaces: one of
/// the node's (under an entry such as `kernel`) is refused, and an entry
/// that can allow none is a configuration error.
#[test]
fn sysctls_of_the_node_are_never_allowed() {
    let (_, f) = configure("allow: {sysctls: [kernel, net.core]}").unwrap();
    for bad in [
        "{kernel.core_pattern: '|/tmp/x'}",
        "{kernel/modprobe: /tmp/x}",
        "{kernel.shmmax.x: '1'}",
    ] {
        refused(run(&f, "default", SYSCTL, bad));
    }
    for bad in [
        "allow: {sysctls: [vm]}",
        "allow: {sysctls: [kernel.core_pattern]}",
        "allow: {sysctls: [fs.file-max]}",
    ] {
        assert!(configure(bad).is_err(), "{bad}");
    }
    // A namespaced sysctl of a namespace the pod shares with the node is
    // the node's: net.* of a host-network pod, kernel.shm* of a host-IPC
    // one, kernel.hostname of a pod in the node's UTS namespace.
    let (_, f) = configure("allow: {sysctls: [net, kernel, fs.mqueue]}").unwrap();
    let with = |namespaces: &[&str], v: &str| {
        let ns: Vec<LinuxNamespace> = namespaces
            .iter()
            .map(|t| LinuxNamespace {
                r#type: (*t).into(),
                path: String::new(),
            })
            .collect();
        let a = BTreeMap::from([(SYSCTL.to_owned(), v.to_owned())]);
        adjustment(&Request {
            annotations: &a,
            pod: "p",
            namespace: "default",
            linux_namespaces: &ns,
            container: "c",
            strict: false,
            fence: &f,
        })
    };
    with(&["network"], "{net.core.somaxconn: '1'}").unwrap();
    with(&["ipc"], "{kernel.shmmax: '1', fs.mqueue.msg_max: '1'}").unwrap();
    with(&["uts"], "{kernel.hostname: x}").unwrap();
    refused(with(&["ipc", "uts"], "{net.core.somaxconn: '1'}"));
    refused(with(&["network", "uts"], "{kernel.shmmax: '1'}"));
    refused(with(&["network", "ipc"], "{kernel.domainname: x}"));
    refused(with(&[], "{fs.mqueue.msg_max: '1'}"));
}

/// Names are checked for what the runtime will read in them.
#[test]
fn malformed_names_are_refused() {
    let f = fenced();
    for (k, v) in [
        (CDI, "['nvidia.com/gpu=0,vendor.com/net=0']"),
        (CDI, "['nvidia.com/gpu=0 vendor.com/net=0']"),
        (CDI, "['nvidia.com/gpu=a/b=c']"),
        (NET, "- {hostIf: 'sriov-a/b', name: net1}"),
        (NET, "- {hostIf: 'sriov-vf0 ', name: net1}"),
        (NET, "- {hostIf: sriov-very-long-name, name: net1}"),
        (NET, "- {hostIf: sriov-vf0, name: 'a:b'}"),
    ] {
        refused(run(&f, "gpu-jobs", k, v));
    }
}

#[path = "attack_tests.rs"]
mod attacks;
