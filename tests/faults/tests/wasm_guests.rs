//! Hostile WebAssembly guests against a runtime in its own process (the
//! victim, `src/bin/victim.rs`, loading a plugin directory): a guest that
//! loops forever, one that sleeps in `poll_oneoff` past its deadline, one
//! that storms cheap host calls, one that logs 16 KiB lines without end,
//! ones that call `env.log` or `fd_write` with their whole memory or
//! `random_get` of 1 MiB in a loop, ones whose memory or table growth
//! fails in a loop, one that grows its memory and one that grows a table
//! without bound, one whose `_initialize` and one whose start function
//! never ends, one that answers with a pointer outside its memory, one
//! that answers with a huge size, and one that imports a function the
//! host does not provide. Each is stopped (its call fails and its
//! instance is discarded, then re-instantiated with backoff until its
//! strike limit) or refused at load, with an error naming the plugin in
//! the runtime's log; the victim stays up, its peak memory stays under
//! [`PEAK_LIMIT_KIB`] (its own, the guest's memory cap and a small
//! constant), a guest that runs past its deadline has its call end within
//! [`SLACK_MS`] of it, one that never loads is refused within the
//! registration timeout, and a well-behaved socket plugin gets every one
//! of its creations through meanwhile.
//!
//! The deadline is real time (the guest runs on a blocking thread, timed
//! by the host's clock), not paused time. Each test takes about a second
//! (the runaway guests: their 300 ms request timeout).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;
mod victim_proc;
#[path = "../../../crates/nri-runtime/tests/wasm_util/mod.rs"]
mod wasm_util;

use std::path::PathBuf;
use std::time::Duration;

use common::*;
use nri_api::EventMask;
use nri_api::api::Event;
use nri_api::api::log_request::Level;
use nri_fault_tests::peak_rss_kib;
use victim_proc::VictimProc;
use wasm_util::{Wat, Work, packed};

const CREATE: &str = "plugin_create_container";
/// Creations the socket plugin must complete beside the hostile guest.
const CREATIONS: u64 = 20;
/// The request timeout of the victim's plugins, ms.
const TIMEOUT_MS: u64 = 300;
/// Each guest's memory cap in the victim (MiB).
const GUEST_MEMORY_MIB: u32 = 16;
/// The victim's registration timeout (ms), unless a test sets another.
const REGISTRATION_MS: u64 = 5000;
/// The victim's own peak RSS with a guest that does nothing (KiB; a debug
/// build: measured 13.5 to 14.2 MiB, load average 17 on 2 cores).
const RUNTIME_KIB: u64 = 16 * 1024;
/// The victim's peak RSS bound (KiB): the runtime's own, the guest's
/// memory cap, and a small constant (8 MiB) for its instance, stacks and
/// compiled code. Measured: a guest at its memory cap costs 16 MiB more
/// than the runtime's own (29.5 to 30.6 MiB in all), one that never
/// grows its memory nothing measurable; an unbounded guest would take its
/// 4 GiB address space.
const PEAK_LIMIT_KIB: u64 = RUNTIME_KIB + (GUEST_MEMORY_MIB as u64) * 1024 + 8 * 1024;
/// How long past its deadline a runaway guest's call may end (ms): a
/// slice is kept to 5 ms of the guest's work (see `docs/runtime/wasm.md`,
/// "Time"); the rest is the scheduling of a debug build's threads on a
/// loaded 2-core machine (measured: at most 51 ms past the deadline at
/// load average 17, most within 20 ms).
const SLACK_MS: u64 = 100;
/// A plugin's log budget (`LOG_BURST` and `LOG_RATE` of the runtime's
/// WebAssembly host): bytes at once, and bytes a second after that.
const LOG_BURST: u64 = 1024 * 1024;
const LOG_RATE: u64 = 64 * 1024;

fn hostile(body: &str) -> Wat {
    let mut events = EventMask::EMPTY;
    events.set(Event::CreateContainer);
    Wat::new(events).with_body(CREATE, body)
}

/// The victim, with a plugin directory, its stderr (the runtime's log)
/// in a file.
struct Victim {
    proc: VictimProc,
    socket: PathBuf,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl std::ops::Deref for Victim {
    type Target = VictimProc;
    fn deref(&self) -> &VictimProc {
        &self.proc
    }
}

impl std::ops::DerefMut for Victim {
    fn deref_mut(&mut self) -> &mut VictimProc {
        &mut self.proc
    }
}

impl Victim {
    async fn start(guest_id: &str, guest: &Wat) -> Victim {
        Self::start_with(guest_id, guest, REGISTRATION_MS).await
    }

