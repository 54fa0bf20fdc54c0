//! Checks a real NRI runtime (containerd, CRI-O) against the NRI lifecycle
//! contract and reports each clause.
//!
//! The engine of `nri conformance`. It registers with the runtime as
//! plugins subscribed to every event the runtime can deliver (through
//! [`nri_plugin`]), records everything they receive with timestamps, and
//! either drives pods and containers itself through `crictl`
//! ([`Mode::Cri`]; or through any [`Cri`] implementation with [`run_with`])
//! or watches the node for a while ([`Mode::Passive`]).
//! Then it checks the contract clause by clause ([`Clause`]) and returns a
//! [`Report`]: one [`ClauseResult`] per clause, PASS / FAIL / DISCREPANCY
//! (a breach recorded in [`KNOWN_DISCREPANCIES`] for that runtime version,
//! with its explanation) / SKIPPED / INFO, and the raw records. The report
//! is `serde::Serialize` (for `--json`); [`print_table`] prints it as a
//! table.
//!
//! ```no_run
//! use nri_conformance::{CriOptions, Mode, Options, print_table, run};
//!
//! # async fn doc() -> Result<(), Box<dyn std::error::Error>> {
//! let cri = CriOptions::new("unix:///run/containerd/containerd.sock", "busybox:latest");
//! let report = run(Options::new("/var/run/nri/nri.sock", Mode::Cri(cri))).await?;
//! print_table(&report, &mut std::io::stdout())?;
//! assert!(report.ok());
//! # Ok(()) }
//! ```
//!
//! # The driven scenario
//!
//! Phase by phase (see `docs/conformance.md` for what each clause checks
//! and which critest case it corresponds to):
//!
//! 1. *Lifecycle*: a pod with a container created, started, updated,
//!    stopped and removed; a second pod removed with a started and a
//!    never-started container in it.
//! 2. *Self exit*: a container whose command exits at once.
//! 3. *Stop twice*: a pod stopped twice, then a container created in it.
//! 4. *Hooks held or refused*: an instance holds StopPodSandbox,
//!    RunPodSandbox, CreateContainer while the checker looks at the runtime
//!    through CRI; another refuses the first RunPodSandbox of a pod.
//! 5. *Sync*: instances register during creations; one holds its
//!    Synchronize open while containers are created.
//! 6. *Errors*: an instance refuses CreateContainer; another refuses every
//!    teardown event of a pod while one after it watches.
//! 7. *Slow* (with [`Options::check_timeout`]): Synchronize and
//!    CreateContainer answered after the runtime's request timeout.
//! 8. *Shutdown* (only with [`Options::stop_runtime`]): the runtime is
//!    stopped and must send Shutdown first.
//!
//! A main instance (index `00`, called first) and a tail instance (index
//! `99`, called last) watch throughout. The checkers in [`check`] are pure
//! functions over [`Record`]s and what the driver observed, usable on any
//! event log.

pub mod check;
pub mod cri;
mod crictl;
mod error;
mod evaluate;
mod instances;
mod known;
pub mod record;
mod recorder;
mod report;
mod run;
mod scenario;

pub use check::{Clause, Violation};
pub use cri::{
    ContainerSpec, ContainerState, ContainerStatus, Cri, CriResult, PodSpec, PodState, PodStatus,
};
pub use crictl::CriOptions;
pub use error::Error;
pub use known::{KNOWN_DISCREPANCIES, KnownDiscrepancy, known_discrepancy, known_for};
pub use record::{Record, RecordKind};
pub use report::{ClauseResult, Finding, Report, RuntimeSummary, Status, print_table};
pub use run::{Mode, Options, run, run_with};

/// [`run`] on a new multi-threaded tokio runtime, for callers that are not
/// async.
///
/// # Errors
///
/// Those of [`run`], and [`Error::Io`] if the tokio runtime cannot start.
pub fn run_blocking(opts: Options) -> Result<Report, Error> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|source| Error::Io {
            what: "start a tokio runtime".into(),
            source,
        })?
        .block_on(run(opts))
}

// The README's example, compiled as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
