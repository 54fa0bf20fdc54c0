//! The plugin binary against the Go runtime peer (`nri-go-runtime`,
//! containerd/nri v0.12.5 adaptation): the net devices named in the pod
//! annotation are in the merged adjustment of the pod's first container;
//! bad annotations and host-network pods fail the pod with a clear error.
//! Skipped (with a message) when the peer is missing, unless
//! `NRI_REQUIRE_INTEROP=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use nri_sample_common::testing::{GoRuntime, PluginProcess, adjustment, prelaunch_dirs};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_network-device-injector");

fn run_pod(rt: &mut GoRuntime, id: &str, annotations: Value, netns: bool) -> Value {
    let namespaces = if netns {
        json!([{"type": "network", "path": format!("/var/run/netns/cni-{id}")}])
    } else {
        json!([])
    };
    rt.cmd(json!({"cmd": "RunPodSandbox", "pod": {
        "id": id, "name": format!("pod-{id}"), "uid": format!("uid-{id}"), "namespace": "default",
        "annotations": annotations, "linux": {"namespaces": namespaces},
    }}))
}

fn exercise(rt: &mut GoRuntime) {
    let sample = "- name: dummy0\n  new_name: eth33\n  address: 192.168.2.2\n  prefix: 24\n  mtu: 1500\n- name: dummy1\n";
    let r = run_pod(
        rt,
        "p1",
        json!({"netdevice.noderesource.dev/pod": sample}),
        true,
    );
    assert_eq!(r["ok"], json!(true), "{r}");
    let r = rt.create_container("p1", "c1", "app", json!({}));
    let adj = adjustment(&r);
    assert_eq!(
        adj["linux"]["net_devices"],
        json!({"dummy0": {"name": "eth33"}, "dummy1": {"name": "dummy1"}}),
        "{r}"
    );
    rt.ok(json!({"cmd": "PostCreateContainer", "container_id": "c1"}));
    // The second container of the pod joins the namespace that has them.
    let r = rt.create_container("p1", "c2", "sidecar", json!({}));
    assert!(adjustment(&r)["linux"].get("net_devices").is_none(), "{r}");

    // Legacy key; a pod without annotation gets nothing.
    let r = run_pod(
        rt,
        "p2",
        json!({"netdevices.nri.containerd.io": "- name: eno9"}),
        true,
    );
    assert_eq!(r["ok"], json!(true), "{r}");
    let r = rt.create_container("p2", "c3", "app", json!({}));
    assert_eq!(
        adjustment(&r)["linux"]["net_devices"],
        json!({"eno9": {"name": "eno9"}})
    );
    let r = run_pod(rt, "p3", json!({}), false);
    assert_eq!(r["ok"], json!(true), "{r}");
    let r = rt.create_container("p3", "c4", "app", json!({}));
    assert!(adjustment(&r)["linux"].get("net_devices").is_none(), "{r}");

    // Bad annotation and host network: the pod fails, with the reason.
    let r = run_pod(
        rt,
        "p4",
        json!({"netdevice.noderesource.dev": "- name: a\n  address: 1.2.3"}),
        true,
    );
    assert_eq!(r["ok"], json!(false), "{r}");
    let e = r["error"].as_str().unwrap();
    assert!(
        e.contains("error parsing address") && e.contains("netdevice.noderesource.dev"),
        "{e}"
    );
    let r = run_pod(
        rt,
        "p5",
        json!({"netdevice.noderesource.dev": "- name: a"}),
        false,
    );
    assert_eq!(r["ok"], json!(false), "{r}");
    assert!(r["error"].as_str().unwrap().contains("host network"), "{r}");
}

#[test]
fn external_plugin_injects_net_devices() {
    let Some(mut rt) = GoRuntime::start(&[]) else {
        return;
    };
    let mut plugin = PluginProcess::external(BIN, &rt.socket, &["-idx", "10"]);
    rt.wait_plugins(1);
    exercise(&mut rt);
    assert!(plugin.is_running());
    rt.stop();
}

#[test]
fn prelaunched_plugin_injects_net_devices() {
    if nri_sample_common::testing::go_peer("nri-go-runtime").is_none() {
        return;
    }
    let (_dir, flags) = prelaunch_dirs(BIN, "10-network-device-injector", &[], None);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut rt = GoRuntime::start(&flags).unwrap();
    rt.wait_plugins(1);
    let plugins = rt.ok(json!({"cmd": "list_plugins"}));
    assert_eq!(
        plugins["plugins"][0]["name"], "10-network-device-injector",
        "{plugins}"
    );
    exercise(&mut rt);
    rt.stop();
}
