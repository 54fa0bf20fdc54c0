//! `env.log`: a guest's log line, read out of its memory without reading
//! more than the line's cap. The request is an encoded `LogRequest`
//! (message, level); its fields are walked in place, in the guest's
//! memory, and only the message's first [`MAX_LOGGED`] bytes are copied:
//! a guest that passes a length of gigabytes costs what a capped line
//! costs.
//!
//! And the plugin's log budget ([`LogBudget`]), which both `env.log` and
//! `fd_write` lines go through: a guest that logs without end writes at
//! most 1 MiB at once and 64 KiB a second after that
//! (by default; [`WasmLimits::log_burst`](super::WasmLimits::log_burst)),
//! across its instances; the lines over it are dropped and counted.

use std::time::Instant;

use nri_api::api::log_request::Level;
use wasmi::Caller;

use super::wasi::{HOST_BYTES_PER_FUEL, HostState, MAX_LOGGED, enter};

/// What one line costs the budget beyond its message: about what the
/// log's own fields (time, level, target, plugin) add, so that a guest
/// writing empty lines is bounded too.
pub(crate) const LOG_LINE_COST: u64 = 128;

/// One plugin's log budget (a token bucket of bytes), shared by its
/// instances: re-instantiation does not refill it.
#[derive(Debug)]
pub(crate) struct LogBudget {
    burst: u64,
    rate: u64,
    left: u64,
    at: Instant,
    dropped_lines: u64,
    dropped_bytes: u64,
}

/// What [`LogBudget::admit`] decided about one line.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Write it; `dropped` lines (and bytes) were dropped since the last
    /// line written.
    Write { dropped: Option<(u64, u64)> },
    /// Drop it; `first`: the first line dropped since one was written.
    Drop { first: bool },
}

impl LogBudget {
    /// A full budget of `burst` bytes, refilled at `rate` bytes a second.
    pub(crate) fn with_rate(burst: u64, rate: u64, now: Instant) -> Self {
        LogBudget {
            burst,
            rate,
            left: burst,
            at: now,
            dropped_lines: 0,
            dropped_bytes: 0,
        }
    }

    /// Whether a line of `bytes` may be written at `now`, and takes its
    /// cost (`bytes` plus [`LOG_LINE_COST`]) if so.
    pub(crate) fn admit(&mut self, bytes: usize, now: Instant) -> Admit {
        let elapsed = now.saturating_duration_since(self.at).as_nanos();
        let gained = elapsed.saturating_mul(u128::from(self.rate)) / 1_000_000_000;
        if gained > 0 {
            let gained = u64::try_from(gained).unwrap_or(u64::MAX);
            self.left = self.left.saturating_add(gained).min(self.burst);
            self.at = now;
        }
        let cost = (bytes as u64).saturating_add(LOG_LINE_COST);
        if cost <= self.left {
            self.left -= cost;
            let dropped =
                (self.dropped_lines > 0).then_some((self.dropped_lines, self.dropped_bytes));
            (self.dropped_lines, self.dropped_bytes) = (0, 0);
            Admit::Write { dropped }
        } else {
            self.dropped_lines += 1;
            self.dropped_bytes = self.dropped_bytes.saturating_add(bytes as u64);
            Admit::Drop {
                first: self.dropped_lines == 1,
            }
        }
    }
}

/// Fuel a line written to the log costs per byte (its message's length
/// plus [`LOG_LINE_COST`]), beyond what reading it cost: formatting and
/// writing a line is far slower than copying it (measured: a 16 KiB line
/// at about 240 µs in a debug build, 15 ns a byte).
pub(crate) const LOG_FUEL_PER_BYTE: u64 = 16;

/// Whether a line of `bytes` of the guest `caller` may be written, under
/// its plugin's [`LogBudget`]: if so, charges the call for writing it
/// ([`LOG_FUEL_PER_BYTE`]).
pub(crate) fn admit_and_charge(caller: &mut Caller<'_, HostState>, bytes: usize) -> bool {
    if !admit(caller.data(), bytes) {
        return false;
    }
    let cost = (bytes as u64).saturating_add(LOG_LINE_COST);
    super::wasi::charge(caller, cost.saturating_mul(LOG_FUEL_PER_BYTE));
    true
}

