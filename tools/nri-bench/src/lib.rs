//! Side-by-side benchmarks of the Rust NRI stack against the Go reference
//! (containerd/nri v0.12.5), in one run, interleaved.
//!
//! Four stacks, each a fresh runtime process with K fresh plugin processes
//! on a temp socket, all driven with the same realistic request shape (see
//! [`shape`]):
//!
//! | stack | runtime process | plugin processes |
//! |---|---|---|
//! | [`Stack::GoGo`] | `nri-go-bench` (Go adaptation) | `nri-go-plugin --bench` (Go stub) |
//! | [`Stack::GoRust`] | `nri-go-bench` | `nri-bench-plugin` (on `nri-plugin`) |
//! | [`Stack::RustRust`] | `nri-bench-runtime` (on `nri-runtime`, [`harness`]) | `nri-bench-plugin` |
//! | [`Stack::RustGo`] | `nri-bench-runtime` | `nri-go-plugin --bench` |
//! | [`Stack::GoProxy`] | `nri-go-bench` | `nri-bench-proxy` (nri-proxy) with K `nri-bench-plugin` behind it |
//! | [`Stack::RustProxy`] | `nri-bench-runtime` | `nri-bench-proxy` with K `nri-bench-plugin` behind it |
//! | [`Stack::GoWasm`] | `nri-go-bench --wasm` (wazero) | none: K copies of the Go-built `wasm-guest.wasm` in its plugin directory |
//! | [`Stack::RustWasm`] | `nri-bench-runtime --wasm` (wasmi) | the same K modules |
//! | [`Stack::GoWat`] | `nri-go-bench --wasm` (wazero) | none: K copies of a no-op guest written in WAT, assembled by the bench |
//! | [`Stack::RustWat`] | `nri-bench-runtime --wasm` (wasmi) | the same K modules |
//!
//! The plugin SDK is compared under the same Go runtime (`GoRust` vs
//! `GoGo`), the runtime library under the same Go plugins (`RustGo` vs
//! `GoGo`) and as a whole (`RustRust` vs `GoGo`).
//!
//! The engine is [`run`]: [`BenchOptions`] in, [`BenchReport`] out
//! (serializable), [`print_table`] renders it. Every cell is run `reps`
//! times with the stacks interleaved (their order rotates per repetition);
//! each reported value is the median of the per-run values with their
//! min-max.
//!
//! ```no_run
//! let opts = nri_bench::BenchOptions { quick: true, ..Default::default() };
//! let report = nri_bench::run(&opts, |line| eprintln!("{line}"))?;
//! nri_bench::print_table(&report, &mut std::io::stdout())?;
//! # Ok::<(), nri_bench::Error>(())
//! ```

mod bins;
mod cli;
mod driver;
pub mod harness;
mod matrix;
mod paced;
pub mod probe;
pub mod procfs;
mod report;
pub mod result;
mod sha256;
pub mod shape;
pub mod stats;
mod table;
mod targets;
mod wasm;

pub use cli::BenchArgs;
pub use driver::{ENV_PROXY_K, ENV_PROXY_PLUGIN, run};
pub use matrix::{BenchOptions, Cell, Stack};
pub use paced::{ENV_PLUGIN_DECODE, ENV_PLUGIN_SPIN_US, Twin};
pub use report::{BenchReport, CellReport, Machine, MetricSummary, StackResult, TargetCheck};
pub use table::print_table;

/// Errors of the benchmark engine and harness.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file system or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A program could not be started.
    #[error("cannot run {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A needed binary is missing.
    #[error("missing binary {path} ({hint})")]
    MissingBinary {
        /// Where it was looked for.
        path: String,
        /// How to get it.
        hint: &'static str,
    },
    /// Not all plugins registered and synchronized in time.
    #[error("only {registered} of {wanted} plugins registered+synchronized after {after:?}")]
    Registration {
        /// Plugins active at the deadline.
        registered: usize,
        /// Plugins launched.
        wanted: usize,
        /// The wait.
        after: std::time::Duration,
    },
    /// The runtime library failed.
    #[error("nri-runtime: {0}")]
    Runtime(#[from] nri_runtime::Error),
    /// A harness check failed (call errors, merged adjustment).
    #[error("{0}")]
    Check(String),
    /// A harness task failed.
    #[error("harness task: {0}")]
    Task(String),
    /// Invalid options.
    #[error("invalid options: {0}")]
    Options(String),
    /// Writing the table failed.
    #[error("writing output: {0}")]
    Output(#[source] std::io::Error),
}

/// What a harness run measures (`--mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Startup, idle RSS, then timed calls.
    Latency,
    /// Startup against a large state, RSS after sync.
    Sync,
    /// Startup and idle RSS only.
    Idle,
}

impl Mode {
    /// The flag value.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Latency => "latency",
            Mode::Sync => "sync",
            Mode::Idle => "idle",
        }
    }

    /// Parses a flag value.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "latency" => Some(Mode::Latency),
            "sync" => Some(Mode::Sync),
            "idle" => Some(Mode::Idle),
            _ => None,
        }
    }
}

/// Plugin flavour (`--flavour`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Flavour {
    /// No adjustment.
    Noop,
    /// One env var and one annotation per plugin.
    Adjusting,
}

impl Flavour {
    /// The flag value.
    pub fn as_str(self) -> &'static str {
        match self {
            Flavour::Noop => "noop",
            Flavour::Adjusting => "adjusting",
        }
    }

    /// Parses a flag value (`none` = `noop`).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "noop" | "none" => Some(Flavour::Noop),
            "adjusting" => Some(Flavour::Adjusting),
            _ => None,
        }
    }
}

/// Timed event (`--event`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Event {
    /// CreateContainer (a fresh container per call).
    CreateContainer,
    /// StartContainer (one request reused).
    StartContainer,
}

impl Event {
    /// The flag value.
    pub fn as_str(self) -> &'static str {
        match self {
            Event::CreateContainer => "CreateContainer",
            Event::StartContainer => "StartContainer",
        }
    }

    /// Parses any spelling (`CreateContainer`, `create_container`,
    /// `createcontainer`).
    pub fn parse(s: &str) -> Option<Self> {
        let n: String = s
            .chars()
            .filter(|c| *c != '_' && *c != '-')
            .collect::<String>()
            .to_ascii_lowercase();
        match n.as_str() {
            "createcontainer" => Some(Event::CreateContainer),
            "startcontainer" => Some(Event::StartContainer),
            _ => None,
        }
    }
}

// The README's example, compiled as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
