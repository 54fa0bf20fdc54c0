//! A seeded fault-schedule checker for the runtime library
//! (`nri_runtime::Adaptation`) and `nri-proxy` in front of it, in the
//! manner of FoundationDB's simulation testing, TigerBeetle's VOPR and
//! Jepsen's checkers.
//!
//! One seed gives one [`Schedule`] (`generate.rs`): a
//! set-up (timeouts, strike limit, plugins with their failure policy,
//! subscription, peer kind) and steps (pod and container lifecycles, some
//! concurrent; containers exiting on their own; plugin faults: slow
//! answers under and over the deadline, hangs, crashes, error answers,
//! cuts and reconnects, late registration; unsolicited updates; a slow
//! listing; in proxy mode, upstream cuts and restarts with a changed set of
//! objects). A run (`run.rs`) executes it on a fresh current-thread tokio
//! runtime on paused time, every peer in process over real unix sockets,
//! against a model runtime holding the truth (`model.rs`, `lifecycle.rs`);
//! observers record what every plugin saw per connection instance
//! (`observe.rs`, `sdk.rs`). After the schedule the run quiesces (faults
//! healed, every plugin back, time past every backoff) and the invariants
//! are checked (`invariants.rs`, `view.rs`, `memory.rs`). A failure is
//! shrunk to the shortest schedule that still fails (`shrink.rs`) and
//! written as text that replays (`text.rs`).
//!
//! The command line is `src/main.rs`; docs/reliability.md says what is
//! generated, what is checked, and what the checker found.

pub mod check;
pub mod decode;
pub mod env;
pub mod generate;
pub mod invariants;
pub mod lifecycle;
pub mod memory;
pub mod model;
pub mod observe;
pub mod proxy;
pub mod raw;
pub mod regressions;
pub mod relay;
pub mod rng;
pub mod run;
pub mod scenarios;
pub mod schedule;
pub mod sdk;
pub mod shrink;
pub mod text;
pub mod totals;
pub mod view;
pub mod wasm;
pub mod wasm_checks;
pub mod wasm_program;

pub use check::{Failure, Outcome, check_schedule, check_seed};
pub use generate::Size;
pub use run::Options;
pub use schedule::{Mode, Schedule};
