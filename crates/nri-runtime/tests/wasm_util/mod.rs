//! WebAssembly test guests written in WAT and assembled in the test: a
//! guest with every export of the plugin ABI, a fixed buffer for requests,
//! and per-method bodies chosen by the test. Shared by the runtime's, the
//! simulator's, the `nri` command's, the proxy's and the fault suite's
//! tests (through `#[path]`).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use nri_api::EventMask;
use nri_api::api::log_request::Level;
use nri_api::api::{ConfigureResponse, LogRequest};
use prost::Message;

/// Every method export of the ABI.
pub const METHODS: [&str; 18] = [
    "plugin_configure",
    "plugin_synchronize",
    "plugin_shutdown",
    "plugin_run_pod_sandbox",
    "plugin_update_pod_sandbox",
    "plugin_post_update_pod_sandbox",
    "plugin_stop_pod_sandbox",
    "plugin_remove_pod_sandbox",
    "plugin_create_container",
    "plugin_post_create_container",
    "plugin_start_container",
    "plugin_post_start_container",
    "plugin_update_container",
    "plugin_post_update_container",
    "plugin_stop_container",
    "plugin_remove_container",
    "plugin_state_change",
    "plugin_validate_container_adjustment",
];

/// Where requests are placed (malloc always answers it, growing memory).
const REQUEST_AT: u32 = 32768;

/// The import of WASI `poll_oneoff` as `$poll`.
pub const POLL_IMPORT: &str = r#"(import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))"#;

/// The counter [`Work::Count`] loops on.
const COUNTER: &str = "(global $i (mut i32) (i32.const 0))";

/// What a test guest's method does before it answers (see [`Wat::work`]).
#[derive(Clone, Copy, Debug)]
pub enum Work {
    /// Counts to this in a loop (about six instructions a turn).
    Count(u32),
    /// Loops forever: only the deadline or the plugin's closing ends it.
    Forever,
    /// Sleeps this long in WASI `poll_oneoff` (one relative clock
    /// subscription).
    Sleep(Duration),
}

/// About 600 000 instructions: far over a call's inline fuel, far under a
/// second.
pub const LONG_WORK: Work = Work::Count(100_000);

/// A WAT guest under construction.
#[derive(Clone, Default)]
pub struct Wat {
    /// Method export -> body (a WAT instruction sequence leaving an i64).
    bodies: Vec<(String, String)>,
    /// Data segments at offsets below REQUEST_AT: (offset, bytes).
    data: Vec<(u32, Vec<u8>)>,
    next_data: u32,
    /// Extra module fields (imports go first).
    imports: Vec<String>,
    fields: Vec<String>,
    api_version: i64,
    omit: Vec<String>,
}

/// `(ptr << 32) | len`, with bit 31 for an error string.
pub fn packed(ptr: u32, len: u32, error: bool) -> i64 {
    let mut v = (u64::from(ptr) << 32) | u64::from(len);
    if error {
        v |= 1 << 31;
    }
    v as i64
}

impl Wat {
    /// A guest subscribing to `events`, answering every call with an empty
    /// response.
    pub fn new(events: EventMask) -> Self {
        let mut w = Wat {
            next_data: 1024,
            api_version: 1,
            ..Default::default()
        };
        let cfg = ConfigureResponse {
            events: events.as_i32(),
            ..Default::default()
        }
        .encode_to_vec();
        w.answer_bytes("plugin_configure", &cfg);
        w
    }

