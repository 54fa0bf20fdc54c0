//! Hostile annotations against the YAML decoders every sample plugin
//! uses (`goyaml`, both dialects): whatever the text, decoding one stays
//! under a memory, CPU and time bound, and answers (a value or an error)
//! instead of crashing.
//!
//! Memory is what the decoder allocates (a counting global allocator: the
//! peak of live bytes above the start); CPU is the thread's own time
//! (`/proc/thread-self/schedstat`). Each case states what it attacks.
//! The bounds are loose for a debug build on a busy 2-core machine; the
//! numbers of a release build are in the crate's README ("Decoding
//! bounds"). Time budget of the whole file: a few seconds.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use nri_sample_common::goyaml::{Field, Shape, decode_sigs_value, decode_v3_value};

/// Counts live heap bytes and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is passed on unchanged.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract is passed on unchanged.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                let now = LIVE.fetch_add(new_size - layout.size(), Ordering::Relaxed)
                    + (new_size - layout.size());
                PEAK.fetch_max(now, Ordering::Relaxed);
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// One test at a time (the allocator's counters are global): a test
/// building its text while another measures would count in its peak.
static SERIAL: Mutex<()> = Mutex::new(());

/// Holds [`SERIAL`] for the whole of a test.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The bounds every case must stay under (debug build).
const MAX_HEAP: usize = 16 << 20;
const MAX_CPU: Duration = Duration::from_secs(2);
const MAX_MESSAGE: usize = 4096;

/// This thread's CPU time.
fn thread_cpu() -> Duration {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    let ns: u64 = s.split_whitespace().next().unwrap().parse().unwrap();
    Duration::from_nanos(ns)
}

/// Decodes `text` into `shape` with both dialects; returns the peak heap
/// above the start and the CPU time, and whether each decoded.
fn measure(name: &str, text: &str, shape: &Shape) -> (usize, Duration) {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let cpu = thread_cpu();
    let sigs = decode_sigs_value(text, shape, shape.zero()).map(|d| d.notices.len());
    let v3 = decode_v3_value(text, shape, shape.zero()).map(|d| d.notices.len());
    let cpu = thread_cpu() - cpu;
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    let show = |r: &Result<usize, nri_sample_common::goyaml::DecodeError>| match r {
        Ok(n) => format!("decoded, {n} notices"),
        Err(e) => {
            let t = e.to_string();
            let head: String = t.chars().take(100).collect();
            format!("{head:?} ({} bytes)", t.len())
        }
    };
    eprintln!(
        "{name}: {} bytes of text, peak heap {} KiB, CPU {cpu:?}; sigs {}, v3 {}",
        text.len(),
        peak / 1024,
        show(&sigs),
        show(&v3)
    );
    assert!(
        peak < MAX_HEAP,
        "{name}: peak heap {peak} bytes >= {MAX_HEAP}"
    );
    assert!(cpu < MAX_CPU, "{name}: CPU {cpu:?} >= {MAX_CPU:?}");
    // An error's message goes to the runtime and the log: it is short
    // whatever the text.
    for e in [sigs.err(), v3.err()].into_iter().flatten() {
        let len = e.to_string().len();
        assert!(len <= MAX_MESSAGE, "{name}: an error of {len} bytes");
    }
    (peak, cpu)
}

const DEVICE: Shape = Shape::Struct(&[
    Field::new("path", Shape::Str),
    Field::new("type", Shape::Str),
    Field::new("major", Shape::Int(64)),
    Field::new("minor", Shape::Int(64)),
]);
const DEVICES: Shape = Shape::Seq(&DEVICE);
const SYSCTLS: Shape = Shape::Map(&Shape::Str);
const ANY: Shape = Shape::Any;

/// A long scalar anchored once and aliased from a list: a few hundred
/// KB of text that names gigabytes.
#[test]
fn a_long_scalar_aliased_many_times() {
    let _serial = serial();
    let text = format!(
        "- {{path: &s {}}}\n- {{path: [{}]}}\n",
        "x".repeat(100_000),
        "*s, ".repeat(20_000)
    );
    assert!(text.len() < 200_000);
    measure("long scalar x 20,000 aliases", &text, &DEVICES);
}

/// Nested anchors: each level a list of aliases of the level below.
#[test]
fn nested_anchors() {
    let _serial = serial();
    let mut text = format!("a0: &a0 [{}]\n", "xxxxxxxxxx, ".repeat(10));
    for i in 1..9 {
        let prev = format!("*a{}, ", i - 1);
        text.push_str(&format!("a{i}: &a{i} [{}]\n", prev.repeat(10)));
    }
    measure("nested anchors, 10^9 nodes named", &text, &ANY);
    measure("nested anchors into a map", &text, &SYSCTLS);
}

/// Anchored collections nested in one another: each anchor keeps a copy
/// of everything inside it.
#[test]
fn anchors_nested_in_anchors() {
    let _serial = serial();
    let depth = 60;
    let mut text = String::new();
    for i in 0..depth {
        text.push_str(&format!("[&n{i} "));
    }
    text.push_str(&format!("[{}]", "x, ".repeat(40_000)));
    text.push_str(&"]".repeat(depth));
    measure("60 nested anchors around 40,000 items", &text, &ANY);
}

