//! One WebAssembly plugin: its engine, store and instance ([`Guest`]), and
//! the plugin connection the runtime calls ([`WasmConn`]).
//!
//! Calls are serialized per plugin (one lock around the instance) and run
//! on a blocking thread, in slices of fuel: after each slice the call's
//! deadline and the plugin's closing are checked (wasmi has no epoch
//! interruption). A trap, an exit, a deadline passed or an answer that
//! breaks the ABI leave the guest in an unknown state: the instance is
//! dropped and the plugin closed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio_util::sync::CancellationToken;
use wasmi::{
    Engine, Memory, Module, Store, StoreLimitsBuilder, TypedFunc, TypedResumableCall, WasmParams,
    WasmResults,
};

use super::abi::{self, Answer, Packed};
use super::wasi::HostState;
use super::{WasmError, WasmLimits};
use crate::failure::PluginFailure;

/// Largest answer a guest may return: the protocol's message cap, as for
/// socket plugins.
const MAX_ANSWER: usize = nri_ttrpc::codec::MAX_MESSAGE_LEN;
/// Fuel the module's own start function (if any) may use, in slices.
const START_SLICES: u64 = 100;

/// How a guest call went wrong.
#[derive(Debug)]
pub(crate) enum CallError {
    /// The guest's handler returned this error text.
    Status(String),
    /// The call's deadline passed.
    Timeout,
    /// The guest trapped or exited.
    Fatal(String),
    /// The guest broke the ABI (an answer outside its memory, too large).
    Abi(WasmError),
    /// The plugin was closed (before or during the call).
    Closed,
    /// The guest has no export for the method.
    NoMethod,
}

impl CallError {
    /// Whether the guest can still be called after this.
    fn leaves_guest_usable(&self) -> bool {
        matches!(self, CallError::Status(_) | CallError::NoMethod)
    }
}

fn engine_error(e: &wasmi::Error) -> CallError {
    match e.i32_exit_status() {
        Some(code) => CallError::Fatal(format!("guest exited with status {code}")),
        None => CallError::Fatal(format!("guest trapped: {e}")),
    }
}

/// A loaded, initialized guest.
pub(crate) struct Guest {
    store: Store<HostState>,
    memory: Memory,
    malloc: TypedFunc<i32, i32>,
    free: TypedFunc<i32, ()>,
    methods: HashMap<&'static str, TypedFunc<(i32, i32), i64>>,
    slice: u64,
    /// Fuel (about one unit per instruction) the guest used since the
    /// start of the current call, for the trace log.
    fuel_used: u64,
}

impl std::fmt::Debug for Guest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guest")
            .field("plugin", &self.store.data().plugin)
            .finish_non_exhaustive()
    }
}

/// The engine a guest is compiled for: fuel metered.
fn engine() -> Engine {
    let mut cfg = wasmi::Config::default();
    cfg.consume_fuel(true);
    // Functions are translated lazily, on their first call; translation
    // costs no fuel (the deadline still bounds it), since running out of
    // fuel while translating ends the call instead of pausing it.
    cfg.fuel_cost(wasmi::CustomFuelCosts {
        bytes_copied_per_fuel: 64,
        fuel_per_bytes_translated: 0,
        fuel_per_bytes_validated: 0,
    });
    Engine::new(&cfg)
}

