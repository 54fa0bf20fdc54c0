//! WebAssembly observers: a guest written in WAT (assembled per plugin)
//! that logs every request it gets, hex-encoded, through the host's
//! `env.log`, and answers with an empty response (its subscription to
//! Configure). The runtime logs guest lines on target `nri::plugin`; a
//! tracing layer ([`layer`]) picks the checker's lines out by their
//! prefix, `nrichk-<nonce> `, which names the observer, reassembles a
//! request from its chunks (a line is capped at 16 KiB by the host) and
//! records it as the raw peer would.
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
use nri_runtime::wasm::abi::METHOD_EXPORTS;
use prost::Message as _;
use tracing::field::{Field, Visit};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::observe::{Observer, lock};

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
/// What starts every line of a checker guest.
const MAGIC: &str = "nrichk-";

/// A reassembling request per guest, by nonce.
struct Guest {
    obs: Weak<Observer>,
    buf: Vec<u8>,
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
    };
    let mut all = lock(guests());
    all.retain(|_, g| g.obs.strong_count() > 0);
    all.insert(nonce, g);
    nonce
}

/// Writes the guest of `obs` (registered as `nonce`) as `dir/NN-name`.
pub fn install(obs: &Observer, nonce: u64, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
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
    let mut t = String::from("(module\n");
    t.push_str("(import \"env\" \"log\" (func $log (param i32 i32) (result i64)))\n");
    t.push_str("(memory (export \"memory\") 1)\n");
    t.push_str(&data(CFG_AT, &cfg));
    t.push_str(&data(PREFIX_AT, prefix.as_bytes()));
    t.push_str(&data(HEX_AT, b"0123456789abcdef"));
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
    for (id, (method, export)) in METHOD_EXPORTS.iter().enumerate() {
        let answer = if *method == nri_api::method::CONFIGURE {
            (u64::from(CFG_AT) << 32 | cfg.len() as u64) as i64
        } else {
            0
        };
        let _ = writeln!(
            t,
            "(func (export \"{export}\") (param $p i32) (param $l i32) (result i64)
  (call $report (i32.const {id}) (local.get $p) (local.get $l)) (i64.const {answer}))"
        );
    }
    t.push(')');
    t
}

/// `$report(id, ptr, len)`: logs `prefix id(2 digits) marker(+ or .) ' '
/// hex` per chunk of the request, `.` on the last.
fn report(prefix_len: u32) -> String {
    format!(
        "(func $report (param $id i32) (param $ptr i32) (param $len i32)
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
    (i32.store8 offset=3 (local.get $w) (i32.const 32))
    (local.set $w (i32.add (local.get $w) (i32.const 4)))
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
        msg = prefix_len + 4
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
    let (Ok(nonce), Some(id), Some(last), Some(hex)) = (
        nonce.parse::<u64>(),
        rest.get(..2).and_then(|d| d.parse::<usize>().ok()),
        rest.get(2..3).map(|m| m == "."),
        rest.get(4..).and_then(unhex),
    ) else {
        return;
    };
    let (obs, request) = {
        let mut all = lock(guests());
        let Some(g) = all.get_mut(&nonce) else { return };
        g.buf.extend_from_slice(&hex);
        if !last {
            return;
        }
        (g.obs.upgrade(), std::mem::take(&mut g.buf))
    };
    let (Some(obs), Some((method, _))) = (obs, METHOD_EXPORTS.get(id)) else {
        return;
    };
    match crate::decode::decode(method, &request) {
        Ok(Some(r)) => crate::decode::record(&obs, &r),
        Ok(None) => {}
        Err(e) => tracing::error!(error = %e, "a checker guest's request does not decode"),
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
