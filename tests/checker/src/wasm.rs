//! WebAssembly observers: a guest written in WAT (assembled per plugin)
//! that logs every request it gets, hex-encoded, through the host's
//! `env.log`, commits the faults of its program, and answers with an
//! empty response (its subscription to Configure). The runtime logs
//! guest lines on target `nri::plugin`; a tracing layer ([`layer`])
//! picks the checker's lines out by their prefix, `nrichk-<nonce> `,
//! which names the observer, reassembles a request from its chunks (a
//! line is capped at 16 KiB by the host) and records it as the raw peer
//! would, with the fault the guest committed answering it.
//!
//! The fault program (`wasm_program.rs`, generator 6 on) is compiled in:
//! entry `k` matches a request of its event's dedicated export whose bytes
//! hold the protobuf field `id` of its object (`0x0a`, the id's length,
//! the id: the length byte keeps `c1` from matching `c12`), while the
//! instance's count of it lasts. The guest then sleeps (a delay, through
//! WASI `poll_oneoff`, which the host ends at the call's deadline), loops
//! forever (a hang: the host cuts it between fuel slices at the deadline),
//! answers an error string (the ABI's error flag) or traps (`unreachable`,
//! a crash). A line names the entry it matched (`--`: none), before the
//! guest commits it.
//!
//! The layer must be part of the process's global subscriber ([`install`]
//! or [`layer`] in the caller's own): the host may run guest code on a
//! thread of tokio's blocking pool.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use nri_api::api::ConfigureResponse;
use nri_runtime::wasm::abi::{ERROR_FLAG, METHOD_EXPORTS};
use prost::Message as _;
use tracing::field::{Field, Visit};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::observe::{Observer, Seen, lock};
use crate::schedule::{Fault, WasmFault};

/// Where the host writes a request (the guest's `malloc` always answers it).
const REQUEST_AT: u32 = 32768;
/// Room after the request for one log line.
const OUT_SPACE: u32 = 16384;
/// Request bytes per log line (hex: twice as many characters).
const CHUNK: u32 = 4000;
/// Where the Configure answer, the prefix and the hex digits are.
const CFG_AT: u32 = 1024;
const PREFIX_AT: u32 = 2048;
const HEX_AT: u32 = 3072;
/// The error text of an error answer.
const ERR_AT: u32 = 3200;
const ERR_TEXT: &[u8] = b"checker fault: error answer";
/// A `poll_oneoff` clock subscription (48 bytes, zero but its timeout: a
/// relative monotonic sleep), its event (32 bytes) and event count.
const SUB_AT: u32 = 3328;
const EV_AT: u32 = 3392;
const NEV_AT: u32 = 3424;
/// Each entry's count of requests left (`i32`), then each entry's pattern
/// (the bytes of its object's `id` field, in [`PATTERN_ROOM`] bytes).
const LEFT_AT: u32 = 3456;
const PATTERNS_AT: u32 = 4096;
const PATTERN_ROOM: u32 = 32;
/// Most entries a program may have (its counts and patterns fit below
/// the request).
const MAX_ENTRIES: usize = 100;
/// What starts every line of a checker guest.
const MAGIC: &str = "nrichk-";

/// A reassembling request per guest, by nonce.
struct Guest {
    obs: Weak<Observer>,
    buf: Vec<u8>,
    /// The faults of the program's entries.
    faults: Vec<Fault>,
}

fn guests() -> &'static Mutex<HashMap<u64, Guest>> {
    static G: OnceLock<Mutex<HashMap<u64, Guest>>> = OnceLock::new();
    G.get_or_init(Mutex::default)
}

