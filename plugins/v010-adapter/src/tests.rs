#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;

use super::*;
use nri_plugin::api::{LinuxCpu, LinuxMemory, LinuxPids, LinuxPodSandbox, OptionalInt64};
use serde_json::{Value, json};

fn pod() -> PodSandbox {
    PodSandbox {
        id: "pod1".into(),
        name: "web".into(),
        namespace: "default".into(),
        pid: 42,
        labels: [("app".to_owned(), "web".to_owned())].into(),
        annotations: [("a".to_owned(), "b".to_owned())].into(),
        linux: Some(LinuxPodSandbox {
            cgroups_path: "/kubepods/pod1".into(),
            namespaces: vec![LinuxNamespace {
                r#type: "network".into(),
                path: "/var/run/netns/x".into(),
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn request_json_matches_upstream_field_names() {
    let p = pod();
    let req = build_request("0.1", legacy::State::Create, &Task::from_pod(&p), &p).unwrap();
    let v = serde_json::to_value(&req).unwrap();
    assert_eq!(
        v,
        json!({
            "version": "0.1", "state": "create", "id": "pod1", "sandboxID": "pod1", "pid": 42,
            "spec": {"resources": null, "namespaces": {"network": "/var/run/netns/x"},
                     "cgroupsPath": "/kubepods/pod1", "annotations": {"a": "b"}},
            "labels": {"app": "web"},
        })
    );
    // A container without pid, annotations or namespaces: those are left out.
    let ctr = Container {
        id: "c1".into(),
        ..Default::default()
    };
    let req = build_request("1", legacy::State::Delete, &Task::from_container(&ctr), &p).unwrap();
    let v = serde_json::to_value(&req).unwrap();
    assert_eq!(v["state"], "delete");
    assert_eq!(v["spec"], json!({"resources": null}));
    assert!(v.get("pid").is_none() && v.get("results").is_none() && v.get("conf").is_none());
    assert_eq!(v["sandboxID"], "pod1");
}

#[test]
fn resources_in_oci_form() {
    let r = LinuxResources {
        memory: Some(LinuxMemory {
            limit: Some(OptionalInt64 { value: 1 << 30 }),
            ..Default::default()
        }),
        cpu: Some(LinuxCpu {
            shares: Some(nri_plugin::api::OptionalUInt64 { value: 512 }),
            cpus: "0-1".into(),
            ..Default::default()
        }),
        pids: Some(LinuxPids { limit: 100 }),
        unified: [("memory.high".to_owned(), "max".to_owned())].into(),
        ..Default::default()
    };
    assert_eq!(
        legacy::oci_resources(Some(&r)).unwrap(),
        json!({"memory": {"limit": 1073741824}, "cpu": {"shares": 512, "cpus": "0-1"},
               "pids": {"limit": 100}, "unified": {"memory.high": "max"}})
    );
    assert_eq!(
        legacy::oci_resources(Some(&LinuxResources::default())).unwrap(),
        json!({"memory": {}, "cpu": {}})
    );
    assert_eq!(legacy::oci_resources(None).unwrap(), Value::Null);
}

struct Setup {
    dir: tempfile::TempDir,
    invoker: Invoker,
}

fn setup(conf: &str, plugins: &[(&str, &str)]) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    for (name, body) in plugins {
        let p = bin.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let conf_path = dir.path().join("conf.json");
    std::fs::write(&conf_path, conf).unwrap();
    let invoker = Invoker {
        bin_dir: bin,
        conf_path,
        timeout: Some(Duration::from_secs(5)),
    };
    Setup { dir, invoker }
}

#[tokio::test(flavor = "current_thread")]
async fn plugins_run_in_order_and_see_earlier_results() {
    let s = setup(
        r#"{"version":"0.1","plugins":[{"type":"first","conf":{"z":1,"a":[true]}},{"type":"second"}]}"#,
        &[
            (
                "first",
                r#"[ "$1" = invoke ] || exit 9; cat > "$(dirname "$0")/../first.json"; echo '{"plugin":"first","version":"0.1","metadata":{"k":"v"}}'"#,
            ),
            (
                "second",
                r#"cat > "$(dirname "$0")/../second.json"; echo '{"plugin":"second","version":"0.1"}'"#,
            ),
        ],
    );
    let p = pod();
    let results = s
        .invoker
        .invoke(legacy::State::Create, &Task::from_pod(&p), &p)
        .await
        .unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0].metadata["k"], "v");
    let first = std::fs::read_to_string(s.dir.path().join("first.json")).unwrap();
    // conf is passed verbatim (key order and spacing kept).
    assert!(
        first.starts_with(r#"{"conf":{"z":1,"a":[true]},"version":"0.1","state":"create""#),
        "{first}"
    );
    let second: Value =
        serde_json::from_str(&std::fs::read_to_string(s.dir.path().join("second.json")).unwrap())
            .unwrap();
    assert!(second.get("conf").is_none());
    assert_eq!(second["results"][0]["plugin"], "first");
}

async fn invoke_err(conf: &str, plugins: &[(&str, &str)]) -> String {
    let s = setup(conf, plugins);
    let p = pod();
    s.invoker
        .invoke(legacy::State::Delete, &Task::from_pod(&p), &p)
        .await
        .unwrap_err()
        .to_string()
}

#[tokio::test(flavor = "current_thread")]
async fn failures_name_the_plugin() {
    let conf = r#"{"version":"0.1","plugins":[{"type":"p"}]}"#;
    let e = invoke_err(
        conf,
        &[(
            "p",
            r#"cat >/dev/null; echo '{"plugin":"p","error":"no quota left"}'"#,
        )],
    )
    .await;
    assert_eq!(e, "plugin: p: no quota left");
    let e = invoke_err(conf, &[("p", "echo garbage; exit 3")]).await;
    assert!(
        e.starts_with("plugin: p: failed to unmarshal plugin output") && e.contains("exit code: 3"),
        "{e}"
    );
    let e = invoke_err(conf, &[("p", "exit 0")]).await;
    assert!(e.contains("output: <empty>"), "{e}");
    let e = invoke_err(conf, &[]).await;
    assert!(e.contains("plugin: p: executable file not found"), "{e}");
    let e = invoke_err("{not json", &[]).await;
    assert!(e.contains("invalid NRI v0.1.0 configuration"), "{e}");
    // A plugin that exits without reading its input still counts by its output.
    let s = setup(conf, &[("p", r#"echo '{"plugin":"p"}'"#)]);
    let p = pod();
    assert!(
        s.invoker
            .invoke(legacy::State::Create, &Task::from_pod(&p), &p)
            .await
            .is_ok()
    );
}

#[test]
fn no_time_limit_by_default_as_upstream() {
    assert_eq!(Invoker::default().timeout, None);
}

#[tokio::test(flavor = "current_thread")]
async fn hung_plugin_is_killed_at_the_timeout() {
    let mut s = setup(
        r#"{"plugins":[{"type":"slow"}]}"#,
        &[("slow", "exec sleep 30")],
    );
    s.invoker.timeout = Some(Duration::from_millis(200));
    let p = pod();
    let started = std::time::Instant::now();
    let e = s
        .invoker
        .invoke(legacy::State::Create, &Task::from_pod(&p), &p)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("timed out"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test(flavor = "current_thread")]
async fn missing_config_is_no_plugins() {
    let s = setup("", &[]);
    let invoker = Invoker {
        conf_path: s.dir.path().join("nope.json"),
        ..s.invoker.clone()
    };
    let conf = invoker.load_config().unwrap();
    assert_eq!(conf.version, DEFAULT_VERSION);
    let p = pod();
    assert!(
        invoker
            .invoke(legacy::State::Create, &Task::from_pod(&p), &p)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(flavor = "current_thread")]
async fn teardown_errors_are_swallowed_others_returned() {
    let s = setup(
        r#"{"plugins":[{"type":"p"}]}"#,
        &[("p", r#"cat >/dev/null; echo '{"error":"boom"}'"#)],
    );
    let a = V010Adapter::new(s.invoker.clone());
    let p = pod();
    let c = Container {
        id: "c1".into(),
        ..Default::default()
    };
    assert!(
        a.run_pod_sandbox(p.clone())
            .await
            .unwrap_err()
            .message()
            .contains("plugin: p: boom")
    );
    // Teardown never fails.
    assert!(a.stop_pod_sandbox(p.clone()).await.is_ok());
    assert!(a.start_container(p.clone(), c.clone()).await.is_err());
    assert!(a.stop_container(p, c).await.is_ok());
}
