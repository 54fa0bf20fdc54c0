//! The host functions a guest may import: `env.log` and a small WASI
//! preview 1 layer, sandboxed. No files, no arguments, no environment, no
//! sockets: standard output and error go to the debug log, standard input
//! is empty, clocks and randomness work, `poll_oneoff` sleeps on clock
//! subscriptions only (a sleep that reaches the request's deadline times
//! the request out), and every other
//! WASI function the guest imports answers `ENOSYS`. An import from any
//! other module refuses the guest.

use std::time::{Duration, Instant, SystemTime};

use wasmi::{Caller, Extern, FuncType, Linker, Memory, Module, Val, ValType};

use super::WasmError;

/// Import module of WASI preview 1.
pub(crate) const WASI_MODULE: &str = "wasi_snapshot_preview1";

/// WASI errno values (`wasi_snapshot_preview1` `errno`).
const ESUCCESS: i32 = 0;
const EBADF: i32 = 8;
const EFAULT: i32 = 21;
const EINVAL: i32 = 28;
const ENOSYS: i32 = 52;

/// WASI clock ids.
const CLOCK_REALTIME: i32 = 0;
const CLOCK_MONOTONIC: i32 = 1;
/// `poll_oneoff` subscription and event sizes and tags.
const SUBSCRIPTION_SIZE: usize = 48;
const EVENT_SIZE: usize = 32;
const EVENTTYPE_CLOCK: u8 = 0;
const SUBCLOCKFLAGS_ABSTIME: u16 = 1;
/// `fd_fdstat_get`: size of `fdstat`, and `filetype::character_device`.
const FDSTAT_SIZE: usize = 24;
const FILETYPE_CHARACTER_DEVICE: u8 = 2;

/// Most bytes one `fd_write` or log message is logged with; the rest is
/// neither read nor logged.
pub(crate) const MAX_LOGGED: usize = 16 * 1024;
/// Most bytes one `random_get` fills.
const MAX_RANDOM: usize = 1024 * 1024;
/// Most bytes a `random_get` fills on the async executor: a larger one
/// pauses the call there and runs on its blocking thread (see
/// [`Deferred`]).
const INLINE_RANDOM: usize = 4096;
/// Fuel one host function call costs, before what it charges by the
/// byte: about what the call itself costs in time, in units of the
/// guest's instructions (measured in `docs/runtime/wasm.md`).
pub(crate) const HOST_CALL_FUEL: u64 = 200;
/// Bytes a host function copies per unit of fuel (as the engine charges
/// its bulk instructions, [`super::image::BYTES_PER_FUEL`]).
pub(crate) const HOST_BYTES_PER_FUEL: u64 = super::image::BYTES_PER_FUEL as u64;
/// Random bytes per unit of fuel (the kernel's generator is slower than a
/// copy: measured, about 2 ns a byte).
const RANDOM_BYTES_PER_FUEL: u64 = 1;
/// Most subscriptions one `poll_oneoff` takes.
const MAX_SUBSCRIPTIONS: u32 = 1024;
/// Fuel one `poll_oneoff` subscription costs (reading it, writing its
/// event): measured, about what 128 ordinary instructions take.
const SUBSCRIPTION_FUEL: u64 = 128;

/// What the host functions of one guest know: its name (for logs), its
/// resource limits, and the deadline of the call it is in.
pub(crate) struct HostState {
    pub(crate) plugin: String,
    pub(crate) limits: super::image::GuestLimits,
    /// Deadline of the running call (a `poll_oneoff` sleep that reaches it
    /// ends the call as timed out).
    pub(crate) deadline: Option<Instant>,
    /// Origin of the monotonic clock.
    pub(crate) epoch: Instant,
    /// The plugin's closing: a `poll_oneoff` sleep ends early on it.
    pub(crate) closed: tokio_util::sync::CancellationToken,
    /// Whether the guest runs on the async executor (a call's first
    /// slice): `poll_oneoff` and a large `random_get` then pause the call
    /// instead of running there.
    pub(crate) inline: bool,
    /// The plugin's log budget (shared by its instances).
    pub(crate) log_budget: std::sync::Arc<std::sync::Mutex<super::log::LogBudget>>,
    /// Time slept in `poll_oneoff` since the host last took it (a slice's
    /// pace counts the guest's work, not its sleeps).
    pub(crate) slept: std::cell::Cell<Duration>,
}