/// Registers `obs` under a new nonce (its lines name it).
pub fn register(obs: &Arc<Observer>) -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let nonce = u64::from(std::process::id()) << 32 | NEXT.fetch_add(1, Ordering::Relaxed);
    let g = Guest {
        obs: Arc::downgrade(obs),
        buf: Vec::new(),
        faults: obs.spec.wasm_faults.iter().map(|f| f.fault).collect(),
    };
    let mut all = lock(guests());
    all.retain(|_, g| g.obs.strong_count() > 0);
    all.insert(nonce, g);
    nonce
}

/// Writes the guest of `obs` (registered as `nonce`) as `dir/NN-name`.
pub fn install(obs: &Observer, nonce: u64, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    if obs.spec.wasm_faults.len() > MAX_ENTRIES {
        return Err(std::io::Error::other("a fault program of over 100 entries"));
    }
    let wasm = wat::parse_str(text(obs, nonce)).map_err(std::io::Error::other)?;
    // The runtime launches executables named NN-name (a WebAssembly module
    // is told apart by its content).
    let path = dir.join(obs.spec.full_name());
    std::fs::write(&path, wasm)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
}

fn data(at: u32, bytes: &[u8]) -> String {
    let esc: String = bytes.iter().map(|b| format!("\\{b:02x}")).collect();
    format!("(data (i32.const {at}) \"{esc}\")\n")
}

