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
    Engine, Func, Instance, Memory, Module, ResumableCall, ResumableCallHostTrap,
    ResumableCallOutOfFuel, Store, StoreLimitsBuilder, Val, WasmParams, WasmResults,
};

use super::abi::{self, Answer, Packed};
use super::wasi::{self, HostState, SleepEnd};
use super::{WasmError, WasmLimits};
use crate::failure::PluginFailure;

/// Largest answer a guest may return: the protocol's message cap, as for
/// socket plugins.
const MAX_ANSWER: usize = nri_ttrpc::codec::MAX_MESSAGE_LEN;
/// Fuel the module's own start function (if any) may use, in slices.
const START_SLICES: u64 = 100;
/// Fuel a call runs on the caller's task before the rest of it moves to a
/// blocking thread (when the guest's slice is smaller, one slice). At
/// wasmi's pace of a few hundred instructions per microsecond this is
/// well under 100 µs of guest work: the executor is never held longer,
/// and a guest that answers within it (a no-op, a filter that looks at a
/// label) costs no thread hop at all.
const INLINE_FUEL: u64 = 20_000;

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
    malloc: Func,
    free: Func,
    methods: HashMap<&'static str, Func>,
    slice: u64,
    /// Fuel a call may use on the async executor before the rest of it
    /// moves to a blocking thread: [`INLINE_FUEL`], at most one slice.
    inline_fuel: u64,
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

/// The export `name` of `instance`, checked to be a function `P -> R`.
fn export<P: WasmParams, R: WasmResults>(
    instance: &Instance,
    store: &Store<HostState>,
    name: &str,
) -> Result<Func, WasmError> {
    instance
        .get_typed_func::<P, R>(store, name)
        .map(|f| *f.func())
        .map_err(|_| WasmError::MissingExport {
            name: name.to_owned(),
        })
}

/// One run of a guest function: not started yet, or paused.
enum Next {
    /// Call the function with the first `n` of `params`.
    Start(Func, [Val; 2], usize),
    /// Resume after the fuel ran out.
    Fuel(ResumableCallOutOfFuel),
    /// Run this `poll_oneoff` off the executor, then resume.
    Poll(ResumableCallHostTrap, wasi::PollArgs),
}

impl Next {
    fn start(f: Func, params: &[i32]) -> Self {
        let mut p = [Val::I32(0), Val::I32(0)];
        for (slot, v) in p.iter_mut().zip(params) {
            *slot = Val::I32(*v);
        }
        Next::Start(f, p, params.len().min(2))
    }
}

/// Where a call is in the ABI's sequence.
enum Phase {
    /// `malloc` for the request runs.
    Malloc,
    /// The method runs; `req` is the request's address (0: none).
    Method { req: i32 },
    /// `free` of the answer runs.
    FreeAnswer {
        req: i32,
        answer: Result<Vec<u8>, CallError>,
    },
    /// `free` of the request runs.
    FreeRequest { answer: Result<Vec<u8>, CallError> },
}

/// One call of a guest method in progress: its phase, the guest function
/// run that is paused or next, and that run's results.
pub(crate) struct Call {
    method: Func,
    name: &'static str,
    req: Bytes,
    len: i32,
    deadline: Instant,
    phase: Phase,
    next: Option<Next>,
    out: [Val; 1],
    outs: usize,
    /// Fuel (about one unit per instruction) the guest used in this call.
    fuel_used: u64,
}