/// The WASI functions implemented here; every other import of
/// [`WASI_MODULE`] is answered with `ENOSYS`.
const IMPLEMENTED: &[&str] = &[
    "args_get",
    "args_sizes_get",
    "environ_get",
    "environ_sizes_get",
    "clock_time_get",
    "fd_write",
    "fd_read",
    "fd_fdstat_get",
    "fd_prestat_get",
    "random_get",
    "sched_yield",
    "proc_exit",
    "poll_oneoff",
];

/// A linker with `env.log`, the WASI layer, and an `ENOSYS` stub for each
/// other WASI function `module` imports.
///
/// # Errors
///
/// [`WasmError::MissingImport`] for an import this host does not provide
/// (another module, a WASI import that is not a function answering an
/// errno, or a non-function import).
pub(crate) fn linker(module: &Module) -> Result<Linker<HostState>, WasmError> {
    let mut l = Linker::new(module.engine());
    define(&mut l).map_err(|e| WasmError::Instantiate {
        message: e.to_string(),
    })?;
    // A module may import one function twice (Go's do): one stub serves.
    let mut stubbed = std::collections::HashSet::new();
    for import in module.imports() {
        let (m, n) = (import.module(), import.name());
        let missing = || WasmError::MissingImport {
            module: m.to_owned(),
            name: n.to_owned(),
        };
        if (m, n) == super::abi::IMPORT_LOG {
            continue;
        }
        if m != WASI_MODULE {
            return Err(missing());
        }
        if IMPLEMENTED.contains(&n) || !stubbed.insert(n.to_owned()) {
            continue;
        }
        let wasmi::ExternType::Func(ty) = import.ty() else {
            return Err(missing());
        };
        if ty.results() != [ValType::I32] {
            return Err(missing());
        }
        let ty = FuncType::new(ty.params().iter().copied(), [ValType::I32]);
        let name = n.to_owned();
        l.func_new(WASI_MODULE, n, ty, move |mut caller, _, out| {
            enter(&mut caller, 0, HOST_BYTES_PER_FUEL)?;
            // A line of the plugin's log budget: a guest calling it in a
            // loop does not flood the debug log.
            if tracing::enabled!(tracing::Level::DEBUG)
                && super::log::admit_and_charge(&mut caller, name.len())
            {
                tracing::debug!(plugin = %caller.data().plugin, function = %name, "WASI call not supported (ENOSYS)");
            }
            if let Some(o) = out.first_mut() {
                *o = Val::I32(ENOSYS);
            }
            Ok(())
        })
        .map_err(|_| missing())?;
    }
    Ok(l)
}

fn memory(caller: &Caller<'_, HostState>) -> Option<Memory> {
    caller
        .get_export(super::abi::EXPORT_MEMORY)
        .and_then(Extern::into_memory)
}

fn write(caller: &mut Caller<'_, HostState>, ptr: i32, bytes: &[u8]) -> bool {
    let Some(mem) = memory(caller) else {
        return false;
    };
    mem.write(caller, ptr as u32 as usize, bytes).is_ok()
}

fn read_u32(mem: &[u8], ptr: usize) -> Option<u32> {
    let b = mem.get(ptr..ptr.checked_add(4)?)?;
    Some(u32::from_le_bytes(b.try_into().ok()?))
}

fn errno(ok: bool) -> i32 {
    if ok { ESUCCESS } else { EFAULT }
}

/// The start of every host function: ends the running call if its
/// deadline has passed or its plugin was closed (a trap carrying a
/// [`SleepEnd`], which the host classifies as the call's timeout or
/// closing), then charges [`HOST_CALL_FUEL`] and `bytes` (at
/// `bytes_per_fuel`) to the call. A charge over the fuel left empties
/// it: the guest then pauses at its next instruction, where the deadline
/// is checked again.
pub(crate) fn enter(
    caller: &mut Caller<'_, HostState>,
    bytes: usize,
    bytes_per_fuel: u64,
) -> Result<(), wasmi::Error> {
    let state = caller.data();
    if state.closed.is_cancelled() {
        return Err(wasmi::Error::host(SleepEnd::Closed));
    }
    if state.deadline.is_some_and(|d| Instant::now() >= d) {
        return Err(wasmi::Error::host(SleepEnd::Deadline));
    }
    charge(
        caller,
        HOST_CALL_FUEL.saturating_add(bytes as u64 / bytes_per_fuel.max(1)),
    );
    Ok(())
}

