//! The validator binary against the Go runtime peer (`nri-go-runtime`,
//! containerd/nri v0.12.5 adaptation), with other plugins adjusting the
//! container: the Go plugin `nri-go-plugin --adjust adjusting` (env and
//! annotation; it has no hook flavour) and, for the OCI hook, a small Rust
//! plugin in this test that injects a prestart hook into containers whose
//! name starts with `hooked`. Skipped (with a message) when the peers are
//! missing, unless `NRI_REQUIRE_INTEROP=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::{Child, Command, Stdio};

use nri_plugin::api::{
    Container, ContainerAdjustment, CreateContainerResponse, Hook, Hooks, PodSandbox,
};
use nri_plugin::{HandlerResult, Plugin};
use nri_sample_common::testing::{GoRuntime, PluginProcess, ThreadPlugin, go_peer, prelaunch_dirs};
use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_default-validator");

/// Injects a prestart hook into containers named `hooked*`.
struct HookPlugin;

#[nri_plugin::plugin]
impl Plugin for HookPlugin {
    async fn create_container(
        &self,
        _pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        if !ctr.name.starts_with("hooked") {
            return Ok(CreateContainerResponse::default());
        }
        let mut adjust = ContainerAdjustment::default();
        adjust.add_hooks(Hooks {
            prestart: vec![Hook {
                path: "/usr/local/bin/demo-hook".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        Ok(CreateContainerResponse {
            adjust: Some(adjust),
            ..Default::default()
        })
    }
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn go_plugin(bin: &Path, socket: &Path, adjust: &str) -> Killed {
    Killed(
        Command::new(bin)
            .args([
                "--name",
                "go-plugin",
                "--idx",
                "20",
                "--adjust",
                adjust,
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

const CONFIG: &str = "\
enable: true
rejectOCIHookAdjustment: true
rejectNamespaceAdjustment: true
rejectSysctlAdjustment: true
requiredPlugins:
  - go-plugin
tolerateMissingPluginsAnnotation: tolerate-missing-nri-plugins.noderesource.dev
";

#[test]
fn external_validator_rejects_hook_injection() {
    let Some(go) = go_peer("nri-go-plugin") else {
        return;
    };
    let Some(mut rt) = GoRuntime::start(&[]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("validator.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let _validator = PluginProcess::external(
        BIN,
        &rt.socket,
        &["-idx", "00", "-config", config.to_str().unwrap()],
    );
    let _go = go_plugin(&go, &rt.socket, "adjusting");
    let _hooks = ThreadPlugin::start(HookPlugin, "hooks", "30", &rt.socket);
    rt.wait_plugins(3);

    rt.run_pod("p1", "pod1", json!({}));
    // Env and annotation from the Go plugin: allowed.
    let r = rt.create_container("p1", "c1", "plain", json!({}));
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(
        r["response"]["adjust"]["env"][0]["key"], "BENCH_PLUGIN_20",
        "{r}"
    );

    // A hook from 30-hooks: rejected by 00-default-validator, which names it.
    let r = rt.create_container("p1", "c2", "hooked", json!({}));
    assert_eq!(r["ok"], json!(false), "{r}");
    let e = r["error"].as_str().unwrap();
    assert!(e.contains("default-validator"), "{e}");
    assert!(e.contains("30-hooks") && e.contains("OCI hook"), "{e}");

    // The pod requires a plugin that is not there ...
    rt.run_pod(
        "p2",
        "pod2",
        json!({"required-plugins.noderesource.dev": "[nri-policy]"}),
    );
    let r = rt.create_container("p2", "c3", "plain", json!({}));
    assert_eq!(r["ok"], json!(false), "{r}");
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("\"nri-policy\" not present"),
        "{r}"
    );
    // ... unless tolerated by the configured annotation.
    rt.run_pod(
        "p3",
        "pod3",
        json!({
            "required-plugins.noderesource.dev": "[nri-policy]",
            "tolerate-missing-nri-plugins.noderesource.dev/container.plain": "true",
        }),
    );
    let r = rt.create_container("p3", "c4", "plain", json!({}));
    assert_eq!(r["ok"], json!(true), "{r}");
    rt.stop();
}

#[test]
fn prelaunched_validator_takes_its_config_from_the_runtime() {
    let Some(go) = go_peer("nri-go-plugin") else {
        return;
    };
    if go_peer("nri-go-runtime").is_none() {
        return;
    }
    // The required plugin is never started: every creation is rejected;
    // with the toleration annotation it passes.
    let (_dir, mut flags) = prelaunch_dirs(BIN, "00-default-validator", &[], Some(CONFIG));
    // Also listen, for the Go plugin.
    flags.retain(|f| f != "--no-listen");
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut rt = GoRuntime::start(&flags).unwrap();
    rt.wait_plugins(1);
    rt.run_pod("p1", "pod1", json!({}));
    let r = rt.create_container("p1", "c1", "plain", json!({}));
    assert_eq!(r["ok"], json!(false), "{r}");
    let e = r["error"].as_str().unwrap();
    assert!(
        e.contains("00-default-validator") && e.contains("\"go-plugin\" not present"),
        "{e}"
    );

    // Once go-plugin runs, the same pod passes.
    let _go = go_plugin(&go, &rt.socket, "env");
    rt.wait_plugins(2);
    let r = rt.create_container("p1", "c2", "plain", json!({}));
    assert_eq!(r["ok"], json!(true), "{r}");
    rt.stop();
}

#[test]
fn without_enable_it_does_not_validate() {
    if go_peer("nri-go-runtime").is_none() {
        return;
    }
    // Upstream's keys but no `enable: true`: off, as upstream's validator.
    let config = CONFIG.replace("enable: true\n", "");
    let (_dir, flags) = prelaunch_dirs(BIN, "00-default-validator", &[], Some(&config));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut rt = GoRuntime::start(&flags).unwrap();
    rt.wait_plugins(1);
    let list = rt.ok(json!({"cmd": "list_plugins"}));
    // Registered, but not for validation.
    assert_eq!(
        list["plugins"][0]["events_pretty"], "RemovePodSandbox",
        "{list}"
    );
    rt.run_pod("p1", "pod1", json!({}));
    // The required plugin is missing, yet the creation passes.
    let r = rt.create_container("p1", "c1", "plain", json!({}));
    assert_eq!(r["ok"], json!(true), "{r}");
    rt.stop();
}

#[test]
fn bad_config_fails_registration_with_the_reason() {
    if go_peer("nri-go-runtime").is_none() {
        return;
    }
    let (_dir, flags) = prelaunch_dirs(
        BIN,
        "00-default-validator",
        &[],
        Some("rejectFields: [Nonsense]\n"),
    );
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut rt = GoRuntime::start(&flags).unwrap();
    // The plugin refuses its configuration: no validator registered, and
    // container creation is not validated by it.
    let r = rt.cmd(json!({"cmd": "wait_plugins", "count": 1, "timeout_ms": 1500}));
    assert_eq!(r["ok"], json!(false), "{r}");
    rt.stop();
}
