//! The host functions a guest may import: `env.log` and a small WASI
//! preview 1 layer, sandboxed. No files, no arguments, no environment, no
//! sockets: standard output and error go to the debug log, standard input
//! is empty, clocks and randomness work, `poll_oneoff` sleeps on clock
//! subscriptions only (a sleep that reaches the request's deadline times
//! the request out), and every other
//! WASI function the guest imports answers `ENOSYS`. An import from any
//! other module refuses the guest.

use std::io::Read;
use std::time::{Duration, Instant, SystemTime};

use nri_api::api::LogRequest;
use nri_api::api::log_request::Level;
use prost::Message;
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
/// cut.
const MAX_LOGGED: usize = 16 * 1024;
/// Most bytes one `random_get` fills.
const MAX_RANDOM: usize = 1024 * 1024;
/// Most subscriptions one `poll_oneoff` takes.
const MAX_SUBSCRIPTIONS: u32 = 1024;

/// What the host functions of one guest know: its name (for logs), its
/// resource limits, and the deadline of the call it is in.
pub(crate) struct HostState {
    pub(crate) plugin: String,
    pub(crate) limits: wasmi::StoreLimits,
    /// Deadline of the running call (a `poll_oneoff` sleep that reaches it
    /// ends the call as timed out).
    pub(crate) deadline: Option<Instant>,
    /// Origin of the monotonic clock.
    pub(crate) epoch: Instant,
    /// The plugin's closing: a `poll_oneoff` sleep ends early on it.
    pub(crate) closed: tokio_util::sync::CancellationToken,
    /// Whether the guest runs on the async executor (a call's first
    /// slice): `poll_oneoff` then pauses the call instead of sleeping.
    pub(crate) inline: bool,
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
        l.func_new(WASI_MODULE, n, ty, move |caller, _, out| {
            tracing::debug!(plugin = %caller.data().plugin, function = %name, "WASI call not supported (ENOSYS)");
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

fn read(caller: &Caller<'_, HostState>, ptr: i32, len: usize) -> Option<Vec<u8>> {
    let mem = memory(caller)?;
    let start = ptr as u32 as usize;
    mem.data(caller)
        .get(start..start.checked_add(len)?)
        .map(<[u8]>::to_vec)
}

fn write(caller: &mut Caller<'_, HostState>, ptr: i32, bytes: &[u8]) -> bool {
    let Some(mem) = memory(caller) else {
        return false;
    };
    mem.write(caller, ptr as u32 as usize, bytes).is_ok()
}

fn read_u32(caller: &Caller<'_, HostState>, ptr: usize) -> Option<u32> {
    let b = read(caller, ptr as i32, 4)?;
    Some(u32::from_le_bytes(b.try_into().ok()?))
}

fn errno(ok: bool) -> i32 {
    if ok { ESUCCESS } else { EFAULT }
}

fn define(l: &mut Linker<HostState>) -> Result<(), wasmi::errors::LinkerError> {
    l.func_wrap("env", "log", log)?;
    let zero_pair = |mut c: Caller<'_, HostState>, a: i32, b: i32| -> i32 {
        errno(write(&mut c, a, &0u32.to_le_bytes()) && write(&mut c, b, &0u32.to_le_bytes()))
    };
    l.func_wrap(WASI_MODULE, "args_sizes_get", zero_pair)?;
    l.func_wrap(WASI_MODULE, "environ_sizes_get", zero_pair)?;
    let nothing = |_: Caller<'_, HostState>, _: i32, _: i32| -> i32 { ESUCCESS };
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
        |_: Caller<'_, HostState>, _: i32, _: i32| -> i32 { EBADF },
    )?;
    l.func_wrap(WASI_MODULE, "random_get", random_get)?;
    l.func_wrap(
        WASI_MODULE,
        "sched_yield",
        |_: Caller<'_, HostState>| -> i32 { ESUCCESS },
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

/// `env.log(ptr, len) -> i64`: an encoded `LogRequest`, logged on target
/// `nri::plugin` at its level. Answers an empty `Empty` (zero).
fn log(caller: Caller<'_, HostState>, ptr: i32, len: i32) -> i64 {
    let plugin = &caller.data().plugin;
    let len = (len as u32 as usize).min(super::abi::ERROR_FLAG as usize);
    let Some(req) = read(&caller, ptr, len).and_then(|b| LogRequest::decode(&*b).ok()) else {
        tracing::debug!(target: "nri::plugin", plugin = %plugin, "WebAssembly plugin sent an unreadable log request");
        return 0;
    };
    let msg = cut(&req.msg);
    match Level::try_from(req.level).unwrap_or(Level::Unspecified) {
        Level::Error => tracing::error!(target: "nri::plugin", plugin = %plugin, "{msg}"),
        Level::Warn => tracing::warn!(target: "nri::plugin", plugin = %plugin, "{msg}"),
        Level::Info => tracing::info!(target: "nri::plugin", plugin = %plugin, "{msg}"),
        _ => tracing::debug!(target: "nri::plugin", plugin = %plugin, "{msg}"),
    }
    0
}

fn cut(s: &str) -> &str {
    if s.len() <= MAX_LOGGED {
        return s;
    }
    let mut end = MAX_LOGGED;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn clock_time_get(mut caller: Caller<'_, HostState>, id: i32, _precision: i64, out: i32) -> i32 {
    let nanos = match id {
        CLOCK_REALTIME => SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default(),
        CLOCK_MONOTONIC => caller.data().epoch.elapsed(),
        _ => return EINVAL,
    };
    let nanos = u64::try_from(nanos.as_nanos()).unwrap_or(u64::MAX);
    errno(write(&mut caller, out, &nanos.to_le_bytes()))
}

/// `fd_write`: standard output and error go to the debug log; any other
/// descriptor is `EBADF`.
fn fd_write(mut caller: Caller<'_, HostState>, fd: i32, iovs: i32, n: i32, written: i32) -> i32 {
    let stream = match fd {
        1 => "stdout",
        2 => "stderr",
        _ => return EBADF,
    };
    let Some(bytes) = gather(&caller, iovs, n) else {
        return EFAULT;
    };
    let text = String::from_utf8_lossy(&bytes);
    let text = cut(text.trim_end_matches('\n'));
    tracing::debug!(target: "nri::plugin", plugin = %caller.data().plugin, stream, "{text}");
    let total = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    errno(write(&mut caller, written, &total.to_le_bytes()))
}

/// The bytes of an iovec array (each entry `ptr u32, len u32`).
fn gather(caller: &Caller<'_, HostState>, iovs: i32, n: i32) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let base = iovs as u32 as usize;
    for i in 0..(n as u32 as usize).min(1024) {
        let entry = base.checked_add(i.checked_mul(8)?)?;
        let ptr = read_u32(caller, entry)?;
        let len = read_u32(caller, entry.checked_add(4)?)? as usize;
        let take = len.min(MAX_LOGGED.saturating_sub(out.len()));
        out.extend(read(caller, ptr as i32, take)?);
    }
    Some(out)
}

/// `fd_read`: standard input is empty; any other descriptor is `EBADF`.
fn fd_read(mut caller: Caller<'_, HostState>, fd: i32, _iovs: i32, _n: i32, nread: i32) -> i32 {
    if fd != 0 {
        return EBADF;
    }
    errno(write(&mut caller, nread, &0u32.to_le_bytes()))
}

/// `fd_fdstat_get`: the three standard descriptors are blocking character
/// devices; any other is `EBADF`.
fn fd_fdstat_get(mut caller: Caller<'_, HostState>, fd: i32, out: i32) -> i32 {
    if !(0..=2).contains(&fd) {
        return EBADF;
    }
    let mut stat = [0u8; FDSTAT_SIZE];
    stat[0] = FILETYPE_CHARACTER_DEVICE;
    errno(write(&mut caller, out, &stat))
}

fn random_get(mut caller: Caller<'_, HostState>, buf: i32, len: i32) -> i32 {
    let len = len as u32 as usize;
    if len > MAX_RANDOM {
        return EINVAL;
    }
    let mut bytes = vec![0u8; len];
    let filled = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if filled.is_err() {
        return ENOSYS;
    }
    errno(write(&mut caller, buf, &bytes))
}

/// The arguments of a `poll_oneoff` call made while the guest runs on the
/// async executor (its first slice): the call is paused there, without
/// effect, and [`poll`] runs it off the executor before the guest resumes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PollArgs {
    subs: i32,
    events: i32,
    n: i32,
    nevents: i32,
}

impl std::fmt::Display for PollArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("poll_oneoff must run off the async executor")
    }
}

impl wasmi::errors::HostError for PollArgs {}

/// `poll_oneoff`: clock subscriptions sleep (a sleep that reaches the
/// running call's deadline ends the call as timed out); a descriptor
/// subscription is answered at once with `EBADF`.
/// A guest running on the async executor is paused instead (see
/// [`PollArgs`]).
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
        return Err(wasmi::Error::host(args));
    }
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
        match sleep(shortest, state.deadline, &state.closed) {
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