/// The guest's module text.
fn text(obs: &Observer, nonce: u64) -> String {
    let cfg = ConfigureResponse {
        events: obs.spec.events.as_i32(),
        failure_policy: None,
    }
    .encode_to_vec();
    let prefix = format!("{MAGIC}{nonce} ");
    let program = &obs.spec.wasm_faults;
    let mut t = String::from("(module\n");
    t.push_str("(import \"env\" \"log\" (func $log (param i32 i32) (result i64)))\n");
    t.push_str("(import \"wasi_snapshot_preview1\" \"poll_oneoff\" (func $poll (param i32 i32 i32 i32) (result i32)))\n");
    t.push_str("(memory (export \"memory\") 1)\n");
    t.push_str(&data(CFG_AT, &cfg));
    t.push_str(&data(PREFIX_AT, prefix.as_bytes()));
    t.push_str(&data(HEX_AT, b"0123456789abcdef"));
    t.push_str(&data(ERR_AT, ERR_TEXT));
    for (k, f) in program.iter().enumerate() {
        t.push_str(&data(LEFT_AT + 4 * k as u32, &f.times.to_le_bytes()));
        t.push_str(&data(pattern_at(k), &pattern(f)));
    }
    let _ = write!(
        t,
        "(func (export \"malloc\") (param $n i32) (result i32) (local $need i32)
  (local.set $need (i32.shr_u (i32.add (local.get $n) (i32.const {})) (i32.const 16)))
  (if (i32.gt_u (local.get $need) (memory.size))
    (then (drop (memory.grow (i32.sub (local.get $need) (memory.size))))))
  (i32.const {REQUEST_AT}))
(func (export \"free\") (param i32))
(func (export \"plugin_api_version\") (result i64) i64.const 1)
",
        REQUEST_AT + OUT_SPACE + 8 + 65535
    );
    t.push_str(&report(prefix.len() as u32));
    t.push_str(FIND);
    t.push_str(&matcher(program));
    t.push_str(&commit(program));
    let error = (u64::from(ERR_AT) << 32 | u64::from(ERROR_FLAG) | ERR_TEXT.len() as u64) as i64;
    for (id, (method, export)) in METHOD_EXPORTS.iter().enumerate() {
        let answer = if *method == nri_api::method::CONFIGURE {
            (u64::from(CFG_AT) << 32 | cfg.len() as u64) as i64
        } else {
            0
        };
        let _ = writeln!(
            t,
            "(func (export \"{export}\") (param $p i32) (param $l i32) (result i64) (local $e i32)
  (local.set $e (call $match (i32.const {id}) (local.get $p) (local.get $l)))
  (call $report (i32.const {id}) (local.get $p) (local.get $l) (local.get $e))
  (if (call $commit (local.get $e)) (then (return (i64.const {error}))))
  (i64.const {answer}))"
        );
    }
    t.push(')');
    t
}

/// Where entry `k`'s pattern is.
fn pattern_at(k: usize) -> u32 {
    PATTERNS_AT + PATTERN_ROOM * k as u32
}

/// The bytes entry `f` looks for: its object's `id` field (field 1,
/// length-delimited) as a Container or PodSandbox message encodes it.
fn pattern(f: &WasmFault) -> Vec<u8> {
    let id = f.object.as_bytes();
    let mut p = vec![0x0a, id.len() as u8];
    p.extend_from_slice(&id[..id.len().min(PATTERN_ROOM as usize - 2)]);
    p
}

/// The export index of `f`'s event.
fn export_of(f: &WasmFault) -> Option<usize> {
    let m = f.event.method_name()?;
    METHOD_EXPORTS.iter().position(|(method, _)| *method == m)
}

/// `$find(ptr, len, pat, patlen) -> 1 if the request holds the pattern`.
const FIND: &str =
    "(func $find (param $p i32) (param $l i32) (param $pat i32) (param $pl i32) (result i32)
  (local $i i32) (local $j i32)
  (block $no (loop $outer
    (br_if $no (i32.gt_u (i32.add (local.get $i) (local.get $pl)) (local.get $l)))
    (local.set $j (i32.const 0))
    (block $differs (loop $inner
      (if (i32.ge_u (local.get $j) (local.get $pl)) (then (return (i32.const 1))))
      (br_if $differs (i32.ne
        (i32.load8_u (i32.add (i32.add (local.get $p) (local.get $i)) (local.get $j)))
        (i32.load8_u (i32.add (local.get $pat) (local.get $j)))))
      (local.set $j (i32.add (local.get $j) (i32.const 1)))
      (br $inner)))
    (local.set $i (i32.add (local.get $i) (i32.const 1)))
    (br $outer)))
  (i32.const 0))
";

/// `$match(id, ptr, len) -> entry or -1`: the first entry of export `id`
/// whose count lasts and whose pattern the request holds (its count taken
/// down by one).
fn matcher(program: &[WasmFault]) -> String {
    let mut t =
        String::from("(func $match (param $id i32) (param $p i32) (param $l i32) (result i32)\n");
    for (k, f) in program.iter().enumerate() {
        let Some(export) = export_of(f) else { continue };
        let left = LEFT_AT + 4 * k as u32;
        let _ = writeln!(
            t,
            "  (if (i32.and (i32.eq (local.get $id) (i32.const {export})) (i32.gt_s (i32.load (i32.const {left})) (i32.const 0)))
    (then (if (call $find (local.get $p) (local.get $l) (i32.const {}) (i32.const {}))
      (then (i32.store (i32.const {left}) (i32.sub (i32.load (i32.const {left})) (i32.const 1)))
            (return (i32.const {k}))))))",
            pattern_at(k),
            pattern(f).len()
        );
    }
    t.push_str("  (i32.const -1))\n");
    t
}

/// `$commit(entry) -> 1 to answer an error`: what entry `k` does.
fn commit(program: &[WasmFault]) -> String {
    let mut t = String::from("(func $commit (param $e i32) (result i32)\n");
    for (k, f) in program.iter().enumerate() {
        let body = match f.fault {
            Fault::Delay(ms) => format!(
                "(i64.store (i32.const {}) (i64.const {}))
      (drop (call $poll (i32.const {SUB_AT}) (i32.const {EV_AT}) (i32.const 1) (i32.const {NEV_AT})))
      (return (i32.const 0))",
                SUB_AT + 24,
                ms.saturating_mul(1_000_000)
            ),
            Fault::Hang => format!("(loop $spin{k} (br $spin{k}))"),
            Fault::Error => "(return (i32.const 1))".to_owned(),
            Fault::Crash => "unreachable".to_owned(),
        };
        let _ = writeln!(
            t,
            "  (if (i32.eq (local.get $e) (i32.const {k})) (then {body}))"
        );
    }
    t.push_str("  (i32.const 0))\n");
    t
}

