//! The differ binary against the Go runtime peer (`nri-go-runtime`,
//! containerd/nri v0.12.5 adaptation), with the Go plugin
//! `nri-go-plugin --idx 50 --adjust adjusting` between its instances: the
//! instance at 99 logs the env var and annotation the Go plugin added.
//! Skipped (with a message) when the peers are missing, unless
//! `NRI_REQUIRE_INTEROP=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::{Child, Command, Stdio};

use nri_sample_common::testing::{GoRuntime, PluginProcess, go_peer, prelaunch_dirs};
use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_nri-differ");

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn go_plugin(bin: &Path, socket: &Path) -> Killed {
    Killed(
        Command::new(bin)
            .args([
                "--name",
                "go-plugin",
                "--idx",
                "50",
                "--adjust",
                "adjusting",
                "--socket",
            ])
            .arg(socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    )
}

fn exercise(rt: &mut GoRuntime, log: &Path) {
    rt.run_pod("p1", "pod1", json!({}));
    let r = rt.create_container("p1", "c1", "app", json!({"env": ["PATH=/bin"]}));
    assert_eq!(r["ok"], json!(true), "{r}");
    rt.ok(json!({"cmd": "StartContainer", "container_id": "c1"}));
    // Every instance answered before the runtime did: the lines are there.
    let text = std::fs::read_to_string(log).unwrap();
    assert!(
        text.contains("[99] CreateContainer: container: create: env.1: From: <nil> -> To: BENCH_PLUGIN_50=50-go-plugin"),
        "{text}"
    );
    assert!(
        text.contains("[99] CreateContainer: container: create: annotations.bench.example.com/plugin-50: From: <nil> -> To: 50-go-plugin"),
        "{text}"
    );
    assert!(
        text.contains("[99] RunPodSandbox: pod: <no changes>"),
        "{text}"
    );
    assert!(
        text.contains("[99] StartContainer: container: <no changes>"),
        "{text}"
    );
    assert!(
        !text.contains("[00] CreateContainer: container: create"),
        "{text}"
    );
}

#[test]
fn external_differ_shows_changes_of_the_plugin_in_between() {
    let Some(go) = go_peer("nri-go-plugin") else {
        return;
    };
    let Some(mut rt) = GoRuntime::start(&[]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("differ.log");
    let _differ = PluginProcess::external(
        BIN,
        &rt.socket,
        &["-indices", "0,99", "-log-file", log.to_str().unwrap()],
    );
    let _go = go_plugin(&go, &rt.socket);
    rt.wait_plugins(3);
    let plugins = rt.ok(json!({"cmd": "list_plugins"}));
    let names: Vec<&str> = plugins["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["00-differ", "50-go-plugin", "99-differ"]);
    exercise(&mut rt, &log);
    rt.stop();
}

#[test]
fn prelaunched_differ_starts_the_other_indices_from_its_config() {
    let Some(go) = go_peer("nri-go-plugin") else {
        return;
    };
    if go_peer("nri-go-runtime").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("differ.log");
    // The socket path of the runtime is known only once it starts: use a
    // fixed path in the temp dir for both.
    let socket = dir.path().join("nri.sock");
    let config = format!(
        "indices: \"0,99\"\nlogFile: {}\nsocketPath: {}\n",
        log.display(),
        socket.display()
    );
    let (_d, mut flags) = prelaunch_dirs(BIN, "00-differ", &[], Some(&config));
    flags.retain(|f| f != "--no-listen");
    flags.push("--socket".into());
    flags.push(socket.display().to_string());
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut rt = GoRuntime::start(&flags).unwrap();
    let _go = go_plugin(&go, &socket);
    rt.wait_plugins(3);
    exercise(&mut rt, &log);
    rt.stop();
}
