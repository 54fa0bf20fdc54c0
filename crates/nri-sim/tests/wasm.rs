//! WebAssembly plugins in the simulator: a `.wasm` module given with
//! `--plugin` or found in `--plugin-dir` is loaded by the embedded runtime
//! and changes containers like any plugin.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use nri_api::api::{ContainerAdjustment, CreateContainerResponse, KeyValue};
use nri_sim::{Collect, ExtraPlugin, Options, Record, Scenario};
use prost::Message;

const METHODS: [&str; 18] = [
    "configure",
    "synchronize",
    "shutdown",
    "run_pod_sandbox",
    "update_pod_sandbox",
    "post_update_pod_sandbox",
    "stop_pod_sandbox",
    "remove_pod_sandbox",
    "create_container",
    "post_create_container",
    "start_container",
    "post_start_container",
    "update_container",
    "post_update_container",
    "stop_container",
    "remove_container",
    "state_change",
    "validate_container_adjustment",
];

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
    }
    .encode_to_vec();
    let packed = (1024u64 << 32) | resp.len() as u64;
    let mut t = String::from(
        "(module (memory (export \"memory\") 1)
         (func (export \"malloc\") (param i32) (result i32) (i32.const 4096))
         (func (export \"free\") (param i32))
         (func (export \"plugin_api_version\") (result i64) (i64.const 1))\n",
    );
    for m in METHODS {
        let body = if m == "create_container" {
            format!("i64.const {packed}")
        } else {
            "i64.const 0".into()
        };
        t.push_str(&format!(
            "(func (export \"plugin_{m}\") (param i32 i32) (result i64) {body})\n"
        ));
    }
    let esc: String = resp.iter().map(|b| format!("\\{b:02x}")).collect();
    t.push_str(&format!("(data (i32.const 1024) \"{esc}\"))"));
    wat::parse_str(&t).unwrap()
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
