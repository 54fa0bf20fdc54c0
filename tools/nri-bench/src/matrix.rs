//! What the matrix is made of: the stacks, the cells and the options of
//! a run.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::harness::TokioFlavour;
use crate::paced::Twin;
use crate::{Event, Flavour, Mode};

/// Which runtime and which plugins a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stack {
    /// Go runtime (`nri-go-bench`), Go plugins (`nri-go-plugin`): the baseline.
    GoGo,
    /// Go runtime, Rust plugins (`nri-bench-plugin`): the plugin SDK under test.
    GoRust,
    /// Rust runtime (`nri-bench-runtime`), Rust plugins: the whole Rust stack.
    RustRust,
    /// Rust runtime, Go plugins: the runtime library under test.
    RustGo,
    /// Go runtime, `nri-proxy` (`nri-bench-proxy`) with K Rust plugins
    /// behind it: the proxy on the runtime operators run.
    GoProxy,
    /// Rust runtime, `nri-proxy` with K Rust plugins behind it (beside
    /// `RustRust`: the latency the proxy adds).
    RustProxy,
    /// Go runtime with K WebAssembly plugins in-process (containerd/nri's
    /// wazero host), the interop wasm-guest module.
    GoWasm,
    /// Rust runtime with the same K WebAssembly plugins (wasmi).
    RustWasm,
    /// Go runtime (wazero) with K copies of a guest written in WAT that
    /// answers every call at once: the host's own cost per call.
    GoWat,
    /// Rust runtime (wasmi) with the same K WAT guests.
    RustWat,
}

impl Stack {
    /// Short label (`go/go` = runtime/plugins).
    pub fn label(self) -> &'static str {
        match self {
            Stack::GoGo => "go/go",
            Stack::GoRust => "go/rust",
            Stack::RustRust => "rust/rust",
            Stack::RustGo => "rust/go",
            Stack::GoProxy => "go/proxy/rust",
            Stack::RustProxy => "rust/proxy/rust",
            Stack::GoWasm => "go/wasm",
            Stack::RustWasm => "rust/wasm",
            Stack::GoWat => "go/wat",
            Stack::RustWat => "rust/wat",
        }
    }

    pub(crate) fn go_runtime(self) -> bool {
        matches!(
            self,
            Stack::GoGo | Stack::GoRust | Stack::GoProxy | Stack::GoWasm | Stack::GoWat
        )
    }

    /// The K plugins are WebAssembly modules in the runtime's process.
    pub(crate) fn wasm(self) -> bool {
        matches!(
            self,
            Stack::GoWasm | Stack::RustWasm | Stack::GoWat | Stack::RustWat
        )
    }

    /// The modules are the WAT no-op guest, not the Go-built one.
    pub(crate) fn wat(self) -> bool {
        matches!(self, Stack::GoWat | Stack::RustWat)
    }

    pub(crate) fn proxy(self) -> bool {
        matches!(self, Stack::GoProxy | Stack::RustProxy)
    }

    pub(crate) fn go_plugin(self) -> bool {
        matches!(self, Stack::GoGo | Stack::RustGo)
    }
}

/// One harness configuration of the matrix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cell {
    /// Stable identifier, e.g. `create-noop-k8`.
    pub id: String,
    /// Human label.
    pub label: String,
    /// Harness mode.
    pub mode: Mode,
    /// Timed event.
    pub event: Event,
    /// Plugin flavour.
    pub flavour: Flavour,
    /// Plugins.
    pub k: usize,
    /// Timed calls.
    pub n: usize,
    /// Warm-up calls.
    pub warmup: usize,
    /// Concurrent callers.
    pub concurrency: usize,
    /// Stacks run in this cell.
    pub stacks: Vec<Stack>,
    /// One call every this many ms instead of back to back (a node's
    /// pace): the paced cells.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pace_ms: Option<u64>,
    /// Which twin of a cell this is: the defaults, "plain" mode or the
    /// decoding twin (see [`Twin`]).
    #[serde(skip_serializing_if = "Twin::is_defaults")]
    pub twin: Twin,
}

