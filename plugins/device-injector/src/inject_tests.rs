#![allow(clippy::unwrap_used)]
use super::*;

fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn adjust(a: &BTreeMap<String, String>, ctr: &str) -> Result<ContainerAdjustment, InjectError> {
    adjustment(&Request {
        annotations: a,
        pod: "pod",
        namespace: "default",
        linux_namespaces: &[],
        container: ctr,
        strict: false,
        fence: &Fence::default(),
    })
}

fn strict(a: &BTreeMap<String, String>, ctr: &str) -> Result<ContainerAdjustment, InjectError> {
    adjustment(&Request {
        annotations: a,
        pod: "pod",
        namespace: "default",
        linux_namespaces: &[],
        container: ctr,
        strict: true,
        fence: &Fence::default(),
    })
}

fn devices(a: &ContainerAdjustment) -> Vec<(String, i64, i64)> {
    a.linux
        .as_ref()
        .map(|l| {
            l.devices
                .iter()
                .map(|d| (d.path.clone(), d.major, d.minor))
                .collect()
        })
        .unwrap_or_default()
}

const NULL: &str = "- path: /dev/test-null\n  type: c\n  major: 1\n  minor: 3\n";
const ZERO: &str = "- path: /dev/test-zero\n  type: c\n  major: 1\n  minor: 5\n";

#[test]
fn device_precedence() {
    // container beats pod, current prefix beats deprecated one at the same
    // scope, and a deprecated container key beats a current pod key.
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[
                ("devices.noderesource.dev/container.ctr0", NULL),
                ("devices.nri.io/container.ctr0", ZERO),
            ],
            "/dev/test-null",
        ),
        (
            &[
                ("devices.noderesource.dev/pod", ZERO),
                ("devices.nri.io/container.ctr0", NULL),
            ],
            "/dev/test-null",
        ),
        (
            &[
                ("devices.nri.io/pod", NULL),
                ("devices.noderesource.dev", ZERO),
            ],
            "/dev/test-null",
        ),
        (
            &[("devices.noderesource.dev", ZERO), ("devices.nri.io", NULL)],
            "/dev/test-zero",
        ),
    ];
    for (a, want) in cases {
        let adj = adjust(&ann(a), "ctr0").unwrap();
        assert_eq!(devices(&adj)[0].0, *want, "{a:?}");
    }
    let adj = adjust(
        &ann(&[("devices.noderesource.dev/container.ctr1", NULL)]),
        "ctr0",
    )
    .unwrap();
    assert!(devices(&adj).is_empty());
}

#[test]
fn device_fields_and_go_number_rules() {
    let a = ann(&[(
        "devices.noderesource.dev/container.c",
        "- path: /dev/x\n  type: b\n  major: 8.0\n  minor: 1e1\n  file_mode: 0660\n  uid: 5\n- Path: /dev/y\n  TYPE: c\n  major: 1\n  minor: 3\n",
    )]);
    let adj = adjust(&a, "c").unwrap();
    let devs = &adj.linux.as_ref().unwrap().devices;
    assert_eq!((devs[0].major, devs[0].minor), (8, 10));
    assert_eq!(devs[0].file_mode, Some(OptionalFileMode { value: 0o660 }));
    assert_eq!(devs[0].uid, Some(OptionalUInt32 { value: 5 }));
    assert_eq!(devs[0].gid, None);
    assert_eq!(devs[1].path, "/dev/y");
    assert_eq!(devs[1].file_mode, None);
}

