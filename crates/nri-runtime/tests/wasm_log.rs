//! A WebAssembly plugin's `env.log` messages and its standard output and
//! error reach the runtime's log (target `nri::plugin`, field `plugin`).
//! Alone in its binary: it installs a global subscriber to capture the log
//! written on the blocking threads guests run on.
#![cfg(feature = "wasm")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod wasm_util;

use std::io::Write;
use std::sync::{Arc, Mutex};

use common::*;
use nri_api::EventMask;
use nri_api::api::LogRequest;
use nri_api::api::log_request::Level;
use prost::Message;
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

    let mut w = Wat::new(EventMask::ALL)
        .import(r#"(import "env" "log" (func $log (param i32 i32) (result i64)))"#)
        .import(r#"(import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))"#);
    let req = LogRequest {
        msg: "hello from the guest".into(),
        level: Level::Warn as i32,
    }
    .encode_to_vec();
    let at = w.place(&req);
    let text = b"line on stderr\n";
    let text_at = w.place(text);
    let mut iovec = text_at.to_le_bytes().to_vec();
    iovec.extend_from_slice(&u32::try_from(text.len()).unwrap().to_le_bytes());
    let iov_at = w.place(&iovec);
    let nwritten_at = w.place(&[0; 4]);
    let len = req.len();
    let w = w.with_body(
        "plugin_run_pod_sandbox",
        &format!(
            "(drop (call $log (i32.const {at}) (i32.const {len})))
             (drop (call $write (i32.const 2) (i32.const {iov_at}) (i32.const 1) (i32.const {nwritten_at})))
             i64.const 0"
        ),
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
