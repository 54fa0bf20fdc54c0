//! Capabilities: names and numbers, sets, the inference table against the
//! facts read in containerd's and CRI-O's sources, runtime declarations,
//! and which capabilities an adjustment needs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use nri_api::api::{
    CdiDevice, ContainerAdjustment, Event, Hook, Hooks, LinuxDevice, LinuxDeviceCgroup,
    LinuxIoPriority, LinuxMemoryPolicy, LinuxNamespace, LinuxNetDevice, LinuxRdt, LinuxScheduler,
    LinuxSeccomp, Mount,
};
use nri_api::{
    Capability, CapabilityBasis, CapabilitySet, EventMask, NriVersion, Requirement,
    RuntimeCapabilities, adjustment_capabilities, declared_nri_version, infer_capabilities,
    parse_declaration,
};

use Capability as C;

/// containerd/nri's proposed `Capability` enum, name and number.
const UPSTREAM: &[(&str, u32)] = &[
    ("ADJUST_POSIX_RLIMITS", 0),
    ("INPUT_POSIX_RLIMITS", 1),
    ("ADJUST_LINUX_PID_LIMIT", 2),
    ("ADJUST_LINUX_OOM_SCORE", 3),
    ("INPUT_LINUX_OOM_SCORE", 4),
    ("INPUT_IP_ADDRESSES", 5),
    ("ADJUST_CDI_DEVICES", 6),
    ("INPUT_CDI_DEVICES", 7),
    ("INPUT_LINUX_SECURITY_PROFILE", 8),
    ("ADJUST_LINUX_NAMESPACES", 9),
    ("ADJUST_LINUX_SECCOMP_POLICY", 10),
    ("INPUT_LINUX_SECCOMP_POLICY", 11),
    ("ADJUST_LINUX_IO_PRIORITY", 12),
    ("INPUT_LINUX_IO_PRIORITY", 13),
    ("ADJUST_LINUX_CONTAINER_ARGS", 14),
    ("ADJUST_LINUX_SCHEDULING_POLICY", 15),
    ("INPUT_LINUX_SCHEDULING_POLICY", 16),
    ("ADJUST_LINUX_NETWORK_DEVICES", 17),
    ("INPUT_LINUX_NETWORK_DEVICES", 18),
    ("ADJUST_LINUX_RDT_CLOS", 19),
    ("INPUT_LINUX_RDT_CLOS", 20),
    ("ADJUST_LINUX_SYSCTL", 21),
    ("INPUT_LINUX_SYSCTL", 22),
    ("EXTRA_CONTAINER_STATUS", 23),
    ("INPUT_UID_AND_GIDS", 24),
    ("ADJUST_LINUX_MEMORY_POLICY", 25),
    ("INPUT_LINUX_MEMORY_POLICY", 26),
];

#[test]
fn upstream_names_keep_their_numbers() {
    for (name, number) in UPSTREAM {
        let c = Capability::from_name(name).unwrap_or_else(|| panic!("{name}"));
        assert_eq!(c.upstream_number(), Some(*number), "{name}");
        assert_eq!(c.bit(), *number, "{name}: bit = upstream number");
    }
    let with_number = Capability::ALL
        .iter()
        .filter(|c| c.upstream_number().is_some())
        .count();
    assert_eq!(with_number, UPSTREAM.len());
}

#[test]
fn names_are_unique_and_bits_contiguous() {
    let mut names = std::collections::BTreeSet::new();
    for (i, c) in Capability::ALL.iter().enumerate() {
        assert!(names.insert(c.name()), "duplicate {c}");
        assert_eq!(c.bit() as usize, i);
        assert_eq!(Capability::from_bit(c.bit()), Some(*c));
        assert_eq!(c.name().parse::<Capability>().unwrap(), *c);
        assert_eq!(c.name().to_lowercase().parse::<Capability>().unwrap(), *c);
        let input = c.name().starts_with("INPUT_") || c.name() == "EXTRA_CONTAINER_STATUS";
        assert_eq!(c.is_input(), input, "{c}");
    }
    assert_eq!(Capability::from_bit(Capability::ALL.len() as u32), None);
    assert!("ADJUST_NOTHING".parse::<Capability>().is_err());
}

