//! Hostile WebAssembly guests against a runtime in its own process (the
//! victim, `src/bin/victim.rs`, loading a plugin directory): a guest that
//! loops forever, one that sleeps in `poll_oneoff` past its deadline, one
//! that allocates without bound, one that answers with a
//! pointer outside its memory, one that answers with a huge size, and one
//! that imports a function the host does not provide. Each is stopped (its
//! call fails and its instance is discarded, then re-instantiated with
//! backoff until its strike limit) or refused at load, with an error
//! naming the plugin in the runtime's log; the victim stays up, its peak memory
//! stays bounded, and a well-behaved socket plugin gets every one of its
//! creations through meanwhile.
//!
//! Each test takes about a second (the runaway and the sleeping guest:
//! their 300 ms request timeout).
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
use nri_fault_tests::peak_rss_kib;
use victim_proc::VictimProc;
use wasm_util::{Wat, Work, packed};

const CREATE: &str = "plugin_create_container";
/// Creations the socket plugin must complete beside the hostile guest.
const CREATIONS: u64 = 20;
/// The request timeout of the victim's plugins, ms.
const TIMEOUT_MS: u64 = 300;
/// The victim's peak RSS bound (KiB): the guest's 64 MiB memory cap plus
/// the runtime and a copy of the memory while it grows, far below what an
/// unbounded guest would take (its 4 GiB address space).
const PEAK_LIMIT_KIB: u64 = 250 * 1024;

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

    /// Stops the victim; it must exit cleanly. Returns its log.
    async fn quit(mut self) -> String {
        self.proc.quit().await;
        std::fs::read_to_string(&self.log).unwrap()
    }
}

/// Runs the hostile guest `id` beside the good socket plugin: every
/// creation gets the good plugin's adjustment, the victim stays up with a
/// bounded peak, and its log has a line naming `id` and `why`. `loaded`:
/// whether the guest passes the load. Returns the failed-calls report.
async fn attack(id: &str, guest: Wat, loaded: bool, why: &str) -> String {
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
    let peak = peak_rss_kib(&victim.pid()).unwrap();
    assert!(peak < PEAK_LIMIT_KIB, "victim peak {peak} KiB");
    good.stop().await;
    let log = victim.quit().await;
    assert!(
        log.lines().any(|l| l.contains(id) && l.contains(why)),
        "no log line names {id} and {why:?}:\n{log}"
    );
    failed
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
    let failed = attack(
        "20-spin",
        hostile("i64.const 0").work(CREATE, Work::Forever),
        true,
        "ran past its deadline",
    )
    .await;
    // Re-instantiated after each timeout (away meanwhile), closed for good
    // at the third (the default strike limit): never more than three.
    assert_failed_some(&failed, "20-spin", 3);
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