/// How far one [`Guest::advance`] may run a call.
struct Budget<'a> {
    /// On the async executor: the fuel left before the call must move
    /// off it. `None`: on a blocking thread, in slices up to the deadline.
    inline_left: Option<u64>,
    deadline: Instant,
    cancel: Option<&'a CancellationToken>,
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
            inline: false,
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
        let malloc = export::<i32, i32>(&instance, &store, abi::EXPORT_MALLOC)?;
        let free = export::<i32, ()>(&instance, &store, abi::EXPORT_FREE)?;
        let version = export::<(), i64>(&instance, &store, abi::EXPORT_API_VERSION)?;
        let mut methods = HashMap::new();
        for (method, name) in abi::METHOD_EXPORTS {
            methods.insert(method, export::<(i32, i32), i64>(&instance, &store, name)?);
        }
        let init = instance.get_typed_func::<(), ()>(&store, abi::EXPORT_INITIALIZE);
        let mut guest = Guest {
            store,
            memory,
            malloc,
            free,
            methods,
            slice,
            inline_fuel: INLINE_FUEL.min(slice),
        };
        let failed = |e: CallError| instantiate(describe(&e));
        if let Ok(init) = init {
            match guest.run_blocking(*init.func(), &mut [], deadline) {
                Ok(()) => {}
                // An initializer that exits with status 0 is done (as
                // upstream's host accepts it).
                Err(CallError::Fatal(m)) if m == "guest exited with status 0" => {}
                Err(e) => return Err(failed(e)),
            }
        }
        let mut out = [Val::I64(0)];
        guest
            .run_blocking(version, &mut out, deadline)
            .map_err(failed)?;
        let found = out[0].i64().unwrap_or_default();
        if found != abi::PLUGIN_API_VERSION {
            return Err(WasmError::ApiVersion {
                found,
                expected: abi::PLUGIN_API_VERSION,
            });
        }
        Ok(guest)
    }

    /// Runs `f` (no parameters) to its end on this thread, in slices up
    /// to `deadline`.
    fn run_blocking(
        &mut self,
        f: Func,
        out: &mut [Val],
        deadline: Instant,
    ) -> Result<(), CallError> {
        let mut budget = Budget {
            inline_left: None,
            deadline,
            cancel: None,
        };
        let mut used = 0;
        match self.step(Next::start(f, &[]), out, &mut budget, &mut used)? {
            None => Ok(()),
            // Not reached: only a call on the executor pauses.
            Some(_) => Err(CallError::Fatal("guest call paused".into())),
        }
    }

    /// Runs `next` until the function returns (`None`, results in `out`),
    /// traps, or `budget` says stop: on the executor when its fuel is used
    /// or the guest polls (the paused run is returned), on a blocking
    /// thread when the deadline passes or the plugin closes (checked
    /// between slices).
    fn step(
        &mut self,
        next: Next,
        out: &mut [Val],
        budget: &mut Budget<'_>,
        used: &mut u64,
    ) -> Result<Option<Next>, CallError> {
        let cancel = budget.cancel;
        // A `poll_oneoff` sleep cut short ends the call with its reason:
        // the deadline (a timeout) or the closing, not the guest's fault.
        let fail = |e: &wasmi::Error| match e.downcast_ref::<SleepEnd>() {
            Some(SleepEnd::Deadline) => CallError::Timeout,
            Some(SleepEnd::Closed) => CallError::Closed,
            Some(SleepEnd::Slept) | None => engine_error(e),
        };
        let fuel = match budget.inline_left {
            Some(0) => return Ok(Some(next)),
            Some(left) => left,
            None => self.slice,
        };
        let state = self.store.data_mut();
        state.deadline = Some(budget.deadline);
        state.inline = budget.inline_left.is_some();
        let mut given = match &next {
            Next::Fuel(c) => fuel.max(c.required_fuel()),
            _ => fuel,
        };
        self.store.set_fuel(given).map_err(|e| fail(&e))?;
        let mut call = match next {
            Next::Start(f, params, n) => f.call_resumable(&mut self.store, &params[..n], out),
            Next::Fuel(c) => c.resume(&mut self.store, out),
            Next::Poll(c, args) => {
                let (mem, state) = self.memory.data_and_store_mut(&mut self.store);
                let errno = wasi::poll(mem, state, args).map_err(|e| fail(&e))?;
                c.resume(&mut self.store, &[Val::I32(errno)], out)
            }
        }
        .map_err(|e| fail(&e))?;
        loop {
            let left = self.store.get_fuel().unwrap_or(0);
            *used = used.saturating_add(given.saturating_sub(left));
            if let Some(inline) = budget.inline_left.as_mut() {
                *inline = left;
            }
            match call {
                ResumableCall::Finished => return Ok(None),
                ResumableCall::HostTrap(t) => {
                    return match t.host_error().downcast_ref::<wasi::PollArgs>() {
                        Some(args) if budget.inline_left.is_some() => {
                            let args = *args;
                            Ok(Some(Next::Poll(t, args)))
                        }
                        _ => Err(fail(t.host_error())),
                    };
                }
                ResumableCall::OutOfFuel(more) => {
                    if budget.inline_left.is_some() {
                        return Ok(Some(Next::Fuel(more)));
                    }
                    if Instant::now() >= budget.deadline {
                        return Err(CallError::Timeout);
                    }
                    if cancel.is_some_and(CancellationToken::is_cancelled) {
                        return Err(CallError::Closed);
                    }
                    given = self.slice.max(more.required_fuel());
                    self.store.set_fuel(given).map_err(|e| fail(&e))?;
                    call = more.resume(&mut self.store, out).map_err(|e| fail(&e))?;
                }
            }
        }
    }

    /// Makes `closed` the token that ends this guest's calls (checked
    /// between fuel slices and during `poll_oneoff` sleeps).
    pub(crate) fn set_closed(&mut self, closed: CancellationToken) {
        self.store.data_mut().closed = closed;
    }

    /// A call of the guest's export for `method` with the encoded request
    /// `req`, to be run with [`Guest::advance`].
    pub(crate) fn begin(
        &self,
        method: &str,
        req: Bytes,
        deadline: Instant,
    ) -> Result<Call, CallError> {
        let (&name, &f) = self
            .methods
            .get_key_value(method)
            .ok_or(CallError::NoMethod)?;
        let len = u32::try_from(req.len())
            .ok()
            .filter(|n| *n < abi::ERROR_FLAG)
            .ok_or(CallError::Abi(WasmError::AnswerTooLarge {
                len: req.len(),
                max: abi::ERROR_FLAG as usize,
            }))? as i32;
        let (phase, next) = if req.is_empty() {
            (Phase::Method { req: 0 }, Next::start(f, &[0, 0]))
        } else {
            (Phase::Malloc, Next::start(self.malloc, &[len]))
        };
        Ok(Call {
            method: f,
            name,
            req,
            len,
            deadline,
            phase,
            next: Some(next),
            out: [Val::I32(0)],
            outs: 1,
            fuel_used: 0,
        })
    }

    /// Runs `call` on: to its end (the encoded response, or why not), or,
    /// with `inline`, until it has used this guest's inline fuel or must
    /// sleep (`Ok(None)`: go on with `inline` false on a blocking thread).
    pub(crate) fn advance(
        &mut self,
        call: &mut Call,
        inline: bool,
        cancel: &CancellationToken,
    ) -> Result<Option<Vec<u8>>, CallError> {
        let mut budget = Budget {
            inline_left: inline.then_some(self.inline_fuel),
            deadline: call.deadline,
            cancel: Some(cancel),
        };
        loop {
            if let Some(next) = call.next.take() {
                let out = &mut call.out[..call.outs];
                if let Some(paused) = self.step(next, out, &mut budget, &mut call.fuel_used)? {
                    call.next = Some(paused);
                    return Ok(None);
                }
            }
            if let Some(done) = self.after_run(call)? {
                tracing::trace!(plugin = %self.store.data().plugin, method = call.name, fuel = call.fuel_used, "WebAssembly call done");
                return done.map(Some);
            }
        }
    }

    /// Moves `call` to its next phase once a guest function returned: the
    /// call's outcome when it is over.
    #[allow(clippy::type_complexity)]
    fn after_run(
        &mut self,
        call: &mut Call,
    ) -> Result<Option<Result<Vec<u8>, CallError>>, CallError> {
        let free = |ptr: i32| (Next::start(self.free, &[ptr]), 0);
        let phase = std::mem::replace(&mut call.phase, Phase::Malloc);
        let (phase, (next, outs)) = match phase {
            Phase::Malloc => {
                let p = call.out[0].i32().unwrap_or_default();
                self.memory
                    .write(&mut self.store, p as u32 as usize, &call.req)
                    .map_err(|_| {
                        CallError::Abi(WasmError::OutOfBounds {
                            ptr: p as u32,
                            len: call.len as u32,
                            memory: self.memory.data_size(&self.store),
                        })
                    })?;
                (
                    Phase::Method { req: p },
                    (Next::start(call.method, &[p, call.len]), 1),
                )
            }
            Phase::Method { req } => {
                let raw = call.out[0].i64().unwrap_or_default();
                let answer = match abi::read_answer(raw, self.memory.data(&self.store), MAX_ANSWER)
                {
                    Ok(Answer::Message(b)) => Ok(b.to_vec()),
                    Ok(Answer::Error(s)) => Err(CallError::Status(s)),
                    Err(e) => return Err(CallError::Abi(e)),
                };
                // The answer, then the request, go back to the guest's
                // allocator.
                let packed = Packed::unpack(raw);
                if packed.ptr != 0 {
                    (Phase::FreeAnswer { req, answer }, free(packed.ptr as i32))
                } else if req != 0 {
                    (Phase::FreeRequest { answer }, free(req))
                } else {
                    return Ok(Some(answer));
                }
            }
            Phase::FreeAnswer { req, answer } if req != 0 => {
                (Phase::FreeRequest { answer }, free(req))
            }
            Phase::FreeAnswer { answer, .. } | Phase::FreeRequest { answer } => {
                return Ok(Some(answer));
            }
        };
        call.phase = phase;
        call.next = Some(next);
        call.outs = outs;
        Ok(None)
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
    pub(crate) async fn call(
        &self,
        method: &str,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, PluginFailure> {
        let deadline = Instant::now() + timeout;
        let lock = tokio::time::timeout(timeout, self.guest.clone().lock_owned()).await;
        let Ok(guard) = lock else {
            return Err(PluginFailure::Timeout { timeout });
        };
        self.run(guard, method, payload, deadline, timeout).await
    }

    /// Sends `Shutdown` within `timeout`. It does not wait for another call
    /// of this plugin: the runtime is stopping, so a guest busy in a call
    /// is closed instead, which ends that call within a fuel slice or a
    /// sleep's closing check.
    pub(crate) async fn shutdown(&self, timeout: Duration) -> Result<Bytes, PluginFailure> {
        let deadline = Instant::now() + timeout;
        let Ok(guard) = self.guest.clone().try_lock_owned() else {
            tracing::debug!(plugin = %self.name, "WebAssembly plugin busy at Shutdown; closing it");
            self.close();
            return Err(closed_failure());
        };
        let method = nri_api::method::SHUTDOWN;
        self.run(guard, method, Bytes::new(), deadline, timeout)
            .await
    }

    /// Runs one call on the guest `guard` holds, until `deadline`.
    ///
    /// The call starts on this task and, if the guest answers within its
    /// inline fuel, ends there; otherwise the rest runs on a blocking
    /// thread whose handle this future awaits. If the future is dropped
    /// then, the call still ends by itself at its deadline.
    async fn run(
        &self,
        mut guard: tokio::sync::OwnedMutexGuard<Option<Guest>>,
        method: &str,
        payload: Bytes,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<Bytes, PluginFailure> {
        if self.closed.is_cancelled() {
            guard.take();
            return Err(closed_failure());
        }
        let mut rest = None;
        let first = match guard.as_mut() {
            Some(g) => g.begin(method, payload, deadline).and_then(|mut call| {
                let done = g.advance(&mut call, true, &self.closed)?;
                if done.is_none() {
                    rest = Some(call);
                }
                Ok(done)
            }),
            None => Err(CallError::Closed),
        };
        let res = match (first, rest) {
            (Ok(Some(answer)), _) => Ok(answer),
            (Ok(None), Some(mut call)) => {
                let closed = self.closed.clone();
                let name = self.name.clone();
                let m = method.to_owned();
                let task = tokio::task::spawn_blocking(move || {
                    let res = match guard.as_mut() {
                        Some(g) => g.advance(&mut call, false, &closed).and_then(|done| {
                            // Off the executor a call runs to its end.
                            done.ok_or_else(|| CallError::Fatal("guest call paused".into()))
                        }),
                        None => Err(CallError::Closed),
                    };
                    settle(&mut guard, res, &name, &m, &closed)
                });
                return task
                    .await
                    .map_err(|e| PluginFailure::Disconnected {
                        reason: format!("WebAssembly call did not complete: {e}"),
                    })?
                    .map(Bytes::from)
                    .map_err(|e| failure(e, method, timeout));
            }
            (Ok(None), None) => Err(CallError::Fatal("guest call paused".into())),
            (Err(e), _) => Err(e),
        };
        settle(&mut guard, res, &self.name, method, &self.closed)
            .map(Bytes::from)
            .map_err(|e| failure(e, method, timeout))
    }
}

/// The outcome `res` of a finished call, after closing the plugin if its
/// guest is no longer usable.
fn settle(
    guest: &mut Option<Guest>,
    res: Result<Vec<u8>, CallError>,
    name: &str,
    method: &str,
    closed: &CancellationToken,
) -> Result<Vec<u8>, CallError> {
    if let Err(e) = &res
        && !e.leaves_guest_usable()
    {
        if !matches!(e, CallError::Closed) {
            tracing::warn!(plugin = %name, event = %method, error = %describe(e), "WebAssembly NRI plugin failed; closing it");
        }
        guest.take();
        closed.cancel();
    }
    res
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

/// The WAT guests of the integration tests.
#[cfg(all(
    test,
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
#[path = "../../tests/wasm_util/mod.rs"]
mod test_guests;

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
    use test_guests::{Wat, Work, a_thread_sleeps};

    /// A guest whose CreateContainer sleeps one minute in WASI
    /// `poll_oneoff`.
    fn sleeper() -> Vec<u8> {
        Wat::new(nri_api::EventMask::EMPTY)
            .work(
                "plugin_create_container",
                Work::Sleep(Duration::from_secs(60)),
            )
            .wasm()
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