#[test]
fn sets_parse_print_and_map_to_upstream_words() {
    let set: CapabilitySet = " adjust_linux_sysctl ,ADJUST_ENV,".parse().unwrap();
    assert_eq!(set.to_string(), "ADJUST_LINUX_SYSCTL,ADJUST_ENV");
    assert_eq!(set.to_upstream_words(), vec![1 << 21]);
    assert_eq!(CapabilitySet::all().iter().count(), Capability::ALL.len());
    assert_eq!(
        CapabilitySet::all().to_upstream_words(),
        vec![(1 << 27) - 1]
    );
    assert!("ADJUST_ENV,nope".parse::<CapabilitySet>().is_err());
    assert_eq!("".parse::<CapabilitySet>().unwrap(), CapabilitySet::EMPTY);
}

#[test]
fn requirements_parse_capabilities_and_events() {
    let r = |s: &str| s.parse::<Requirement>().unwrap();
    assert_eq!(r("ADJUST_LINUX_SYSCTL"), C::AdjustLinuxSysctl.into());
    assert_eq!(r("UpdatePodSandbox"), Event::UpdatePodSandbox.into());
    assert_eq!(
        r("event ValidateContainerAdjustment"),
        Event::ValidateContainerAdjustment.into()
    );
    assert!("event ADJUST_ENV".parse::<Requirement>().is_err());
    assert!("nothing".parse::<Requirement>().is_err());
}

fn inferred(name: &str, version: &str) -> RuntimeCapabilities {
    infer_capabilities(name, version, None).unwrap_or_else(|| panic!("{name} {version}"))
}

/// Every adjustment and service capability, and whether the runtime
/// applies it, by version: the facts of `capability/table.rs`.
#[test]
fn containerd_adjustments_follow_the_sources() {
    use C::*;
    // (capability, [1.7.29, 1.7.30, 2.0.11, 2.1.9, 2.2.0, 2.2.1, 2.3.7, 2.4.2])
    let versions = [
        "v1.7.29", "v1.7.30", "v2.0.11", "v2.1.9", "v2.2.0", "v2.2.1", "v2.3.7", "v2.4.2",
    ];
    let y = true;
    let n = false;
    let facts: &[(Capability, [bool; 8])] = &[
        (AdjustAnnotations, [y, y, y, y, y, y, y, y]),
        (AdjustMounts, [y, y, y, y, y, y, y, y]),
        (AdjustEnv, [y, y, y, y, y, y, y, y]),
        (AdjustOciHooks, [y, y, y, y, y, y, y, y]),
        (AdjustLinuxDevices, [y, y, y, y, y, y, y, y]),
        (AdjustLinuxCgroupsPath, [y, y, y, y, y, y, y, y]),
        (AdjustLinuxCpu, [y, y, y, y, y, y, y, y]),
        (AdjustLinuxMemoryLimit, [y, y, y, y, y, y, y, y]),
        (AdjustLinuxMemoryTuning, [n, n, n, n, n, n, n, n]),
        (AdjustLinuxHugepageLimits, [y, y, y, y, y, y, y, y]),
        (AdjustLinuxBlockioClass, [y, y, y, y, y, y, y, y]),
        (AdjustLinuxRdtClass, [y, y, y, y, y, y, y, y]),
        (AdjustLinuxCgroupsUnified, [y, y, y, y, y, y, y, y]),
        (AdjustLinuxDeviceRules, [n, n, n, n, y, y, y, y]),
        (AdjustPosixRlimits, [y, y, y, y, y, y, y, y]),
        (AdjustLinuxOomScore, [y, y, y, y, y, y, y, y]),
        (AdjustLinuxPidLimit, [y, y, y, y, y, y, y, y]),
        (AdjustCdiDevices, [n, y, n, y, y, y, y, y]),
        (AdjustLinuxContainerArgs, [n, n, n, n, y, y, y, y]),
        (AdjustLinuxIoPriority, [n, n, n, n, y, y, y, y]),
        (AdjustLinuxSeccompPolicy, [n, n, n, n, y, y, y, y]),
        (AdjustLinuxNamespaces, [n, n, n, n, y, y, y, y]),
        (AdjustLinuxSchedulingPolicy, [n, n, n, n, n, y, y, y]),
        (AdjustLinuxNetworkDevices, [n, n, n, n, n, y, y, y]),
        (AdjustLinuxRdtClos, [n, n, n, n, n, y, y, y]),
        (AdjustLinuxSysctl, [n, n, n, n, n, n, y, y]),
        (AdjustLinuxMemoryPolicy, [n, n, n, n, n, n, y, y]),
        (UpdateContainers, [y, y, y, y, y, y, y, y]),
        (EvictContainers, [n, n, n, n, n, n, n, n]),
    ];
    for (i, version) in versions.iter().enumerate() {
        let rt = inferred("containerd", version);
        assert_eq!(rt.basis, CapabilityBasis::Inferred);
        assert_eq!(rt.known, CapabilitySet::all(), "{version}");
        for (c, by_version) in facts {
            assert_eq!(
                rt.supported.contains(*c),
                by_version[i],
                "containerd {version}: {c}"
            );
        }
    }
    // Every capability that is not an input is in the table above.
    let listed: CapabilitySet = facts.iter().map(|(c, _)| *c).collect();
    for c in Capability::ALL.iter().filter(|c| !c.is_input()) {
        assert!(listed.contains(*c), "{c} has no facts in this test");
    }
}

