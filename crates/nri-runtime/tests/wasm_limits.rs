//! What a module may make the host allocate or run at load: tables and
//! their growth, globals, element segments, function size, and a start
//! function, each refused or stopped by its bound (`docs/runtime/wasm.md`,
//! "Limits") instead of costing the runtime gigabytes or its registration
//! deadline. Guests written in WAT; about two seconds in all.
#![cfg(feature = "wasm")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod wasm_util;

use std::time::{Duration, Instant};

use common::*;
use nri_api::EventMask;
use nri_api::api::Event;
use nri_runtime::wasm::{
    WASM_MAX_ELEMENT_ITEMS, WASM_MAX_ELEMENT_SEGMENTS, WASM_MAX_FUNCTION_SIZE, WASM_MAX_GLOBALS,
    WasmError, WasmLimits, check_module,
};
use nri_runtime::{FailurePolicy, PluginFailure, PluginPolicy};
use wasm_util::Wat;

const CREATE: &str = "plugin_create_container";
const T: Duration = Duration::from_secs(5);

fn guest() -> Wat {
    let mut events = EventMask::EMPTY;
    events.set(Event::CreateContainer);
    Wat::new(events)
}

fn refused(w: &Wat) -> (String, u64, u64) {
    match check_module(&w.wasm(), &WasmLimits::default(), T) {
        Err(WasmError::OverLimit {
            resource,
            found,
            max,
        }) => (resource, found, max),
        other => panic!("not refused for a limit: {other:?}"),
    }
}

/// A table of 50 million elements (200 MB once allocated, eleven bytes
/// of WebAssembly) is refused before anything is allocated.
#[test]
fn a_huge_table_is_refused_before_it_is_allocated() {
    let w = guest().field("(table 50000000 funcref)");
    let started = Instant::now();
    assert_eq!(
        refused(&w),
        ("elements in one table".into(), 50_000_000, 100_000)
    );
    assert!(started.elapsed() < Duration::from_secs(1));
    // The limit is the embedder's to set.
    let small = WasmLimits::default().with_max_table_elements(10);
    let err = check_module(&guest().field("(table 11 funcref)").wasm(), &small, T);
    assert!(matches!(err, Err(WasmError::OverLimit { .. })), "{err:?}");
}

#[test]
fn too_many_globals_element_segments_or_a_huge_function_are_refused() {
    let globals = "(global i32 (i32.const 0))".repeat(WASM_MAX_GLOBALS as usize + 1);
    assert_eq!(refused(&guest().field(&globals)).0, "globals");
    let elems = "(elem func)".repeat(WASM_MAX_ELEMENT_SEGMENTS as usize + 1);
    assert_eq!(refused(&guest().field(&elems)).0, "element segments");
    // Two segments of 600,000 items each: 1.2 MB of WebAssembly, many
    // times that in the engine.
    let items = format!("(elem func {})", "$f ".repeat(600_000)).repeat(2);
    let items = format!("(func $f) {items}");
    assert_eq!(
        refused(&guest().field(&items)),
        (
            "element items".into(),
            1_200_000,
            u64::from(WASM_MAX_ELEMENT_ITEMS)
        )
    );
    let body = "nop ".repeat(WASM_MAX_FUNCTION_SIZE as usize);
    let (what, found, _) = refused(&guest().field(&format!("(func {body})")));
    assert_eq!(what, "bytes in one function body");
    assert!(found > u64::from(WASM_MAX_FUNCTION_SIZE));
}

/// A guest growing its table past the limit traps (its call fails, its
/// instance is discarded) instead of growing the runtime: 200 growths of
/// 100,000 elements would take 80 MB.
#[tokio::test(flavor = "multi_thread")]
async fn growing_a_table_past_the_limit_traps() {
    let env = TestEnv::new();
    let grow = "(table $t 1 funcref)";
    let w = guest().field(grow).with_body(
        CREATE,
        "(local.set $ptr (i32.const 0))
         (loop $l
           (drop (table.grow $t (ref.null func) (i32.const 100000)))
           (local.set $ptr (i32.add (local.get $ptr) (i32.const 1)))
           (br_if $l (i32.lt_u (local.get $ptr) (i32.const 200))))
         i64.const 0",
    );
    w.install(&env.dir.path().join("plugins"), "10-grow");
    let b = env
        .builder()
        .disable_connections(true)
        .plugin_policy("grow", PluginPolicy::new(FailurePolicy::Ignore));
    let a = env.start(b).await;
    let out = a.create_container(&pod("p"), &ctr("p", "c")).await.unwrap();
    assert_eq!(out.errors.len(), 1, "{:?}", out.errors);
    match &out.errors[0].failure {
        PluginFailure::Disconnected { reason } => assert!(reason.contains("trap"), "{reason}"),
        other => panic!("{other:?}"),
    }
    a.stop().await;
}

/// A start function that never ends cannot be paused to look at the
/// deadline: the plugin is refused at the registration timeout, and the
/// runtime starts without it then, not when the start function's fuel
/// runs out.
#[tokio::test(flavor = "multi_thread")]
async fn a_runaway_start_function_is_refused_at_the_registration_timeout() {
    let env = TestEnv::new();
    let registration = Duration::from_millis(50);
    let w = guest().field("(func $spin (loop $l (br $l))) (start $spin)");
    w.install(&env.dir.path().join("plugins"), "10-spin");
    let b = env
        .builder()
        .disable_connections(true)
        .registration_timeout(registration);
    let started = Instant::now();
    let a = env.start(b).await;
    let took = started.elapsed();
    assert!(a.plugins().is_empty());
    assert!(
        took < registration + Duration::from_millis(100),
        "start took {took:?}"
    );
    a.stop().await;
}
