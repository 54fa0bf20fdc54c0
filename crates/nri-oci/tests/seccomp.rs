//! `linux.seccomp` conversion.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use nri_api::api;
use nri_oci::Error;
use serde_json::json;

fn policy() -> api::LinuxSeccomp {
    api::LinuxSeccomp {
        default_action: "SCMP_ACT_ERRNO".into(),
        default_errno: api::OptionalUInt32::some(1u32),
        architectures: vec![
            "SCMP_ARCH_X86_64".into(),
            "SCMP_ARCH_X86".into(),
            "SCMP_ARCH_X32".into(),
            "SCMP_ARCH_AARCH64".into(),
        ],
        flags: vec![
            "SECCOMP_FILTER_FLAG_LOG".into(),
            "SECCOMP_FILTER_FLAG_SPEC_ALLOW".into(),
        ],
        listener_path: "/run/seccomp-agent.sock".into(),
        listener_metadata: "pod=web".into(),
        syscalls: vec![
            api::LinuxSyscall {
                names: vec!["read".into(), "write".into(), "exit_group".into()],
                action: "SCMP_ACT_ALLOW".into(),
                errno_ret: None,
                args: vec![],
            },
            api::LinuxSyscall {
                names: vec!["personality".into()],
                action: "SCMP_ACT_ALLOW".into(),
                errno_ret: None,
                args: vec![api::LinuxSeccompArg {
                    index: 0,
                    value: 0xffff_ffff,
                    value_two: 0,
                    op: "SCMP_CMP_EQ".into(),
                }],
            },
            api::LinuxSyscall {
                names: vec!["clone".into()],
                action: "SCMP_ACT_ERRNO".into(),
                errno_ret: api::OptionalUInt32::some(38u32),
                args: vec![api::LinuxSeccompArg {
                    index: 0,
                    value: 0x7e02_0000,
                    value_two: 0x7e02_0000,
                    op: "SCMP_CMP_MASKED_EQ".into(),
                }],
            },
            api::LinuxSyscall {
                names: vec!["ptrace".into()],
                action: "SCMP_ACT_NOTIFY".into(),
                errno_ret: None,
                args: vec![],
            },
        ],
    }
}

fn adj(p: api::LinuxSeccomp) -> api::ContainerAdjustment {
    linux(api::LinuxContainerAdjustment {
        seccomp_policy: Some(p),
        ..Default::default()
    })
}

