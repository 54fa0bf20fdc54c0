//! A WebAssembly plugin in the proxy's plugin directory (cargo feature
//! `wasm`, on by default): loaded with the limits of the configuration
//! file's `wasm:` section, it adjusts containers the runtime above creates,
//! merged with a socket plugin behind the proxy.
#![cfg(feature = "wasm")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "../../../crates/nri-runtime/tests/wasm_util/mod.rs"]
mod wasm_util;

use std::time::Duration;

use common::*;
use nri_api::api::{ContainerAdjustment, CreateContainerResponse, Event, KeyValue};
use nri_proxy::ProxyConfig;
use nri_runtime::{ConfigFormat, PluginOrigin};
use wasm_util::Wat;

fn guest() -> Wat {
    let mut events = nri_api::EventMask::EMPTY;
    events.set(Event::CreateContainer);
    let resp = CreateContainerResponse {
        adjust: Some(ContainerAdjustment {
            env: vec![KeyValue {
                key: "WASM".into(),
                value: "yes".into(),
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    Wat::new(events).answer("plugin_create_container", &resp)
}

fn config(env: &Env, max_memory: &str) -> ProxyConfig {
    let plugins = env.dir.path().join("plugins");
    let text = format!(
        "socket-path: {}\nplugin-dir: {}\nconfig-dir: {}\nwasm:\n  max-memory: {max_memory}\nproxy:\n  name: proxy\n  index: \"50\"\n  upstream-socket: {}\n",
        env.proxy_socket.display(),
        plugins.display(),
        env.dir.path().join("conf.d").display(),
        env.upstream_socket.display()
    );
    ProxyConfig::parse("proxy.yaml", ConfigFormat::Yaml, &text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wasm_plugin_behind_the_proxy_adjusts_containers() {
    let env = Env::new();
    guest().install(&env.dir.path().join("plugins"), "20-wasm");
    let up = env.upstream(Duration::from_secs(2)).await;
    let proxy = Running::start(config(&env, "4MiB")).await;
    proxy.wait_serving(&env.proxy_socket).await;
    let mut behind = Behind::default();
    let a = TestPlugin::adding("A", "10");
    behind.connect(&env.proxy_socket, "10", "ay", a.clone());
    until(
        "the WebAssembly and the socket plugin behind the proxy",
        || proxy.proxy.adaptation().plugins().len() == 2,
    )
    .await;
    let plugins = proxy.proxy.adaptation().plugins();
    let wasm = plugins.iter().find(|p| p.id.to_string() == "20-wasm");
    assert_eq!(wasm.map(|p| &p.origin), Some(&PluginOrigin::Wasm));

    up.run_pod_sandbox(&pod("p")).await.unwrap();
    let out = up
        .create_container(&pod("p"), &ctr("p", "c"))
        .await
        .unwrap();
    assert_eq!(env_of(&out.adjustment), ["A=10", "WASM=yes"]);
    assert!(out.errors.is_empty(), "{:?}", out.errors);

    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wasm_limits_of_the_config_file_apply_behind_the_proxy() {
    // A guest whose one page of memory is over a 32 KiB cap is refused at
    // load; the proxy serves on without it.
    let env = Env::new();
    guest().install(&env.dir.path().join("plugins"), "20-wasm");
    let up = env.upstream(Duration::from_secs(2)).await;
    let proxy = Running::start(config(&env, "32KiB")).await;
    proxy.wait_serving(&env.proxy_socket).await;
    let mut behind = Behind::default();
    behind.connect(&env.proxy_socket, "10", "ay", TestPlugin::adding("A", "10"));
    until("the socket plugin behind the proxy", || {
        !proxy.proxy.adaptation().plugins().is_empty()
    })
    .await;
    let ids: Vec<String> = proxy
        .proxy
        .adaptation()
        .plugins()
        .iter()
        .map(|p| p.id.to_string())
        .collect();
    assert_eq!(ids, ["10-ay"]);
    up.run_pod_sandbox(&pod("p")).await.unwrap();
    let out = up
        .create_container(&pod("p"), &ctr("p", "c"))
        .await
        .unwrap();
    assert_eq!(env_of(&out.adjustment), ["A=10"]);

    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}

/// With `disable-launch: true` (the DaemonSet's setting) the plugin
/// directory is off for WebAssembly plugins too, as for executables; the
/// configuration lists what it leaves out (logged at start, shown by
/// `--check`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disable_launch_leaves_wasm_plugins_out_and_says_so() {
    let env = Env::new();
    let plugins = env.dir.path().join("plugins");
    guest().install(&plugins, "20-wasm");
    let on = config(&env, "4MiB");
    assert!(on.plugins_not_launched().is_empty());
    let text = format!(
        "socket-path: {}\nplugin-dir: {}\nconfig-dir: {}\ndisable-launch: true\nproxy:\n  name: proxy\n  index: \"50\"\n  upstream-socket: {}\n",
        env.proxy_socket.display(),
        plugins.display(),
        env.dir.path().join("conf.d").display(),
        env.upstream_socket.display()
    );
    let off = ProxyConfig::parse("proxy.yaml", ConfigFormat::Yaml, &text).unwrap();
    assert_eq!(off.plugins_not_launched(), [plugins.join("20-wasm")]);

    let up = env.upstream(Duration::from_secs(2)).await;
    let proxy = Running::start(off).await;
    proxy.wait_serving(&env.proxy_socket).await;
    let mut behind = Behind::default();
    behind.connect(&env.proxy_socket, "10", "ay", TestPlugin::adding("A", "10"));
    until("the socket plugin behind the proxy", || {
        !proxy.proxy.adaptation().plugins().is_empty()
    })
    .await;
    up.run_pod_sandbox(&pod("p")).await.unwrap();
    let out = up
        .create_container(&pod("p"), &ctr("p", "c"))
        .await
        .unwrap();
    assert_eq!(env_of(&out.adjustment), ["A=10"], "no WASM=yes");
    let ids: Vec<String> = (proxy.proxy.adaptation().plugins().iter())
        .map(|p| p.id.to_string())
        .collect();
    assert_eq!(ids, ["10-ay"]);

    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}