/// Takes `fuel` from what the running call has left (all of it, if
/// less: the guest then pauses at its next instruction).
pub(crate) fn charge(caller: &mut Caller<'_, HostState>, fuel: u64) {
    if let Ok(left) = caller.get_fuel() {
        let _ = caller.set_fuel(left.saturating_sub(fuel));
    }
}

type HostResult = Result<i32, wasmi::Error>;

fn define(l: &mut Linker<HostState>) -> Result<(), wasmi::errors::LinkerError> {
    l.func_wrap("env", "log", super::log::log)?;
    let zero_pair = |mut c: Caller<'_, HostState>, a: i32, b: i32| -> HostResult {
        enter(&mut c, 8, HOST_BYTES_PER_FUEL)?;
        Ok(errno(
            write(&mut c, a, &0u32.to_le_bytes()) && write(&mut c, b, &0u32.to_le_bytes()),
        ))
    };
    l.func_wrap(WASI_MODULE, "args_sizes_get", zero_pair)?;
    l.func_wrap(WASI_MODULE, "environ_sizes_get", zero_pair)?;
    let nothing = |mut c: Caller<'_, HostState>, _: i32, _: i32| -> HostResult {
        enter(&mut c, 0, HOST_BYTES_PER_FUEL)?;
        Ok(ESUCCESS)
    };
    l.func_wrap(WASI_MODULE, "args_get", nothing)?;
    l.func_wrap(WASI_MODULE, "environ_get", nothing)?;
    l.func_wrap(WASI_MODULE, "clock_time_get", clock_time_get)?;
    l.func_wrap(WASI_MODULE, "fd_write", fd_write)?;
    l.func_wrap(WASI_MODULE, "fd_read", fd_read)?;
    l.func_wrap(WASI_MODULE, "fd_fdstat_get", fd_fdstat_get)?;
    l.func_wrap(
        WASI_MODULE,
        "fd_prestat_get",
        // No preopened directories: EBADF ends the guest's search.
        |mut c: Caller<'_, HostState>, _: i32, _: i32| -> HostResult {
            enter(&mut c, 0, HOST_BYTES_PER_FUEL)?;
            Ok(EBADF)
        },
    )?;
    l.func_wrap(WASI_MODULE, "random_get", random_get)?;
    l.func_wrap(
        WASI_MODULE,
        "sched_yield",
        |mut c: Caller<'_, HostState>| -> HostResult {
            enter(&mut c, 0, HOST_BYTES_PER_FUEL)?;
            Ok(ESUCCESS)
        },
    )?;
    l.func_wrap(
        WASI_MODULE,
        "proc_exit",
        |_: Caller<'_, HostState>, code: i32| -> Result<(), wasmi::Error> {
            Err(wasmi::Error::i32_exit(code))
        },
    )?;
    l.func_wrap(WASI_MODULE, "poll_oneoff", poll_oneoff)?;
    Ok(())
}

fn clock_time_get(
    mut caller: Caller<'_, HostState>,
    id: i32,
    _precision: i64,
    out: i32,
) -> HostResult {
    enter(&mut caller, 8, HOST_BYTES_PER_FUEL)?;
    let nanos = match id {
        CLOCK_REALTIME => SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default(),
        CLOCK_MONOTONIC => caller.data().epoch.elapsed(),
        _ => return Ok(EINVAL),
    };
    let nanos = u64::try_from(nanos.as_nanos()).unwrap_or(u64::MAX);
    Ok(errno(write(&mut caller, out, &nanos.to_le_bytes())))
}

/// Most iovec entries one `fd_write` reads.
const MAX_IOVECS: usize = 1024;

