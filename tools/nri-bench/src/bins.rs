//! The binaries and modules a benchmark run uses, and the check that the
//! ones its cells need exist (and only those: `--only wasm` needs no
//! plugin or proxy binary).

use std::path::{Path, PathBuf};

use crate::Error;
use crate::matrix::{BenchOptions, Cell, Stack};

/// The programs and modules of one run.
pub(crate) struct Bins {
    pub(crate) go_bench: PathBuf,
    pub(crate) go_plugin: PathBuf,
    pub(crate) rust_runtime: PathBuf,
    pub(crate) rust_plugin: PathBuf,
    pub(crate) rust_proxy: PathBuf,
    pub(crate) wasm_guest: PathBuf,
    /// The WAT no-op guest, written for this run.
    pub(crate) wat_guest: PathBuf,
}

impl Bins {
    /// Where `o` says they are.
    pub(crate) fn new(o: &BenchOptions, wat_guest: PathBuf) -> Self {
        Bins {
            go_bench: o.go_bin_dir.join("nri-go-bench"),
            go_plugin: o.go_bin_dir.join("nri-go-plugin"),
            rust_runtime: o.rust_bin_dir.join("nri-bench-runtime"),
            rust_plugin: o
                .rust_plugin_bin
                .clone()
                .unwrap_or_else(|| o.rust_bin_dir.join("nri-bench-plugin")),
            rust_proxy: o.rust_bin_dir.join("nri-bench-proxy"),
            wasm_guest: o.go_bin_dir.join(crate::wasm::GUEST),
            wat_guest,
        }
    }

    /// The module a WebAssembly stack loads.
    pub(crate) fn guest(&self, stack: Stack) -> &Path {
        if stack.wat() {
            &self.wat_guest
        } else {
            &self.wasm_guest
        }
    }

    /// Checks that the binaries the stacks of `cells` run exist.
    pub(crate) fn check(&self, cells: &[Cell]) -> Result<(), Error> {
        let go_hint = "build the Go peers: bash scripts/build-go-peers.sh (or set NRI_INTEROP_BIN)";
        let rust_hint = "build them: cargo build --release -p nri-bench";
        let stacks: Vec<Stack> = cells
            .iter()
            .flat_map(|c| c.stacks.iter().copied())
            .collect();
        let any = |f: fn(Stack) -> bool| stacks.iter().any(|s| f(*s));
        let needed = [
            (any(Stack::go_runtime), &self.go_bench, go_hint),
            (any(|s| !s.go_runtime()), &self.rust_runtime, rust_hint),
            (
                any(|s| s.go_plugin() && !s.wasm()),
                &self.go_plugin,
                go_hint,
            ),
            (
                any(|s| !s.go_plugin() && !s.wasm()),
                &self.rust_plugin,
                rust_hint,
            ),
            (any(Stack::proxy), &self.rust_proxy, rust_hint),
            (any(|s| s.wasm() && !s.wat()), &self.wasm_guest, go_hint),
        ];
        for (need, path, hint) in needed {
            if need && !path.is_file() {
                return Err(Error::MissingBinary {
                    path: path.display().to_string(),
                    hint,
                });
            }
        }
        Ok(())
    }
}
