//! The real Go plugins (containerd/nri pkg/stub v0.12.5 and v0.8.0, built
//! into interop/bin by scripts/build-go-peers.sh) against our runtime: they
//! register, receive every event in both dialects, and their adjustments
//! are merged. Missing peers: the test fails if NRI_REQUIRE_INTEROP=1,
//! otherwise it says why and returns.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use common::*;
use nri_runtime::Adaptation;
use tokio::io::{AsyncBufReadExt, BufReader};

struct GoPlugin {
    child: tokio::process::Child,
    lines: tokio::task::JoinHandle<Vec<serde_json::Value>>,
}

fn spawn_go(bin: &PathBuf, args: &[&str]) -> GoPlugin {
    let mut child = tokio::process::Command::new(bin)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let lines = tokio::spawn(async move {
        let mut v = Vec::new();
        let mut l = BufReader::new(out).lines();
        while let Ok(Some(line)) = l.next_line().await {
            if let Ok(j) = serde_json::from_str(&line) {
                v.push(j);
            }
        }
        v
    });
    GoPlugin { child, lines }
}

async fn lifecycle(a: &Adaptation, tag: &str) -> nri_api::api::ContainerAdjustment {
    let p = pod(&format!("pod-{tag}"));
    let c = ctr(&p.id, &format!("ctr-{tag}"));
    a.run_pod_sandbox(&p).await.unwrap();
    a.update_pod_sandbox(&p, None, None).await.unwrap();
    a.post_update_pod_sandbox(&p).await.unwrap();
    let out = a.create_container(&p, &c).await.unwrap();
    a.post_create_container(&p, &c).await.unwrap();
    a.start_container(&p, &c).await.unwrap();
    a.post_start_container(&p, &c).await.unwrap();
    a.update_container(&p, &c, None).await.unwrap();
    a.post_update_container(&p, &c).await.unwrap();
    a.stop_container(&p, &c).await.unwrap();
    a.remove_container(&p, &c).await.unwrap();
    a.stop_pod_sandbox(&p).await.unwrap();
    a.remove_pod_sandbox(&p).await.unwrap();
    out.adjustment
}

