//! End-to-end smoke test of the benchmark engine: the `--quick` matrix
//! (small N, small sync state, one repetition) with the Rust harness and
//! plugin, and the Go stacks when the Go peers are built. Checks that every
//! run succeeded and the results are sane; no timing assertions.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use nri_bench::{BenchOptions, Stack};

fn go_bin_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("NRI_INTEROP_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../interop/bin"));
    let ok = dir.join("nri-go-bench").is_file() && dir.join("nri-go-plugin").is_file();
    if ok {
        return Some(dir);
    }
    if std::env::var("NRI_REQUIRE_INTEROP").as_deref() == Ok("1") {
        panic!(
            "Go peers missing in {} (NRI_REQUIRE_INTEROP=1): run scripts/build-go-peers.sh",
            dir.display()
        );
    }
    eprintln!(
        "Go peers missing in {}: running the Rust stack only",
        dir.display()
    );
    None
}

#[test]
#[allow(clippy::too_many_lines)]
fn quick_matrix_end_to_end() {
    let runtime_bin = PathBuf::from(env!("CARGO_BIN_EXE_nri-bench-runtime"));
    let plugin_bin = PathBuf::from(env!("CARGO_BIN_EXE_nri-bench-plugin"));
    let rust_dir = runtime_bin.parent().expect("bin dir").to_path_buf();
    assert_eq!(plugin_bin.parent(), Some(rust_dir.as_path()));
    let go = go_bin_dir();
    let with_go = go.is_some();
    let opts = BenchOptions {
        quick: true,
        reps: 1,
        n: 120,
        plugin_n: 1500,
        plugin_long_n: 300,
        sync_pods: 20,
        with_go,
        go_bin_dir: go.unwrap_or_default(),
        rust_bin_dir: rust_dir,
        // The WebAssembly cells have their own test (wasm.rs).
        wasm_cells: false,
        ..Default::default()
    };
    let report = nri_bench::run(&opts, |l| eprintln!("{l}")).expect("matrix runs");

    assert!(!report.cells.is_empty());
    for c in &report.cells {
        for s in &c.stacks {
            assert!(
                s.errors.is_empty(),
                "{} {}: {:?}",
                c.cell.id,
                s.stack.label(),
                s.errors
            );
            assert_eq!(s.runs.len(), 1, "{} {}", c.cell.id, s.stack.label());
            let r = &s.runs[0];
            // Through the proxy the runtime has one plugin, the proxy.
            let k = if matches!(s.stack, Stack::GoProxy | Stack::RustProxy) {
                1
            } else {
                c.cell.k
            };
            assert_eq!(r.k, k);
            assert!(r.startup_ms > 0.0, "{} startup", c.cell.id);
            assert!(r.rss.runtime_idle.rss_kb > 0);
            assert_eq!(r.rss.plugins_idle.len(), k);
            assert!(
                r.rss
                    .plugins_idle
                    .iter()
                    .all(|m| m.rss_kb > 0 && m.hwm_kb >= m.rss_kb)
            );
            assert_eq!(
                r.plugins_exited_by_themselves + r.plugins_terminated + r.plugins_killed,
                k
            );
            if s.stack == Stack::RustRust || s.stack == Stack::RustGo {
                assert_eq!(r.implementation, "rust");
                // Our runtime sends Shutdown: plugins exit by themselves.
                assert_eq!(r.plugins_killed, 0, "{} {}", c.cell.id, s.stack.label());
            }
            match c.cell.mode {
                nri_bench::Mode::Latency => {
                    let l = r.latency_us.expect("latency stats");
                    assert!(
                        l.min > 0.0 && l.min <= l.median && l.median <= l.p99 && l.p99 <= l.max
                    );
                    assert_eq!(r.n, Some(c.cell.n));
                    assert_eq!(r.call_errors, 0);
                    assert!(r.events_per_sec.unwrap_or(0.0) > 0.0);
                    assert!(r.rss.plugins_after.as_ref().is_some_and(|v| v.len() == k));
                    if c.cell.event == nri_bench::Event::CreateContainer {
                        let want = match c.cell.flavour {
                            nri_bench::Flavour::Adjusting => c.cell.k,
                            nri_bench::Flavour::Noop => 0,
                        };
                        assert_eq!(
                            r.adjust_check.as_deref(),
                            Some(format!("ok: {want} env, {want} annotations").as_str()),
                            "{} {}",
                            c.cell.id,
                            s.stack.label()
                        );
                    }
                }
                nri_bench::Mode::Sync => {
                    let sy = r.sync.as_ref().expect("sync result");
                    assert_eq!(sy.pods, 20);
                    assert_eq!(sy.containers, 100);
                    // ~1.4 KB per pod + ~3.0 KB per container, same bytes on both sides.
                    assert!(
                        sy.proto_bytes > 20 * 1000 + 100 * 2500,
                        "{}",
                        sy.proto_bytes
                    );
                    assert_eq!(sy.sync_callback_ms.len(), 1);
                }
                nri_bench::Mode::Idle => {}
            }
        }
        // Both sides build the same request shape: same sync size.
        if c.cell.mode == nri_bench::Mode::Sync {
            let sizes: Vec<usize> = c
                .stacks
                .iter()
                .filter_map(|s| s.runs[0].sync.as_ref().map(|x| x.proto_bytes))
                .collect();
            assert!(sizes.windows(2).all(|w| w[0] == w[1]), "{sizes:?}");
        }
    }
    // Every target compares a Rust stack with the Go one: with the Go peers
    // each must be measured; without them none can be, and the test says so.
    if with_go {
        for t in &report.targets {
            assert!(t.met.is_some(), "target {} not measured", t.name);
        }
    } else {
        assert!(
            report.targets.iter().all(|t| t.met.is_none()),
            "a target was measured without the Go stack"
        );
        eprintln!(
            "skipped: the {} targets compare against the Go stack, which is not built (scripts/build-go-peers.sh)",
            report.targets.len()
        );
    }
    let mut table = Vec::new();
    nri_bench::print_table(&report, &mut table).expect("table");
    let table = String::from_utf8(table).expect("utf8");
    assert!(table.contains("| CreateContainer noop K=1 |"), "{table}");
    assert!(
        table.contains("### nri-proxy beside a direct connection"),
        "{table}"
    );
    let json = serde_json::to_value(&report).expect("json");
    assert!(json["cells"].as_array().is_some_and(|c| !c.is_empty()));
}

#[test]
fn request_shape_matches_go_sizes() {
    use prost::Message as _;
    let pod = nri_bench::shape::pod(0);
    let ctr = nri_bench::shape::container(&pod, 0, 0);
    // About 1.4 KB per pod and 3.0 KB per container (2.7 KB with this
    // generator, byte-identical to the Go peer: the sync cells compare sizes).
    assert!(
        (1300..1500).contains(&pod.encoded_len()),
        "{}",
        pod.encoded_len()
    );
    assert!(
        (2500..3200).contains(&ctr.encoded_len()),
        "{}",
        ctr.encoded_len()
    );
    assert_eq!(
        nri_bench::shape::hex_id("ctr", 0).len(),
        64,
        "64 hex digits"
    );
}