/// `$report(id, ptr, len, entry)`: logs `prefix id(2 digits) marker(+ or
/// .) entry(2 digits, -- for none) ' ' hex` per chunk of the request, `.`
/// on the last.
fn report(prefix_len: u32) -> String {
    format!(
        "(func $report (param $id i32) (param $ptr i32) (param $len i32) (param $e i32)
  (local $out i32) (local $done i32) (local $n i32) (local $w i32) (local $v i32) (local $i i32) (local $b i32)
  (local.set $out (i32.and (i32.add (i32.add (local.get $ptr) (local.get $len)) (i32.const 7)) (i32.const -8)))
  (loop $chunks
    (local.set $n (i32.sub (local.get $len) (local.get $done)))
    (if (i32.gt_u (local.get $n) (i32.const {CHUNK})) (then (local.set $n (i32.const {CHUNK}))))
    (i32.store8 (local.get $out) (i32.const 10))
    (local.set $w (i32.add (local.get $out) (i32.const 1)))
    (local.set $v (i32.add (i32.const {msg}) (i32.shl (local.get $n) (i32.const 1))))
    (block $vend (loop $vl
      (if (i32.lt_u (local.get $v) (i32.const 128))
        (then (i32.store8 (local.get $w) (local.get $v))
              (local.set $w (i32.add (local.get $w) (i32.const 1)))
              (br $vend)))
      (i32.store8 (local.get $w) (i32.or (i32.and (local.get $v) (i32.const 127)) (i32.const 128)))
      (local.set $w (i32.add (local.get $w) (i32.const 1)))
      (local.set $v (i32.shr_u (local.get $v) (i32.const 7)))
      (br $vl)))
    (local.set $i (i32.const 0))
    (block $pend (loop $pl
      (br_if $pend (i32.ge_u (local.get $i) (i32.const {prefix_len})))
      (i32.store8 (i32.add (local.get $w) (local.get $i)) (i32.load8_u (i32.add (i32.const {PREFIX_AT}) (local.get $i))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $pl)))
    (local.set $w (i32.add (local.get $w) (i32.const {prefix_len})))
    (i32.store8 (local.get $w) (i32.add (i32.const 48) (i32.div_u (local.get $id) (i32.const 10))))
    (i32.store8 offset=1 (local.get $w) (i32.add (i32.const 48) (i32.rem_u (local.get $id) (i32.const 10))))
    (i32.store8 offset=2 (local.get $w)
      (select (i32.const 46) (i32.const 43) (i32.eq (i32.add (local.get $done) (local.get $n)) (local.get $len))))
    (if (i32.lt_s (local.get $e) (i32.const 0))
      (then (i32.store8 offset=3 (local.get $w) (i32.const 45))
            (i32.store8 offset=4 (local.get $w) (i32.const 45)))
      (else (i32.store8 offset=3 (local.get $w) (i32.add (i32.const 48) (i32.div_u (local.get $e) (i32.const 10))))
            (i32.store8 offset=4 (local.get $w) (i32.add (i32.const 48) (i32.rem_u (local.get $e) (i32.const 10))))))
    (i32.store8 offset=5 (local.get $w) (i32.const 32))
    (local.set $w (i32.add (local.get $w) (i32.const 6)))
    (local.set $i (i32.const 0))
    (block $hend (loop $hl
      (br_if $hend (i32.ge_u (local.get $i) (local.get $n)))
      (local.set $b (i32.load8_u (i32.add (i32.add (local.get $ptr) (local.get $done)) (local.get $i))))
      (i32.store8 (local.get $w) (i32.load8_u (i32.add (i32.const {HEX_AT}) (i32.shr_u (local.get $b) (i32.const 4)))))
      (i32.store8 offset=1 (local.get $w) (i32.load8_u (i32.add (i32.const {HEX_AT}) (i32.and (local.get $b) (i32.const 15)))))
      (local.set $w (i32.add (local.get $w) (i32.const 2)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $hl)))
    (drop (call $log (local.get $out) (i32.sub (local.get $w) (local.get $out))))
    (local.set $done (i32.add (local.get $done) (local.get $n)))
    (br_if $chunks (i32.lt_u (local.get $done) (local.get $len)))))
",
        msg = prefix_len + 6
    )
}

/// The `message` of a tracing event.
#[derive(Default)]
struct Message(Option<String>);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = Some(format!("{value:?}"));
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0 = Some(value.to_owned());
        }
    }
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    if b.len() % 2 != 0 {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16);
    b.chunks(2)
        .map(|p| Some((digit(p[0])? << 4 | digit(p[1])?) as u8))
        .collect()
}

