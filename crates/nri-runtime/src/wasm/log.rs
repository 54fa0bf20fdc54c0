//! `env.log`: a guest's log line, read out of its memory without reading
//! more than the line's cap. The request is an encoded `LogRequest`
//! (message, level); its fields are walked in place, in the guest's
//! memory, and only the message's first [`MAX_LOGGED`] bytes are copied:
//! a guest that passes a length of gigabytes costs what a capped line
//! costs.

use nri_api::api::log_request::Level;
use wasmi::Caller;

use super::wasi::{HOST_BYTES_PER_FUEL, HostState, MAX_LOGGED, enter};

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
    match Level::try_from(level).unwrap_or(Level::Unspecified) {
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
    use nri_api::api::LogRequest;
    use prost::Message;

    use super::*;

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
}
