//! `hook-injector` against the Go runtime peer (containerd/nri v0.12.5
//! adaptation): hooks from a hooks.d directory are matched on commands,
//! annotations and mounts and come back in the merged adjustment; new
//! files are picked up without a restart.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;

use nri_sample_common::testing::{GoRuntime, PluginProcess, adjustment};
use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_hook-injector");

fn hook_file(dir: &Path, name: &str, exe: &Path, tag: &str, when: &str, stages: &str) {
    std::fs::write(
        dir.join(name),
        format!(
            r#"{{"version": "1.0.0", "hook": {{"path": "{}", "args": ["demo-hook.sh", "{tag}"], "env": ["DEMO_HOOK={tag}"], "timeout": 10}}, "when": {when}, "stages": {stages}}}"#,
            exe.display()
        ),
    )
    .unwrap();
}

#[test]
fn injects_matching_hooks() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = tmp.path().join("demo-hook.sh");
    std::fs::write(&exe, "#!/bin/sh\n").unwrap();
    let dir = tmp.path().join("hooks.d");
    std::fs::create_dir_all(&dir).unwrap();
    hook_file(
        &dir,
        "always-inject.json",
        &exe,
        "always",
        r#"{"always": true}"#,
        r#"["prestart", "poststop"]"#,
    );
    hook_file(
        &dir,
        "busybox-inject.json",
        &exe,
        "busybox",
        r#"{"commands": ["busybox"]}"#,
        r#"["poststart"]"#,
    );
    hook_file(
        &dir,
        "traced.json",
        &exe,
        "traced",
        r#"{"annotations": {"^hooks\\.example\\.com/trace$": "^true$"}, "hasBindMounts": true}"#,
        r#"["createContainer"]"#,
    );

    let Some(mut rt) = GoRuntime::start(&[]) else {
        return;
    };
    let dir_arg = dir.display().to_string();
    let _plugin = PluginProcess::external(BIN, &rt.socket, &["-idx", "10", "-hooks-dir", &dir_arg]);
    rt.wait_plugins(1);
    rt.run_pod("p1", "pod1", json!({"hooks.example.com/trace": "true"}));

    let r = rt.create_container(
        "p1",
        "c1",
        "c1",
        json!({"args": ["busybox", "sleep", "inf"]}),
    );
    let hooks = &adjustment(&r)["hooks"];
    let always = json!({"path": exe.display().to_string(), "args": ["demo-hook.sh", "always"], "env": ["DEMO_HOOK=always"], "timeout": {"value": "10"}});
    assert_eq!(hooks["create_runtime"], json!([always]), "{r}");
    assert_eq!(hooks["poststop"], json!([always]), "{r}");
    assert_eq!(hooks["poststart"][0]["args"][1], "busybox", "{r}");
    assert!(hooks.get("create_container").is_none(), "no mounts: {r}");

    // With a mount: the annotation+hasBindMounts hook too; not busybox.
    let r = rt.create_container(
        "p1",
        "c2",
        "c2",
        json!({"args": ["/bin/sh"], "mounts": [{"source": "/a", "destination": "/b", "type": "bind", "options": ["bind"]}]}),
    );
    let hooks = &adjustment(&r)["hooks"];
    assert_eq!(hooks["create_container"][0]["args"][1], "traced", "{r}");
    assert!(hooks.get("poststart").is_none(), "{r}");

    // A new file is picked up (watching is on by default).
    hook_file(
        &dir,
        "late.json",
        &exe,
        "late",
        r#"{"commands": ["^/bin/sh$"]}"#,
        r#"["startContainer"]"#,
    );
    let r = rt.create_container("p1", "c3", "c3", json!({"args": ["/bin/sh"]}));
    assert_eq!(
        adjustment(&r)["hooks"]["start_container"][0]["args"][1],
        "late",
        "{r}"
    );

    // A command condition and a container without args: the creation fails, naming the hook.
    let r = rt.create_container("p1", "c4", "c4", json!({}));
    assert_eq!(r["ok"], json!(false), "{r}");
    assert!(
        r["error"].as_str().unwrap().contains("busybox-inject.json"),
        "{r}"
    );
    rt.stop();
}