/// A map of many short keys (pairwise key comparison is quadratic).
#[test]
fn many_keys() {
    let _serial = serial();
    let mut text = String::from("{");
    for i in 0..45_000 {
        text.push_str(&format!("k{i}: v, "));
    }
    text.push('}');
    measure("45,000 keys", &text, &SYSCTLS);
    // A map as large as the bounds allow decodes, in linear time.
    let mut text = String::from("{");
    for i in 0..4_500 {
        text.push_str(&format!("k{i}: v, "));
    }
    text.push('}');
    measure("4,500 keys", &text, &SYSCTLS);
}

/// Long keys over deep lists: a path string per node would copy the key
/// for every item below it.
#[test]
fn long_keys_over_long_lists() {
    let _serial = serial();
    // An explicit key (`? `): a plain key is at most 1024 characters.
    let text = format!("? {}\n: [{}]\n", "k".repeat(100_000), "1, ".repeat(9_000));
    measure("100 KB key over 9,000 items", &text, &SYSCTLS);
    measure("100 KB key over 9,000 items (any)", &text, &ANY);
}

/// Many type errors (yaml.v3 reports every one of them).
#[test]
fn many_errors() {
    let _serial = serial();
    let text = format!("[{}]", "{major: x}, ".repeat(20_000));
    measure("20,000 type errors", &text, &DEVICES);
}

/// Deep nesting, and many comments (each skipped event once cost a stack
/// frame).
#[test]
fn deep_nesting_and_many_comments() {
    let _serial = serial();
    let deep = "[".repeat(50_000) + &"]".repeat(50_000);
    measure("50,000 levels", &deep, &ANY);
    let comments = "#\n".repeat(120_000) + "- {path: /dev/x}\n";
    measure("120,000 comment lines", &comments, &DEVICES);
}

/// The largest documents the bounds let through: as many nodes, as much
/// text (through aliases), both at once.
#[test]
fn the_largest_documents_allowed() {
    let _serial = serial();
    let items = format!("[{}]", "x, ".repeat(9_998));
    measure("9,999 nodes", &items, &ANY);
    let devices = format!("[{}]", "{path: /dev/x}, ".repeat(3_300));
    measure("3,300 devices", &devices, &DEVICES);
    let text = format!(
        "- {{path: &s {}}}\n- {{path: *s}}\n- {{path: *s}}\n- {{path: *s}}\n",
        "x".repeat(200_000)
    );
    measure("1 MB of text through aliases", &text, &DEVICES);
    let text = format!(
        "- {{path: &p {}}}\n{}",
        "x".repeat(300),
        "- {path: *p}\n".repeat(3_000)
    );
    measure("3,000 devices with 300-byte paths", &text, &DEVICES);
    let text = format!("a: &s {}\nb: [{}]\n", "x".repeat(100), "*s, ".repeat(9_000));
    measure("9,000 aliases of 100 bytes", &text, &ANY);
}

/// `parse_yaml` (configurations read with serde-saphyr) keeps the same
/// bounds.
#[test]
fn parse_yaml_keeps_the_bounds() {
    let _serial = serial();
    let cases = [
        (
            "long scalar aliased",
            format!(
                "a: &s {}\nb: [{}]\n",
                "x".repeat(100_000),
                "*s, ".repeat(20_000)
            ),
        ),
        ("nested anchors", {
            let mut t = format!("a0: &a0 [{}]\n", "xxxxxxxxxx, ".repeat(10));
            for i in 1..9 {
                let prev = format!("*a{}, ", i - 1);
                t.push_str(&format!("a{i}: &a{i} [{}]\n", prev.repeat(10)));
            }
            t
        }),
        ("45,000 keys", {
            let mut t = String::from("{");
            for i in 0..45_000 {
                t.push_str(&format!("k{i}: v, "));
            }
            t + "}"
        }),
        ("50,000 levels", "[".repeat(50_000) + &"]".repeat(50_000)),
    ];
    for (name, text) in cases {
        let base = LIVE.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        let cpu = thread_cpu();
        let r = nri_sample_common::parse_yaml(&text);
        let cpu = thread_cpu() - cpu;
        let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
        let msg = r
            .as_ref()
            .err()
            .map(ToString::to_string)
            .unwrap_or_default();
        eprintln!(
            "parse_yaml {name}: peak heap {} KiB, CPU {cpu:?}, ok {}, error of {} bytes",
            peak / 1024,
            r.is_ok(),
            msg.len()
        );
        assert!(peak < MAX_HEAP, "{name}: peak heap {peak}");
        assert!(cpu < MAX_CPU, "{name}: CPU {cpu:?}");
        assert!(
            msg.len() <= MAX_MESSAGE,
            "{name}: error of {} bytes",
            msg.len()
        );
    }
}

/// A text larger than any annotation (Kubernetes caps all of a pod's
/// annotations at 256 KiB together).
#[test]
fn a_huge_text() {
    let _serial = serial();
    let text = format!("- {{path: /dev/x, type: {}}}\n", "c".repeat(8 << 20));
    measure("8 MiB scalar", &text, &DEVICES);
}
