//! Checks a real NRI runtime (containerd, CRI-O) against the NRI lifecycle
//! contract (DESIGN.md section 4, items 2 and 4) and reports each clause.
//!
//! The engine of `nri conformance`. It registers with the runtime as a
//! plugin subscribed to every event the runtime can deliver (through
//! [`nri_plugin`]), records everything it receives with timestamps, and
//! either drives pods and containers itself through `crictl`
//! ([`Mode::Cri`]) or watches the node for a while ([`Mode::Passive`]).
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
//! 1. *Lifecycle*: a pod with a container that is created, started,
//!    updated (`crictl update --cpu-share`), stopped and removed, then the
//!    pod stopped and removed; a second pod removed while one container in
//!    it runs and another was never started.
//! 2. *Sync race*: pods and containers created in rounds while two more
//!    instances register, one during a RunPodSandbox, one during a
//!    CreateContainer; each must see every object exactly once.
//! 3. *Create error*: an instance refuses CreateContainer for one container;
//!    that creation must fail and the next one work.
//! 4. *Request timeout*: an instance answers CreateContainer one second
//!    after the runtime's request timeout; what happens is recorded.
//! 5. *Shutdown* (only with [`Options::stop_runtime`]): the runtime is
//!    stopped and must send Shutdown first.
//!
//! The checkers in [`check`] are pure functions over [`Record`]s, usable on
//! any event log.

pub mod check;
mod driver;
mod error;
mod known;
pub mod record;
mod report;
mod run;

pub use check::{Clause, Violation};
pub use driver::CriOptions;
pub use error::Error;
pub use known::{KNOWN_DISCREPANCIES, KnownDiscrepancy, known_discrepancy, known_for};
pub use record::{Record, RecordKind};
pub use report::{ClauseResult, Finding, Report, RuntimeSummary, Status, print_table};
pub use run::{Mode, Options, run};

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