/// Takes one line of a checker guest.
fn take(line: &str) {
    let Some(rest) = line.strip_prefix(MAGIC) else {
        return;
    };
    let Some((nonce, rest)) = rest.split_once(' ') else {
        return;
    };
    let (Ok(nonce), Some(id), Some(last), Some(entry), Some(hex)) = (
        nonce.parse::<u64>(),
        rest.get(..2).and_then(|d| d.parse::<usize>().ok()),
        rest.get(2..3).map(|m| m == "."),
        rest.get(3..5),
        rest.get(6..).and_then(unhex),
    ) else {
        return;
    };
    let (obs, request, fault) = {
        let mut all = lock(guests());
        let Some(g) = all.get_mut(&nonce) else { return };
        g.buf.extend_from_slice(&hex);
        if !last {
            return;
        }
        let fault = entry.parse::<usize>().ok().and_then(|k| g.faults.get(k));
        (g.obs.upgrade(), std::mem::take(&mut g.buf), fault.copied())
    };
    let (Some(obs), Some((method, _))) = (obs, METHOD_EXPORTS.get(id)) else {
        return;
    };
    match crate::decode::decode(method, &request) {
        Ok(Some(r)) => record(&obs, &r, fault),
        Ok(None) => {}
        Err(e) => tracing::error!(error = %e, "a checker guest's request does not decode"),
    }
}

/// Records what a guest logged, and the fault it commits answering it. A
/// Configure starts a new instance: the one before it has ended (the
/// runtime makes a new instance once it discarded the last). A trap ends
/// the instance, not by the runtime's doing (as a crash cuts a socket).
fn record(obs: &Observer, r: &crate::decode::Request, fault: Option<Fault>) {
    use crate::decode::Request;
    match (r, fault) {
        (Request::Configure, _) => {
            if obs.instance_count() > 0 {
                obs.record(Seen::Lost);
            }
            obs.configured();
        }
        (
            Request::Event {
                event,
                pod,
                ctr,
                asked_mem,
            },
            Some(f),
        ) => {
            obs.record(Seen::Event {
                event: *event,
                pod: pod.clone(),
                ctr: ctr.clone(),
                asked_mem: *asked_mem,
                fault: Some(f),
            });
            if f == Fault::Crash {
                obs.record(Seen::Cut);
            }
        }
        _ => crate::decode::record(obs, r),
    }
}

/// The tracing layer that records what checker guests log.
pub fn layer<S>() -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    Capture.with_filter(tracing_subscriber::filter::filter_fn(|m| {
        m.target() == "nri::plugin"
    }))
}

struct Capture;

impl<S: tracing::Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let mut m = Message::default();
        event.record(&mut m);
        if let Some(line) = m.0 {
            take(&line);
        }
    }
}

/// Installs a global subscriber with [`layer`] alone, unless one is set
/// (tests; the command line installs its own with the layer).
pub fn install_capture() {
    let _ = tracing_subscriber::registry().with(layer()).try_init();
}