/// `fd_write`: standard output and error go to the debug log, at most
/// [`MAX_LOGGED`] bytes of one write (the rest is not read, and reported
/// written); any other descriptor is `EBADF`.
fn fd_write(
    mut caller: Caller<'_, HostState>,
    fd: i32,
    iovs: i32,
    n: i32,
    written: i32,
) -> HostResult {
    let entries = (n as u32 as usize).min(MAX_IOVECS);
    enter(&mut caller, entries * 8, HOST_BYTES_PER_FUEL)?;
    let stream = match fd {
        1 => "stdout",
        2 => "stderr",
        _ => return Ok(EBADF),
    };
    let Some(mem) = memory(&caller) else {
        return Ok(EFAULT);
    };
    let Some((bytes, total)) = gather(mem.data(&caller), iovs, entries) else {
        return Ok(EFAULT);
    };
    enter(&mut caller, bytes.len(), HOST_BYTES_PER_FUEL)?;
    let text = String::from_utf8_lossy(&bytes);
    let text = super::log::cut(text.trim_end_matches('\n'));
    if tracing::enabled!(target: "nri::plugin", tracing::Level::DEBUG)
        && super::log::admit_and_charge(&mut caller, text.len())
    {
        tracing::debug!(target: "nri::plugin", plugin = %caller.data().plugin, stream, "{text}");
    }
    let total = u32::try_from(total).unwrap_or(u32::MAX);
    Ok(errno(write(&mut caller, written, &total.to_le_bytes())))
}

/// The first [`MAX_LOGGED`] bytes of the `n` iovecs at `iovs` (each entry
/// `ptr u32, len u32`), and the sum of their lengths.
fn gather(mem: &[u8], iovs: i32, n: usize) -> Option<(Vec<u8>, u64)> {
    let mut out = Vec::new();
    let mut total = 0u64;
    let base = iovs as u32 as usize;
    for i in 0..n {
        let entry = base.checked_add(i.checked_mul(8)?)?;
        let ptr = read_u32(mem, entry)?;
        let len = read_u32(mem, entry.checked_add(4)?)? as usize;
        total = total.saturating_add(len as u64);
        let take = len.min(MAX_LOGGED.saturating_sub(out.len()));
        if take > 0 {
            out.extend_from_slice(slice(mem, ptr as i32, take)?);
        }
    }
    Some((out, total))
}

/// `fd_read`: standard input is empty; any other descriptor is `EBADF`.
fn fd_read(
    mut caller: Caller<'_, HostState>,
    fd: i32,
    _iovs: i32,
    _n: i32,
    nread: i32,
) -> HostResult {
    enter(&mut caller, 4, HOST_BYTES_PER_FUEL)?;
    if fd != 0 {
        return Ok(EBADF);
    }
    Ok(errno(write(&mut caller, nread, &0u32.to_le_bytes())))
}

/// `fd_fdstat_get`: the three standard descriptors are blocking character
/// devices; any other is `EBADF`.
fn fd_fdstat_get(mut caller: Caller<'_, HostState>, fd: i32, out: i32) -> HostResult {
    enter(&mut caller, FDSTAT_SIZE, HOST_BYTES_PER_FUEL)?;
    if !(0..=2).contains(&fd) {
        return Ok(EBADF);
    }
    let mut stat = [0u8; FDSTAT_SIZE];
    stat[0] = FILETYPE_CHARACTER_DEVICE;
    Ok(errno(write(&mut caller, out, &stat)))
}

/// `random_get`: up to [`MAX_RANDOM`] bytes from the kernel's generator,
/// charged by the byte; a large one asked on the async executor pauses
/// the call and runs on its blocking thread.
fn random_get(mut caller: Caller<'_, HostState>, buf: i32, len: i32) -> HostResult {
    let n = len as u32 as usize;
    if n > MAX_RANDOM {
        enter(&mut caller, 0, RANDOM_BYTES_PER_FUEL)?;
        return Ok(EINVAL);
    }
    if caller.data().inline && n > INLINE_RANDOM {
        return Err(wasmi::Error::host(Deferred::Random { buf, len }));
    }
    enter(&mut caller, n, RANDOM_BYTES_PER_FUEL)?;
    let Some(mem) = memory(&caller) else {
        return Ok(EFAULT);
    };
    Ok(fill_random(mem.data_mut(&mut caller), buf, n))
}

/// Fills `mem[buf..buf + n]` from the kernel's generator: the errno.
fn fill_random(mem: &mut [u8], buf: i32, n: usize) -> i32 {
    let start = buf as u32 as usize;
    let Some(dst) = start.checked_add(n).and_then(|end| mem.get_mut(start..end)) else {
        return EFAULT;
    };
    let mut done = 0;
    while done < dst.len() {
        let rest = &mut dst[done..];
        // SAFETY: getrandom(2) writes at most `rest.len()` bytes into the
        // buffer it is given, which is `rest`, valid and exclusively
        // borrowed for the call.
        #[allow(unsafe_code)]
        let got = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        match usize::try_from(got) {
            Ok(k) if k > 0 => done += k,
            _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            _ => return ENOSYS,
        }
    }
    ESUCCESS
}