#[test]
fn containerd_inputs_follow_the_sources() {
    use C::*;
    let versions = [
        "v1.7.30", "v2.0.11", "v2.1.9", "v2.2.0", "v2.2.1", "v2.3.7", "v2.4.2",
    ];
    let y = true;
    let n = false;
    let facts: &[(Capability, [bool; 7])] = &[
        (InputLinuxOomScore, [y, y, y, y, y, y, y]),
        (InputIpAddresses, [n, n, y, y, y, y, y]),
        (InputLinuxIoPriority, [n, n, n, n, y, y, y]),
        (InputLinuxSchedulingPolicy, [n, n, n, n, y, y, y]),
        (InputLinuxNetworkDevices, [n, n, n, n, y, y, y]),
        (InputLinuxRdtClos, [n, n, n, n, y, y, y]),
        (InputLinuxSecurityProfile, [n, n, n, n, y, y, y]),
        (InputPosixRlimits, [n, n, n, n, n, y, y]),
        (InputUidAndGids, [n, n, n, n, n, y, y]),
        (InputLinuxSysctl, [n, n, n, n, n, y, y]),
        (InputCdiDevices, [n, n, n, n, n, y, y]),
        (InputLinuxSeccompPolicy, [n, n, n, n, n, y, y]),
        (ExtraContainerStatus, [n, n, n, n, n, y, y]),
        (InputLinuxMemoryPolicy, [n, n, n, n, n, n, n]),
    ];
    for (i, version) in versions.iter().enumerate() {
        let rt = inferred("containerd", version);
        for (c, by_version) in facts {
            assert_eq!(
                rt.supported.contains(*c),
                by_version[i],
                "containerd {version}: {c}"
            );
        }
    }
    let listed: CapabilitySet = facts.iter().map(|(c, _)| *c).collect();
    for c in Capability::ALL.iter().filter(|c| c.is_input()) {
        assert!(listed.contains(*c), "{c} has no facts in this test");
    }
}

