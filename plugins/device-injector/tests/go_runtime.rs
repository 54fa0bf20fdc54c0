//! `device-injector` against the Go runtime peer (containerd/nri v0.12.5
//! adaptation): devices, CDI devices and mounts from pod annotations reach
//! the merged adjustment; a bad annotation fails CreateContainer with a
//! message naming it.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use nri_sample_common::testing::{GoRuntime, PluginProcess, adjustment};
use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_device-injector");

#[test]
fn injects_devices_cdi_devices_and_mounts() {
    let Some(mut rt) = GoRuntime::start(&[]) else {
        return;
    };
    let _plugin = PluginProcess::external(BIN, &rt.socket, &["-idx", "10"]);
    rt.wait_plugins(1);
    rt.run_pod(
        "p1",
        "bbdev0",
        json!({
            "devices.noderesource.dev/container.c0": "- path: /dev/nri-null\n  type: c\n  major: 1\n  minor: 3\n  file_mode: 0666\n",
            "cdi-devices.nri.io/container.c0": "- vendor0.com/device=null\n",
            "mounts.noderesource.dev/pod": "- source: /home\n  destination: /host-home\n  type: bind\n  options:\n  - bind\n  - ro\n",
            "sysctl.noderesource.dev/container.c0": "net.core.somaxconn: \"256\"\n",
            "devices.noderesource.dev/container.bad": "- path: /dev/x\n  type: c\n  major: 1.5\n",
        }),
    );
    let r = rt.create_container("p1", "c0", "c0", json!({}));
    let adj = adjustment(&r);
    assert_eq!(
        adj["linux"]["devices"],
        json!([{"path": "/dev/nri-null", "type": "c", "major": "1", "minor": "3", "file_mode": {"value": 438}}]),
        "{r}"
    );
    assert_eq!(
        adj["CDI_devices"],
        json!([{"name": "vendor0.com/device=null"}]),
        "{r}"
    );
    assert_eq!(
        adj["mounts"],
        json!([{"source": "/home", "destination": "/host-home", "type": "bind", "options": ["bind", "ro"]}]),
        "{r}"
    );
    assert_eq!(
        adj["linux"]["sysctl"],
        json!({"net.core.somaxconn": "256"}),
        "{r}"
    );

    // Another container of the pod gets the pod-wide mount only.
    let r = rt.create_container("p1", "c1", "c1", json!({}));
    let adj = adjustment(&r);
    assert!(adj["linux"].get("devices").is_none(), "{r}");
    assert_eq!(adj["mounts"][0]["destination"], "/host-home", "{r}");

    let r = rt.create_container("p1", "c2", "bad", json!({}));
    assert_eq!(r["ok"], json!(false), "{r}");
    let err = r["error"].as_str().unwrap();
    assert!(
        err.contains("devices.noderesource.dev/container.bad"),
        "{err}"
    );
    assert!(err.contains("1.5"), "{err}");
    rt.stop();
}