impl Guest {
    /// Compiles and instantiates `wasm`, runs its initializer and checks
    /// its API version and exports, all before `deadline`.
    pub(crate) fn load(
        plugin: &str,
        wasm: &[u8],
        limits: &WasmLimits,
        deadline: Instant,
    ) -> Result<Self, WasmError> {
        let engine = engine();
        let module = Module::new(&engine, wasm).map_err(|e| WasmError::Compile {
            message: e.to_string(),
        })?;
        let linker = super::wasi::linker(&module)?;
        let state = HostState {
            plugin: plugin.to_owned(),
            limits: StoreLimitsBuilder::new()
                .memory_size(limits.max_memory)
                .memories(1)
                .instances(1)
                .trap_on_grow_failure(true)
                .build(),
            deadline: Some(deadline),
            epoch: Instant::now(),
            closed: CancellationToken::new(),
        };
        let mut store = Store::new(&engine, state);
        store.limiter(|s| &mut s.limits);
        let instantiate = |message: String| WasmError::Instantiate { message };
        let slice = limits.fuel_slice.max(1);
        store
            .set_fuel(slice.saturating_mul(START_SLICES))
            .map_err(|e| instantiate(e.to_string()))?;
        let instance = linker
            .instantiate_and_start(&mut store, &module)
            .map_err(|e| instantiate(e.to_string()))?;
        let missing = |name: &str| WasmError::MissingExport {
            name: name.to_owned(),
        };
        let memory = instance
            .get_memory(&store, abi::EXPORT_MEMORY)
            .ok_or_else(|| missing(abi::EXPORT_MEMORY))?;
        let malloc = instance
            .get_typed_func::<i32, i32>(&store, abi::EXPORT_MALLOC)
            .map_err(|_| missing(abi::EXPORT_MALLOC))?;
        let free = instance
            .get_typed_func::<i32, ()>(&store, abi::EXPORT_FREE)
            .map_err(|_| missing(abi::EXPORT_FREE))?;
        let version = instance
            .get_typed_func::<(), i64>(&store, abi::EXPORT_API_VERSION)
            .map_err(|_| missing(abi::EXPORT_API_VERSION))?;
        let mut methods = HashMap::new();
        for (method, export) in abi::METHOD_EXPORTS {
            let f = instance
                .get_typed_func::<(i32, i32), i64>(&store, export)
                .map_err(|_| missing(export))?;
            methods.insert(method, f);
        }
        let init = instance.get_typed_func::<(), ()>(&store, abi::EXPORT_INITIALIZE);
        let mut guest = Guest {
            store,
            memory,
            malloc,
            free,
            methods,
            slice,
            fuel_used: 0,
        };
        let failed = |e: CallError| instantiate(describe(&e));
        if let Ok(init) = init {
            match guest.run(&init, (), deadline, None) {
                Ok(()) => {}
                // An initializer that exits with status 0 is done (as
                // upstream's host accepts it).
                Err(CallError::Fatal(m)) if m == "guest exited with status 0" => {}
                Err(e) => return Err(failed(e)),
            }
        }
        let found = guest.run(&version, (), deadline, None).map_err(failed)?;
        if found != abi::PLUGIN_API_VERSION {
            return Err(WasmError::ApiVersion {
                found,
                expected: abi::PLUGIN_API_VERSION,
            });
        }
        Ok(guest)
    }

    /// Runs `f` in fuel slices until it returns, traps, or `deadline`
    /// passes (checked between slices), or `cancel` is cancelled.
    fn run<P: WasmParams, R: WasmResults>(
        &mut self,
        f: &TypedFunc<P, R>,
        params: P,
        deadline: Instant,
        cancel: Option<&CancellationToken>,
    ) -> Result<R, CallError> {
        self.store.data_mut().deadline = Some(deadline);
        // A trap after the plugin was closed (a cut `poll_oneoff` sleep)
        // is the closing, not the guest's fault.
        let fail = |e: &wasmi::Error| {
            if cancel.is_some_and(CancellationToken::is_cancelled) {
                CallError::Closed
            } else {
                engine_error(e)
            }
        };
        self.store.set_fuel(self.slice).map_err(|e| fail(&e))?;
        let mut given = self.slice;
        let mut call = f
            .call_resumable(&mut self.store, params)
            .map_err(|e| fail(&e))?;
        loop {
            match call {
                TypedResumableCall::Finished(r) => {
                    let left = self.store.get_fuel().unwrap_or(0);
                    self.fuel_used = self.fuel_used.saturating_add(given.saturating_sub(left));
                    return Ok(r);
                }
                TypedResumableCall::HostTrap(t) => return Err(fail(t.host_error())),
                TypedResumableCall::OutOfFuel(more) => {
                    if Instant::now() >= deadline {
                        return Err(CallError::Timeout);
                    }
                    if cancel.is_some_and(CancellationToken::is_cancelled) {
                        return Err(CallError::Closed);
                    }
                    let fuel = self.slice.max(more.required_fuel());
                    self.fuel_used = self.fuel_used.saturating_add(given);
                    given = fuel;
                    self.store.set_fuel(fuel).map_err(|e| fail(&e))?;
                    call = more.resume(&mut self.store).map_err(|e| fail(&e))?;
                }
            }
        }
    }

    /// Makes `closed` the token that ends this guest's calls (checked
    /// between fuel slices and during `poll_oneoff` sleeps).
    pub(crate) fn set_closed(&mut self, closed: CancellationToken) {
        self.store.data_mut().closed = closed;
    }