#[test]
fn crio_follows_its_nri_version_and_its_sources() {
    use C::*;
    let versions = ["1.31.0", "1.33.2", "1.34.0", "1.35.1", "1.36.0"];
    let y = true;
    let n = false;
    let facts: &[(Capability, [bool; 5])] = &[
        (AdjustEnv, [y, y, y, y, y]),
        (AdjustLinuxPidLimit, [n, y, y, y, y]),
        (AdjustCdiDevices, [n, n, y, y, y]),
        (AdjustLinuxContainerArgs, [n, n, y, y, y]),
        (AdjustLinuxNamespaces, [n, n, y, y, y]),
        (AdjustLinuxSchedulingPolicy, [n, n, n, y, y]),
        (AdjustLinuxNetworkDevices, [n, n, n, y, y]),
        // NRI v0.11.0 (CRI-O 1.35, 1.36) merges sysctls into maps it
        // never made.
        (AdjustLinuxSysctl, [n, n, n, n, n]),
        (AdjustLinuxMemoryPolicy, [n, n, n, n, n]),
        (AdjustLinuxMemoryTuning, [n, n, n, n, n]),
        (EvictContainers, [n, n, n, n, n]),
        (InputIpAddresses, [n, y, y, y, y]),
        (InputLinuxSchedulingPolicy, [n, n, n, y, y]),
        (InputUidAndGids, [n, n, n, n, y]),
        (InputLinuxSecurityProfile, [n, n, n, n, n]),
    ];
    for (i, version) in versions.iter().enumerate() {
        for name in ["cri-o", "CRI-O", "crio"] {
            let rt = inferred(name, version);
            for (c, by_version) in facts {
                assert_eq!(
                    rt.supported.contains(*c),
                    by_version[i],
                    "{name} {version}: {c}"
                );
            }
        }
    }
}

#[test]
fn a_reported_nri_version_decides_the_adjustments() {
    // A containerd 2.3 built with a newer NRI.
    let rt = infer_capabilities("containerd", "v2.3.7", Some(NriVersion::new(0, 12, 3))).unwrap();
    assert!(rt.supported.contains(C::AdjustLinuxSysctl));
    // The runtime's part still decides CDI devices.
    let rt = infer_capabilities("containerd", "v2.0.5", Some(NriVersion::new(0, 12, 0))).unwrap();
    assert!(rt.supported.contains(C::AdjustLinuxSysctl));
    assert!(!rt.supported.contains(C::AdjustCdiDevices));
}

#[test]
fn versions_past_the_sources_read_keep_what_is_granted_and_know_nothing_else() {
    let rt = RuntimeCapabilities::of_runtime("v0.13.0", "containerd", "v2.5.0");
    assert_eq!(rt.basis, CapabilityBasis::Inferred);
    assert_eq!(rt.supports(C::AdjustLinuxSysctl.into()), Some(true));
    assert_eq!(rt.supports(C::AdjustLinuxMemoryTuning.into()), None);
    assert_eq!(rt.supports(C::EvictContainers.into()), None);
    let rt = RuntimeCapabilities::of_runtime("", "cri-o", "1.37.0");
    assert_eq!(
        rt.supports(C::AdjustLinuxSchedulingPolicy.into()),
        Some(true)
    );
    assert_eq!(rt.supports(C::AdjustLinuxSysctl.into()), None);
}

#[test]
fn no_inference_for_other_runtimes_or_versions_before_nri() {
    assert!(infer_capabilities("my-runtime", "v9.9.9", None).is_none());
    assert!(infer_capabilities("containerd", "v1.6.30", None).is_none());
    assert!(infer_capabilities("containerd", "(devel)", None).is_none());
    assert!(infer_capabilities("cri-o", "1.25.9", None).is_none());

    // Unknown runtime reporting its NRI version: events known, nothing else.
    let rt = RuntimeCapabilities::of_runtime("v0.12.3", "my-runtime", "v1");
    assert_eq!(rt.basis, CapabilityBasis::Unknown);
    assert_eq!(rt.supports(C::AdjustEnv.into()), None);
    assert_eq!(rt.supports(Event::UpdatePodSandbox.into()), Some(true));
    // Without an NRI version: the events every version delivers are
    // known to be delivered, the others unknown.
    let rt = RuntimeCapabilities::of_runtime("", "my-runtime", "v1");
    assert_eq!(rt.supports(Event::CreateContainer.into()), Some(true));
    assert_eq!(rt.supports(Event::UpdatePodSandbox.into()), None);
    let check = rt.check([C::AdjustLinuxSysctl.into(), Event::CreateContainer.into()]);
    assert!(check.missing.is_empty());
    assert_eq!(check.unknown, vec![C::AdjustLinuxSysctl.into()]);
    assert_eq!(check.to_string(), "ADJUST_LINUX_SYSCTL unknown");
}