    /// A guest subscribing to CreateContainer that answers it by setting
    /// env `K=v`.
    pub fn env_setter() -> Self {
        let resp = nri_api::api::CreateContainerResponse {
            adjust: Some(nri_api::api::ContainerAdjustment {
                env: vec![nri_api::api::KeyValue {
                    key: "K".into(),
                    value: "v".into(),
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let events = EventMask::EMPTY.with(nri_api::api::Event::CreateContainer);
        Wat::new(events).answer("plugin_create_container", &resp)
    }

    /// Places `bytes` in memory; returns their offset.
    pub fn place(&mut self, bytes: &[u8]) -> u32 {
        let at = self.next_data;
        self.next_data += u32::try_from(bytes.len()).unwrap() + 8;
        assert!(self.next_data < REQUEST_AT, "test data too large");
        self.data.push((at, bytes.to_vec()));
        at
    }

    /// `export` answers with the encoded message `msg`.
    pub fn answer(self, export: &str, msg: &impl Message) -> Self {
        let mut w = self;
        w.answer_bytes(export, &msg.encode_to_vec());
        w
    }

    fn answer_bytes(&mut self, export: &str, bytes: &[u8]) {
        let at = self.place(bytes);
        let v = packed(at, u32::try_from(bytes.len()).unwrap(), false);
        self.body(export, &format!("i64.const {v}"));
    }

    /// `export` answers with the error string `text`.
    pub fn error(mut self, export: &str, text: &str) -> Self {
        let at = self.place(text.as_bytes());
        let v = packed(at, u32::try_from(text.len()).unwrap(), true);
        self.body(export, &format!("i64.const {v}"));
        self
    }

    /// `export` runs `body` (WAT instructions leaving an i64 on the stack).
    pub fn with_body(mut self, export: &str, body: &str) -> Self {
        self.body(export, body);
        self
    }

    fn body(&mut self, export: &str, body: &str) {
        self.bodies.retain(|(e, _)| e != export);
        self.bodies.push((export.to_owned(), body.to_owned()));
    }

    /// `export` writes `line` and a newline to descriptor `fd` through WASI
    /// `fd_write`, then logs `msg` at `level` through `env.log`, and
    /// answers an empty response.
    pub fn talk(mut self, export: &str, level: Level, msg: &str, fd: u32, line: &str) -> Self {
        let write = r#"(import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))"#;
        if !self.imports.iter().any(|i| i == write) {
            self.imports.push(write.to_owned());
        }
        let log = self.log_call(level, msg);
        let text = format!("{line}\n");
        let text_at = self.place(text.as_bytes());
        let mut iovec = text_at.to_le_bytes().to_vec();
        iovec.extend_from_slice(&u32::try_from(text.len()).unwrap().to_le_bytes());
        let iov_at = self.place(&iovec);
        let written_at = self.place(&[0; 4]);
        self.with_body(
            export,
            &format!(
                "(drop (call $write (i32.const {fd}) (i32.const {iov_at}) (i32.const 1) (i32.const {written_at})))
                 {log}
                 i64.const 0"
            ),
        )
    }

    /// `export` does `work`, then answers as set before (by
    /// [`Wat::answer`], [`Wat::error`], [`Wat::with_body`]; by default an
    /// empty response).
    pub fn work(mut self, export: &str, work: Work) -> Self {
        let before = match work {
            Work::Count(n) => {
                self.add_field(COUNTER);
                format!(
                    "(global.set $i (i32.const 0))
                     (loop $l (global.set $i (i32.add (global.get $i) (i32.const 1)))
                       (br_if $l (i32.lt_u (global.get $i) (i32.const {n}))))"
                )
            }
            Work::Forever => "(loop $l (br $l))".to_owned(),
            Work::Sleep(d) => self.sleep_call(d),
        };
        self.before(export, &before)
    }

    /// The instructions of one WASI `poll_oneoff` sleep of `d` (one
    /// relative clock subscription; importing `poll_oneoff` as `$poll`).
    pub fn sleep_call(&mut self, d: Duration) -> String {
        if !self.imports.iter().any(|i| i == POLL_IMPORT) {
            self.imports.push(POLL_IMPORT.to_owned());
        }
        // A subscription: userdata, tag 0 (clock), clock id 1
        // (monotonic), timeout in ns at 24, no flags (relative).
        let mut sub = [0u8; 48];
        sub[16] = 1;
        let nanos = u64::try_from(d.as_nanos()).unwrap();
        sub[24..32].copy_from_slice(&nanos.to_le_bytes());
        let sub_at = self.place(&sub);
        let event_at = self.place(&[0; 32]);
        let count_at = self.place(&[0; 4]);
        format!(
            "(drop (call $poll (i32.const {sub_at}) (i32.const {event_at}) (i32.const 1) (i32.const {count_at})))"
        )
    }

    /// `export` runs `instructions` (WAT leaving nothing on the stack),
    /// then what it ran before.
    pub fn before(mut self, export: &str, instructions: &str) -> Self {
        let after = self
            .bodies
            .iter()
            .find(|(e, _)| e == export)
            .map_or("i64.const 0".to_owned(), |(_, b)| b.clone());
        self.body(export, &format!("{instructions}\n{after}"));
        self
    }

    /// `export` first logs `msg` at `level` through `env.log`.
    pub fn logs_first(mut self, export: &str, level: Level, msg: &str) -> Self {
        let call = self.log_call(level, msg);
        self.before(export, &call)
    }

    /// The instructions of one `env.log` of `msg` at `level` (importing
    /// `env.log` as `$log`).
    pub fn log_call(&mut self, level: Level, msg: &str) -> String {
        let import = r#"(import "env" "log" (func $log (param i32 i32) (result i64)))"#;
        if !self.imports.iter().any(|i| i == import) {
            self.imports.push(import.to_owned());
        }
        let req = LogRequest {
            msg: msg.into(),
            level: level as i32,
        }
        .encode_to_vec();
        let at = self.place(&req);
        format!(
            "(drop (call $log (i32.const {at}) (i32.const {})))",
            req.len()
        )
    }

    fn add_field(&mut self, field: &str) {
        if !self.fields.iter().any(|f| f == field) {
            self.fields.push(field.to_owned());
        }
    }

    /// Adds an import (a WAT `(import ...)` field).
    pub fn import(mut self, field: &str) -> Self {
        self.imports.push(field.to_owned());
        self
    }

    /// Adds a module field.
    pub fn field(mut self, field: &str) -> Self {
        self.fields.push(field.to_owned());
        self
    }

    /// Leaves out an export.
    pub fn omit(mut self, export: &str) -> Self {
        self.omit.push(export.to_owned());
        self
    }

    /// `plugin_api_version` answers `v`.
    pub fn api_version(mut self, v: i64) -> Self {
        self.api_version = v;
        self
    }

    /// The module's text.
    pub fn text(&self) -> String {
        let mut t = String::from("(module\n");
        for i in &self.imports {
            t.push_str(i);
            t.push('\n');
        }
        t.push_str("(memory (export \"memory\") 1)\n");
        if !self.omit.iter().any(|o| o == "malloc") {
            t.push_str(&format!(
                "(func (export \"malloc\") (param $n i32) (result i32) (local $need i32)
                  (local.set $need (i32.shr_u (i32.add (i32.add (local.get $n) (i32.const {REQUEST_AT})) (i32.const 65535)) (i32.const 16)))
                  (if (i32.gt_u (local.get $need) (memory.size))
                    (then (drop (memory.grow (i32.sub (local.get $need) (memory.size))))))
                  (i32.const {REQUEST_AT}))\n"
            ));
        }
        t.push_str("(func (export \"free\") (param i32))\n");
        t.push_str(&format!(
            "(func (export \"plugin_api_version\") (result i64) i64.const {})\n",
            self.api_version
        ));
        for m in METHODS {
            if self.omit.iter().any(|o| o == m) {
                continue;
            }
            let body = self
                .bodies
                .iter()
                .find(|(e, _)| e == m)
                .map_or("i64.const 0", |(_, b)| b.as_str());
            t.push_str(&format!(
                "(func (export \"{m}\") (param $ptr i32) (param $len i32) (result i64) {body})\n"
            ));
        }
        for (at, bytes) in &self.data {
            let esc: String = bytes.iter().map(|b| format!("\\{b:02x}")).collect();
            t.push_str(&format!("(data (i32.const {at}) \"{esc}\")\n"));
        }
        for f in &self.fields {
            t.push_str(f);
            t.push('\n');
        }
        t.push(')');
        t
    }

    /// The assembled module.
    pub fn wasm(&self) -> Vec<u8> {
        wat::parse_str(self.text()).unwrap_or_else(|e| panic!("{e}\n{}", self.text()))
    }

    /// Writes the module as the executable plugin `dir/id`.
    pub fn install(&self, dir: &Path, id: &str) {
        std::fs::create_dir_all(dir).unwrap();
        let p = dir.join(id);
        std::fs::write(&p, self.wasm()).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// The `nanosleep` and `clock_nanosleep` syscall numbers (what
/// `std::thread::sleep` ends in).
#[cfg(target_arch = "x86_64")]
const SLEEPS: [&str; 2] = ["35", "230"];
#[cfg(target_arch = "aarch64")]
const SLEEPS: [&str; 2] = ["101", "115"];

/// Whether a thread of this process is in a sleep syscall (the runtime's
/// and the test's threads park in futex or epoll waits; a guest's
/// `poll_oneoff` sleeps).
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
pub fn a_thread_sleeps() -> bool {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .any(|t| {
            let sc = std::fs::read_to_string(t.path().join("syscall")).unwrap_or_default();
            SLEEPS.contains(&sc.split_whitespace().next().unwrap_or_default())
        })
}

/// What [`talker`]'s CreateContainer writes to standard output.
pub const TALKER_STDOUT: &str = "hello from wasm";
/// What [`talker`]'s CreateContainer logs at level warn.
pub const TALKER_LOG: &str = "careful, said the guest";

/// A guest subscribing to every event whose CreateContainer writes
/// [`TALKER_STDOUT`] to standard output and logs [`TALKER_LOG`] at level
/// warn, and changes nothing.
pub fn talker() -> Wat {
    Wat::new(EventMask::EMPTY).talk(
        "plugin_create_container",
        Level::Warn,
        TALKER_LOG,
        1,
        TALKER_STDOUT,
    )
}

/// The plugin output lines `nri sim --plugin-output` shows for one
/// CreateContainer of [`talker`], in order.
pub fn talker_output() -> [String; 2] {
    [TALKER_STDOUT.to_owned(), format!("WARN {TALKER_LOG}")]
}