#[test]
fn values_are_passed_on_unchecked_as_go_does() {
    // Go does not check device types, paths, mount destinations or CDI
    // names: the runtime decides.
    let a = ann(&[
        ("devices.noderesource.dev/container.c", "- {type: q}"),
        ("cdi-devices.noderesource.dev/container.c", "['', 123]"),
        (
            "mounts.noderesource.dev/container.c",
            "- {source: /a, options: [size=1m, 755, yes]}",
        ),
        (
            "network-devices.noderesource.dev/container.c",
            "- {name: eth1}",
        ),
    ]);
    let adj = adjust(&a, "c").unwrap();
    let l = adj.linux.as_ref().unwrap();
    assert_eq!(l.devices[0].r#type, "q");
    assert_eq!(l.devices[0].path, "");
    let cdi: Vec<&str> = adj.cdi_devices.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(cdi, ["", "123"]);
    assert_eq!(adj.mounts[0].destination, "");
    assert_eq!(adj.mounts[0].options, ["size=1m", "755", "true"]);
    assert_eq!(l.net_devices[""].name, "eth1");
}

#[test]
fn other_settings() {
    let a = ann(&[
        (
            "io-priority.noderesource.dev/container.c",
            "class: IOPRIO_CLASS_RT\npriority: 4\n",
        ),
        (
            "scheduling-policy.nri.io/pod",
            "policy: SCHED_FIFO\npriority: 10\nflags: [SCHED_FLAG_RESET_ON_FORK]\n",
        ),
        (
            "network-devices.noderesource.dev/container.c",
            "- hostIf: ens2.100\n  Name: netdev0\n",
        ),
        (
            "sysctl.noderesource.dev/container.c",
            "net.core.somaxconn: 256\nnet.ipv4.ip_forward: on\n",
        ),
        (
            "memory-policy.noderesource.dev",
            "mode: MPOL_INTERLEAVE\nnodes: 2\nflags: [MPOL_F_STATIC_NODES]\n",
        ),
    ]);
    let adj = adjust(&a, "c").unwrap();
    let l = adj.linux.unwrap();
    assert_eq!(
        l.io_priority,
        Some(LinuxIoPriority {
            class: IoPrioClass::IoprioClassRt as i32,
            priority: 4
        })
    );
    let s = l.scheduler.unwrap();
    assert_eq!(s.policy, LinuxSchedulerPolicy::SchedFifo as i32);
    assert_eq!(s.priority, 10);
    assert_eq!(s.flags, [LinuxSchedulerFlag::SchedFlagResetOnFork as i32]);
    assert_eq!(l.net_devices["ens2.100"].name, "netdev0");
    assert_eq!(l.sysctl["net.core.somaxconn"], "256");
    assert_eq!(l.sysctl["net.ipv4.ip_forward"], "true");
    let m = l.memory_policy.unwrap();
    assert_eq!(m.mode, MpolMode::MpolInterleave as i32);
    assert_eq!(m.nodes, "2");
    assert_eq!(m.flags, [MpolFlag::MpolFStaticNodes as i32]);
}

#[test]
fn empty_values_as_go() {
    // Devices, CDI devices, mounts: an empty value is nothing. Sysctls and
    // net devices: an empty document is an empty list or map.
    let a = ann(&[
        ("devices.noderesource.dev/container.c", ""),
        ("cdi-devices.noderesource.dev/container.c", ""),
        ("mounts.noderesource.dev", ""),
        ("sysctl.noderesource.dev", ""),
        ("network-devices.noderesource.dev", ""),
    ]);
    assert_eq!(adjust(&a, "c").unwrap(), ContainerAdjustment::default());
    // I/O priority: an empty class is dropped (Go warns and sets none).
    let a = ann(&[("io-priority.noderesource.dev", "")]);
    assert_eq!(adjust(&a, "c").unwrap().linux, None);
    assert!(strict(&a, "c").is_err());
    // Scheduling: an empty block is policy SCHED_NONE.
    let a = ann(&[("scheduling-policy.noderesource.dev", "")]);
    let s = adjust(&a, "c").unwrap().linux.unwrap().scheduler.unwrap();
    assert_eq!(s.policy, LinuxSchedulerPolicy::SchedNone as i32);
    assert!(strict(&a, "c").is_err());
    // Memory policy: an empty value has no mode, which Go refuses.
    let a = ann(&[("memory-policy.noderesource.dev", "")]);
    assert!(matches!(
        adjust(&a, "c"),
        Err(InjectError::MemoryPolicy { .. })
    ));
}

#[test]
fn lenient_names_as_go() {
    // Unknown class: no I/O priority. Unknown policy: SCHED_NONE. Unknown
    // flag: flag 0 (SCHED_FLAG_RESET_ON_FORK). Strict refuses all three.
    let a = ann(&[("io-priority.noderesource.dev", "class: FAST")]);
    assert_eq!(adjust(&a, "c").unwrap().linux, None);
    assert!(strict(&a, "c").is_err());
    let a = ann(&[(
        "scheduling-policy.noderesource.dev",
        "policy: SCHED_RR\nflags: [SCHED_FLAG_FAST, SCHED_FLAG_RECLAIM]",
    )]);
    let s = adjust(&a, "c").unwrap().linux.unwrap().scheduler.unwrap();
    assert_eq!(s.policy, LinuxSchedulerPolicy::SchedRr as i32);
    assert_eq!(
        s.flags,
        [
            LinuxSchedulerFlag::SchedFlagResetOnFork as i32,
            LinuxSchedulerFlag::SchedFlagReclaim as i32
        ]
    );
    let e = strict(&a, "c").unwrap_err();
    assert!(e.to_string().contains("SCHED_FLAG_FAST"), "{e}");
    // Unknown keys: ignored, refused when strict.
    let a = ann(&[(
        "devices.noderesource.dev",
        "- {path: /dev/x, type: c, majr: 1}",
    )]);
    assert_eq!(devices(&adjust(&a, "c").unwrap()).len(), 1);
    let e = strict(&a, "c").unwrap_err();
    assert!(e.to_string().contains("majr"), "{e}");
}

#[test]
fn errors_as_go() {
    let cases = [
        ("devices.noderesource.dev/container.c", "path: /dev/x"),
        (
            "devices.noderesource.dev/container.c",
            "- {path: /dev/x, major: one}",
        ),
        (
            "devices.noderesource.dev/container.c",
            "- {path: /dev/x, major: 1.5}",
        ),
        (
            "devices.noderesource.dev/container.c",
            "- {path: /dev/x, major: '1'}",
        ),
        ("devices.nri.io/pod", "- ["),
        (
            "cdi-devices.noderesource.dev/container.c",
            "vendor.com/device=x",
        ),
        ("cdi-devices.noderesource.dev/container.c", "[{a: b}]"),
        (
            "io-priority.noderesource.dev/container.c",
            "class: IOPRIO_CLASS_RT\npriority: x",
        ),
        (
            "scheduling-policy.noderesource.dev/container.c",
            "runtime: -1",
        ),
        (
            "sysctl.noderesource.dev/container.c",
            "net.core.somaxconn: [1]",
        ),
        ("sysctl.noderesource.dev/container.c", "[a]"),
        (
            "memory-policy.noderesource.dev/container.c",
            "mode: MPOL_FOO",
        ),
        (
            "memory-policy.noderesource.dev/container.c",
            "mode: MPOL_BIND\nflags: [F]",
        ),
    ];
    for (k, v) in cases {
        let e = adjust(&ann(&[(k, v)]), "c").unwrap_err();
        assert!(e.to_string().contains(k), "{k}={v:?}: {e}");
    }
}

/// What one container's annotations make the plugin log: at most 4 KiB
/// per annotation (a line per annotation, values cut to fit), however many
/// items they hold and however many of them Go would drop. Before, each
/// injected item was a line, and each dropped one a warning carrying the
/// whole value.
#[test]
fn one_annotation_logs_a_few_kib_at_most() {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    let long = "x".repeat(200);
    let devices: String = (0..700)
        .map(|i| format!("- {{path: /dev/{long}{i}, type: c, major: 1, minor: 3, extra: 1}}\n"))
        .collect();
    let mounts: String = (0..1_000)
        .map(|i| format!("- {{source: /{long}{i}, destination: /d{i}, type: bind}}\n"))
        .collect();
    let sysctls: String = (0..1_000)
        .map(|i| format!("net.core.{long}{i}: '1'\n"))
        .collect();
    let flags = format!("flags: [{}]", "UNKNOWN, ".repeat(3_000));
    let annotations = ann(&[
        ("devices.noderesource.dev/container.c", &devices),
        ("mounts.noderesource.dev/container.c", &mounts),
        ("sysctl.noderesource.dev/container.c", &sysctls),
        ("scheduling-policy.noderesource.dev/container.c", &flags),
    ]);
    // A first run registers the log call sites (a call site seen for the
    // first time by two test threads at once can miss a scoped subscriber).
    adjust(&annotations, "c").unwrap();
    let sink = Sink::default();
    let out = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || out.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        adjust(&annotations, "c").unwrap();
    });
    let log = sink.0.lock().unwrap().len();
    eprintln!("4 annotations of 700 to 3,000 items: {log} bytes of log");
    assert!(log <= 4 * 4096, "{log} bytes of log for 4 annotations");
}

