//! Host functions under a hostile guest: `env.log`, `fd_write` and
//! `random_get` called in a loop with the largest lengths the guest can
//! give. Each call is charged and bounded and checks the call's
//! deadline, so the call ends at its deadline and the runtime's only
//! executor thread stays free meanwhile: a ticker on it never sees the
//! thread spend more than a few milliseconds on the processor between
//! two of its turns. About a second per test (the 300 ms request
//! timeout, and the start).
//!
//! Nothing here depends on how busy the machine is: the executor's time
//! is the thread's own processor time (`/proc/thread-self/schedstat`),
//! which a thread waiting for a processor does not accrue, and the bound
//! on the call's end is far from what a held executor costs (minutes).
//! The plugin's Configure and Synchronize end within their first slice on
//! the executor, where no deadline is looked at: its short request
//! timeout cannot fail them.
#![cfg(feature = "wasm")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod wasm_util;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use nri_api::EventMask;
use nri_api::api::Event;
use nri_runtime::{FailurePolicy, PluginFailure, PluginPolicy};
use wasm_util::Wat;

const CREATE: &str = "plugin_create_container";
const TIMEOUT: Duration = Duration::from_millis(300);
/// The guest's memory: 4 MiB.
const MEMORY: u32 = 4 << 20;
/// Where the hostile buffers start: above the request buffer.
const AT: u32 = 65536;
/// Most processor time the executor thread may spend between two turns
/// of the ticker (a slice on the executor takes about a millisecond; a
/// held executor spends seconds).
const MAX_GAP: Duration = Duration::from_millis(50);
/// Latest the call may end after its deadline, in wall-clock time: far
/// over what scheduling delays add on a loaded machine, far under what a
/// host function that ignores the deadline costs (such a guest, looping
/// forever, held the executor for minutes).
const LATE: Duration = Duration::from_secs(3);

/// Processor time this thread has used (the first field of
/// `/proc/thread-self/schedstat`, in nanoseconds).
fn thread_cpu() -> Duration {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    let ns: u64 = s.split_whitespace().next().unwrap().parse().unwrap();
    Duration::from_nanos(ns)
}

/// The guest's CreateContainer: grows memory to [`MEMORY`], runs `setup`,
/// then calls `call` (leaving nothing on the stack) forever.
fn flooder(import: &str, setup: &str, call: &str) -> Wat {
    let mut events = EventMask::EMPTY;
    events.set(Event::CreateContainer);
    Wat::new(events).import(import).with_body(
        CREATE,
        &format!(
            "(drop (memory.grow (i32.const {})))
             {setup}
             (loop $l {call} (br $l))
             i64.const 0",
            MEMORY / 65536 - 1
        ),
    )
}

/// `n` as a varint of exactly four bytes, as a little-endian i32.
fn varint4(n: u32) -> i32 {
    assert!(n < 1 << 28);
    let b = [
        (n & 0x7f) as u8 | 0x80,
        ((n >> 7) & 0x7f) as u8 | 0x80,
        ((n >> 14) & 0x7f) as u8 | 0x80,
        (n >> 21) as u8,
    ];
    i32::from_le_bytes(b)
}

/// Runs one CreateContainer of `guest` on a current-thread runtime while
/// a ticker on the same thread keeps the largest processor time the
/// thread spent between two of its turns: the call must time out near
/// its deadline, the executor never be held.
fn flood(guest: Wat) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let env = TestEnv::new();
        guest.install(&env.dir.path().join("plugins"), "10-flood");
        let b = env
            .builder()
            .disable_connections(true)
            .request_timeout(TIMEOUT)
            .plugin_policy("flood", PluginPolicy::new(FailurePolicy::Ignore));
        let a = env.start(b).await;
        assert_eq!(a.plugins().len(), 1);
        let gap = Arc::new(AtomicU64::new(0));
        let ticker = tokio::spawn({
            let gap = gap.clone();
            async move {
                let mut last = thread_cpu();
                loop {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    let now = thread_cpu();
                    let d = now.saturating_sub(last).as_micros() as u64;
                    gap.fetch_max(d, Ordering::Relaxed);
                    last = now;
                }
            }
        });
        tokio::task::yield_now().await;
        let started = Instant::now();
        let out = a.create_container(&pod("p"), &ctr("p", "c")).await.unwrap();
        let took = started.elapsed();
        ticker.abort();
        assert_eq!(out.errors.len(), 1, "{:?}", out.errors);
        assert_eq!(
            out.errors[0].failure,
            PluginFailure::Timeout { timeout: TIMEOUT }
        );
        assert!(took < TIMEOUT + LATE, "the call took {took:?}");
        let gap = Duration::from_micros(gap.load(Ordering::Relaxed));
        assert!(
            gap < MAX_GAP,
            "the executor was held for {gap:?} of processor time"
        );
        a.stop().await;
    });
}

#[test]
fn a_guest_logging_its_whole_memory_in_a_loop_ends_at_its_deadline() {
    // One LogRequest whose message is the rest of the memory.
    let len = MEMORY - AT - 5;
    flooder(
        r#"(import "env" "log" (func $log (param i32 i32) (result i64)))"#,
        &format!(
            "(i32.store8 (i32.const {AT}) (i32.const 10))
             (i32.store (i32.const {}) (i32.const {}))",
            AT + 1,
            varint4(len)
        ),
        &format!(
            "(drop (call $log (i32.const {AT}) (i32.const {})))",
            len + 5
        ),
    )
    .pipe(flood);
}

#[test]
fn a_guest_writing_its_whole_memory_to_stdout_in_a_loop_ends_at_its_deadline() {
    // One iovec: the rest of the memory.
    let (iov, written, data) = (AT, AT + 8, AT + 16);
    flooder(
        r#"(import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))"#,
        &format!(
            "(i32.store (i32.const {iov}) (i32.const {data}))
             (i32.store (i32.const {}) (i32.const {}))",
            iov + 4,
            MEMORY - data
        ),
        &format!("(drop (call $write (i32.const 1) (i32.const {iov}) (i32.const 1) (i32.const {written})))"),
    )
    .pipe(flood);
}

#[test]
fn a_guest_asking_for_randomness_in_a_loop_ends_at_its_deadline() {
    flooder(
        r#"(import "wasi_snapshot_preview1" "random_get" (func $random (param i32 i32) (result i32)))"#,
        "",
        &format!("(drop (call $random (i32.const {AT}) (i32.const {})))", 1 << 20),
    )
    .pipe(flood);
}

trait Pipe: Sized {
    fn pipe<R>(self, f: impl FnOnce(Self) -> R) -> R {
        f(self)
    }
}

impl Pipe for Wat {}
