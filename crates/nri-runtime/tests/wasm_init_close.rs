//! A guest's `_initialize` sees its plugin's closing as its calls do:
//! stopping the runtime while a WebAssembly plugin is still initializing
//! (asleep in `poll_oneoff`, or looping, with a registration timeout far
//! longer than the test) ends the initializer within a fuel slice or a
//! sleep's closing check, instead of leaving it on a blocking thread until
//! the registration deadline.
//!
//! The guest logs a line when its initializer starts; a global subscriber
//! (`common::log_capture`) tells the test when it is in. The initializer's
//! thread belongs to the tokio runtime's blocking pool, which the runtime's
//! drop waits for: how long that takes is how long the guest ran on.
#![cfg(feature = "wasm")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod wasm_util;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::log_capture::{log, logged};
use common::*;
use nri_api::EventMask;
use nri_api::api::Event;
use nri_api::api::log_request::Level;
use wasm_util::{Wat, Work};

/// The registration timeout, and the sleeping initializer's sleep: far
/// longer than the test.
const LONG: Duration = Duration::from_secs(120);

/// Generous bound on the initializer's end after `stop` (a sleep looks at
/// the closing every 10 ms, a loop at every fuel slice; an initializer
/// that ignores the closing runs on for two minutes).
const PROMPT: Duration = Duration::from_secs(10);

/// Starts a runtime whose only plugin, `10-<name>`, logs "`<name>` is in"
/// and then does `work` in `_initialize`; stops the runtime once the guest
/// is in, and checks that the runtime's blocking pool (the initializer's
/// thread) is done promptly.
fn stop_during_init(name: &str, work: Work) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let log = log();
        let entered = format!("{name} is in");
        let mut events = EventMask::EMPTY;
        events.set(Event::CreateContainer);
        let mut guest = Wat::new(events);
        let say = guest.log_call(Level::Info, &entered);
        let body = match work {
            Work::Sleep(d) => guest.sleep_call(d),
            Work::Forever => "(loop $l (br $l))".to_owned(),
            Work::Count(_) => unreachable!(),
        };
        let guest = guest.field(&format!("(func (export \"_initialize\") {say} {body})"));
        let env = TestEnv::new();
        guest.install(&env.dir.path().join("plugins"), &format!("10-{name}"));
        let b = env
            .builder()
            .disable_connections(true)
            .registration_timeout(LONG);
        let a = Arc::new(b.build(env.runtime.clone()).unwrap());
        let starting = tokio::spawn({
            let a = a.clone();
            async move { a.start().await }
        });
        tokio::time::timeout(PROMPT, logged(&entered))
            .await
            .unwrap_or_else(|_| panic!("the initializer never started:\n{}", log.text()));
        tokio::time::timeout(PROMPT, a.stop())
            .await
            .expect("stop returned during the initializer");
        let started = tokio::time::timeout(PROMPT, starting)
            .await
            .expect("start returned")
            .unwrap();
        assert!(started.is_err(), "{started:?}");
        assert!(a.plugins().is_empty());
    });
    let dropping = Instant::now();
    drop(rt);
    let took = dropping.elapsed();
    assert!(
        took < PROMPT,
        "the initializer ran on for {took:?} after stop (until the registration deadline)"
    );
}

#[test]
fn stop_ends_a_guest_asleep_in_its_initializer() {
    stop_during_init("sleeper", Work::Sleep(LONG));
}

#[test]
fn stop_ends_a_guest_looping_in_its_initializer() {
    stop_during_init("spinner", Work::Forever);
}
