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
        self.store
            .set_fuel(self.slice)
            .map_err(|e| engine_error(&e))?;
        let mut given = self.slice;
        let mut call = f
            .call_resumable(&mut self.store, params)
            .map_err(|e| engine_error(&e))?;
        loop {
            match call {
                TypedResumableCall::Finished(r) => {
                    let left = self.store.get_fuel().unwrap_or(0);
                    self.fuel_used = self.fuel_used.saturating_add(given.saturating_sub(left));
                    return Ok(r);
                }
                TypedResumableCall::HostTrap(t) => return Err(engine_error(t.host_error())),
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
                    self.store.set_fuel(fuel).map_err(|e| engine_error(&e))?;
                    call = more.resume(&mut self.store).map_err(|e| engine_error(&e))?;
                }
            }
        }
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
    pub(crate) fn new(name: String, guest: Guest, closed: CancellationToken) -> Self {
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