    /// One call of the guest's export for `method` with the encoded
    /// request `req`: the encoded response, or why not.
    pub(crate) fn call(
        &mut self,
        method: &str,
        req: &[u8],
        deadline: Instant,
        cancel: &CancellationToken,
    ) -> Result<Vec<u8>, CallError> {
        let f = *self.methods.get(method).ok_or(CallError::NoMethod)?;
        self.fuel_used = 0;
        let len = u32::try_from(req.len())
            .ok()
            .filter(|n| *n < abi::ERROR_FLAG)
            .ok_or(CallError::Abi(WasmError::AnswerTooLarge {
                len: req.len(),
                max: abi::ERROR_FLAG as usize,
            }))?;
        let ptr = if req.is_empty() {
            0
        } else {
            let malloc = self.malloc;
            let p = self.run(&malloc, len as i32, deadline, Some(cancel))?;
            self.memory
                .write(&mut self.store, p as u32 as usize, req)
                .map_err(|_| {
                    CallError::Abi(WasmError::OutOfBounds {
                        ptr: p as u32,
                        len,
                        memory: self.memory.data_size(&self.store),
                    })
                })?;
            p
        };
        let raw = self.run(&f, (ptr, len as i32), deadline, Some(cancel))?;
        let answer = match abi::read_answer(raw, self.memory.data(&self.store), MAX_ANSWER) {
            Ok(Answer::Message(b)) => Ok(b.to_vec()),
            Ok(Answer::Error(s)) => Err(CallError::Status(s)),
            Err(e) => return Err(CallError::Abi(e)),
        };
        // The answer, then the request, go back to the guest's allocator.
        let free = self.free;
        let packed = Packed::unpack(raw);
        if packed.ptr != 0 {
            self.run(&free, packed.ptr as i32, deadline, Some(cancel))?;
        }
        if ptr != 0 {
            self.run(&free, ptr, deadline, Some(cancel))?;
        }
        tracing::trace!(plugin = %self.store.data().plugin, method, fuel = self.fuel_used, "WebAssembly call done");
        answer
    }
}

/// `e` as text, for logs and load errors.
fn describe(e: &CallError) -> String {
    match e {
        CallError::Status(s) => format!("guest returned an error: {s}"),
        CallError::Timeout => "deadline passed".into(),
        CallError::Fatal(m) => m.clone(),
        CallError::Abi(e) => e.to_string(),
        CallError::Closed => "plugin closed".into(),
        CallError::NoMethod => "no export for the method".into(),
    }
}

/// The runtime's handle on one WebAssembly plugin: the guest behind a lock
/// (calls are serialized), closed with the plugin's token.
pub(crate) struct WasmConn {
    guest: Arc<tokio::sync::Mutex<Option<Guest>>>,
    closed: CancellationToken,
    name: String,
}

impl std::fmt::Debug for WasmConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmConn")
            .field("plugin", &self.name)
            .finish_non_exhaustive()
    }
}

