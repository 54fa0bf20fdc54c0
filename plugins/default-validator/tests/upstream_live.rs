//! This plugin against upstream's own default validator, live: the same
//! adjustments of the same containers go once through the Go runtime peer
//! (containerd/nri v0.12.5 adaptation) with upstream's built-in validator
//! (`--default-validator`, the main module's `plugins/default-validator`)
//! and once through the same runtime with this plugin pre-launched as
//! `00-default-validator`; every creation must be accepted or rejected
//! alike, with the same reason. A small Rust plugin in the test adjusts
//! containers by name: a hook, a namespace, a sysctl; pod annotations ask
//! for plugins that are (or are not) there. Skipped when the peer is
//! missing, unless `NRI_REQUIRE_INTEROP=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use nri_plugin::api::{
    Container, ContainerAdjustment, CreateContainerResponse, Hook, Hooks, LinuxNamespace,
    PodSandbox,
};
use nri_plugin::{HandlerResult, Plugin};
use nri_sample_common::testing::{GoRuntime, ThreadPlugin, go_peer, prelaunch_dirs};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_default-validator");

/// Adjusts containers by the start of their name.
struct Adjuster;

#[nri_plugin::plugin]
impl Plugin for Adjuster {
    async fn create_container(
        &self,
        _pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        let mut a = ContainerAdjustment::default();
        if ctr.name.starts_with("hook") {
            a.add_hooks(Hooks {
                prestart: vec![Hook {
                    path: "/bin/true".into(),
                    ..Default::default()
                }],
                ..Default::default()
            });
        }
        if ctr.name.starts_with("ns") {
            a.add_or_replace_namespace(LinuxNamespace {
                r#type: "network".into(),
                path: "/var/run/netns/other".into(),
            });
        }
        if ctr.name.starts_with("sysctl") {
            a.set_linux_sysctl("net.ipv4.ip_forward", "1");
        }
        if ctr.name.starts_with("env") {
            a.add_env("ADJUSTED", "1");
        }
        Ok(CreateContainerResponse {
            adjust: Some(a),
            ..Default::default()
        })
    }
}

const TOLERATE: &str = "tolerate.example.com";

/// The containers created, in one pod, and the pod's annotations.
const CONTAINERS: &[&str] = &["plain", "env", "hook", "ns", "sysctl", "hook-ns-sysctl"];

fn pod_annotations() -> Value {
    json!({
        "required-plugins.noderesource.dev/container.env": "[adjuster]",
        "required-plugins.noderesource.dev/container.plain": "[missing-plugin]",
        "required-plugins.noderesource.dev/container.ns": "[30-adjuster, missing-too]",
    })
}

/// Creates the containers; returns `(name, ok, reason)` for each.
fn outcomes(rt: &mut GoRuntime, plugins: u64, tolerated: bool) -> Vec<(String, bool, String)> {
    let _adjuster = ThreadPlugin::start(Adjuster, "adjuster", "30", &rt.socket);
    rt.wait_plugins(plugins);
    let mut annotations = pod_annotations();
    if tolerated {
        annotations[TOLERATE] = json!("true");
    }
    rt.run_pod("p1", "pod1", annotations);
    CONTAINERS
        .iter()
        .map(|name| {
            let r = rt.create_container("p1", &format!("c-{name}"), name, json!({}));
            let ok = r["ok"] == json!(true);
            let error = r["error"].as_str().unwrap_or_default();
            // The reason, after the runtime's wrapping.
            let reason = error
                .split_once("reason: ")
                .map_or(error, |(_, r)| r)
                .to_owned();
            ((*name).to_owned(), ok, reason)
        })
        .collect()
}

/// One configuration, both ways.
fn compare(go_json: Value, yaml: &str) {
    let mut tolerated_runs = Vec::new();
    for tolerated in [false, true] {
        let Some(mut go) = GoRuntime::start(&["--default-validator", &go_json.to_string()]) else {
            return;
        };
        // The built-in validator and the adjuster.
        let upstream = outcomes(&mut go, 2, tolerated);
        go.stop();

        let (_dir, mut flags) = prelaunch_dirs(BIN, "00-default-validator", &[], Some(yaml));
        flags.retain(|f| f != "--no-listen");
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let mut ours_rt = GoRuntime::start(&flags).unwrap();
        let ours = outcomes(&mut ours_rt, 2, tolerated);
        ours_rt.stop();
        assert_eq!(
            ours, upstream,
            "configuration {yaml:?} (tolerated: {tolerated}): ours left, upstream's right"
        );
        tolerated_runs.push(upstream);
    }
    eprintln!("{yaml:?}: {tolerated_runs:?}");
}

#[test]
fn every_rule_as_upstream_decides() {
    if go_peer("nri-go-runtime").is_none() {
        return;
    }
    compare(
        json!({
            "Enable": true,
            "RejectOCIHookAdjustment": true,
            "RejectNamespaceAdjustment": true,
            "RejectSysctlAdjustment": true,
            "RequiredPlugins": ["adjuster"],
            "TolerateMissingAnnotation": TOLERATE,
        }),
        &format!(
            "enable: true\nrejectOCIHookAdjustment: true\nrejectNamespaceAdjustment: true\nrejectSysctlAdjustment: true\nrequiredPlugins: [adjuster]\ntolerateMissingPluginsAnnotation: {TOLERATE}\n"
        ),
    );
    // Each rule alone, and required plugins without a toleration.
    compare(
        json!({"Enable": true, "RejectOCIHookAdjustment": true}),
        "enable: true\nrejectOCIHookAdjustment: true\n",
    );
    compare(
        json!({"Enable": true, "RejectNamespaceAdjustment": true, "RequiredPlugins": ["missing-global"]}),
        "enable: true\nrejectNamespaceAdjustment: true\nrequiredPlugins: [missing-global]\n",
    );
}
