//! WebAssembly plugins in the simulator: a `.wasm` module given with
//! `--plugin` or found in `--plugin-dir` is loaded by the embedded runtime
//! and changes containers like any plugin.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../nri-runtime/tests/wasm_util/mod.rs"]
mod wasm_util;

use std::path::Path;

use nri_api::EventMask;
use nri_api::api::{ContainerAdjustment, CreateContainerResponse, KeyValue};
use nri_sim::{Collect, ExtraPlugin, Options, Record, Scenario};
use wasm_util::Wat;

/// A guest subscribing to every event (empty ConfigureResponse) whose
/// CreateContainer sets env `FROM_WASM=yes`.
fn guest() -> Vec<u8> {
    let resp = CreateContainerResponse {
        adjust: Some(ContainerAdjustment {
            env: vec![KeyValue {
                key: "FROM_WASM".into(),
                value: "yes".into(),
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    Wat::new(EventMask::EMPTY)
        .answer("plugin_create_container", &resp)
        .wasm()
}

const SCENARIO: &str = "pods:\n  - name: p\n    containers:\n      - name: c\n        env: { A: '1' }\nsteps:\n  - up: p\nexpect:\n  - container: p/c\n    env: { A: '1', FROM_WASM: 'yes' }\n    owners:\n      env/FROM_WASM: 30-wasmer\n  - plugin: wasmer\n    registered: true\n";

async fn run(opts: &Options) -> (nri_sim::Summary, Vec<Record>) {
    // The scenario names the plugin the options bring.
    let sc =
        Scenario::parse_with("t.yaml", Path::new("."), SCENARIO, &opts.parse_options()).unwrap();
    let mut rec = Collect::default();
    let s = nri_sim::run(&sc, opts, &mut rec).await.unwrap();
    (s, rec.0)
}

fn registered(recs: &[Record]) -> Vec<String> {
    recs.iter()
        .filter_map(|r| match r {
            Record::PluginRegistered { plugin, .. } => Some(plugin.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wasm_plugin_given_with_plugin_is_loaded() {
    let dir = tempfile::tempdir().unwrap();
    // Not executable, with a .wasm suffix: still loaded (named `wasmer`).
    let file = dir.path().join("wasmer.wasm");
    std::fs::write(&file, guest()).unwrap();
    let arg = format!("{}:30", file.display());
    let opts = Options {
        extra_plugins: vec![ExtraPlugin::parse(&arg).unwrap()],
        ..Default::default()
    };
    let (s, recs) = run(&opts).await;
    assert_eq!(registered(&recs), ["30-wasmer"]);
    assert!(s.passed(), "{s:?}\n{recs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wasm_plugin_in_the_plugin_directory_is_loaded() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("30-wasmer");
    std::fs::write(&file, guest()).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
    let opts = Options {
        plugin_dir: Some(dir.path().to_owned()),
        ..Default::default()
    };
    let (s, recs) = run(&opts).await;
    assert_eq!(registered(&recs), ["30-wasmer"]);
    assert!(s.passed(), "{s:?}\n{recs:?}");
}

fn plugin_output(recs: &[Record], id: &str) -> Vec<String> {
    recs.iter()
        .filter_map(|r| match r {
            Record::PluginOutput { plugin, line } if plugin == id => Some(line.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_output_shows_what_a_wasm_plugin_writes_and_logs() {
    // The runtime logs a guest's output through `tracing`: collect it the
    // way `nri sim` does, with the simulator's layer in the subscriber.
    let log = nri_sim::PluginLog::default();
    tracing::subscriber::set_global_default(nri_sim::subscriber(&log)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("30-talker.wasm");
    std::fs::write(&file, wasm_util::talker().wasm()).unwrap();
    let sc = "pods:\n  - name: p\n    containers: [{ name: c }]\nsteps:\n  - up: p\nexpect:\n  - plugin: talker\n    event: CreateContainer\n    calls: 1\n";
    let mut opts = Options {
        extra_plugins: vec![ExtraPlugin::parse(file.to_str().unwrap()).unwrap()],
        plugin_output: true,
        plugin_log: Some(log.clone()),
        ..Default::default()
    };
    let parse =
        |o: &Options| Scenario::parse_with("t.yaml", Path::new("."), sc, &o.parse_options());
    let mut rec = Collect::default();
    let s = nri_sim::run(&parse(&opts).unwrap(), &opts, &mut rec)
        .await
        .unwrap();
    assert!(s.passed(), "{s:?}\n{:?}", rec.0);
    assert_eq!(
        plugin_output(&rec.0, "30-talker"),
        wasm_util::talker_output(),
        "{:?}",
        rec.0
    );
    // Without --plugin-output nothing is shown.
    opts.plugin_output = false;
    let mut rec = Collect::default();
    nri_sim::run(&parse(&opts).unwrap(), &opts, &mut rec)
        .await
        .unwrap();
    assert!(plugin_output(&rec.0, "30-talker").is_empty(), "{:?}", rec.0);
}