/// Options of a benchmark run.
#[derive(Debug, Clone, Serialize)]
pub struct BenchOptions {
    /// Repetitions of the whole matrix.
    pub reps: usize,
    /// Short smoke variant (small N, small sync state, 1 rep unless set).
    pub quick: bool,
    /// Timed calls at K=1 in the runtime cells; K plugins get `n / K`
    /// (at least 200), so every cell makes about the same number of plugin
    /// calls.
    pub n: usize,
    /// Events of the plugin memory/CPU cells (the anchor's 20000).
    pub plugin_n: usize,
    /// Events of the plugin growth cell (100000).
    pub plugin_long_n: usize,
    /// Sync state: pods.
    pub sync_pods: usize,
    /// Sync state: containers per pod.
    pub sync_containers_per_pod: usize,
    /// Run the runtime-library cells.
    pub runtime_cells: bool,
    /// Run the plugin-SDK cells.
    pub plugin_cells: bool,
    /// Run the proxy cells (`nri-proxy` between the runtime and K plugins).
    pub proxy_cells: bool,
    /// Run the WebAssembly plugin cells (the Go guest in both runtimes).
    pub wasm_cells: bool,
    /// Include the Go stacks (needs the Go peers).
    pub with_go: bool,
    /// Directory of `nri-go-bench` and `nri-go-plugin`.
    pub go_bin_dir: PathBuf,
    /// Directory of `nri-bench-runtime` and `nri-bench-plugin`.
    pub rust_bin_dir: PathBuf,
    /// The Rust bench plugin to run instead of the one in `rust_bin_dir`
    /// (e.g. a static `min-size` build, as the plugin images ship).
    pub rust_plugin_bin: Option<PathBuf>,
    /// tokio scheduler of the Rust runtime harness.
    pub tokio: TokioFlavour,
    /// tokio workers of the Rust runtime harness (multi_thread).
    pub workers: usize,
    /// Idle wait before the idle RSS reading, ms.
    pub idle_wait_ms: u64,
}

impl Default for BenchOptions {
    fn default() -> Self {
        let exe_dir = std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or_default();
        let go_bin_dir = std::env::var_os("NRI_INTEROP_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../interop/bin"));
        BenchOptions {
            reps: 3,
            quick: false,
            n: 4000,
            plugin_n: 20000,
            plugin_long_n: 100000,
            sync_pods: 1000,
            sync_containers_per_pod: 5,
            runtime_cells: true,
            plugin_cells: true,
            proxy_cells: true,
            wasm_cells: true,
            with_go: true,
            go_bin_dir,
            rust_bin_dir: exe_dir,
            rust_plugin_bin: None,
            tokio: TokioFlavour::MultiThread,
            workers: 2,
            idle_wait_ms: 500,
        }
    }
}

/// The shortest idle wait of a proxy cell (ms). The harness sees one
/// plugin, the proxy, register; the proxy starts the plugins behind it
/// only once it is synchronized upstream, and the harness's adjustment
/// check (the first CreateContainer after the idle wait) needs all of them
/// registered. With `--quick`'s 100 ms, four plugin processes on a loaded
/// machine were not always there yet.
const PROXY_IDLE_WAIT_MS: u64 = 3000;

/// The idle wait a run of `stack` gets: [`BenchOptions::idle_wait_ms`],
/// and at least [`PROXY_IDLE_WAIT_MS`] through the proxy.
pub(crate) fn idle_wait_ms(o: &BenchOptions, stack: Stack) -> u64 {
    if stack.proxy() {
        o.idle_wait_ms.max(PROXY_IDLE_WAIT_MS)
    } else {
        o.idle_wait_ms
    }
}

impl BenchOptions {
    /// Applies the `--quick` sizes (called by [`crate::run`] when `quick` is set).
    pub(crate) fn effective(&self) -> BenchOptions {
        let mut o = self.clone();
        if o.quick {
            o.n = o.n.min(200);
            o.plugin_n = o.plugin_n.min(300);
            o.plugin_long_n = o.plugin_long_n.min(1500);
            o.sync_pods = o.sync_pods.min(50);
            o.idle_wait_ms = o.idle_wait_ms.min(100);
        }
        o
    }

    /// The matrix of cells.
    pub fn cells(&self) -> Vec<Cell> {
        let o = self.effective();
        let mut cells = Vec::new();
        if o.runtime_cells {
            cells.extend(runtime_cells(&o));
            cells.extend(crate::paced::cells(&o));
        }
        if o.proxy_cells {
            cells.extend(proxy_cells(&o));
        }
        if o.wasm_cells {
            cells.extend(crate::wasm::cells(&o));
        }
        if o.plugin_cells && o.with_go {
            cells.extend(plugin_cells(&o));
        }
        cells
    }

    /// Timed calls of a cell with `k` plugins: `n / k`, at least 200 (40
    /// with `--quick`), so every cell makes about the same number of plugin
    /// calls.
    fn per_k(&self, k: usize) -> usize {
        let min_n = if self.quick { 40 } else { 200 };
        (self.n / k).max(min_n)
    }

    /// The sync state's label: `N pods / M containers`.
    fn sync_state(&self) -> String {
        format!(
            "{} pods / {} containers",
            self.sync_pods,
            self.sync_pods * self.sync_containers_per_pod
        )
    }
}