impl WasmConn {
    pub(crate) fn new(name: String, mut guest: Guest, closed: CancellationToken) -> Self {
        guest.set_closed(closed.clone());
        Self {
            guest: Arc::new(tokio::sync::Mutex::new(Some(guest))),
            closed,
            name,
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// Closes the plugin; the instance is dropped now if no call runs, else
    /// when the running call ends (at its next fuel slice).
    pub(crate) fn close(&self) {
        self.closed.cancel();
        if let Ok(mut g) = self.guest.try_lock() {
            g.take();
        }
    }

    pub(crate) async fn closed(&self) {
        self.closed.cancelled().await;
    }

    /// Calls `method` with `payload` within `timeout` (waiting for an
    /// earlier call of this plugin counts toward it).
    ///
    /// The call runs on a blocking thread whose handle this future awaits;
    /// if the future is dropped, the call still ends by itself at its
    /// deadline.
    pub(crate) async fn call(
        &self,
        method: &str,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, PluginFailure> {
        let deadline = Instant::now() + timeout;
        let Ok(mut guard) = tokio::time::timeout(timeout, self.guest.clone().lock_owned()).await
        else {
            return Err(PluginFailure::Timeout { timeout });
        };
        if self.closed.is_cancelled() {
            guard.take();
            return Err(closed_failure());
        }
        let closed = self.closed.clone();
        let name = self.name.clone();
        let m = method.to_owned();
        let task = tokio::task::spawn_blocking(move || {
            let res = match guard.as_mut() {
                Some(g) => g.call(&m, &payload, deadline, &closed),
                None => Err(CallError::Closed),
            };
            if let Err(e) = &res
                && !e.leaves_guest_usable()
            {
                if !matches!(e, CallError::Closed) {
                    tracing::warn!(plugin = %name, event = %m, error = %describe(e), "WebAssembly NRI plugin failed; closing it");
                }
                guard.take();
                closed.cancel();
            }
            res
        });
        let res = task.await.map_err(|e| PluginFailure::Disconnected {
            reason: format!("WebAssembly call did not complete: {e}"),
        })?;
        res.map(Bytes::from)
            .map_err(|e| failure(e, method, timeout))
    }
}

fn closed_failure() -> PluginFailure {
    PluginFailure::Disconnected {
        reason: "WebAssembly plugin closed".into(),
    }
}

fn failure(e: CallError, method: &str, timeout: Duration) -> PluginFailure {
    match e {
        CallError::Status(message) => PluginFailure::Status {
            code: i32::from(nri_ttrpc::Code::Unknown),
            message,
        },
        CallError::Timeout => PluginFailure::Timeout { timeout },
        CallError::Fatal(reason) => PluginFailure::Disconnected { reason },
        CallError::Abi(e) => PluginFailure::InvalidResponse {
            message: format!("{method} answer refused: {e}"),
        },
        CallError::Closed => closed_failure(),
        CallError::NoMethod => PluginFailure::Unimplemented {
            method: method.to_owned(),
            message: "the WebAssembly plugin does not export it".into(),
        },
    }
}

#[cfg(all(
    test,
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::wasm::WasmLimits;

    /// The `nanosleep` and `clock_nanosleep` syscall numbers (what
    /// `std::thread::sleep` ends in).
    #[cfg(target_arch = "x86_64")]
    const SLEEPS: [&str; 2] = ["35", "230"];
    #[cfg(target_arch = "aarch64")]
    const SLEEPS: [&str; 2] = ["101", "115"];

    /// A guest whose CreateContainer sleeps one minute in WASI
    /// `poll_oneoff` (one relative clock subscription at 1024: tag 0,
    /// timeout in ns at offset 24).
    fn sleeper() -> Vec<u8> {
        let mut methods = String::new();
        for (_, export) in crate::wasm::abi::METHOD_EXPORTS {
            let body = if export == "plugin_create_container" {
                "(drop (call $poll (i32.const 1024) (i32.const 2048) (i32.const 1) (i32.const 2096))) i64.const 0"
            } else {
                "i64.const 0"
            };
            methods.push_str(&format!(
                "(func (export \"{export}\") (param i32 i32) (result i64) {body})\n"
            ));
        }
        let timeout: String = 60_000_000_000u64
            .to_le_bytes()
            .iter()
            .map(|b| format!("\\{b:02x}"))
            .collect();
        wat::parse_str(format!(
            r#"(module
              (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
              (memory (export "memory") 1)
              (data (i32.const 1048) "{timeout}")
              (func (export "malloc") (param i32) (result i32) (i32.const 4096))
              (func (export "free") (param i32))
              (func (export "plugin_api_version") (result i64) (i64.const 1))
              {methods})"#
        ))
        .unwrap()
    }

    /// Whether a thread of this process is in a sleep syscall (the
    /// runtime's and the test's threads park in futex or epoll waits; a
    /// guest's `poll_oneoff` sleeps).
    fn a_thread_sleeps() -> bool {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .flatten()
            .any(|t| {
                let sc = std::fs::read_to_string(t.path().join("syscall")).unwrap_or_default();
                SLEEPS.contains(&sc.split_whitespace().next().unwrap_or_default())
            })
    }

    /// Closing a plugin whose guest sleeps in `poll_oneoff` (its call has
    /// a minute left) ends the call within the sleep's closing check, not
    /// at the call's deadline, and frees the thread it ran on.
    #[tokio::test(flavor = "multi_thread")]
    async fn closing_ends_a_call_sleeping_in_the_guest() {
        let deadline = Instant::now() + Duration::from_secs(10);
        let guest =
            Guest::load("10-sleeper", &sleeper(), &WasmLimits::default(), deadline).unwrap();
        let conn = Arc::new(WasmConn::new(
            "10-sleeper".into(),
            guest,
            CancellationToken::new(),
        ));
        let call = tokio::spawn({
            let conn = conn.clone();
            async move {
                conn.call(
                    nri_api::method::CREATE_CONTAINER,
                    Bytes::new(),
                    Duration::from_secs(60),
                )
                .await
            }
        });
        // Close once the guest sleeps in poll_oneoff.
        let end = Instant::now() + Duration::from_secs(20);
        while !a_thread_sleeps() {
            assert!(Instant::now() < end, "the guest never slept");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let closing = Instant::now();
        conn.close();
        let res = tokio::time::timeout(Duration::from_secs(5), call)
            .await
            .expect("the call ended soon after the close")
            .unwrap();
        assert!(
            matches!(res, Err(PluginFailure::Disconnected { .. })),
            "{res:?}"
        );
        assert!(closing.elapsed() < Duration::from_secs(5));
        assert!(!a_thread_sleeps(), "the guest's thread still sleeps");
    }
}
