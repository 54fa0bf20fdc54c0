//! The time a fuel slice takes: the most expensive instruction mixes a
//! guest can run (bulk memory and table instructions of the largest
//! lengths, calls of functions with the most locals, recursion, lazy
//! translation of large functions, every host function with its largest
//! arguments), each run in slices of fuel on the engine and host
//! functions the runtime uses, each slice timed (wall and thread CPU
//! time). What `docs/runtime/wasm.md` ("Time") states was measured here:
//!
//! ```sh
//! cargo test -p nri-runtime --release --lib wasm::calibrate -- --ignored --nocapture
//! ```
//!
//! (and without `--release` for a debug build of the runtime). The test
//! asserts nothing about time (a loaded machine makes any wall-time
//! bound meaningless); [`every_mix_runs`] checks in every test run that
//! the mixes still assemble and run.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use wasmi::{Linker, Module, ResumableCall, Store, Val};

use super::WasmLimits;
use super::image::{GuestLimits, engine};
use super::log::LogBudget;
use super::wasi::{self, HostState};

/// 64 MiB: the default memory cap, in pages.
const FULL_PAGES: u32 = 1024;
/// Half the default memory cap, in pages.
const HALF: u32 = FULL_PAGES / 2;
/// The default table cap.
const TABLE: u32 = super::DEFAULT_WASM_MAX_TABLE_ELEMENTS;

/// One instruction mix: a module exporting `memory` and `run` (which
/// loops forever), and what it does.
struct Mix {
    name: &'static str,
    wat: String,
}