#[test]
fn events_come_from_the_nri_version() {
    let rt = RuntimeCapabilities::of_runtime("", "containerd", "v2.1.9");
    assert_eq!(rt.events, EventMask::ALL_BEFORE_V0_10);
    assert_eq!(
        rt.supports(Event::ValidateContainerAdjustment.into()),
        Some(false)
    );
    let rt = RuntimeCapabilities::of_runtime("v0.12.3", "containerd", "v2.4.2");
    assert_eq!(rt.events, EventMask::ALL);
}

#[test]
fn checks_list_what_is_missing_once_and_in_order() {
    let rt = RuntimeCapabilities::of_runtime("", "containerd", "v2.1.9");
    let check = rt.check([
        Event::UpdatePodSandbox.into(),
        C::AdjustLinuxSysctl.into(),
        C::AdjustEnv.into(),
        C::AdjustLinuxSchedulingPolicy.into(),
        C::AdjustLinuxSysctl.into(),
    ]);
    assert_eq!(
        check.missing,
        vec![
            C::AdjustLinuxSchedulingPolicy.into(),
            C::AdjustLinuxSysctl.into(),
            Event::UpdatePodSandbox.into()
        ]
    );
    assert!(check.unknown.is_empty());
    assert!(!check.is_satisfied());
    assert_eq!(
        check.to_string(),
        "ADJUST_LINUX_SCHEDULING_POLICY, ADJUST_LINUX_SYSCTL, event UpdatePodSandbox not supported"
    );
}

#[test]
fn declarations_round_trip_and_win_over_inference() {
    let caps = CapabilitySet::of(&[C::AdjustEnv, C::AdjustLinuxSysctl]);
    let declared = RuntimeCapabilities::declared(caps, EventMask::ALL_BEFORE_V0_10);
    for tagged in [false, true] {
        let v = declared_nri_version(tagged, &declared);
        assert_eq!(nri_api::is_nri_rs_runtime(&v), tagged, "{v}");
        assert_eq!(NriVersion::parse(&v).unwrap(), NriVersion::CURRENT);
        assert_eq!(parse_declaration(&v), Some(declared), "{v}");
        // A declaring runtime named containerd is not inferred.
        let rt = RuntimeCapabilities::of_runtime(&v, "containerd", "v2.1.9");
        assert_eq!(rt, declared);
        assert_eq!(rt.supports(C::AdjustMounts.into()), Some(false));
        assert_eq!(rt.supports(Event::UpdatePodSandbox.into()), Some(false));
    }
}

/// What a declarer cannot tell travels as unknown (`nri-proxy` speaking
/// for a runtime past the facts, or an unknown one).
#[test]
fn declarations_carry_what_is_unknown() {
    for (name, version, nri) in [
        ("containerd", "v2.9.0", "v0.13.0"),
        ("my-runtime", "v1", "v0.12.3"),
        ("my-runtime", "v1", ""),
        ("containerd", "v2.1.9", ""),
    ] {
        let upstream = RuntimeCapabilities::of_runtime(nri, name, version);
        let v = declared_nri_version(true, &upstream);
        let back = parse_declaration(&v).unwrap();
        assert_eq!(back.basis, CapabilityBasis::Declared);
        for c in Capability::ALL {
            assert_eq!(
                back.supports((*c).into()),
                upstream.supports((*c).into()),
                "{v}: {c}"
            );
        }
        for e in Event::ALL_EVENTS {
            assert_eq!(
                back.supports(e.into()),
                upstream.supports(e.into()),
                "{v}: {e}"
            );
        }
    }
    let unknown = RuntimeCapabilities::of_runtime("", "my-runtime", "v1");
    assert_eq!(
        declared_nri_version(false, &unknown),
        "v0.12.5+caps-43-0-7ffffffffff.events-7ff-3800"
    );
}

