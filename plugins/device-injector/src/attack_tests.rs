//! Attacks on the fence beyond the ones it was designed against: deep
//! nesting, huge numbers, control characters, paths through `..`,
//! CDI names that are not one device, duplicated keys, look-alike
//! characters, fields of other settings smuggled into a value, and
//! annotations meant for other containers. Each either fails the
//! container's creation or injects only what a rule allows.

use super::*;

/// `s` as a YAML double-quoted scalar (control characters as `\xNN`).
fn yq(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x100 && c.is_control() => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The value gives no adjustment: it is refused or fails to decode.
fn rejected(k: &str, v: &str) {
    let f = fenced();
    match run(&f, "gpu-jobs", k, v) {
        Err(_) => {}
        Ok(a) => panic!("{k}={v:?} injected {a:?}"),
    }
}

#[test]
fn deep_nesting_and_huge_numbers_inject_nothing() {
    let deep = "[".repeat(10_000) + &"]".repeat(10_000);
    for k in [DEV, MNT, CDI, SYSCTL, NET, IO, SCHED, MPOL] {
        rejected(k, &deep);
    }
    let dev = |fields: &str| format!("- {{path: /dev/nvidia0, type: c, {fields}}}");
    for fields in [
        // Past int64: Go's decoder refuses it.
        "major: 99999999999999999999, minor: 0",
        // Past the kernel's 12 and 20 bits (truncated into other devices).
        "major: 0x100000c3, minor: 0",
        "major: 195, minor: 0x100000",
        "major: 4294967491, minor: 0",
        // The device cgroup's wildcard.
        "major: -1, minor: 0",
        "major: 195, minor: -1",
        // Not integers to Go (1.95e2 is: Go reads it as 195).
        "major: .inf, minor: 0",
        // File type and set-id bits in the mode, and past uint32.
        "major: 195, minor: 0, file_mode: 0o104666",
        "major: 195, minor: 0, file_mode: 4294967296",
        "major: 195, minor: 0, uid: 4294967296",
    ] {
        rejected(DEV, &dev(fields));
    }
}

/// A path with a control character (a line break, an escape sequence, a
/// NUL) is refused by the fence of its setting: no rule names one, and
/// the runtime and its logs would show something else than the fence
/// judged. Before, a device path or mount path under an allowed pattern
/// or tree passed with them.
#[test]
fn control_characters_in_paths_are_refused() {
    for path in [
        "/dev/nvidia0\n",
        "/dev/nvidia\u{1b}[2K0",
        "/dev/nvidia0\0/x",
    ] {
        let v = format!("- {{path: {}, type: c, major: 195, minor: 0}}", yq(path));
        let r = refused(run(&fenced(), "gpu-jobs", DEV, &v));
        assert!(r.to_string().contains("device"), "{r}");
    }
    for (source, destination) in [
        ("/srv/datasets/a\nb", "/data"),
        ("/srv/datasets/a", "/data\r\nFORGED"),
        ("/srv/datasets/a\u{7f}", "/data"),
    ] {
        let v = format!(
            "- {{source: {}, destination: {}, type: bind, options: [ro]}}",
            yq(source),
            yq(destination)
        );
        let r = refused(run(&fenced(), "gpu-jobs", MNT, &v));
        assert!(r.to_string().contains("mount"), "{r}");
    }
}

/// Device paths are judged by their numbers, never by where a path seems
/// to lead: `..` anywhere is refused, and a path under an allowed pattern
/// with other numbers is refused.
#[test]
fn device_paths_through_dot_dot_or_with_other_numbers() {
    for v in [
        "- {path: /dev/../dev/nvidia0, type: c, major: 195, minor: 0}",
        "- {path: /dev/nvidia0/../mem, type: c, major: 195, minor: 0}",
        "- {path: /dev/nvidia0/.., type: c, major: 195, minor: 0}",
        "- {path: dev/nvidia0, type: c, major: 195, minor: 0}",
        "- {path: /dev/nvidia-link-to-mem, type: c, major: 1, minor: 1}",
        "- {path: /dev/nvidia0, type: a, major: 195, minor: 0}",
        "- {path: /dev/nvidia0, type: '', major: 195, minor: 0}",
    ] {
        rejected(DEV, v);
    }
    // A `.` component is not under the pattern as written: refused too.
    rejected(
        DEV,
        "- {path: /dev/./nvidia0, type: c, major: 195, minor: 0}",
    );
}

#[test]
fn cdi_names_that_are_not_one_allowed_device() {
    for name in [
        "nvidia.com/gpu=0,vendor.com/net=0",
        "nvidia.com/gpu=0;vendor.com/net=0",
        "nvidia.com/gpu=../../x",
        "nvidia.com/gpu=0\n",
        "nvidia.com/gpu=0 ",
        " nvidia.com/gpu=0",
        "nvidia.com/gpu=",
        "nvidia.com/gpu",
        "nvidia.com/gpu=*",
        // Look-alikes: a Cyrillic `а`, a full-width `=`, upper case.
        "nvidi\u{430}.com/gpu=0",
        "nvidia.com/gpu\u{ff1d}0",
        "NVIDIA.com/gpu=0",
        "nvidia.com/gpu/x=0",
    ] {
        rejected(CDI, &format!("[{}]", yq(name)));
    }
}

/// A key given twice (or in two spellings Go's decoder folds together)
/// is decoded once: what the fence checks is what is injected.
#[test]
fn duplicated_keys_never_split_the_check_from_the_injection() {
    let f = fenced();
    let cases = [
        (
            DEV,
            "- {path: /dev/nvidia0, type: c, major: 195, minor: 0, major: 1, minor: 1}",
        ),
        (
            DEV,
            "- {path: /dev/nvidia0, type: c, major: 195, Major: 1, MAJOR: 1, minor: 0}",
        ),
        (
            DEV,
            "- {path: /dev/nvidia0, type: c, MAJOR: 1, major: 195, minor: 0}",
        ),
        (
            SYSCTL,
            "{net.core.somaxconn: 1, net.core.somaxconn: 2, kernel.core_pattern: x}",
        ),
        (NET, "- {hostIf: sriov-1, HOSTIF: eth0, name: net1}"),
        (NET, "- {HostIf: eth0, hostIf: sriov-1, name: net1}"),
        (
            MNT,
            "- {source: /srv/datasets/a, SOURCE: /, destination: /data, type: bind}",
        ),
    ];
    for (k, v) in cases {
        let Ok(a) = run(&f, "gpu-jobs", k, v) else {
            continue;
        };
        let linux = a.linux.clone().unwrap_or_default();
        for d in &linux.devices {
            assert_eq!((d.r#type.as_str(), d.major), ("c", 195), "{v}: {a:?}");
        }
        for s in linux.sysctl.keys() {
            assert_eq!(s, "net.core.somaxconn", "{v}: {a:?}");
        }
        for host in linux.net_devices.keys() {
            assert!(host.starts_with("sriov-"), "{v}: {a:?}");
        }
        for m in &a.mounts {
            assert!(m.source.starts_with("/srv/datasets"), "{v}: {a:?}");
        }
    }
}

/// Characters that look like the allowed ones are other names.
#[test]
fn look_alike_characters_are_other_names() {
    let f = fenced();
    let dev = "- {path: /dev/nvidia0, type: c, major: 195, minor: 0}";
    // A hyphen U+2010 and a Cyrillic `о` in the namespace.
    for ns in ["gpu\u{2010}jobs", "gpu-j\u{43e}bs", "GPU-JOBS", "gpu-jobs "] {
        refused(run(&f, ns, DEV, dev));
    }
    for v in [
        // A Cyrillic `ѕ`, a full-width solidus (not a separator: the
        // component is then not `datasets`), a trailing space.
        "- {source: /srv/data\u{455}ets/x, destination: /d, type: bind}",
        "- {source: /srv/datasets\u{ff0f}..\u{ff0f}etc, destination: /d, type: bind}",
        "- {source: '/srv/datasets /x', destination: /d, type: bind}",
    ] {
        refused(run(&f, "gpu-jobs", MNT, v));
    }
    refused(run(&f, "gpu-jobs", SYSCTL, "{net.core.\u{455}omaxconn: 1}"));
    refused(run(
        &f,
        "gpu-jobs",
        NET,
        "- {hostIf: sriov\u{2010}1, name: n}",
    ));
}

/// Fields of other settings in a value (hooks, env, annotations, mounts
/// in a device) are dropped: a setting injects only its own kind.
#[test]
fn a_value_injects_only_its_own_setting() {
    let f = fenced();
    let extra = "hooks: {prestart: [{path: /bin/sh}]}, env: [X=1], annotations: {a: b}, \
                 mounts: [{source: /, destination: /host}], linux: {devices: [{path: /dev/mem}]}";
    let cases = [
        (DEV, "- {path: /dev/nvidia0, type: c, major: 195, minor: 0"),
        (
            MNT,
            "- {source: /srv/datasets/a, destination: /data, type: bind, options: [ro]",
        ),
        (NET, "- {hostIf: sriov-1, name: net1"),
        (IO, "{class: IOPRIO_CLASS_BE, priority: 4"),
        (SCHED, "{policy: SCHED_BATCH"),
        (MPOL, "{mode: MPOL_INTERLEAVE, nodes: '0-1'"),
    ];
    for (k, v) in cases {
        let clean = run(&f, "gpu-jobs", k, &format!("{v}}}")).unwrap();
        let smuggled = run(&f, "gpu-jobs", k, &format!("{v}, {extra}}}")).unwrap();
        assert_eq!(clean, smuggled, "{k}");
        assert!(smuggled.hooks.is_none() && smuggled.env.is_empty(), "{k}");
    }
}

/// An annotation for another container of the pod, or a key that only
/// looks like this container's, does nothing for this one, and a pod
/// outside the namespaces is not failed for this container because of it.
#[test]
fn annotations_for_other_containers_do_not_reach_this_one() {
    let f = fenced();
    let dev = "- {path: /dev/mem, type: c, major: 1, minor: 1}";
    for key in [
        "devices.noderesource.dev/container.other",
        "devices.noderesource.dev/container.C",
        "devices.noderesource.dev/container.c ",
        "devices.noderesource.dev/container.c/x",
        "Devices.noderesource.dev/container.c",
        "devices.noderesource.dev/containers.c",
        "devices.noderesource.dev./container.c",
    ] {
        for ns in ["gpu-jobs", "default"] {
            let a = run(&f, ns, key, dev).unwrap_or_else(|e| panic!("{key} {ns}: {e}"));
            assert_eq!(a, ContainerAdjustment::default(), "{key}");
        }
    }
    // The container it names gets the refusal.
    let a = BTreeMap::from([(
        "devices.noderesource.dev/container.other".to_owned(),
        dev.to_owned(),
    )]);
    let r = adjustment(&Request {
        annotations: &a,
        pod: "p",
        namespace: "gpu-jobs",
        linux_namespaces: &POD_NAMESPACES,
        container: "other",
        strict: false,
        fence: &f,
    });
    refused(r);
}
