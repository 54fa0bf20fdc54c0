//! A WebAssembly plugin's `env.log` messages and its standard output and
//! error reach the runtime's log (target `nri::plugin`, field `plugin`).
//! Alone in its binary: it installs a global subscriber to capture the log
//! written on the threads guests run on.
#![cfg(feature = "wasm")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod wasm_util;

use std::io::Write;
use std::sync::{Arc, Mutex};

use common::*;
use nri_api::EventMask;
use nri_api::api::log_request::Level;
use wasm_util::Wat;

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);
impl Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn log_and_stderr_of_a_guest_reach_the_log() {
    let buf = Buf::default();
    let writer = buf.clone();
    tracing::subscriber::set_global_default(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish(),
    )
    .unwrap();

    let w = Wat::new(EventMask::ALL).talk(
        "plugin_run_pod_sandbox",
        Level::Warn,
        "hello from the guest",
        2,
        "line on stderr",
    );
    let env = TestEnv::new();
    w.install(&env.dir.path().join("plugins"), "10-talker");
    let a = env.start(env.builder().disable_connections(true)).await;
    a.run_pod_sandbox(&pod("p")).await.unwrap();
    a.stop().await;
    let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    let line = |needle: &str| {
        out.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no {needle:?} in:\n{out}"))
            .to_owned()
    };
    let log = line("hello from the guest");
    assert!(
        log.contains("WARN") && log.contains("plugin=10-talker"),
        "{log}"
    );
    let err = line("line on stderr");
    assert!(
        err.contains("DEBUG") && err.contains("stream=\"stderr\""),
        "{err}"
    );
}