/// An annotation cannot forge log lines: every name and value it puts in
/// a log line (device paths, CDI names, mount paths, interface names,
/// sysctl names and values, memory nodes) is quoted, so a line break or
/// an escape sequence in it shows as `\n` or `\u{1b}`, never as a new
/// line of the plugin's log. Before, sysctl names were written as they
/// came.
#[test]
fn annotations_cannot_forge_log_lines() {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    let forged = "x\\nFORGED level=error \\e[31m";
    let annotations = ann(&[
        (
            "devices.noderesource.dev/container.c",
            &format!("- {{path: \"/dev/{forged}\", type: c, major: 1, minor: 3}}"),
        ),
        (
            "cdi-devices.noderesource.dev/container.c",
            &format!("- \"vendor.com/class={forged}\""),
        ),
        (
            "mounts.noderesource.dev/container.c",
            &format!("- {{source: \"/{forged}\", destination: \"/{forged}\", type: bind}}"),
        ),
        (
            "network-devices.noderesource.dev/container.c",
            &format!("- {{hostIf: \"{forged}\", name: \"{forged}\"}}"),
        ),
        (
            "sysctl.noderesource.dev/container.c",
            &format!("\"net.core.{forged}\": \"{forged}\""),
        ),
        (
            "memory-policy.noderesource.dev/container.c",
            &format!("{{mode: MPOL_INTERLEAVE, nodes: \"{forged}\"}}"),
        ),
    ]);
    adjust(&annotations, "c").unwrap();
    let sink = Sink::default();
    let out = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || out.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        adjust(&annotations, "c").unwrap();
    });
    let log = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    assert!(log.contains("FORGED"), "the values are logged:\n{log}");
    for line in log.lines() {
        assert!(
            !line.starts_with("FORGED"),
            "a line forged by an annotation:\n{log}"
        );
    }
    assert!(
        !log.contains('\u{1b}'),
        "an escape sequence in the log:\n{log}"
    );
}