fn events(lines: &[serde_json::Value], plugin: &str) -> Vec<String> {
    lines
        .iter()
        .filter(|l| l["plugin"] == plugin && l.get("seq").is_some())
        .map(|l| l["event"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Stops the runtime (the plugins get Shutdown), waits for the plugins to
/// exit and returns the lines they printed.
async fn stop_and_collect<const N: usize>(
    a: &Adaptation,
    plugins: [GoPlugin; N],
) -> Vec<serde_json::Value> {
    a.stop().await;
    let mut all = Vec::new();
    for mut g in plugins {
        let _ = tokio::time::timeout(Duration::from_secs(5), g.child.wait()).await;
        all.extend(g.lines.await.unwrap());
    }
    all
}

/// Asserts that `plugin`'s CreateContainer line (dumped with `--dump`)
/// shows the container with `earlier`'s env variable, annotation and mount
/// (as the adjusting Go peers add them).
fn sees_adjustment(lines: &[serde_json::Value], plugin: &str, earlier: &str) {
    let idx = earlier.split('-').next().unwrap();
    let line = lines
        .iter()
        .find(|l| l["plugin"] == plugin && l["event"] == "CreateContainer")
        .unwrap_or_else(|| panic!("no CreateContainer from {plugin}: {lines:#?}"));
    let c = &line["container"];
    let env: Vec<&str> = c["env"]
        .as_array()
        .map(|v| v.iter().filter_map(|e| e.as_str()).collect())
        .unwrap_or_default();
    assert!(
        env.contains(&format!("BENCH_PLUGIN_{idx}={earlier}").as_str()),
        "{plugin} did not see {earlier}'s env: {c:#}"
    );
    assert_eq!(env.len(), 1, "{c:#}");
    assert_eq!(
        c["annotations"][format!("bench.example.com/plugin-{idx}")].as_str(),
        Some(earlier),
        "{c:#}"
    );
    let mounts = c["mounts"].as_array().cloned().unwrap_or_default();
    assert!(
        mounts
            .iter()
            .any(|m| m["destination"] == format!("/mnt/nri-plugin-{idx}").as_str()),
        "{c:#}"
    );
}

/// The other way round from the test above: a v0.8 plugin adjusts, a
/// v0.12 plugin after it sees the adjusted container.
#[tokio::test(flavor = "multi_thread")]
async fn a_go_plugin_sees_the_container_adjusted_before_it() {
    let (Some(modern), Some(legacy)) = (go_peer("nri-go-plugin"), go_peer("nri-go-plugin-legacy"))
    else {
        return;
    };
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let sock = env.socket.to_str().unwrap().to_owned();
    let l = spawn_go(
        &legacy,
        &[
            "--socket",
            &sock,
            "--name",
            "golegacy",
            "--idx",
            "10",
            "--events",
            LEGACY_EVENTS,
            "--adjust",
            "env,annotation,mount",
        ],
    );
    wait_active(&a, 1).await;
    let m = spawn_go(
        &modern,
        &[
            "--socket", &sock, "--name", "gomodern", "--idx", "20", "--adjust", "env", "--dump",
        ],
    );
    wait_active(&a, 2).await;
    let adj = lifecycle(&a, "y").await;
    let keys: Vec<&str> = adj.env.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["BENCH_PLUGIN_10", "BENCH_PLUGIN_20"]);
    let all = stop_and_collect(&a, [l, m]).await;
    sees_adjustment(&all, "20-gomodern", "10-golegacy");
}

const LEGACY_EVENTS: &str = "runpodsandbox,stoppodsandbox,removepodsandbox,createcontainer,postcreatecontainer,startcontainer,poststartcontainer,updatecontainer,postupdatecontainer,stopcontainer,removecontainer";

#[tokio::test(flavor = "multi_thread")]
#[allow(clippy::too_many_lines)]
async fn go_plugins_both_dialects_register_get_every_event_and_adjust() {
    let (Some(modern), Some(legacy)) = (go_peer("nri-go-plugin"), go_peer("nri-go-plugin-legacy"))
    else {
        return;
    };
    let env = TestEnv::new();
    env.runtime.add_pod(pod("pre"));
    env.runtime.add_container(ctr("pre", "pre-c"));
    let a = env.start(env.builder()).await;
    let sock = env.socket.to_str().unwrap().to_owned();
    let m = spawn_go(
        &modern,
        &[
            "--socket",
            &sock,
            "--name",
            "gomodern",
            "--idx",
            "10",
            "--adjust",
            "env,annotation,mount",
        ],
    );
    wait_active(&a, 1).await;
    let l = spawn_go(
        &legacy,
        &[
            "--socket",
            &sock,
            "--name",
            "golegacy",
            "--idx",
            "20",
            "--events",
            LEGACY_EVENTS,
            "--adjust",
            "device,rlimit",
            "--dump",
        ],
    );
    wait_active(&a, 2).await;
    let adj = lifecycle(&a, "x").await;

    assert!(
        adj.env
            .iter()
            .any(|kv| kv.key == "BENCH_PLUGIN_10" && kv.value == "10-gomodern"),
        "{:?}",
        adj.env
    );
    assert_eq!(
        adj.annotations
            .get("bench.example.com/plugin-10")
            .map(String::as_str),
        Some("10-gomodern")
    );
    assert!(
        adj.mounts
            .iter()
            .any(|mt| mt.destination == "/mnt/nri-plugin-10")
    );
    let linux = adj.linux.as_ref().expect("device from legacy plugin");
    assert!(linux.devices.iter().any(|d| d.path == "/dev/nri-plugin-20"));
    assert!(adj.rlimits.iter().any(|r| r.r#type == "RLIMIT_NOFILE"));
    let infos = a.plugins();
    assert!(
        infos
            .iter()
            .any(|p| p.id.to_string() == "20-golegacy" && p.legacy_dialect)
    );
    assert!(
        infos
            .iter()
            .any(|p| p.id.to_string() == "10-gomodern" && !p.legacy_dialect)
    );

    let all = stop_and_collect(&a, [m, l]).await;
    let modern_ev = events(&all, "10-gomodern");
    assert_eq!(
        modern_ev,
        [
            "Configure",
            "Synchronize",
            "RunPodSandbox",
            "UpdatePodSandbox",
            "PostUpdatePodSandbox",
            "CreateContainer",
            "PostCreateContainer",
            "StartContainer",
            "PostStartContainer",
            "UpdateContainer",
            "PostUpdateContainer",
            "StopContainer",
            "RemoveContainer",
            "StopPodSandbox",
            "RemovePodSandbox",
            "Shutdown"
        ],
        "{all:#?}"
    );
    // The request after an adjustment that only appends is the previous
    // request plus a second `container` field; the v0.8 stub merges it.
    sees_adjustment(&all, "20-golegacy", "10-gomodern");
    let legacy_ev = events(&all, "20-golegacy");
    assert_eq!(
        legacy_ev,
        [
            "Configure",
            "Synchronize",
            "RunPodSandbox",
            "CreateContainer",
            "PostCreateContainer",
            "StartContainer",
            "PostStartContainer",
            "UpdateContainer",
            "PostUpdateContainer",
            "StopContainer",
            "RemoveContainer",
            "StopPodSandbox",
            "RemovePodSandbox",
            "Shutdown"
        ],
        "{all:#?}"
    );
    let sync = all
        .iter()
        .find(|l| l["plugin"] == "10-gomodern" && l["event"] == "Synchronize")
        .unwrap();
    assert_eq!(
        (sync["pods"].as_u64(), sync["containers"].as_u64()),
        (Some(1), Some(1))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn launched_go_plugin_gets_its_config_and_is_stopped() {
    let Some(modern) = go_peer("nri-go-plugin") else {
        return;
    };
    let env = TestEnv::new();
    let plugins = env.dir.path().join("plugins");
    let conf = env.dir.path().join("conf.d");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::create_dir_all(&conf).unwrap();
    let out = env.dir.path().join("events.jsonl");
    let script = plugins.join("30-launched");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nexec {} --adjust annotation \"$@\" >>{}\n",
            modern.display(),
            out.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(conf.join("launched.conf"), "hello: config").unwrap();
    let a = env.start(env.builder().disable_connections(true)).await;
    assert_eq!(a.plugins().len(), 1, "launched plugin active after start()");
    assert!(matches!(
        a.plugins()[0].origin,
        nri_runtime::PluginOrigin::Launched { .. }
    ));
    let adj = lifecycle(&a, "l").await;
    assert_eq!(
        adj.annotations
            .get("bench.example.com/plugin-30")
            .map(String::as_str),
        Some("30-launched")
    );
    a.stop().await;
    let text = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let cfg = lines.iter().find(|l| l["event"] == "Configure").unwrap();
    assert_eq!(cfg["config"], "hello: config");
    assert_eq!(cfg["runtime_name"], "fake-runtime");
    assert!(lines.iter().any(|l| l["event"] == "Shutdown"), "{text}");
}

/// A snapshot larger than one message (1000 pods, 5000 containers of
/// about 1 KiB each: several Synchronize messages with `more` set) reaches
/// the Go v0.12 stub whole: it reassembles the messages and hands its
/// plugin every pod and container in one Synchronize call.
#[tokio::test(flavor = "multi_thread")]
async fn a_go_plugin_reassembles_a_split_sync() {
    let Some(modern) = go_peer("nri-go-plugin") else {
        return;
    };
    let env = TestEnv::new();
    for i in 0..1000 {
        let p = pod(&format!("pod-{i}"));
        for j in 0..5 {
            let mut c = ctr(&p.id, &format!("ctr-{i}-{j}"));
            c.annotations
                .insert("example.com/padding".into(), "x".repeat(1024));
            env.runtime.add_container(c);
        }
        env.runtime.add_pod(p);
    }
    let a = env.start(env.builder()).await;
    let sock = env.socket.to_str().unwrap().to_owned();
    let mut g = spawn_go(
        &modern,
        &["--socket", &sock, "--name", "gosplit", "--idx", "10"],
    );
    wait_active(&a, 1).await;
    a.stop().await;
    let _ = tokio::time::timeout(Duration::from_secs(5), g.child.wait()).await;
    let all = g.lines.await.unwrap();
    let syncs: Vec<_> = all
        .iter()
        .filter(|l| l["plugin"] == "10-gosplit" && l["event"] == "Synchronize")
        .collect();
    assert_eq!(syncs.len(), 1, "{all:#?}");
    assert_eq!(
        (syncs[0]["pods"].as_u64(), syncs[0]["containers"].as_u64()),
        (Some(1000), Some(5000))
    );
}
