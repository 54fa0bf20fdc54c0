//! `logger` against the Go runtime peer (containerd/nri v0.12.5
//! adaptation): external with flags, and pre-launched with its YAML
//! configuration from the runtime's config dir (log file, events, env and
//! annotation).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use nri_sample_common::testing::{GoRuntime, PluginProcess, adjustment, prelaunch_dirs};
use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_logger");

#[test]
fn external_with_flags() {
    let Some(mut rt) = GoRuntime::start(&[]) else {
        return;
    };
    let mut plugin = PluginProcess::external(
        BIN,
        &rt.socket,
        &[
            "-idx",
            "10",
            "-events",
            "runpodsandbox,createcontainer",
            "-add-env",
            "LOGGER_ENV",
            "-set-annotation",
            "logger.example.com/pid",
        ],
    );
    rt.wait_plugins(1);
    let list = rt.ok(json!({"cmd": "list_plugins"}));
    assert_eq!(list["plugins"][0]["name"], "10-logger", "{list}");
    assert_eq!(
        list["plugins"][0]["events_pretty"], "RunPodSandbox,CreateContainer",
        "{list}"
    );

    rt.run_pod("p1", "pod1", json!({}));
    let r = rt.create_container("p1", "c1", "c1", json!({}));
    let adj = adjustment(&r);
    let pid = format!("logger-pid-{}", plugin.child.id());
    assert_eq!(
        adj["env"],
        json!([{"key": "LOGGER_ENV", "value": pid}]),
        "{r}"
    );
    assert_eq!(
        adj["annotations"]["logger.example.com/pid"],
        json!(pid),
        "{r}"
    );
    assert!(plugin.is_running());
    rt.stop();
}

#[test]
fn bad_events_flag_is_fatal_as_in_go() {
    let out = std::process::Command::new(BIN)
        .args(["-events", "createcontainer,bogus"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bogus"), "{err}");
}

#[test]
fn prelaunched_with_config() {
    let logdir = tempfile::tempdir().unwrap();
    let log = logdir.path().join("logger.log");
    let config = format!(
        "logFile: {}\nevents: [RunPodSandbox, CreateContainer, StartContainer]\naddAnnotation: logger.example.com/added\naddEnv: LOGGER_ADDED\n",
        log.display()
    );
    let (_dir, flags) = prelaunch_dirs(BIN, "30-logger", &[], Some(&config));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let Some(mut rt) = GoRuntime::start(&flags) else {
        return;
    };
    rt.wait_plugins(1);
    let list = rt.ok(json!({"cmd": "list_plugins"}));
    assert_eq!(list["plugins"][0]["name"], "30-logger", "{list}");
    assert_eq!(
        list["plugins"][0]["events_pretty"], "RunPodSandbox,CreateContainer,StartContainer",
        "{list}"
    );
    rt.run_pod("p1", "pod1", json!({}));
    let r = rt.create_container("p1", "c1", "c1", json!({}));
    let adj = adjustment(&r);
    assert!(
        adj["annotations"]["logger.example.com/added"]
            .as_str()
            .unwrap()
            .starts_with("logger-pid-"),
        "{r}"
    );
    assert_eq!(adj["env"][0]["key"], "LOGGER_ADDED", "{r}");
    rt.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("RunPodSandbox: pod:"), "{text}");
    assert!(text.contains("CreateContainer: container:"), "{text}");
    // The bodies are YAML, as the Go logger writes them.
    assert!(text.contains("RunPodSandbox:    id: p1"), "{text}");
    assert!(
        text.contains("RunPodSandbox:    namespace: default"),
        "{text}"
    );
    assert!(
        text.contains("CreateContainer:    pod_sandbox_id: p1"),
        "{text}"
    );
    assert!(!text.contains("PodSandbox {"), "{text}");
    assert!(!text.contains('\x1b'), "colour codes in a log file: {text}");
}

#[test]
fn prelaunched_bad_config_is_refused() {
    // An unknown event; and, as in Go, no `events` without `-events`.
    for config in ["events: [NoSuchEvent]\n", "addEnv: LOGGER_ENV\n"] {
        let (_dir, flags) = prelaunch_dirs(BIN, "30-logger", &[], Some(config));
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let Some(mut rt) = GoRuntime::start(&flags) else {
            return;
        };
        // The plugin fails its Configure: it never counts as registered.
        let r = rt.cmd(json!({"cmd": "wait_plugins", "count": 1, "timeout_ms": 1500}));
        assert_eq!(r["ok"], json!(false), "{config}: {r}");
        rt.stop();
    }
}
