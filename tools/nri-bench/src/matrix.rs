//! What the matrix is made of: the stacks, the cells and the options of
//! a run.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::harness::TokioFlavour;
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
    /// "Plain" mode: no spinning anywhere (our runtime's and plugins' spin
    /// budgets zero), beside the same cell with the defaults.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub plain: bool,
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
    #[allow(clippy::too_many_lines)]
    pub fn cells(&self) -> Vec<Cell> {
        let o = self.effective();
        let min_n = if o.quick { 40 } else { 200 };
        let rt_stacks: Vec<Stack> = if o.with_go {
            vec![Stack::GoGo, Stack::RustRust, Stack::RustGo]
        } else {
            vec![Stack::RustRust]
        };
        let pl_stacks: Vec<Stack> = if o.with_go {
            vec![Stack::GoGo, Stack::GoRust]
        } else {
            Vec::new()
        };
        let mut cells = Vec::new();
        let lat = |id: String,
                   label: String,
                   event: Event,
                   flavour: Flavour,
                   k: usize,
                   n: usize,
                   conc: usize,
                   stacks: &Vec<Stack>| Cell {
            id,
            label,
            mode: Mode::Latency,
            event,
            flavour,
            k,
            n,
            warmup: (n / 20).max(10),
            concurrency: conc,
            stacks: stacks.clone(),
            pace_ms: None,
            plain: false,
        };
        if o.runtime_cells {
            for flavour in [Flavour::Noop, Flavour::Adjusting] {
                for k in [1usize, 4, 8] {
                    let n = (o.n / k).max(min_n);
                    cells.push(lat(
                        format!("create-{}-k{k}", flavour.as_str()),
                        format!("CreateContainer {} K={k}", flavour.as_str()),
                        Event::CreateContainer,
                        flavour,
                        k,
                        n,
                        1,
                        &rt_stacks,
                    ));
                }
            }
            cells.push(lat(
                "start-noop-k8".into(),
                "StartContainer noop K=8".into(),
                Event::StartContainer,
                Flavour::Noop,
                8,
                (o.n / 8).max(min_n),
                1,
                &rt_stacks,
            ));
            for k in [1usize, 8] {
                cells.push(lat(
                    format!("conc8-noop-k{k}"),
                    format!("CreateContainer noop K={k}, 8 concurrent"),
                    Event::CreateContainer,
                    Flavour::Noop,
                    k,
                    (o.n / k).max(min_n),
                    8,
                    &rt_stacks,
                ));
            }
            cells.push(Cell {
                id: "sync-runtime".into(),
                label: format!(
                    "register+sync 1 plugin, {} pods / {} containers",
                    o.sync_pods,
                    o.sync_pods * o.sync_containers_per_pod
                ),
                mode: Mode::Sync,
                event: Event::CreateContainer,
                flavour: Flavour::Noop,
                k: 1,
                n: 0,
                warmup: 0,
                concurrency: 1,
                stacks: rt_stacks.clone(),
                pace_ms: None,
                plain: false,
            });
            cells.extend(crate::paced::cells(&o));
        }
        if o.proxy_cells {
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
            for (f, flavour) in [("noop", Flavour::Noop), ("adjusting", Flavour::Adjusting)] {
                for k in [1usize, 4] {
                    let n = (o.n / k).max(min_n);
                    cells.push(lat(
                        format!("proxy-{f}-k{k}"),
                        format!("CreateContainer {f} K={k}, direct and through nri-proxy"),
                        Event::CreateContainer,
                        flavour,
                        k,
                        n,
                        1,
                        &stacks,
                    ));
                }
            }
        }
        if o.wasm_cells {
            cells.extend(crate::wasm::cells(&o));
        }
        if o.plugin_cells && !pl_stacks.is_empty() {
            for (id, n) in [("plugin-n", o.plugin_n), ("plugin-long", o.plugin_long_n)] {
                cells.push(Cell {
                    warmup: 0,
                    ..lat(
                        id.into(),
                        format!("plugin under Go runtime: {n} x CreateContainer noop K=1"),
                        Event::CreateContainer,
                        Flavour::Noop,
                        1,
                        n,
                        1,
                        &pl_stacks,
                    )
                });
            }
            cells.push(Cell {
                id: "sync-plugin".into(),
                label: format!(
                    "plugin under Go runtime: sync of {} pods / {} containers",
                    o.sync_pods,
                    o.sync_pods * o.sync_containers_per_pod
                ),
                mode: Mode::Sync,
                event: Event::CreateContainer,
                flavour: Flavour::Noop,
                k: 1,
                n: 0,
                warmup: 0,
                concurrency: 1,
                stacks: pl_stacks,
                pace_ms: None,
                plain: false,
            });
        }
        cells
    }
}