#[test]
fn full_policy_conversion() {
    let spec = adjusted(&adj(policy()));
    let s = &json(&spec)["linux"]["seccomp"];
    assert_eq!(s["defaultAction"], "SCMP_ACT_ERRNO");
    assert_eq!(s["defaultErrnoRet"], 1);
    assert_eq!(s["architectures"][0], "SCMP_ARCH_X86_64");
    assert_eq!(
        s["flags"],
        json!(["SECCOMP_FILTER_FLAG_LOG", "SECCOMP_FILTER_FLAG_SPEC_ALLOW"])
    );
    assert_eq!(s["listenerPath"], "/run/seccomp-agent.sock");
    assert_eq!(
        s["syscalls"][2],
        json!({
            "names": ["clone"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38,
            "args": [{"index": 0, "value": 0x7e02_0000u64, "valueTwo": 0x7e02_0000u64, "op": "SCMP_CMP_MASKED_EQ"}]
        })
    );
    assert_eq!(s["syscalls"][1]["args"][0].get("valueTwo"), None);
    snap!("full_policy_conversion", s);
}

#[test]
fn policy_replaces_previous_one() {
    let mut spec = adjusted(&adj(policy()));
    let minimal = api::LinuxSeccomp {
        default_action: "SCMP_ACT_ALLOW".into(),
        ..Default::default()
    };
    applier()
        .apply_adjustment(&mut spec, &adj(minimal))
        .unwrap();
    assert_eq!(
        json(&spec)["linux"]["seccomp"],
        json!({"defaultAction": "SCMP_ACT_ALLOW"})
    );
}

#[test]
fn every_oci_action_and_arch_round_trips() {
    for action in [
        "SCMP_ACT_KILL",
        "SCMP_ACT_KILL_THREAD",
        "SCMP_ACT_KILL_PROCESS",
        "SCMP_ACT_TRAP",
        "SCMP_ACT_ERRNO",
        "SCMP_ACT_NOTIFY",
        "SCMP_ACT_TRACE",
        "SCMP_ACT_LOG",
        "SCMP_ACT_ALLOW",
    ] {
        let spec = adjusted(&adj(api::LinuxSeccomp {
            default_action: action.into(),
            ..Default::default()
        }));
        assert_eq!(json(&spec)["linux"]["seccomp"]["defaultAction"], action);
    }
    let arches = [
        "SCMP_ARCH_X86",
        "SCMP_ARCH_X86_64",
        "SCMP_ARCH_X32",
        "SCMP_ARCH_ARM",
        "SCMP_ARCH_AARCH64",
        "SCMP_ARCH_MIPS",
        "SCMP_ARCH_MIPS64",
        "SCMP_ARCH_MIPS64N32",
        "SCMP_ARCH_MIPSEL",
        "SCMP_ARCH_MIPSEL64",
        "SCMP_ARCH_MIPSEL64N32",
        "SCMP_ARCH_PPC",
        "SCMP_ARCH_PPC64",
        "SCMP_ARCH_PPC64LE",
        "SCMP_ARCH_S390",
        "SCMP_ARCH_S390X",
        "SCMP_ARCH_PARISC",
        "SCMP_ARCH_PARISC64",
        "SCMP_ARCH_RISCV64",
        "SCMP_ARCH_LOONGARCH64",
        "SCMP_ARCH_M68K",
        "SCMP_ARCH_SH",
        "SCMP_ARCH_SHEB",
    ];
    let spec = adjusted(&adj(api::LinuxSeccomp {
        default_action: "SCMP_ACT_ALLOW".into(),
        architectures: arches.iter().map(|a| a.to_string()).collect(),
        flags: vec![
            "SECCOMP_FILTER_FLAG_TSYNC".into(),
            "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV".into(),
        ],
        ..Default::default()
    }));
    assert_eq!(
        json(&spec)["linux"]["seccomp"]["architectures"],
        json!(arches)
    );
}

#[test]
fn unknown_strings_are_typed_errors() {
    let cases: Vec<(api::LinuxSeccomp, &str, &str)> = vec![
        (
            api::LinuxSeccomp {
                default_action: "allow".into(),
                ..Default::default()
            },
            "linux.seccomp_policy.default_action",
            "allow",
        ),
        (
            api::LinuxSeccomp {
                default_action: "".into(),
                ..Default::default()
            },
            "linux.seccomp_policy.default_action",
            "",
        ),
        (
            api::LinuxSeccomp {
                architectures: vec!["x86_64".into()],
                ..policy()
            },
            "linux.seccomp_policy.architectures",
            "x86_64",
        ),
        (
            api::LinuxSeccomp {
                flags: vec!["SECCOMP_FILTER_FLAG_NOPE".into()],
                ..policy()
            },
            "linux.seccomp_policy.flags",
            "SECCOMP_FILTER_FLAG_NOPE",
        ),
        (
            api::LinuxSeccomp {
                syscalls: vec![api::LinuxSyscall {
                    names: vec!["read".into()],
                    action: "SCMP_ACT_MAYBE".into(),
                    ..Default::default()
                }],
                ..policy()
            },
            "linux.seccomp_policy.syscalls.action",
            "SCMP_ACT_MAYBE",
        ),
        (
            api::LinuxSeccomp {
                syscalls: vec![api::LinuxSyscall {
                    names: vec!["read".into()],
                    action: "SCMP_ACT_ALLOW".into(),
                    args: vec![api::LinuxSeccompArg {
                        op: "==".into(),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..policy()
            },
            "linux.seccomp_policy.syscalls.args.op",
            "==",
        ),
    ];
    for (p, want_field, want_value) in cases {
        let mut spec = base_spec();
        let err = applier().apply_adjustment(&mut spec, &adj(p)).unwrap_err();
        match err {
            Error::UnknownValue { field, value } => {
                assert_eq!((field, value.as_str()), (want_field, want_value));
            }
            other => panic!("unexpected error {other:?}"),
        }
        assert_eq!(spec, base_spec());
    }
}

#[test]
fn syscall_without_names_is_rejected() {
    let p = api::LinuxSeccomp {
        syscalls: vec![api::LinuxSyscall {
            action: "SCMP_ACT_ALLOW".into(),
            ..Default::default()
        }],
        ..policy()
    };
    let err = applier()
        .apply_adjustment(&mut base_spec(), &adj(p))
        .unwrap_err();
    assert!(matches!(
        err,
        Error::MissingField {
            field: "linux.seccomp_policy.syscalls",
            ..
        }
    ));
}
