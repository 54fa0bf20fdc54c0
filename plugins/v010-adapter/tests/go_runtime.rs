//! The adapter binary against the Go runtime peer (`nri-go-runtime`,
//! containerd/nri v0.12.5 adaptation), running a tiny v0.1.0 plugin (a
//! shell script) from a temp bin dir per a temp `conf.json`. Skipped (with
//! a message) when the peer is missing, unless `NRI_REQUIRE_INTEROP=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use nri_sample_common::testing::{GoRuntime, PluginProcess, go_peer, prelaunch_dirs};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_v010-adapter");

/// Appends each request to `requests.jsonl`; fails requests whose pod has
/// the annotation `v010.example.com/fail`.
const PLUGIN: &str = r#"#!/bin/sh
[ "$1" = invoke ] || { echo "usage: $0 invoke" >&2; exit 2; }
req=$(cat)
printf '%s\n' "$req" >> "$(dirname "$0")/../requests.jsonl"
case "$req" in
  *v010.example.com/fail*) echo '{"plugin":"recorder","version":"0.1","error":"refused by recorder"}' ;;
  *) echo '{"plugin":"recorder","version":"0.1","metadata":{"seen":"yes"}}' ;;
esac
"#;

fn install(dir: &Path) -> (String, String) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let p = bin.join("nri-recorder");
    std::fs::write(&p, PLUGIN).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    let conf = dir.join("conf.json");
    std::fs::write(
        &conf,
        r#"{"version":"0.1","plugins":[{"type":"nri-recorder","conf":{"mode":"test"}}]}"#,
    )
    .unwrap();
    (bin.display().to_string(), conf.display().to_string())
}

fn requests(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("requests.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn exercise(rt: &mut GoRuntime, dir: &Path) {
    rt.ok(json!({"cmd": "RunPodSandbox", "pod": {
        "id": "pod1", "name": "web", "namespace": "default", "uid": "u1", "pid": 4242,
        "labels": {"app": "web"}, "annotations": {"x": "y"},
        "linux": {"cgroups_path": "/kubepods/pod1",
                  "namespaces": [{"type": "network", "path": "/var/run/netns/n1"}]},
    }}));
    let r = rt.create_container("pod1", "ctr1", "app", json!({
        "pid": 77, "annotations": {"c": "d"},
        "linux": {"resources": {"memory": {"limit": {"value": "1073741824"}}, "cpu": {"shares": {"value": "512"}}}},
    }));
    assert_eq!(r["ok"], json!(true), "{r}");
    rt.ok(json!({"cmd": "StartContainer", "container_id": "ctr1"}));
    rt.ok(json!({"cmd": "StopContainer", "container_id": "ctr1"}));
    rt.ok(json!({"cmd": "StopPodSandbox", "pod_id": "pod1"}));

    let reqs = requests(dir);
    let seen: Vec<(String, String)> = reqs
        .iter()
        .map(|r| {
            (
                r["state"].as_str().unwrap().to_owned(),
                r["id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let s = |a: &str, b: &str| (a.to_owned(), b.to_owned());
    assert_eq!(
        seen,
        [
            s("create", "pod1"),
            s("create", "ctr1"),
            s("delete", "ctr1"),
            s("delete", "pod1")
        ]
    );
    let pod = &reqs[0];
    assert_eq!(pod["version"], "0.1");
    assert_eq!(pod["conf"], json!({"mode": "test"}));
    assert_eq!(pod["sandboxID"], "pod1");
    assert_eq!(pod["pid"], 4242);
    assert_eq!(pod["labels"], json!({"app": "web"}));
    assert_eq!(
        pod["spec"]["namespaces"],
        json!({"network": "/var/run/netns/n1"})
    );
    assert_eq!(pod["spec"]["cgroupsPath"], "/kubepods/pod1");
    assert_eq!(pod["spec"]["annotations"], json!({"x": "y"}));
    let ctr = &reqs[1];
    assert_eq!(ctr["sandboxID"], "pod1");
    assert_eq!(ctr["pid"], 77);
    assert_eq!(ctr["labels"], json!({"app": "web"}), "sandbox labels");
    assert_eq!(
        ctr["spec"]["resources"],
        json!({"memory": {"limit": 1073741824}, "cpu": {"shares": 512}})
    );
    assert_eq!(ctr["spec"]["annotations"], json!({"c": "d"}));

    // A failing v0.1.0 plugin fails RunPodSandbox and StartContainer with
    // its message, but not StopContainer.
    let r = rt.cmd(json!({"cmd": "RunPodSandbox", "pod": {
        "id": "pod2", "name": "bad", "annotations": {"v010.example.com/fail": "1"}}}));
    assert_eq!(r["ok"], json!(false), "{r}");
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("plugin: nri-recorder: refused by recorder"),
        "{r}"
    );
    rt.ok(json!({"cmd": "RunPodSandbox", "pod": {"id": "pod3", "name": "ok"}}));
    let r = rt.create_container(
        "pod3",
        "ctr3",
        "app",
        json!({"annotations": {"v010.example.com/fail": "1"}}),
    );
    assert_eq!(r["ok"], json!(true), "{r}");
    let r = rt.cmd(json!({"cmd": "StartContainer", "container_id": "ctr3"}));
    assert_eq!(r["ok"], json!(false), "{r}");
    rt.ok(json!({"cmd": "StopContainer", "container_id": "ctr3"}));
}

#[test]
fn external_adapter_runs_v010_plugins() {
    let Some(mut rt) = GoRuntime::start(&[]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (bin, conf) = install(dir.path());
    let _p = PluginProcess::external(
        BIN,
        &rt.socket,
        &["-idx", "00", "-bin-dir", &bin, "-conf", &conf],
    );
    rt.wait_plugins(1);
    exercise(&mut rt, dir.path());
    rt.stop();
}

#[test]
fn prelaunched_adapter_runs_v010_plugins() {
    if go_peer("nri-go-runtime").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (bin, conf) = install(dir.path());
    let (_d, flags) = prelaunch_dirs(
        BIN,
        "00-v010-adapter",
        &["-bin-dir", &bin, "-conf", &conf],
        None,
    );
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut rt = GoRuntime::start(&flags).unwrap();
    rt.wait_plugins(1);
    exercise(&mut rt, dir.path());
    rt.stop();
}

#[test]
fn conf_changes_apply_without_restart() {
    let Some(mut rt) = GoRuntime::start(&[]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (bin, conf) = install(dir.path());
    std::fs::remove_file(&conf).unwrap();
    let _p = PluginProcess::external(
        BIN,
        &rt.socket,
        &["-idx", "00", "-bin-dir", &bin, "-conf", &conf],
    );
    rt.wait_plugins(1);
    rt.ok(json!({"cmd": "RunPodSandbox", "pod": {"id": "a", "name": "a"}}));
    assert!(
        requests(dir.path()).is_empty(),
        "no conf.json: nothing runs"
    );
    std::fs::write(
        &conf,
        r#"{"version":"0.1","plugins":[{"type":"nri-recorder"}]}"#,
    )
    .unwrap();
    rt.ok(json!({"cmd": "RunPodSandbox", "pod": {"id": "b", "name": "b"}}));
    // RunPodSandbox answers after the v0.1.0 plugins ran.
    assert_eq!(requests(dir.path())[0]["id"], "b");
    rt.stop();
}
