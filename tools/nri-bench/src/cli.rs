//! The benchmark's command-line options and report output, shared by the
//! `nri-bench` binary and the `nri bench` command.

use std::io::Write;
use std::path::PathBuf;

use crate::harness::TokioFlavour;
use crate::{BenchOptions, BenchReport, Error, print_table};

/// Command-line options of the benchmark matrix (flatten into a clap
/// parser with `#[command(flatten)]`).
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Repetitions of the whole matrix (default 3; 1 with --quick).
    #[arg(long, value_name = "N")]
    pub reps: Option<usize>,
    /// Short smoke variant: small N, small sync state.
    #[arg(long)]
    pub quick: bool,
    /// Print the whole report as JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Also write the whole report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json_out: Option<PathBuf>,
    /// Timed calls at K=1 in the runtime cells (K plugins: N/K).
    #[arg(long, value_name = "N")]
    pub n: Option<usize>,
    /// Events of the plugin CPU/memory cell.
    #[arg(long, value_name = "N")]
    pub plugin_n: Option<usize>,
    /// Events of the plugin growth cell.
    #[arg(long, value_name = "N")]
    pub plugin_long_n: Option<usize>,
    /// Pods in the sync state.
    #[arg(long, value_name = "N")]
    pub sync_pods: Option<usize>,
    /// Only these cells (repeat the flag for several kinds).
    #[arg(long, value_name = "CELLS", value_parser = ["runtime", "plugin", "proxy", "wasm"])]
    pub only: Vec<String>,
    /// Skip the Go stacks (no Go peers needed).
    #[arg(long)]
    pub no_go: bool,
    /// Directory of nri-go-bench and nri-go-plugin (default $NRI_INTEROP_BIN
    /// or interop/bin of the source tree).
    #[arg(long, value_name = "DIR")]
    pub go_bin_dir: Option<PathBuf>,
    /// Directory of nri-bench-runtime and nri-bench-plugin (default: beside
    /// this binary).
    #[arg(long, value_name = "DIR")]
    pub rust_bin_dir: Option<PathBuf>,
    /// Rust bench plugin binary to use instead of the one in the Rust bin
    /// dir, e.g. the static min-size build (see docs/benchmarks/nri.md).
    #[arg(long, value_name = "FILE")]
    pub rust_plugin_bin: Option<PathBuf>,
    /// tokio scheduler of the Rust runtime harness.
    #[arg(long, value_name = "FLAVOUR", default_value = "multi", value_parser = ["multi", "current"])]
    pub tokio: String,
    /// tokio workers of the Rust runtime harness.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub workers: usize,
}

impl BenchArgs {
    /// The engine options these arguments ask for.
    pub fn options(&self) -> BenchOptions {
        let mut o = BenchOptions {
            quick: self.quick,
            with_go: !self.no_go,
            workers: self.workers,
            rust_plugin_bin: self.rust_plugin_bin.clone(),
            ..Default::default()
        };
        if let Some(v) = self.reps {
            o.reps = v;
        } else if self.quick {
            o.reps = 1;
        }
        if let Some(v) = self.n {
            o.n = v;
        }
        if let Some(v) = self.plugin_n {
            o.plugin_n = v;
        }
        if let Some(v) = self.plugin_long_n {
            o.plugin_long_n = v;
        }
        if let Some(v) = self.sync_pods {
            o.sync_pods = v;
        }
        if let Some(d) = &self.go_bin_dir {
            o.go_bin_dir = d.clone();
        }
        if let Some(d) = &self.rust_bin_dir {
            o.rust_bin_dir = d.clone();
        }
        o.tokio = if self.tokio == "current" {
            TokioFlavour::CurrentThread
        } else {
            TokioFlavour::MultiThread
        };
        if !self.only.is_empty() {
            let only = |kind: &str| self.only.iter().any(|o| o == kind);
            o.runtime_cells = only("runtime");
            o.plugin_cells = only("plugin");
            o.proxy_cells = only("proxy");
            o.wasm_cells = only("wasm");
        }
        o
    }

    /// Writes the report as asked: as JSON to `--json-out` if given, then
    /// to `out` as tables (or as JSON with `--json`).
    ///
    /// Errors: [`Error::Io`] when the JSON file cannot be written,
    /// [`Error::Output`] when `out` cannot be.
    pub fn write_report(&self, report: &BenchReport, out: &mut dyn Write) -> Result<(), Error> {
        if let Some(path) = &self.json_out {
            serde_json::to_vec_pretty(report)
                .map_err(std::io::Error::from)
                .and_then(|v| std::fs::write(path, v))
                .map_err(|source| Error::Io {
                    what: "writing the JSON report",
                    source,
                })?;
        }
        if self.json {
            serde_json::to_writer_pretty(&mut *out, report)
                .map_err(std::io::Error::from)
                .and_then(|()| writeln!(out))
                .map_err(Error::Output)
        } else {
            print_table(report, out)
        }
    }
}