#[test]
fn a_declaration_from_an_older_runtime_leaves_newer_capabilities_unknown() {
    // A declarer that knew 30 capabilities and has all of them.
    let v = format!("v0.12.5+nri-rs.caps-30-{:x}.events-3fff", (1u128 << 30) - 1);
    let rt = RuntimeCapabilities::of_runtime(&v, "nri-sim", "0.1.0");
    assert_eq!(rt.supports(C::AdjustPosixRlimits.into()), Some(true));
    assert_eq!(rt.supports(C::AdjustLinuxDevices.into()), None);
    // Bits the declarer set beyond what it counted are ignored; without
    // an events identifier the NRI version tells the events.
    let v = format!("v0.10.0+caps-1-{:x}", u128::MAX);
    let d = parse_declaration(&v).unwrap();
    assert_eq!(d.supported, CapabilitySet::of(&[C::AdjustPosixRlimits]));
    assert_eq!(d.events, EventMask::ALL);
    let d = parse_declaration("v0.9.0+caps-43-0").unwrap();
    assert_eq!(d.events, EventMask::ALL_BEFORE_V0_10);
}

#[test]
fn malformed_or_absent_declarations_are_none() {
    for v in [
        "",
        "v0.12.5",
        "v0.12.5+nri-rs",
        "v0.12.5+events-3fff",
        "v0.12.5+caps-",
        "v0.12.5+caps-43",
        "v0.12.5+caps-x-ff",
        "v0.12.5+caps-43-zz",
        "v0.12.5+caps-43-ff-zz",
        "v0.12.5+caps-43-ff-1-2",
        "v0.12.5+caps-43-ff.events-nothex",
        "v0.12.5+caps-43-ff.events-3fff-x",
        "v0.12.5+caps-43-ff.events-1-2-3",
        "v0.12.5+caps-43-ff.events-1ffffffff",
        "v0.12.5+caps-43-ffffffffffffffffffffffffffffffffff",
        "garbage+caps-43-ff",
    ] {
        assert_eq!(parse_declaration(v), None, "{v}");
    }
}

/// One adjustment per top-level field.
fn top_level_cases() -> Vec<(Capability, ContainerAdjustment)> {
    let mut cases = Vec::new();
    let mut case = |c: Capability, f: &dyn Fn(&mut ContainerAdjustment)| {
        let mut a = ContainerAdjustment::default();
        f(&mut a);
        cases.push((c, a));
    };
    case(C::AdjustAnnotations, &|a| {
        a.remove_annotation("x");
    });
    case(C::AdjustMounts, &|a| {
        a.add_mount(Mount::new("/x", "tmpfs", "tmpfs", ["ro"]));
    });
    case(C::AdjustEnv, &|a| {
        a.add_env("A", "1");
    });
    case(C::AdjustOciHooks, &|a| {
        a.add_hooks(Hooks {
            poststop: vec![Hook::default()],
            ..Default::default()
        });
    });
    case(C::AdjustPosixRlimits, &|a| {
        a.add_rlimit("RLIMIT_NOFILE", 2, 1);
    });
    case(C::AdjustCdiDevices, &|a| {
        a.cdi_devices.push(CdiDevice {
            name: "vendor.com/gpu=0".into(),
        });
    });
    case(C::AdjustLinuxContainerArgs, &|a| {
        a.set_args(["sh"]);
    });
    cases
}