/// The arguments of a host function called while the guest runs on the
/// async executor (its first slice) that must not run there: the call is
/// paused without effect (a host trap carrying this), and
/// [`run_deferred`] runs the function on the blocking thread the call
/// moves to, before the guest resumes with its result.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Deferred {
    /// `poll_oneoff` (it may sleep).
    Poll(PollArgs),
    /// A `random_get` of more than [`INLINE_RANDOM`] bytes.
    Random {
        /// Where.
        buf: i32,
        /// How many bytes.
        len: i32,
    },
}

impl std::fmt::Display for Deferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a host function that must run off the async executor")
    }
}

impl wasmi::errors::HostError for Deferred {}

/// Runs a [`Deferred`] host function on the guest's memory `mem`: its
/// errno, or the trap that ends the call.
pub(crate) fn run_deferred(
    mem: &mut [u8],
    state: &HostState,
    d: Deferred,
) -> Result<i32, wasmi::Error> {
    match d {
        Deferred::Poll(args) => poll(mem, state, args),
        Deferred::Random { buf, len } => Ok(fill_random(mem, buf, len as u32 as usize)),
    }
}

/// The arguments of a `poll_oneoff` call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PollArgs {
    subs: i32,
    events: i32,
    n: i32,
    nevents: i32,
}

/// `poll_oneoff`: clock subscriptions sleep (a sleep that reaches the
/// running call's deadline ends the call as timed out); a descriptor
/// subscription is answered at once with `EBADF`.
/// A guest running on the async executor is paused instead (see
/// [`Deferred`]).
fn poll_oneoff(
    mut caller: Caller<'_, HostState>,
    subs: i32,
    events: i32,
    n: i32,
    nevents: i32,
) -> Result<i32, wasmi::Error> {
    let args = PollArgs {
        subs,
        events,
        n,
        nevents,
    };
    if caller.data().inline {
        return Err(wasmi::Error::host(Deferred::Poll(args)));
    }
    let subscriptions = (n as u32).min(MAX_SUBSCRIPTIONS) as usize;
    enter(&mut caller, subscriptions * SUBSCRIPTION_FUEL as usize, 1)?;
    let Some(mem) = memory(&caller) else {
        return Ok(EFAULT);
    };
    let (data, state) = mem.data_and_store_mut(&mut caller);
    poll(data, state, args)
}

/// Runs one `poll_oneoff` on the guest's memory `mem`: the errno it
/// answers, or the trap (a [`SleepEnd`]) that ends a call whose sleep was
/// cut by its deadline or its plugin's closing.
pub(crate) fn poll(mem: &mut [u8], state: &HostState, a: PollArgs) -> Result<i32, wasmi::Error> {
    let n = a.n as u32;
    if n == 0 || n > MAX_SUBSCRIPTIONS {
        return Ok(EINVAL);
    }
    let Some(raw) = slice(mem, a.subs, n as usize * SUBSCRIPTION_SIZE) else {
        return Ok(EFAULT);
    };
    let now_mono = state.epoch.elapsed();
    let mut out = Vec::new();
    let mut clocks = Vec::new();
    for sub in raw.chunks_exact(SUBSCRIPTION_SIZE) {
        let userdata = &sub[0..8];
        let tag = sub[8];
        if tag != EVENTTYPE_CLOCK {
            out.push(event(userdata, EBADF as u16, tag));
            continue;
        }
        let timeout = u64::from_le_bytes(sub[24..32].try_into().unwrap_or_default());
        let flags = u16::from_le_bytes(sub[40..42].try_into().unwrap_or_default());
        let mut wait = Duration::from_nanos(timeout);
        if flags & SUBCLOCKFLAGS_ABSTIME != 0 {
            wait = wait.saturating_sub(now_mono);
        }
        clocks.push((wait, userdata.to_vec()));
    }
    if out.is_empty() {
        let Some(shortest) = clocks.iter().map(|(w, _)| *w).min() else {
            return Ok(EINVAL);
        };
        let asleep = Instant::now();
        let end = sleep(shortest, state.deadline, &state.closed);
        state.slept.set(state.slept.get() + asleep.elapsed());
        match end {
            SleepEnd::Slept => {}
            // The call ends here: it timed out, or its plugin was closed.
            cut => return Err(wasmi::Error::host(cut)),
        }
        for (w, userdata) in &clocks {
            if *w <= shortest {
                out.push(event(userdata, 0, EVENTTYPE_CLOCK));
            }
        }
    }
    let count = u32::try_from(out.len()).unwrap_or(0);
    Ok(errno(
        put(mem, a.events, &out.concat()) && put(mem, a.nevents, &count.to_le_bytes()),
    ))
}