/// Whether a line of `bytes` of the guest `state` may be written, under
/// its plugin's [`LogBudget`]; logs (once per run of dropped lines) that
/// lines are dropped, and how many were once one is written again.
fn admit(state: &HostState, bytes: usize) -> bool {
    let (admit, burst, rate) = {
        let mut budget = crate::lock(&state.log_budget);
        let admit = budget.admit(bytes, Instant::now());
        (admit, budget.burst, budget.rate)
    };
    match admit {
        Admit::Write { dropped: None } => true,
        Admit::Write {
            dropped: Some((lines, bytes)),
        } => {
            tracing::warn!(target: "nri::plugin", plugin = %state.plugin, lines, bytes, "WebAssembly plugin's log lines were dropped: over its log budget");
            true
        }
        Admit::Drop { first } => {
            if first {
                tracing::warn!(target: "nri::plugin", plugin = %state.plugin, burst, per_second = rate, "WebAssembly plugin is over its log budget: dropping its log lines");
            }
            false
        }
    }
}

/// Most fields of one `LogRequest` walked (it has two).
const MAX_FIELDS: usize = 16;

/// `env.log(ptr, len) -> i64`: an encoded `LogRequest`, logged on target
/// `nri::plugin` at its level, its message cut at [`MAX_LOGGED`] bytes.
/// Answers an empty `Empty` (zero).
pub(crate) fn log(
    mut caller: Caller<'_, HostState>,
    ptr: i32,
    len: i32,
) -> Result<i64, wasmi::Error> {
    enter(&mut caller, 0, HOST_BYTES_PER_FUEL)?;
    let Some(mem) = caller
        .get_export(super::abi::EXPORT_MEMORY)
        .and_then(wasmi::Extern::into_memory)
    else {
        return Ok(0);
    };
    let parsed = {
        let data = mem.data(&caller);
        let start = ptr as u32 as usize;
        let request = start
            .checked_add(len as u32 as usize)
            .and_then(|end| data.get(start..end));
        request.and_then(parse).map(|(level, msg)| {
            let text = String::from_utf8_lossy(msg);
            (level, cut(&text).to_owned())
        })
    };
    let plugin = caller.data().plugin.clone();
    let Some((level, msg)) = parsed else {
        tracing::debug!(target: "nri::plugin", plugin = %plugin, "WebAssembly plugin sent an unreadable log request");
        return Ok(0);
    };
    enter(&mut caller, msg.len(), HOST_BYTES_PER_FUEL)?;
    let level = Level::try_from(level).unwrap_or(Level::Unspecified);
    let enabled = match level {
        Level::Error => tracing::enabled!(target: "nri::plugin", tracing::Level::ERROR),
        Level::Warn => tracing::enabled!(target: "nri::plugin", tracing::Level::WARN),
        Level::Info => tracing::enabled!(target: "nri::plugin", tracing::Level::INFO),
        _ => tracing::enabled!(target: "nri::plugin", tracing::Level::DEBUG),
    };
    // A line the log leaves out costs no budget.
    if !enabled || !admit_and_charge(&mut caller, msg.len()) {
        return Ok(0);
    }
    match level {
        Level::Error => tracing::error!(target: "nri::plugin", plugin = %plugin, "{msg}"),
        Level::Warn => tracing::warn!(target: "nri::plugin", plugin = %plugin, "{msg}"),
        Level::Info => tracing::info!(target: "nri::plugin", plugin = %plugin, "{msg}"),
        _ => tracing::debug!(target: "nri::plugin", plugin = %plugin, "{msg}"),
    }
    Ok(0)
}