/// One adjustment per field under `linux`.
fn linux_cases() -> Vec<(Capability, ContainerAdjustment)> {
    let mut cases = Vec::new();
    let mut case = |c: Capability, f: &dyn Fn(&mut ContainerAdjustment)| {
        let mut a = ContainerAdjustment::default();
        f(&mut a);
        cases.push((c, a));
    };
    case(C::AdjustLinuxDevices, &|a| {
        a.add_device(LinuxDevice::default());
    });
    case(C::AdjustLinuxCgroupsPath, &|a| {
        a.linux_mut().cgroups_path = "/x".into();
    });
    case(C::AdjustLinuxOomScore, &|a| {
        a.set_linux_oom_score_adj(Some(10));
    });
    case(C::AdjustLinuxIoPriority, &|a| {
        a.linux_mut().io_priority = Some(LinuxIoPriority::default());
    });
    case(C::AdjustLinuxSeccompPolicy, &|a| {
        a.linux_mut().seccomp_policy = Some(LinuxSeccomp::default());
    });
    case(C::AdjustLinuxNamespaces, &|a| {
        a.add_or_replace_namespace(LinuxNamespace::default());
    });
    case(C::AdjustLinuxSysctl, &|a| {
        a.linux_mut()
            .sysctl
            .insert("-kernel.x".into(), String::new());
    });
    case(C::AdjustLinuxNetworkDevices, &|a| {
        a.linux_mut()
            .net_devices
            .insert("eth1".into(), LinuxNetDevice::default());
    });
    case(C::AdjustLinuxSchedulingPolicy, &|a| {
        a.linux_mut().scheduler = Some(LinuxScheduler::default());
    });
    case(C::AdjustLinuxRdtClos, &|a| {
        a.linux_mut().rdt = Some(LinuxRdt::default());
    });
    case(C::AdjustLinuxMemoryPolicy, &|a| {
        a.linux_mut().memory_policy = Some(LinuxMemoryPolicy::default());
    });
    case(C::AdjustLinuxCpu, &|a| {
        a.set_linux_cpu_set_cpus("0-1");
    });
    case(C::AdjustLinuxMemoryLimit, &|a| {
        a.set_linux_memory_limit(1 << 30);
    });
    case(C::AdjustLinuxMemoryTuning, &|a| {
        a.set_linux_memory_swappiness(10);
    });
    case(C::AdjustLinuxHugepageLimits, &|a| {
        a.add_linux_hugepage_limit("2MB", 1 << 21);
    });
    case(C::AdjustLinuxBlockioClass, &|a| {
        a.set_linux_blockio_class("slow");
    });
    case(C::AdjustLinuxRdtClass, &|a| {
        a.set_linux_rdt_class("gold");
    });
    case(C::AdjustLinuxCgroupsUnified, &|a| {
        a.add_linux_unified("memory.high", "1G");
    });
    case(C::AdjustLinuxDeviceRules, &|a| {
        a.linux_resources_mut()
            .devices
            .push(LinuxDeviceCgroup::default());
    });
    case(C::AdjustLinuxPidLimit, &|a| {
        a.set_linux_pid_limits(100);
    });
    cases
}

/// Each field of an adjustment needs exactly its capability; together
/// they cover every ADJUST_* capability.
#[test]
fn each_adjustment_field_needs_its_capability() {
    let mut covered = CapabilitySet::EMPTY;
    let mut all = ContainerAdjustment::default();
    let mut seen = BTreeMap::new();
    for (c, a) in top_level_cases().iter().chain(&linux_cases()) {
        assert_eq!(adjustment_capabilities(a), CapabilitySet::from(*c), "{c}");
        covered.insert(*c);
        assert!(seen.insert(*c, ()).is_none(), "{c} twice");
        merge(&mut all, a);
    }
    let adjust_caps: CapabilitySet = Capability::ALL
        .iter()
        .copied()
        .filter(|c| c.name().starts_with("ADJUST_"))
        .collect();
    assert_eq!(covered, adjust_caps);
    assert_eq!(adjustment_capabilities(&all), adjust_caps);
    assert_eq!(
        adjustment_capabilities(&ContainerAdjustment::default()),
        CapabilitySet::EMPTY
    );
}

/// Adds the fields of `b` to `a` (only what the cases above set).
fn merge(a: &mut ContainerAdjustment, b: &ContainerAdjustment) {
    use prost::Message;
    // Protobuf merge: repeated fields append, maps and messages merge.
    a.merge(b.encode_to_vec().as_slice()).unwrap();
}