/// A back-to-back latency cell: `n` CreateContainer calls, one caller, a
/// warm-up of `n / 20` (at least 10).
fn latency_cell(
    id: String,
    label: String,
    flavour: Flavour,
    k: usize,
    n: usize,
    stacks: &[Stack],
) -> Cell {
    Cell {
        id,
        label,
        mode: Mode::Latency,
        event: Event::CreateContainer,
        flavour,
        k,
        n,
        warmup: (n / 20).max(10),
        concurrency: 1,
        stacks: stacks.to_vec(),
        pace_ms: None,
        twin: Twin::Defaults,
    }
}

/// A registration-and-sync cell: one no-op plugin against the sync state.
fn sync_cell(id: &str, label: String, stacks: Vec<Stack>) -> Cell {
    Cell {
        id: id.into(),
        label,
        mode: Mode::Sync,
        event: Event::CreateContainer,
        flavour: Flavour::Noop,
        k: 1,
        n: 0,
        warmup: 0,
        concurrency: 1,
        stacks,
        pace_ms: None,
        twin: Twin::Defaults,
    }
}

/// The runtime-library cells: CreateContainer at K = 1, 4, 8 (no-op and
/// adjusting), StartContainer at K = 8, 8 concurrent callers at K = 1 and
/// 8, and registration with sync.
fn runtime_cells(o: &BenchOptions) -> Vec<Cell> {
    let stacks: Vec<Stack> = if o.with_go {
        vec![Stack::GoGo, Stack::RustRust, Stack::RustGo]
    } else {
        vec![Stack::RustRust]
    };
    let mut cells = Vec::new();
    for flavour in [Flavour::Noop, Flavour::Adjusting] {
        for k in [1usize, 4, 8] {
            cells.push(latency_cell(
                format!("create-{}-k{k}", flavour.as_str()),
                format!("CreateContainer {} K={k}", flavour.as_str()),
                flavour,
                k,
                o.per_k(k),
                &stacks,
            ));
        }
    }
    cells.push(Cell {
        event: Event::StartContainer,
        ..latency_cell(
            "start-noop-k8".into(),
            "StartContainer noop K=8".into(),
            Flavour::Noop,
            8,
            o.per_k(8),
            &stacks,
        )
    });
    for k in [1usize, 8] {
        cells.push(Cell {
            concurrency: 8,
            ..latency_cell(
                format!("conc8-noop-k{k}"),
                format!("CreateContainer noop K={k}, 8 concurrent"),
                Flavour::Noop,
                k,
                o.per_k(k),
                &stacks,
            )
        });
    }
    cells.push(sync_cell(
        "sync-runtime",
        format!("register+sync 1 plugin, {}", o.sync_state()),
        stacks,
    ));
    cells
}

/// The proxy cells: CreateContainer at K = 1 and 4 (no-op and adjusting),
/// direct and through `nri-proxy`.
fn proxy_cells(o: &BenchOptions) -> Vec<Cell> {
    let stacks = if o.with_go {
        vec![
            Stack::GoGo,
            Stack::GoRust,
            Stack::GoProxy,
            Stack::RustRust,
            Stack::RustProxy,
        ]
    } else {
        vec![Stack::RustRust, Stack::RustProxy]
    };
    // Through the proxy the harnesses start one plugin and check
    // the adjustments of the K behind it (`--adjusting-plugins`).
    let mut cells = Vec::new();
    for (f, flavour) in [("noop", Flavour::Noop), ("adjusting", Flavour::Adjusting)] {
        for k in [1usize, 4] {
            cells.push(latency_cell(
                format!("proxy-{f}-k{k}"),
                format!("CreateContainer {f} K={k}, direct and through nri-proxy"),
                flavour,
                k,
                o.per_k(k),
                &stacks,
            ));
        }
    }
    cells
}

/// The plugin-SDK cells, under the Go runtime (so only with the Go
/// stacks): the memory/CPU run, the growth run and the sync.
fn plugin_cells(o: &BenchOptions) -> Vec<Cell> {
    let stacks = vec![Stack::GoGo, Stack::GoRust];
    let mut cells = Vec::new();
    for (id, n) in [("plugin-n", o.plugin_n), ("plugin-long", o.plugin_long_n)] {
        cells.push(Cell {
            warmup: 0,
            ..latency_cell(
                id.into(),
                format!("plugin under Go runtime: {n} x CreateContainer noop K=1"),
                Flavour::Noop,
                1,
                n,
                &stacks,
            )
        });
    }
    cells.push(sync_cell(
        "sync-plugin",
        format!("plugin under Go runtime: sync of {}", o.sync_state()),
        stacks,
    ));
    cells
}