/// `s` cut at [`MAX_LOGGED`] bytes, on a character boundary.
pub(crate) fn cut(s: &str) -> &str {
    if s.len() <= MAX_LOGGED {
        return s;
    }
    let mut end = MAX_LOGGED;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A varint at the start of `b`: its value and length.
fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, byte) in b.iter().take(10).enumerate() {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// The level and the first [`MAX_LOGGED`] bytes of the message of the
/// encoded `LogRequest` `req` (the last of each field wins, as in any
/// protobuf decoder), or `None` if it is not one. Reads the fields' keys
/// and lengths and the message's first bytes; skips the rest.
fn parse(req: &[u8]) -> Option<(i32, &[u8])> {
    let (mut level, mut msg): (i32, &[u8]) = (0, &[]);
    let mut at = 0;
    for _ in 0..MAX_FIELDS {
        if at == req.len() {
            return Some((level, msg));
        }
        let (key, n) = varint(req.get(at..)?)?;
        at += n;
        match (key >> 3, key & 7) {
            (_, 0) => {
                let (v, n) = varint(req.get(at..)?)?;
                if key >> 3 == 2 {
                    level = v as i32;
                }
                at += n;
            }
            (_, 1) => at = at.checked_add(8)?,
            (_, 5) => at = at.checked_add(4)?,
            (field, 2) => {
                let (l, n) = varint(req.get(at..)?)?;
                at += n;
                let end = at.checked_add(usize::try_from(l).ok()?)?;
                let body = req.get(at..end)?;
                if field == 1 {
                    msg = &body[..body.len().min(MAX_LOGGED)];
                }
                at = end;
            }
            _ => return None,
        }
        if at > req.len() {
            return None;
        }
    }
    (at == req.len()).then_some((level, msg))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use nri_api::api::LogRequest;
    use prost::Message;

    use super::*;
    use crate::wasm::{DEFAULT_WASM_LOG_BURST as LOG_BURST, DEFAULT_WASM_LOG_RATE as LOG_RATE};

    #[test]
    fn a_log_request_is_read_in_place_and_cut() {
        let req = |msg: &str, level: Level| {
            LogRequest {
                msg: msg.into(),
                level: level as i32,
            }
            .encode_to_vec()
        };
        let r = req("hello", Level::Warn);
        assert_eq!(parse(&r), Some((Level::Warn as i32, &b"hello"[..])));
        assert_eq!(parse(&[]), Some((0, &b""[..])));
        let long = "x".repeat(3 * MAX_LOGGED);
        let r = req(&long, Level::Info);
        assert_eq!(parse(&r).unwrap().1.len(), MAX_LOGGED);
        // Cut short, or a length past the end: not a request.
        assert_eq!(parse(&r[..r.len() - 1]), None);
        assert_eq!(parse(&[0x0a, 0xff, 0x01]), None);
        // Too many fields.
        assert_eq!(parse(&[0x10, 0x01].repeat(MAX_FIELDS + 1)), None);
        assert_eq!(cut(&"é".repeat(MAX_LOGGED)).len(), MAX_LOGGED);
    }

    #[test]
    fn the_log_budget_holds_a_burst_then_refills_at_its_rate() {
        let t0 = Instant::now();
        let mut b = LogBudget::with_rate(LOG_BURST, LOG_RATE, t0);
        let line = 16 * 1024;
        let cost = line as u64 + LOG_LINE_COST;
        let fit = LOG_BURST / cost;
        for _ in 0..fit {
            assert_eq!(b.admit(line, t0), Admit::Write { dropped: None });
        }
        assert_eq!(b.admit(line, t0), Admit::Drop { first: true });
        // What is left (under a line) is not a line's worth.
        assert_eq!(
            b.admit(line, t0 + Duration::from_micros(1)),
            Admit::Drop { first: false }
        );
        // Empty lines cost too.
        let mut c = LogBudget::with_rate(LOG_BURST, LOG_RATE, t0);
        let empties = (0..).take_while(|_| c.admit(0, t0) != Admit::Drop { first: true });
        assert_eq!(empties.count() as u64, LOG_BURST / LOG_LINE_COST);
        // A second later: LOG_RATE more bytes, and the drops are told.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(
            b.admit(line, t1),
            Admit::Write {
                dropped: Some((2, 2 * line as u64))
            }
        );
        let mut written = cost;
        while let Admit::Write { .. } = b.admit(line, t1) {
            written += cost;
        }
        let left_after_burst = LOG_BURST - fit * cost;
        assert!(written <= LOG_RATE + left_after_burst, "{written}");
        assert!(written + cost > LOG_RATE, "{written}");
        // Never more than the burst, however long it waited.
        let t2 = t1 + Duration::from_secs(3600);
        let mut n = 0;
        while let Admit::Write { .. } = b.admit(line, t2) {
            n += 1;
        }
        assert_eq!(n, fit);
    }
}