    /// [`Victim::start`] with a registration timeout of `registration_ms`
    /// (the bound of the guest's load).
    async fn start_with(guest_id: &str, guest: &Wat, registration_ms: u64) -> Victim {
        let dir = tempfile::tempdir().unwrap();
        let plugins = dir.path().join("plugins");
        guest.install(&plugins, guest_id);
        let socket = dir.path().join("nri/nri.sock");
        let log = dir.path().join("victim.log");
        let mut cmd = VictimProc::command();
        cmd.arg("--socket")
            .arg(&socket)
            .arg("--plugin-dir")
            .arg(&plugins)
            .arg("--request-timeout-ms")
            .arg(TIMEOUT_MS.to_string())
            .arg("--registration-timeout-ms")
            .arg(registration_ms.to_string())
            .arg("--wasm-max-memory-mib")
            .arg(GUEST_MEMORY_MIB.to_string())
            .env("RUST_LOG", "warn")
            .stderr(std::fs::File::create(&log).unwrap());
        Victim {
            proc: VictimProc::spawn(cmd).await,
            socket,
            log,
            _dir: dir,
        }
    }

    /// Runs `n` lifecycles: (creations with the good plugin's annotation,
    /// others).
    async fn cycle(&mut self, n: u64) -> (u64, u64) {
        self.send(&format!("cycle {n}")).await;
        let l = self.line().await;
        let mut w = l.split_whitespace();
        assert_eq!(w.next(), Some("cycled"), "{l}");
        let ok = w.next().unwrap().parse().unwrap();
        (ok, w.next().unwrap().parse().unwrap())
    }

    /// The failed calls by plugin, as the victim's metrics counted them.
    async fn failed(&mut self) -> String {
        self.send("report").await;
        let _refused = self.line().await;
        self.line().await
    }

    /// Each plugin's longest call (ms), as the victim's metrics timed it.
    async fn slowest(&mut self) -> String {
        self.send("slowest").await;
        self.line().await
    }

