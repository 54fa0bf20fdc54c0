//! The WebAssembly cells of the benchmark end to end (`--only wasm`,
//! quick sizes, our stack): the Go-built guest (interop/wasm-guest, built
//! by scripts/build-go-peers.sh) and the WAT no-op guest, K = 1 and 4
//! times in the Rust runtime, with no plugin or proxy binary around.
//! Checks that every run succeeded, loaded K modules and timed
//! CreateContainer calls with no adjustment; no timing assertions. The Go
//! stack of these cells is left to the benchmark itself: its wazero host
//! compiles the 10 MB guest once per plugin, 8 s of CPU each here, which
//! would make this test cost minutes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use nri_bench::{BenchOptions, BenchReport, Stack};

fn interop_dir() -> PathBuf {
    std::env::var_os("NRI_INTEROP_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../interop/bin"))
}

#[test]
fn wasm_cells_end_to_end() {
    let dir = interop_dir();
    if !dir.join("wasm-guest.wasm").is_file() {
        assert_ne!(
            std::env::var("NRI_REQUIRE_INTEROP").as_deref(),
            Ok("1"),
            "wasm-guest.wasm missing in {} (NRI_REQUIRE_INTEROP=1): run scripts/build-go-peers.sh",
            dir.display()
        );
        eprintln!(
            "skipping: wasm-guest.wasm missing in {}; run scripts/build-go-peers.sh",
            dir.display()
        );
        return;
    }
    // Only the runtime harness, alone in a directory: the WebAssembly
    // cells need no plugin or proxy binary.
    let bins = tempfile::tempdir().expect("tempdir");
    let runtime_bin = bins.path().join("nri-bench-runtime");
    std::fs::copy(env!("CARGO_BIN_EXE_nri-bench-runtime"), &runtime_bin).expect("copy");
    let opts = BenchOptions {
        quick: true,
        reps: 1,
        n: 80,
        with_go: false,
        go_bin_dir: dir,
        rust_bin_dir: bins.path().to_path_buf(),
        runtime_cells: false,
        plugin_cells: false,
        proxy_cells: false,
        wasm_cells: true,
        ..Default::default()
    };
    let report = nri_bench::run(&opts, |l| eprintln!("{l}")).expect("matrix runs");

    let ids: Vec<&str> = report.cells.iter().map(|c| c.cell.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "wasm-noop-k1",
            "wasm-noop-k4",
            "wasm-wat-noop-k1",
            "wasm-wat-noop-k4"
        ]
    );
    check_runs(&report);
    // The call target needs only our stack; the load target compares with
    // Go's host, which did not run.
    let measured = |prefix: &str| {
        report
            .targets
            .iter()
            .find(|t| t.name.starts_with(prefix))
            .map(|t| t.met.is_some())
    };
    assert_eq!(measured("CreateContainer noop through one"), Some(true));
    assert_eq!(measured("WebAssembly plugin load"), Some(false));
    let mut table = Vec::new();
    nri_bench::print_table(&report, &mut table).expect("table");
    let table = String::from_utf8(table).expect("utf8");
    assert!(
        table.contains("### WebAssembly plugins (the Go-built guest, noop)"),
        "{table}"
    );
    assert!(table.contains("| rust/wasm |"), "{table}");
    assert!(
        table.contains("### WebAssembly plugins (the WAT no-op guest: the host's own cost)"),
        "{table}"
    );
    assert!(table.contains("| rust/wat |"), "{table}");
}

/// Every run of every cell succeeded, on the right stack, with K modules
/// and no plugin process, and timed calls that changed nothing.
fn check_runs(report: &BenchReport) {
    for c in &report.cells {
        let stacks: Vec<Stack> = c.stacks.iter().map(|s| s.stack).collect();
        let want = if c.cell.id.contains("wat") {
            Stack::RustWat
        } else {
            Stack::RustWasm
        };
        assert_eq!(stacks, [want]);
        for s in &c.stacks {
            let what = format!("{} {}", c.cell.id, s.stack.label());
            assert!(s.errors.is_empty(), "{what}: {:?}", s.errors);
            let r = &s.runs[0];
            assert_eq!(r.k, c.cell.k, "{what}");
            // No plugin processes: the modules run inside the runtime.
            assert!(r.rss.plugins_idle.is_empty(), "{what}");
            assert!(r.startup_ms > 0.0, "{what}");
            assert!(r.rss.runtime_idle.rss_kb > 0, "{what}");
            let l = r.latency_us.expect("latency stats");
            assert!(l.min > 0.0 && l.min <= l.median && l.median <= l.max);
            assert_eq!(r.n, Some(c.cell.n), "{what}");
            assert_eq!(r.call_errors, 0, "{what}");
            assert_eq!(
                r.adjust_check.as_deref(),
                Some("ok: 0 env, 0 annotations"),
                "{what}"
            );
        }
    }
}
