//! The JSON object one harness run prints: the schema of `nri-go-bench`
//! (interop/README.md), shared by the Rust harness `nri-bench-runtime`.

use serde::{Deserialize, Serialize};

use crate::procfs::Mem;
use crate::stats::Stats;

/// Result of one harness run (one runtime process, K fresh plugins).
///
/// Field names and meanings are those of `nri-go-bench`; fields only one
/// side prints are optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunResult {
    /// `go` or `rust`: the runtime side.
    #[serde(rename = "impl")]
    pub implementation: String,
    /// NRI protocol version the runtime implements.
    pub nri_version: String,
    /// Go toolchain of the Go harness.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub go_version: Option<String>,
    /// GOMAXPROCS of the Go harness.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gomaxprocs: Option<u32>,
    /// tokio scheduler of the Rust harness (`current_thread` or `multi_thread`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokio_flavour: Option<String>,
    /// tokio worker threads of the Rust harness.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_threads: Option<usize>,
    /// `latency`, `sync` or `idle`.
    pub mode: String,
    /// Timed event (latency mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// Plugin flavour: `noop` or `adjusting`.
    pub flavour: String,
    /// Number of plugin processes.
    pub k: usize,
    /// Timed calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n: Option<usize>,
    /// Warm-up calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warmup: Option<usize>,
    /// Concurrent callers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<usize>,
    /// Launch of the first plugin -> K plugins registered and synchronized, ms.
    pub startup_ms: f64,
    /// Per-call latency, µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<Stats>,
    /// N / wall time of the timed loop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events_per_sec: Option<f64>,
    /// Wall time of the timed loop, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall_ms: Option<f64>,
    /// Runtime process CPU per timed event, µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_cpu_us_per_event: Option<f64>,
    /// CPU of all plugin processes per timed event, µs (10 ms ticks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plugins_cpu_us_per_event: Option<f64>,
    /// Timed calls that failed.
    pub call_errors: u64,
    /// Result of the merged-adjustment check (`ok: K env, K annotations`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adjust_check: Option<String>,
    /// Sync mode details.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync: Option<SyncResult>,
    /// Memory snapshots.
    pub rss: RssResult,
    /// Plugins that exited after the runtime stopped, without a signal.
    pub plugins_exited_by_themselves: usize,
    /// Plugins that needed SIGTERM.
    pub plugins_terminated: usize,
    /// Plugins that needed SIGKILL.
    pub plugins_killed: usize,
    /// Why the run failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Sync mode details.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SyncResult {
    /// Pods in the runtime's state.
    pub pods: usize,
    /// Containers in the runtime's state.
    pub containers: usize,
    /// Serialized size of all pods and containers.
    pub proto_bytes: usize,
    /// Per plugin: time of the synchronization (Go: the sync callback; Rust:
    /// listing the state -> plugin active), ms.
    pub sync_callback_ms: Vec<f64>,
    /// Launch -> registered and synchronized, ms.
    pub registered_synced_ms: f64,
}

/// Memory snapshots (KiB).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RssResult {
    /// The runtime process, `idle_wait` after all plugins registered.
    pub runtime_idle: Mem,
    /// The runtime process after the timed loop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_after: Option<Mem>,
    /// Each plugin, `idle_wait` after registration (in sync mode: after sync).
    pub plugins_idle: Vec<Mem>,
    /// Each plugin after the timed loop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plugins_after: Option<Vec<Mem>>,
}
