//! One instance of a WebAssembly plugin ([`Guest`]) and the calls into
//! it: the ABI's sequence (`malloc`, the method, `free`), run in slices of
//! fuel. After each slice the call's deadline and the plugin's closing are
//! checked (wasmi has no epoch interruption); the host functions check
//! them too. A call's first slice runs on the caller's task, the rest on
//! a blocking thread (see `conn.rs`).

use std::collections::HashMap;
use std::time::Instant;

use bytes::Bytes;
use tokio_util::sync::CancellationToken;
use wasmi::{
    Func, Instance, Memory, ResumableCall, ResumableCallHostTrap, ResumableCallOutOfFuel, Store,
    Val, WasmParams, WasmResults,
};

use super::WasmError;
use super::abi::{self, Answer, Packed};
use super::pace::Pace;
use super::wasi::{self, HostState, SleepEnd};

/// Largest answer a guest may return: the protocol's message cap, as for
/// socket plugins.
const MAX_ANSWER: usize = nri_ttrpc::codec::MAX_MESSAGE_LEN;

/// How a guest call went wrong.
#[derive(Debug)]
pub(crate) enum CallError {
    /// The guest's handler returned this error text.
    Status(String),
    /// The call's deadline passed.
    Timeout,
    /// The caller stopped waiting at its own deadline, sooner than the
    /// call's (the event's deadline cut the plugin's timeout short); the
    /// call goes on without it (see `conn.rs`).
    CallerLeft,
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
    pub(crate) fn leaves_guest_usable(&self) -> bool {
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
    pub(super) store: Store<HostState>,
    pub(super) memory: Memory,
    pub(super) malloc: Func,
    pub(super) free: Func,
    pub(super) methods: HashMap<&'static str, Func>,
    /// The fuel of the next slice off the executor, kept to a time.
    pub(super) pace: Pace,
    /// Fuel a call may use on the async executor before the rest of it
    /// moves to a blocking thread: `image::INLINE_FUEL`, at most one
    /// slice.
    pub(super) inline_fuel: u64,
}

impl std::fmt::Debug for Guest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guest")
            .field("plugin", &self.store.data().plugin)
            .finish_non_exhaustive()
    }
}

/// The export `name` of `instance`, checked to be a function `P -> R`.
pub(super) fn export<P: WasmParams, R: WasmResults>(
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
    /// Run this host function off the executor, then resume.
    Host(ResumableCallHostTrap, wasi::Deferred),
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
    /// Runs `f` (no parameters) to its end on this thread, in slices up
    /// to `deadline` or until `closed` is cancelled (checked between
    /// slices, and by host functions and sleeps through the token the
    /// instance was made with).
    pub(super) fn run_blocking(
        &mut self,
        f: Func,
        out: &mut [Val],
        deadline: Instant,
        closed: &CancellationToken,
    ) -> Result<(), CallError> {
        let mut budget = Budget {
            inline_left: None,
            deadline,
            cancel: Some(closed),
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
            None => self.pace.slice(),
        };
        let state = self.store.data_mut();
        state.deadline = Some(budget.deadline);
        state.inline = budget.inline_left.is_some();
        let mut given = match &next {
            Next::Fuel(c) => fuel.max(c.required_fuel()),
            _ => fuel,
        };
        self.store.set_fuel(given).map_err(|e| fail(&e))?;
        let mut began = Instant::now();
        let mut call = match next {
            Next::Start(f, params, n) => f.call_resumable(&mut self.store, &params[..n], out),
            Next::Fuel(c) => c.resume(&mut self.store, out),
            Next::Host(c, deferred) => {
                let (mem, state) = self.memory.data_and_store_mut(&mut self.store);
                let errno = wasi::run_deferred(mem, state, deferred).map_err(|e| fail(&e))?;
                began = Instant::now();
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
                    return match t.host_error().downcast_ref::<wasi::Deferred>() {
                        Some(deferred) if budget.inline_left.is_some() => {
                            let deferred = *deferred;
                            Ok(Some(Next::Host(t, deferred)))
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
                    // A `poll_oneoff` sleep in the slice is not its work.
                    let slept = self.store.data().slept.take();
                    let took = began.elapsed().saturating_sub(slept);
                    self.pace.after(given.saturating_sub(left), took);
                    given = self.pace.slice().max(more.required_fuel());
                    self.store.set_fuel(given).map_err(|e| fail(&e))?;
                    began = Instant::now();
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
pub(crate) fn describe(e: &CallError) -> String {
    match e {
        CallError::Status(s) => format!("guest returned an error: {s}"),
        CallError::Timeout => "deadline passed".into(),
        CallError::CallerLeft => "the caller stopped waiting".into(),
        CallError::Fatal(m) => m.clone(),
        CallError::Abi(e) => e.to_string(),
        CallError::Closed => "plugin closed".into(),
        CallError::NoMethod => "no export for the method".into(),
    }
}