fn module(imports: &str, pages: u32, fields: &str, body: &str) -> String {
    format!(
        "(module {imports}
           (memory (export \"memory\") {pages} {FULL_PAGES})
           {fields}
           (func (export \"run\") {body}))"
    )
}

/// A function `$big` with `n` i64 locals (each zeroed at every call).
fn big_locals(n: u32) -> String {
    format!("(func $big (local {}) )", "i64 ".repeat(n as usize))
}

/// An encoded `LogRequest` at level error with a message of `len`
/// bytes: its header (the message's bytes follow), 4-byte varint length.
fn log_header(len: u32) -> String {
    let v = [
        (len & 0x7f) as u8 | 0x80,
        ((len >> 7) & 0x7f) as u8 | 0x80,
        ((len >> 14) & 0x7f) as u8 | 0x80,
        ((len >> 21) & 0x7f) as u8,
    ];
    let b = [0x10, 0x04, 0x0a, v[0], v[1], v[2], v[3]];
    b.iter().map(|x| format!("\\{x:02x}")).collect()
}

const LOG: &str = r#"(import "env" "log" (func $log (param i32 i32) (result i64)))"#;
const FD_WRITE: &str = r#"(import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))"#;
const RANDOM: &str =
    r#"(import "wasi_snapshot_preview1" "random_get" (func $r (param i32 i32) (result i32)))"#;
const POLL: &str = r#"(import "wasi_snapshot_preview1" "poll_oneoff" (func $p (param i32 i32 i32 i32) (result i32)))"#;
const CLOCK: &str = r#"(import "wasi_snapshot_preview1" "clock_time_get" (func $c (param i32 i64 i32) (result i32)))"#;
const ENOSYS: &str = r#"(import "wasi_snapshot_preview1" "path_open" (func $o (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))"#;

/// Functions of [`TRANSLATE_BYTES`] each, for the translation mix.
const TRANSLATE_FUNCS: u32 = 48;
/// Size of one function body of the translation mix (about).
const TRANSLATE_BYTES: usize = super::WASM_MAX_FUNCTION_SIZE as usize;

/// A module of `funcs` functions of about `bytes` each (arithmetic on a
/// local), whose `run` calls each once (translating it), then loops.
fn translation(funcs: u32, bytes: usize) -> String {
    // `local.get 0 i32.const 1 i32.add local.set 0`: 7 bytes.
    let step = "(local.set 0 (i32.add (local.get 0) (i32.const 1)))";
    let body = step.repeat(bytes / 7);
    let mut fields = String::new();
    let mut calls = String::new();
    for i in 0..funcs {
        fields.push_str(&format!("(func $f{i} (local i32) {body})\n"));
        calls.push_str(&format!("(call $f{i})"));
    }
    module("", 1, &fields, &format!("{calls} (loop $l (br $l))"))
}

fn mixes() -> Vec<Mix> {
    [plain(), bulk(), tables_and_calls(), host_calls()]
        .into_iter()
        .flatten()
        .collect()
}

/// Plain instructions.
fn plain() -> Vec<Mix> {
    vec![
        Mix {
            name: "br loop",
            wat: module("", 1, "", "(loop $l (br $l))"),
        },
        Mix {
            name: "i64 load/store/add loop",
            wat: module(
                "",
                1,
                "",
                "(local i32) (loop $l
                   (i64.store (i32.const 8) (i64.add (i64.load (i32.const 8)) (i64.const 1)))
                   (local.set 0 (i32.add (local.get 0) (i32.const 1)))
                   (br $l))",
            ),
        },
    ]
}

/// Bulk memory instructions of the largest lengths.
fn bulk() -> Vec<Mix> {
    let full = FULL_PAGES * 65536;
    vec![
        Mix {
            name: "memory.fill 64 MiB",
            wat: module(
                "",
                FULL_PAGES,
                "",
                &format!(
                    "(loop $l (memory.fill (i32.const 0) (i32.const 1) (i32.const {full})) (br $l))"
                ),
            ),
        },
        Mix {
            name: "memory.copy 32 MiB",
            wat: module(
                "",
                FULL_PAGES,
                "",
                &format!(
                    "(loop $l (memory.copy (i32.const 0) (i32.const {}) (i32.const {})) (br $l))",
                    full / 2,
                    full / 2
                ),
            ),
        },
        Mix {
            name: "memory.fill 1 byte",
            wat: module(
                "",
                1,
                "",
                "(loop $l (memory.fill (i32.const 0) (i32.const 1) (i32.const 1)) (br $l))",
            ),
        },
        Mix {
            name: "memory.init 1 MiB",
            wat: module(
                "",
                FULL_PAGES,
                &format!("(data $d \"{}\")", "\\00".repeat(1 << 20)),
                "(loop $l (memory.init $d (i32.const 0) (i32.const 0) (i32.const 1048576)) (br $l))",
            ),
        },
        Mix {
            // At the module's own maximum, under the runtime's cap (a failed
            // growth, -1; past the cap a growth traps).
            name: "memory.grow failing at its maximum",
            wat: format!(
                "(module (memory (export \"memory\") {HALF} {HALF})
                   (func (export \"run\") (loop $l (drop (memory.grow (i32.const 1))) (br $l))))"
            ),
        },
        Mix {
            name: "memory.grow by 0",
            wat: module(
                "",
                1,
                "",
                "(loop $l (drop (memory.grow (i32.const 0))) (br $l))",
            ),
        },
    ]
}

/// Table instructions, calls, recursion and translation.
fn tables_and_calls() -> Vec<Mix> {
    vec![
        Mix {
            name: "table.grow failing at its maximum",
            wat: module(
                "",
                1,
                &format!("(table $t {} {} funcref)", TABLE / 2, TABLE / 2),
                "(loop $l (drop (table.grow $t (ref.null func) (i32.const 1))) (br $l))",
            ),
        },
        Mix {
            name: "table.fill whole table",
            wat: module(
                "",
                1,
                &format!("(table $t {TABLE} {TABLE} funcref) (func $g) (elem declare func $g)"),
                &format!("(loop $l (table.fill $t (i32.const 0) (ref.func $g) (i32.const {TABLE})) (br $l))"),
            ),
        },
        Mix {
            name: "table.copy half table",
            wat: module(
                "",
                1,
                &format!("(table $t {TABLE} {TABLE} funcref)"),
                &format!(
                    "(loop $l (table.copy $t $t (i32.const 0) (i32.const {}) (i32.const {})) (br $l))",
                    TABLE / 2,
                    TABLE / 2
                ),
            ),
        },
        Mix {
            name: "call_indirect",
            wat: module(
                "",
                1,
                "(type $v (func)) (table 1 funcref) (elem (i32.const 0) $g) (func $g)",
                "(loop $l (call_indirect (type $v) (i32.const 0)) (br $l))",
            ),
        },
        Mix {
            name: "call of a function with 29,000 locals",
            wat: module(
                "",
                1,
                &big_locals(29_000),
                "(loop $l (call $big) (br $l))",
            ),
        },
        Mix {
            name: "call of a function with 4,096 locals",
            wat: module("", 1, &big_locals(4096), "(loop $l (call $big) (br $l))"),
        },
        Mix {
            name: "call of a function with 1,000 locals",
            wat: module("", 1, &big_locals(1000), "(loop $l (call $big) (br $l))"),
        },
        Mix {
            name: "recursion 900 deep, 100 locals a frame",
            wat: module(
                "",
                1,
                &format!(
                    "(func $rec (param i32) (local {})
                       (if (local.get 0) (then (call $rec (i32.sub (local.get 0) (i32.const 1))))))",
                    "i64 ".repeat(100)
                ),
                "(loop $l (call $rec (i32.const 900)) (br $l))",
            ),
        },
        Mix {
            name: "lazy translation of 48 functions of the largest size",
            wat: translation(TRANSLATE_FUNCS, TRANSLATE_BYTES),
        },
    ]
}

/// Every host function with its largest arguments.
fn host_calls() -> Vec<Mix> {
    let full = FULL_PAGES * 65536;
    vec![
        Mix {
            name: "env.log of 16 KiB (error level, logged)",
            wat: module(
                LOG,
                FULL_PAGES,
                &format!("(data (i32.const 0) \"{}\")", log_header(full - 64)),
                &format!("(loop $l (drop (call $log (i32.const 0) (i32.const {}))) (br $l))", full - 57),
            ),
        },
        Mix {
            name: "fd_write of 1024 iovecs to stdout (debug log)",
            wat: module(
                FD_WRITE,
                FULL_PAGES,
                &format!(
                    "(data (i32.const 0) \"{}\")",
                    [0x0010_0000u32.to_le_bytes(), 0x0010_0000u32.to_le_bytes()]
                        .concat()
                        .repeat(1024)
                        .iter()
                        .map(|b| format!("\\{b:02x}"))
                        .collect::<String>()
                ),
                "(loop $l (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1024) (i32.const 16384))) (br $l))",
            ),
        },
        Mix {
            name: "random_get of 1 MiB",
            wat: module(
                RANDOM,
                32,
                "",
                "(loop $l (drop (call $r (i32.const 0) (i32.const 1048576))) (br $l))",
            ),
        },
        Mix {
            name: "random_get of 1 byte",
            wat: module(
                RANDOM,
                1,
                "",
                "(loop $l (drop (call $r (i32.const 0) (i32.const 1))) (br $l))",
            ),
        },
        Mix {
            name: "poll_oneoff of 1024 zero clocks",
            wat: module(
                POLL,
                4,
                // 1024 subscriptions at 0: tag 0, clock 1, timeout 0.
                "",
                "(local i32)
                 (loop $s
                   (i32.store8 (i32.add (i32.mul (local.get 0) (i32.const 48)) (i32.const 16)) (i32.const 1))
                   (local.set 0 (i32.add (local.get 0) (i32.const 1)))
                   (br_if $s (i32.lt_u (local.get 0) (i32.const 1024))))
                 (loop $l (drop (call $p (i32.const 0) (i32.const 65536) (i32.const 1024) (i32.const 196608))) (br $l))",
            ),
        },
        Mix {
            name: "clock_time_get",
            wat: module(
                CLOCK,
                1,
                "",
                "(loop $l (drop (call $c (i32.const 1) (i64.const 0) (i32.const 0))) (br $l))",
            ),
        },
        Mix {
            name: "an ENOSYS stub (debug log)",
            wat: module(
                ENOSYS,
                1,
                "",
                "(loop $l (drop (call $o (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i64.const 0) (i64.const 0) (i32.const 0) (i32.const 0))) (br $l))",
            ),
        },
    ]
}

/// The CPU time this thread has used.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the one it is given.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &raw mut ts) };
    assert_eq!(rc, 0);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// What the slices of one mix took.
struct Measured {
    slices: usize,
    /// Fuel used per slice (the largest).
    fuel: u64,
    /// Longest slice, wall and CPU.
    wall_max: Duration,
    cpu_max: Duration,
    /// Median CPU time of a slice.
    cpu_median: Duration,
    /// The largest CPU nanoseconds per unit of fuel of any slice.
    ns_per_fuel_max: f64,
}

/// Runs `mix` in slices of `slice` fuel for about `time` (at least 3
/// slices, at most `max_slices`), timing each.
fn measure(mix: &Mix, slice: u64, time: Duration, max_slices: usize) -> Measured {
    let wasm = wat::parse_str(&mix.wat).unwrap_or_else(|e| panic!("{}: {e}", mix.name));
    let engine = engine();
    let module = Module::new(&engine, &wasm).unwrap();
    let linker: Linker<HostState> = wasi::linker(&module).unwrap();
    let state = HostState {
        plugin: "calibrate".into(),
        limits: GuestLimits::new(&WasmLimits::default()),
        deadline: None,
        epoch: Instant::now(),
        closed: CancellationToken::new(),
        inline: false,
        // Every line written: the most a host function can cost.
        log_budget: std::sync::Arc::new(std::sync::Mutex::new(LogBudget::with_rate(
            u64::MAX,
            super::DEFAULT_WASM_LOG_RATE,
            Instant::now(),
        ))),
        slept: std::cell::Cell::default(),
    };
    let mut store = Store::new(&engine, state);
    store.limiter(|s| &mut s.limits);
    store.set_fuel(u64::MAX / 2).unwrap();
    let instance = linker.instantiate_and_start(&mut store, &module).unwrap();
    let run = instance.get_func(&store, "run").unwrap();
    store.set_fuel(slice).unwrap();
    let mut out: [Val; 0] = [];
    let (mut wall_max, mut cpu_max) = (Duration::ZERO, Duration::ZERO);
    let (mut cpus, mut fuel, mut worst) = (Vec::new(), 0u64, 0f64);
    let begin = Instant::now();
    let (mut t0, mut c0) = (Instant::now(), thread_cpu());
    let mut call = run.call_resumable(&mut store, &[], &mut out).unwrap();
    loop {
        let (wall, cpu) = (t0.elapsed(), thread_cpu().saturating_sub(c0));
        let ResumableCall::OutOfFuel(more) = call else {
            panic!("{}: the mix ended", mix.name);
        };
        let given = slice.max(more.required_fuel());
        let used = store
            .get_fuel()
            .map_or(given, |left| given - left.min(given));
        let used = if cpus.is_empty() { slice } else { used };
        wall_max = wall_max.max(wall);
        cpu_max = cpu_max.max(cpu);
        fuel = fuel.max(used);
        worst = worst.max(cpu.as_nanos() as f64 / used.max(1) as f64);
        cpus.push(cpu);
        if (cpus.len() >= 3 && begin.elapsed() >= time) || cpus.len() >= max_slices {
            break;
        }
        store.set_fuel(given).unwrap();
        (t0, c0) = (Instant::now(), thread_cpu());
        call = more.resume(&mut store, &mut out).unwrap();
    }
    cpus.sort();
    Measured {
        slices: cpus.len(),
        fuel,
        wall_max,
        cpu_max,
        cpu_median: cpus[cpus.len() / 2],
        ns_per_fuel_max: worst,
    }
}

/// The table of every mix at the default slice (see the module's docs).
#[test]
#[ignore = "a measurement, run by hand (see the module's docs)"]
fn calibrate_fuel_against_time() {
    // The host functions' log lines are formatted and written, as in a
    // runtime logging at debug level.
    let sink = std::fs::File::create("/dev/null").unwrap();
    let _log = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(std::sync::Mutex::new(sink))
            .finish(),
    );
    let slice = std::env::var("NRI_CALIBRATE_SLICE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(super::DEFAULT_WASM_FUEL_SLICE);
    println!(
        "fuel slice {slice}; build {}",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    println!(
        "{:<46} {:>6} {:>10} {:>9} {:>9} {:>9} {:>8} {:>10}",
        "mix", "slices", "fuel", "wall max", "cpu max", "cpu med", "ns/fuel", "fuel/ms"
    );
    let only = std::env::var("NRI_CALIBRATE_ONLY").unwrap_or_default();
    for mix in mixes().into_iter().filter(|m| m.name.contains(&only)) {
        let m = measure(&mix, slice, Duration::from_millis(500), 200);
        println!(
            "{:<46} {:>6} {:>10} {:>7.2}ms {:>7.2}ms {:>7.2}ms {:>8.2} {:>10.0}",
            mix.name,
            m.slices,
            m.fuel,
            m.wall_max.as_secs_f64() * 1e3,
            m.cpu_max.as_secs_f64() * 1e3,
            m.cpu_median.as_secs_f64() * 1e3,
            m.ns_per_fuel_max,
            1e6 / m.ns_per_fuel_max,
        );
    }
}

/// Every mix assembles, instantiates and runs a few slices (small ones;
/// the translation mix with two small functions instead of its 6 MiB,
/// which takes a minute to assemble in a debug build). About 2 s.
#[test]
fn every_mix_runs() {
    let small = Mix {
        name: "lazy translation, small",
        wat: translation(2, 4096),
    };
    let mixes = mixes().into_iter().filter(|m| !m.name.starts_with("lazy"));
    for mix in mixes.chain([small]) {
        let m = measure(&mix, 10_000, Duration::ZERO, 3);
        assert_eq!(m.slices, 3, "{}", mix.name);
    }
}

/// What a call of a Go-built guest costs (its CreateContainer with a
/// request of about a kilobyte): the module at `NRI_CALIBRATE_GO_GUEST`
/// (`scripts/build-go-peers.sh` builds one), 300 calls after a warm-up,
/// the median and 90th percentile of each call's thread CPU time.
#[test]
#[ignore = "a measurement, run by hand with NRI_CALIBRATE_GO_GUEST set"]
fn go_guest_call_cost() {
    use nri_api::api::{Container, CreateContainerRequest, PodSandbox};
    use prost::Message;
    let Ok(path) = std::env::var("NRI_CALIBRATE_GO_GUEST") else {
        println!("NRI_CALIBRATE_GO_GUEST not set");
        return;
    };
    let wasm = std::fs::read(path).unwrap();
    let far = Instant::now() + Duration::from_secs(600);
    let rss = || {
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:").map(|v| v.trim().to_owned()))
            .unwrap()
    };
    let (t0, r0) = (Instant::now(), rss());
    let image = super::image::Image::compile(&wasm, &WasmLimits::default()).unwrap();
    let mut guest = image
        .instantiate("go", far, &tokio_util::sync::CancellationToken::new())
        .unwrap();
    println!("load {:?}, RSS {r0} -> {}", t0.elapsed(), rss());
    let open = CancellationToken::new();
    let mut call = |method: &str, req: Vec<u8>| {
        let mut c = guest.begin(method, req.into(), far).unwrap();
        guest.advance(&mut c, false, &open).unwrap();
    };
    call(
        nri_api::method::CONFIGURE,
        nri_api::api::ConfigureRequest::default().encode_to_vec(),
    );
    let labels = |n: usize| {
        (0..n)
            .map(|i| (format!("example.com/label-{i}"), format!("value-{i}")))
            .collect()
    };
    let req = CreateContainerRequest {
        pod: Some(PodSandbox {
            id: "pod-0123456789abcdef".into(),
            name: "calibrate".into(),
            namespace: "default".into(),
            labels: labels(8),
            annotations: labels(8),
            ..Default::default()
        }),
        container: Some(Container {
            id: "ctr-0123456789abcdef".into(),
            name: "c".into(),
            labels: labels(4),
            annotations: labels(4),
            args: vec!["/bin/sh".into(), "-c".into(), "sleep 1".into()],
            env: vec!["PATH=/usr/bin:/bin".into()],
            ..Default::default()
        }),
    }
    .encode_to_vec();
    let mut times = Vec::new();
    for i in 0..350 {
        let c0 = thread_cpu();
        call(nri_api::method::CREATE_CONTAINER, req.clone());
        if i >= 50 {
            times.push(thread_cpu().saturating_sub(c0));
        }
    }
    times.sort();
    println!("RSS after the calls {}", rss());
    println!(
        "Go guest CreateContainer ({} byte request): median {:?}, p90 {:?}",
        req.len(),
        times[times.len() / 2],
        times[times.len() * 9 / 10]
    );
}
