//! `template` against the Go runtime peer (containerd/nri v0.12.5
//! adaptation): registers for every event but validation, answers a whole
//! pod/container lifecycle without error and adjusts nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use nri_sample_common::testing::{GoRuntime, PluginProcess, adjustment, prelaunch_dirs};
use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_template-under-test");

fn lifecycle(rt: &mut GoRuntime) {
    rt.run_pod("p1", "pod1", json!({"a": "b"}));
    rt.ok(json!({"cmd": "UpdatePodSandbox", "pod_id": "p1"}));
    rt.ok(json!({"cmd": "PostUpdatePodSandbox", "pod_id": "p1"}));
    let r = rt.create_container("p1", "c1", "c1", json!({"args": ["sleep", "inf"]}));
    let adj = adjustment(&r);
    for field in ["env", "annotations", "mounts", "rlimits", "CDI_devices"] {
        assert!(adj.get(field).is_none(), "{field} in {r}");
    }
    for cmd in [
        "PostCreateContainer",
        "StartContainer",
        "PostStartContainer",
        "UpdateContainer",
        "PostUpdateContainer",
        "StopContainer",
        "RemoveContainer",
    ] {
        rt.ok(json!({"cmd": cmd, "container_id": "c1"}));
    }
    rt.ok(json!({"cmd": "StopPodSandbox", "pod_id": "p1"}));
    rt.ok(json!({"cmd": "RemovePodSandbox", "pod_id": "p1"}));
}

#[test]
fn external_subscribes_as_the_go_template() {
    let Some(mut rt) = GoRuntime::start(&[]) else {
        return;
    };
    let mut plugin = PluginProcess::external(BIN, &rt.socket, &["-idx", "10", "-name", "tmpl"]);
    rt.wait_plugins(1);
    let list = rt.ok(json!({"cmd": "list_plugins"}));
    assert_eq!(list["plugins"][0]["name"], "10-tmpl", "{list}");
    // The Go template's subscription: every pod and container event but the
    // pod updates and validation.
    assert_eq!(list["plugins"][0]["events"], json!(0x7FF), "{list}");
    lifecycle(&mut rt);
    assert!(plugin.is_running());
    rt.stop();
}

#[test]
fn prelaunched_with_config_and_validator_flag() {
    let (_dir, flags) = prelaunch_dirs(
        BIN,
        "40-template",
        &["-validate", "-pod-updates"],
        Some("cfgParam1: hello\n"),
    );
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let Some(mut rt) = GoRuntime::start(&flags) else {
        return;
    };
    rt.wait_plugins(1);
    let list = rt.ok(json!({"cmd": "list_plugins"}));
    assert_eq!(list["plugins"][0]["events"], json!(0x3FFF), "{list}");
    lifecycle(&mut rt);
    rt.stop();
}

#[test]
fn prelaunched_bad_config_is_refused() {
    let (_dir, flags) = prelaunch_dirs(BIN, "40-template", &[], Some("cfgParam1: [1, 2]\n"));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let Some(mut rt) = GoRuntime::start(&flags) else {
        return;
    };
    let r = rt.cmd(json!({"cmd": "wait_plugins", "count": 1, "timeout_ms": 1500}));
    assert_eq!(r["ok"], json!(false), "{r}");
    rt.stop();
}
