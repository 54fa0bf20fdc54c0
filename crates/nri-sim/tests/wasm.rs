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

/// A guest whose CreateContainer writes a line to stdout (WASI `fd_write`)
/// and logs one at level warn (`env.log`), and changes nothing.
fn talking_guest() -> Vec<u8> {
    use nri_api::api::LogRequest;
    use nri_api::api::log_request::Level;
    let text = b"hello from wasm\n";
    let log = LogRequest {
        msg: "careful, said the guest".into(),
        level: Level::Warn as i32,
    }
    .encode_to_vec();
    let esc = |b: &[u8]| b.iter().map(|b| format!("\\{b:02x}")).collect::<String>();
    // iovec at 512: text at 600, its length.
    let mut iov = 600u32.to_le_bytes().to_vec();
    iov.extend((text.len() as u32).to_le_bytes());
    let mut t = format!(
        "(module
         (import \"wasi_snapshot_preview1\" \"fd_write\" (func $w (param i32 i32 i32 i32) (result i32)))
         (import \"env\" \"log\" (func $log (param i32 i32) (result i64)))
         (memory (export \"memory\") 1)
         (data (i32.const 512) \"{}\")
         (data (i32.const 600) \"{}\")
         (data (i32.const 700) \"{}\")
         (func (export \"malloc\") (param i32) (result i32) (i32.const 4096))
         (func (export \"free\") (param i32))
         (func (export \"plugin_api_version\") (result i64) (i64.const 1))\n",
        esc(&iov),
        esc(text),
        esc(&log),
    );
    for m in METHODS {
        let body = if m == "create_container" {
            format!(
                "(drop (call $w (i32.const 1) (i32.const 512) (i32.const 1) (i32.const 520))) \
                 (drop (call $log (i32.const 700) (i32.const {}))) (i64.const 0)",
                log.len()
            )
        } else {
            "i64.const 0".into()
        };
        t.push_str(&format!(
            "(func (export \"plugin_{m}\") (param i32 i32) (result i64) {body})\n"
        ));
    }
    t.push(')');
    wat::parse_str(&t).unwrap()
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
    std::fs::write(&file, talking_guest()).unwrap();
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
        ["hello from wasm", "WARN careful, said the guest"],
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
