//! `ulimit-adjuster` against the Go runtime peer (containerd/nri v0.12.5
//! adaptation): the merged adjustment carries the annotated rlimits, and a
//! bad annotation fails CreateContainer with a message naming it.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use nri_sample_common::testing::{GoRuntime, PluginProcess, adjustment, prelaunch_dirs};
use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_ulimit-adjuster");

#[test]
fn external_plugin_sets_rlimits() {
    let Some(mut rt) = GoRuntime::start(&[]) else {
        return;
    };
    let _plugin = PluginProcess::external(BIN, &rt.socket, &["-idx", "10"]);
    rt.wait_plugins(1);
    rt.run_pod(
        "p1",
        "pod1",
        json!({
            "ulimits.noderesource.dev/container.c1": "- type: nofile\n  soft: 1024\n  hard: 4096\n- type: RLIMIT_MEMLOCK\n  hard: 987654\n",
            "ulimits.noderesource.dev/container.bad": "- type: NOFILES\n  hard: 1\n",
        }),
    );
    let r = rt.create_container("p1", "c1", "c1", json!({}));
    let adj = adjustment(&r);
    assert_eq!(
        adj["rlimits"],
        json!([
            {"type": "RLIMIT_NOFILE", "hard": "4096", "soft": "1024"},
            {"type": "RLIMIT_MEMLOCK", "hard": "987654"}
        ]),
        "{r}"
    );

    // Not annotated: nothing.
    let r = rt.create_container("p1", "c2", "c2", json!({}));
    assert!(adjustment(&r).get("rlimits").is_none(), "{r}");

    // A bad annotation fails the creation, naming the key and the value.
    let r = rt.create_container("p1", "c3", "bad", json!({}));
    assert_eq!(r["ok"], json!(false), "{r}");
    let err = r["error"].as_str().unwrap();
    assert!(
        err.contains("ulimits.noderesource.dev/container.bad"),
        "{err}"
    );
    assert!(err.contains("NOFILES"), "{err}");
    rt.stop();
}

#[test]
fn prelaunched_plugin_sets_rlimits() {
    let (_dir, flags) = prelaunch_dirs(BIN, "20-ulimit-adjuster", &[], None);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let Some(mut rt) = GoRuntime::start(&flags) else {
        return;
    };
    rt.wait_plugins(1);
    rt.run_pod(
        "p1",
        "pod1",
        json!({"ulimits.nri.containerd.io/container.c1": "- {type: core, hard: 0}"}),
    );
    let r = rt.create_container("p1", "c1", "c1", json!({}));
    assert_eq!(
        adjustment(&r)["rlimits"],
        json!([{"type": "RLIMIT_CORE"}]),
        "{r}"
    );
    rt.stop();
}