/// `len` bytes of `mem` at `ptr`, if all inside it.
fn slice(mem: &[u8], ptr: i32, len: usize) -> Option<&[u8]> {
    let start = ptr as u32 as usize;
    mem.get(start..start.checked_add(len)?)
}

/// Writes `bytes` into `mem` at `ptr`; false if they do not fit inside.
fn put(mem: &mut [u8], ptr: i32, bytes: &[u8]) -> bool {
    let start = ptr as u32 as usize;
    let Some(end) = start.checked_add(bytes.len()) else {
        return false;
    };
    match mem.get_mut(start..end) {
        Some(dst) => {
            dst.copy_from_slice(bytes);
            true
        }
        None => false,
    }
}

/// Longest one `poll_oneoff` sleep goes without looking whether the
/// plugin was closed.
const SLEEP_CHECK: Duration = Duration::from_millis(10);

/// How a `poll_oneoff` sleep ended. A sleep cut short ends the guest's
/// call with a trap carrying the reason (this value, as a host error):
/// the host classifies it as the call's timeout or its plugin's closing,
/// never as the guest's fault, and the guest never sees the cut sleep
/// return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SleepEnd {
    /// The guest slept as long as it asked.
    Slept,
    /// The running call's deadline came first: the call has timed out
    /// (the answer could only be late).
    Deadline,
    /// The plugin was closed during the sleep.
    Closed,
}

impl std::fmt::Display for SleepEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SleepEnd::Slept => "poll_oneoff slept",
            SleepEnd::Deadline => "deadline passed during poll_oneoff",
            SleepEnd::Closed => "plugin closed during poll_oneoff",
        })
    }
}

impl wasmi::errors::HostError for SleepEnd {}

/// Sleeps for `wanted`, or until `deadline` if that comes first (or at the
/// same time), or until `closed` is cancelled (seen within
/// [`SLEEP_CHECK`]); says which ended it.
fn sleep(
    wanted: Duration,
    deadline: Option<Instant>,
    closed: &tokio_util::sync::CancellationToken,
) -> SleepEnd {
    let start = Instant::now();
    let (length, end) = match deadline.map(|d| d.saturating_duration_since(start)) {
        Some(left) if left <= wanted => (left, SleepEnd::Deadline),
        _ => (wanted, SleepEnd::Slept),
    };
    loop {
        if closed.is_cancelled() {
            return SleepEnd::Closed;
        }
        let left = length.saturating_sub(start.elapsed());
        if left.is_zero() {
            return end;
        }
        std::thread::sleep(left.min(SLEEP_CHECK));
    }
}

fn event(userdata: &[u8], error: u16, tag: u8) -> Vec<u8> {
    let mut e = vec![0u8; EVENT_SIZE];
    e[0..8].copy_from_slice(userdata);
    e[8..10].copy_from_slice(&error.to_le_bytes());
    e[10] = tag;
    e
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use tokio_util::sync::CancellationToken;

    use super::{SleepEnd, sleep};

    const HOUR: Duration = Duration::from_secs(3600);

    /// None of these sleeps (a thread of this process in a sleep would
    /// confuse the host's test that watches for the guest's sleep); the
    /// sleeps themselves are tested through guests in `tests/`.
    #[test]
    fn a_sleep_says_how_it_ended() {
        let open = CancellationToken::new();
        let far = Some(Instant::now() + HOUR);
        assert_eq!(sleep(Duration::ZERO, far, &open), SleepEnd::Slept);
        assert_eq!(sleep(Duration::ZERO, None, &open), SleepEnd::Slept);
        // A deadline already passed, or reached with the sleep, cuts it.
        let now = Instant::now();
        assert_eq!(sleep(Duration::ZERO, Some(now), &open), SleepEnd::Deadline);
        assert_eq!(sleep(HOUR, Some(now), &open), SleepEnd::Deadline);
        let closed = CancellationToken::new();
        closed.cancel();
        assert_eq!(sleep(HOUR, far, &closed), SleepEnd::Closed);
    }
}