    /// Stops the victim; it must exit cleanly. Returns its log.
    async fn quit(mut self) -> String {
        self.proc.quit().await;
        std::fs::read_to_string(&self.log).unwrap()
    }
}

/// What an attack left: the failed-calls report, the hostile guest's
/// longest call (ms), the victim's log and how long it lived.
struct Outcome {
    failed: String,
    slowest_ms: u64,
    log: String,
    lived: Duration,
}

/// Runs the hostile guest `id` beside the good socket plugin: every
/// creation gets the good plugin's adjustment, the victim stays up with a
/// bounded peak, and its log has a line naming `id` and `why`. `loaded`:
/// whether the guest passes the load. Returns the failed-calls report.
async fn attack(id: &str, guest: Wat, loaded: bool, why: &str) -> String {
    attack_for(id, guest, loaded, why).await.failed
}

/// [`attack`], with all it left.
async fn attack_for(id: &str, guest: Wat, loaded: bool, why: &str) -> Outcome {
    let born = std::time::Instant::now();
    let mut victim = Victim::start(id, &guest).await;
    let mut good = GoodPlugin::start(&victim.socket);
    victim.active(if loaded { 2 } else { 1 }).await;
    let (ok, bad) = victim.cycle(CREATIONS).await;
    assert_eq!(
        (ok, bad),
        (CREATIONS, 0),
        "the socket plugin's creations go through"
    );
    // And the good plugin really saw them.
    assert_eq!(good.next().await.0, Event::CreateContainer);
    let failed = victim.failed().await;
    let slowest = victim.slowest().await;
    let slowest_ms = slowest
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{id}=")))
        .map_or(0, |ms| ms.parse().unwrap());
    let peak = peak_rss_kib(&victim.pid()).unwrap();
    eprintln!("{id}: victim peak {peak} KiB, longest call {slowest_ms} ms");
    assert!(peak < PEAK_LIMIT_KIB, "victim peak {peak} KiB");
    good.stop().await;
    let log = victim.quit().await;
    let lived = born.elapsed();
    assert!(
        log.lines().any(|l| l.contains(id) && l.contains(why)),
        "no log line names {id} and {why:?}:\n{}",
        &log[..log.len().min(4096)]
    );
    Outcome {
        failed,
        slowest_ms,
        log,
        lived,
    }
}

/// A runaway guest's calls ended at their deadline, within [`SLACK_MS`].
fn assert_cut_at_deadline(o: &Outcome, id: &str) {
    assert!(
        (TIMEOUT_MS..=TIMEOUT_MS + SLACK_MS).contains(&o.slowest_ms),
        "{id}'s longest call took {} ms against its {TIMEOUT_MS} ms timeout",
        o.slowest_ms
    );
}

/// `failed` counts between one and `most` failed calls of `id` (how many
/// depends on how many creations come while it is away, re-instantiated
/// after a backoff).
fn assert_failed_some(failed: &str, id: &str, most: u64) {
    let n: u64 = failed
        .strip_prefix(&format!("failed {id}="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{failed}"));
    assert!((1..=most).contains(&n), "{failed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_that_loops_forever_is_stopped_at_its_deadline() {
    let o = attack_for(
        "20-spin",
        hostile("i64.const 0").work(CREATE, Work::Forever),
        true,
        "ran past its deadline",
    )
    .await;
    // Re-instantiated after each timeout (away meanwhile), closed for good
    // at the third (the default strike limit): never more than three.
    assert_failed_some(&o.failed, "20-spin", 3);
    assert_cut_at_deadline(&o, "20-spin");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_storming_host_calls_is_stopped_at_its_deadline() {
    // The cheapest host function, called without end: each call is
    // charged and checks the deadline itself.
    let clock = r#"(import "wasi_snapshot_preview1" "clock_time_get" (func $clock (param i32 i64 i32) (result i32)))"#;
    let o = attack_for(
        "26-storm",
        hostile(
            "(loop $l (drop (call $clock (i32.const 1) (i64.const 0) (i32.const 64))) (br $l)) i64.const 0",
        )
        .import(clock),
        true,
        "ran past its deadline",
    )
    .await;
    assert_failed_some(&o.failed, "26-storm", 3);
    assert_cut_at_deadline(&o, "26-storm");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_logging_without_end_is_held_to_its_log_budget() {
    // 16 KiB lines at level error (which the victim's log keeps), without
    // end: about 7 MB a fuel slice without the budget.
    let mut guest = hostile("i64.const 0");
    let line = guest.log_call(Level::Error, &"x".repeat(16 * 1024));
    let guest = guest.with_body(CREATE, &format!("(loop $l {line} (br $l)) i64.const 0"));
    let o = attack_for("27-chatter", guest, true, "over its log budget").await;
    assert_failed_some(&o.failed, "27-chatter", 3);
    assert_cut_at_deadline(&o, "27-chatter");
    let logged: u64 = o
        .log
        .lines()
        .filter(|l| l.contains("27-chatter") && l.contains("xxxx"))
        .map(|l| l.len() as u64)
        .sum();
    // The burst, what the budget refilled while the victim lived, and a
    // line's own fields.
    let most = LOG_BURST + LOG_RATE * (o.lived.as_millis() as u64 / 1000 + 1) + 64 * 1024;
    assert!(
        logged <= most,
        "the guest logged {logged} bytes in {:?} (bound {most})",
        o.lived
    );
    assert!(logged >= LOG_BURST / 2, "its burst was logged: {logged}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_whose_memory_growth_fails_in_a_loop_is_stopped_at_its_deadline() {
    // A growth past the 4 GiB a memory can have fails (-1) inside the
    // engine, before the runtime's limiter is asked; in a loop, without
    // end. The engine's tail-call dispatch did not return on that path,
    // so each failed growth took a native stack frame: the runtime
    // process died of a stack overflow within one fuel slice.
    let o = attack_for(
        "29-regrow",
        hostile(
            "(loop $l (br_if $l (i32.eq (memory.grow (i32.const 65536)) (i32.const -1)))) i64.const 0",
        ),
        true,
        "ran past its deadline",
    )
    .await;
    assert_failed_some(&o.failed, "29-regrow", 3);
    assert_cut_at_deadline(&o, "29-regrow");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_whose_table_growth_fails_in_a_loop_is_stopped_at_its_deadline() {
    // The same with a table at its own maximum.
    let o = attack_for(
        "30-retable",
        hostile(
            "(loop $l (br_if $l (i32.eq (table.grow $t (ref.null func) (i32.const 1)) (i32.const -1)))) i64.const 0",
        )
        .field("(table $t 1 1 funcref)"),
        true,
        "ran past its deadline",
    )
    .await;
    assert_failed_some(&o.failed, "30-retable", 3);
    assert_cut_at_deadline(&o, "30-retable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_that_grows_a_table_without_bound_is_stopped_at_its_cap() {
    // 10,000 elements at a time, until the runtime's cap (100,000) traps.
    let failed = attack(
        "28-tables",
        hostile(
            "(loop $l (br_if $l (i32.ne (table.grow $t (ref.null func) (i32.const 10000)) (i32.const -1)))) i64.const 0",
        )
        .field("(table $t 0 funcref)"),
        true,
        "trapped",
    )
    .await;
    // Re-instantiated after each failure (no strike), with backoff.
    assert_failed_some(&failed, "28-tables", CREATIONS - 1);
}

/// Where the flooding guests' buffers start: above the request buffer.
const AT: u32 = 65536;
/// The flooding guests' memory: all the victim lets them have.
const FLOOD_MEMORY: u32 = GUEST_MEMORY_MIB << 20;

/// A guest whose CreateContainer grows its memory to [`FLOOD_MEMORY`],
/// runs `setup`, then calls `call` (importing it with `import`) forever.
fn flooder(import: &str, setup: &str, call: &str) -> Wat {
    hostile(&format!(
        "(drop (memory.grow (i32.const {})))
         {setup}
         (loop $l {call} (br $l))
         i64.const 0",
        FLOOD_MEMORY / 65536 - 1
    ))
    .import(import)
}

/// `n` as a varint of exactly four bytes, as a little-endian i32.
fn varint4(n: u32) -> i32 {
    assert!(n < 1 << 28);
    i32::from_le_bytes([
        (n & 0x7f) as u8 | 0x80,
        ((n >> 7) & 0x7f) as u8 | 0x80,
        ((n >> 14) & 0x7f) as u8 | 0x80,
        (n >> 21) as u8,
    ])
}

/// Runs the flooding guest `id`: each of its calls ends at its deadline
/// (at most three, the strike limit), within [`SLACK_MS`].
async fn flood(id: &str, guest: Wat) {
    let o = attack_for(id, guest, true, "ran past its deadline").await;
    assert_failed_some(&o.failed, id, 3);
    assert_cut_at_deadline(&o, id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_logging_its_whole_memory_in_a_loop_is_stopped_at_its_deadline() {
    // One LogRequest (level error, which the victim's log keeps) whose
    // message is the rest of the memory, logged without end: each call
    // reads the line's cap, not the length the guest gives.
    // The message, then the level (field 2, error) in the memory's last
    // two bytes.
    let len = FLOOD_MEMORY - AT - 7;
    let guest = flooder(
        r#"(import "env" "log" (func $log (param i32 i32) (result i64)))"#,
        &format!(
            "(i32.store8 (i32.const {AT}) (i32.const 10))
             (i32.store (i32.const {}) (i32.const {}))
             (i32.store16 (i32.const {}) (i32.const 0x0410))",
            AT + 1,
            varint4(len),
            FLOOD_MEMORY - 2,
        ),
        &format!(
            "(drop (call $log (i32.const {AT}) (i32.const {})))",
            len + 7
        ),
    );
    flood("31-biglog", guest).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_writing_its_whole_memory_to_stdout_in_a_loop_is_stopped_at_its_deadline() {
    // One iovec: the rest of the memory.
    let (iov, written, data) = (AT, AT + 8, AT + 16);
    let guest = flooder(
        r#"(import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))"#,
        &format!(
            "(i32.store (i32.const {iov}) (i32.const {data}))
             (i32.store (i32.const {}) (i32.const {}))",
            iov + 4,
            FLOOD_MEMORY - data
        ),
        &format!(
            "(drop (call $write (i32.const 1) (i32.const {iov}) (i32.const 1) (i32.const {written})))"
        ),
    );
    flood("32-stdout", guest).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_asking_for_randomness_in_a_loop_is_stopped_at_its_deadline() {
    // The largest random_get (1 MiB) without end.
    let guest = flooder(
        r#"(import "wasi_snapshot_preview1" "random_get" (func $random (param i32 i32) (result i32)))"#,
        "",
        &format!(
            "(drop (call $random (i32.const {AT}) (i32.const {})))",
            1 << 20
        ),
    );
    flood("33-random", guest).await;
}

/// The registration timeout of the victims whose guest never finishes
/// loading (ms).
const SHORT_REGISTRATION_MS: u64 = 1000;
/// How long a victim may take to listen beyond its registration timeout
/// (ms): a debug build's process start on a loaded 2-core machine.
const START_SLACK_MS: u64 = 1500;

/// Starts a victim with the guest `id`, which never finishes loading: it
/// is refused (its log line says one of `why`), the victim listens within its registration timeout (plus
/// [`START_SLACK_MS`]) and a socket plugin gets its creations through.
async fn never_loads(id: &str, guest: Wat, why: &[&str]) {
    let t0 = std::time::Instant::now();
    let mut victim = Victim::start_with(id, &guest, SHORT_REGISTRATION_MS).await;
    let took = t0.elapsed();
    assert!(
        took < Duration::from_millis(SHORT_REGISTRATION_MS + START_SLACK_MS),
        "the victim listened after {took:?}"
    );
    let mut good = GoodPlugin::start(&victim.socket);
    victim.active(1).await;
    assert_eq!(victim.cycle(CREATIONS).await, (CREATIONS, 0));
    assert_eq!(good.next().await.0, Event::CreateContainer);
    assert_eq!(victim.failed().await, "failed");
    let peak = peak_rss_kib(&victim.pid()).unwrap();
    eprintln!("{id}: victim peak {peak} KiB, listening after {took:?}");
    assert!(peak < PEAK_LIMIT_KIB, "victim peak {peak} KiB");
    good.stop().await;
    let log = victim.quit().await;
    assert!(
        log.lines()
            .any(|l| l.contains(id) && why.iter().any(|w| l.contains(w))),
        "no log line refuses {id} for {why:?}:\n{}",
        &log[..log.len().min(4096)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_whose_initializer_loops_forever_is_refused_at_the_registration_timeout() {
    let guest = hostile("i64.const 0").field(r#"(func (export "_initialize") (loop $l (br $l)))"#);
    // Its slices are timed and the deadline checked between them.
    never_loads(
        "34-init",
        guest,
        &["registration timeout", "deadline passed"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_whose_start_function_loops_forever_is_refused_at_load() {
    // The start function cannot be paused: one fuel slice is its bound.
    let guest = hostile("i64.const 0").field("(func $spin (loop $l (br $l))) (start $spin)");
    never_loads("35-start", guest, &["fuel"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_that_sleeps_past_its_deadline_times_out_there() {
    let nap = Work::Sleep(Duration::from_secs(60));
    let failed = attack(
        "25-nap",
        hostile("i64.const 0").work(CREATE, nap),
        true,
        "ran past its deadline",
    )
    .await;
    // Its sleep cut at the deadline is a timeout, not a late answer: at
    // most three timeouts (the strike limit), then it is closed.
    assert_failed_some(&failed, "25-nap", 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_that_allocates_without_bound_is_stopped_at_its_memory_cap() {
    let failed = attack(
        "21-hog",
        hostile(
            "(loop $l (br_if $l (i32.ne (memory.grow (i32.const 16)) (i32.const -1)))) i64.const 0",
        ),
        true,
        "trapped",
    )
    .await;
    // Re-instantiated after each failure (no strike), with backoff.
    assert_failed_some(&failed, "21-hog", CREATIONS - 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_answering_outside_its_memory_is_closed() {
    let v = packed(0xFFFF_0000, 64, false);
    let failed = attack(
        "22-wild",
        hostile(&format!("i64.const {v}")),
        true,
        "outside the guest's",
    )
    .await;
    // Re-instantiated after each failure (no strike), with backoff.
    assert_failed_some(&failed, "22-wild", CREATIONS - 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_answering_a_huge_size_is_closed() {
    let v = packed(0, 0x7FFF_FFFF, false);
    let failed = attack(
        "23-huge",
        hostile(&format!("i64.const {v}")),
        true,
        "over the limit",
    )
    .await;
    // Re-instantiated after each failure (no strike), with backoff.
    assert_failed_some(&failed, "23-huge", CREATIONS - 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_importing_an_unknown_function_is_refused_at_load() {
    let guest = hostile("i64.const 0")
        .import(r#"(import "env" "open_socket" (func (param i32) (result i32)))"#);
    let failed = attack("24-import", guest, false, "env.open_socket").await;
    // Never loaded, so never called.
    assert_eq!(failed, "failed");
}
