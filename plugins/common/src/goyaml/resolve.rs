//! How Go's YAML libraries resolve a scalar (`go.yaml.in/yaml/v2` and
//! `v3` share these rules, except the YAML 1.1 booleans of v2): null,
//! booleans, integers (`0x`, `0o`, `0b`, leading-`0` octal, `_`
//! separators), floats, or a string.

use super::tree::CORE_TAG;

/// A resolved scalar, with Go's dynamic types.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Resolved {
    /// `~`, `null`, empty.
    Null,
    /// `true`, and in YAML 1.1 also `yes`, `on`, `y`, ...
    Bool(bool),
    /// A Go `int`.
    Int(i64),
    /// A Go `uint64` (only above the `int` range).
    Uint(u64),
    /// A Go `float64`.
    Float(f64),
    /// A string (also timestamps, which decode to strings).
    Str(String),
}

/// Which rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Schema {
    /// `yaml.v2` (YAML 1.1): `yes`/`no`/`on`/`off`/`y`/`n` are booleans.
    V2,
    /// `yaml.v3` (YAML 1.2 core, plus leading-`0` octal).
    V3,
}

/// Go's `strconv.ParseInt`/`ParseUint` with base 0, for the text after
/// the sign: the value's magnitude, or `None`.
fn parse_magnitude(s: &str) -> Option<u64> {
    let (digits, radix) = if let Some(r) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (r, 16)
    } else if let Some(r) = s.strip_prefix("0o").or_else(|| s.strip_prefix("0O")) {
        (r, 8)
    } else if let Some(r) = s.strip_prefix("0b").or_else(|| s.strip_prefix("0B")) {
        (r, 2)
    } else if s.len() > 1 && s.starts_with('0') {
        (&s[1..], 8)
    } else {
        (s, 10)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// Go's `strconv.ParseInt(s, 0, 64)`.
pub(crate) fn parse_int(s: &str) -> Option<i64> {
    let (neg, rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let m = parse_magnitude(rest)?;
    if neg {
        if m == 1u64 << 63 {
            Some(i64::MIN)
        } else {
            i64::try_from(m).ok().map(|v| -v)
        }
    } else {
        i64::try_from(m).ok()
    }
}

/// Go's `strconv.ParseUint(s, 0, 64)` (no sign).
fn parse_uint(s: &str) -> Option<u64> {
    if s.starts_with(['+', '-']) {
        return None;
    }
    parse_magnitude(s)
}

/// `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`
fn yaml_style_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
        i += 1;
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if i < b.len() && b[i] == b'.' {
            i += 1;
            digits(&mut i);
        }
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// A finite float, as Go's `strconv.ParseFloat` (out of range: `None`).
fn parse_float(s: &str) -> Option<f64> {
    s.parse::<f64>().ok().filter(|f| f.is_finite())
}

fn lookup(schema: Schema, s: &str) -> Option<Resolved> {
    Some(match s {
        "true" | "True" | "TRUE" => Resolved::Bool(true),
        "false" | "False" | "FALSE" => Resolved::Bool(false),
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" if schema == Schema::V2 => {
            Resolved::Bool(true)
        }
        "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" if schema == Schema::V2 => {
            Resolved::Bool(false)
        }
        "" | "~" | "null" | "Null" | "NULL" => Resolved::Null,
        ".nan" | ".NaN" | ".NAN" => Resolved::Float(f64::NAN),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => Resolved::Float(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => Resolved::Float(f64::NEG_INFINITY),
        _ => return None,
    })
}

fn number(schema: Schema, s: &str) -> Option<Resolved> {
    let plain: String = s.chars().filter(|&c| c != '_').collect();
    if let Some(i) = parse_int(&plain) {
        return Some(Resolved::Int(i));
    }
    if let Some(u) = parse_uint(&plain) {
        return Some(Resolved::Uint(u));
    }
    if yaml_style_float(&plain) {
        if let Some(f) = parse_float(&plain) {
            return Some(Resolved::Float(f));
        }
    }
    // `0b`/`-0b` and (v3) `0o`/`-0o` are covered by `parse_int` above.
    let _ = schema;
    None
}

/// Resolves an untagged plain scalar.
pub(crate) fn resolve_plain(schema: Schema, s: &str) -> Resolved {
    let hint = s.bytes().next();
    let is_hint = |b: u8| b"+-0123456789yYnNtTfFoO~.".contains(&b);
    if s.is_empty() {
        return Resolved::Null;
    }
    match hint {
        Some(b) if is_hint(b) => {}
        _ => return Resolved::Str(s.to_owned()),
    }
    if s == "<<" {
        return Resolved::Str(s.to_owned());
    }
    if let Some(r) = lookup(schema, s) {
        return r;
    }
    match hint {
        Some(b'.') => parse_float(s).map_or_else(|| Resolved::Str(s.to_owned()), Resolved::Float),
        Some(b'+' | b'-' | b'0'..=b'9') => {
            number(schema, s).unwrap_or_else(|| Resolved::Str(s.to_owned()))
        }
        _ => Resolved::Str(s.to_owned()),
    }
}

/// Resolves a scalar with its style and tag, as Go does: a quoted or block
/// scalar without tag is a string; `!!str`/`!!binary` force a string; a
/// core tag must match what the text resolves to (`!!float` also takes an
/// integer); other tags leave the text as a string.
pub(crate) fn resolve(
    schema: Schema,
    value: &str,
    plain: bool,
    tag: Option<&str>,
) -> Result<Resolved, String> {
    let Some(tag) = tag else {
        return Ok(if plain {
            resolve_plain(schema, value)
        } else {
            Resolved::Str(value.to_owned())
        });
    };
    let Some(core) = tag.strip_prefix(CORE_TAG) else {
        return Ok(Resolved::Str(value.to_owned()));
    };
    let r = resolve_plain(schema, value);
    let ok = match (core, &r) {
        ("str", _) => return Ok(Resolved::Str(value.to_owned())),
        ("binary", _) => return decode_base64(value).map(Resolved::Str),
        ("null", Resolved::Null) | ("bool", Resolved::Bool(_)) => true,
        ("int", Resolved::Int(_) | Resolved::Uint(_)) => true,
        ("float", Resolved::Float(_)) => true,
        ("float", Resolved::Int(i)) => return Ok(Resolved::Float(*i as f64)),
        ("timestamp", Resolved::Str(_)) => true,
        ("map" | "seq" | "merge", _) | ("int" | "float" | "null" | "bool", _) => false,
        _ => return Ok(Resolved::Str(value.to_owned())),
    };
    if ok {
        Ok(r)
    } else {
        Err(format!(
            "cannot decode `{}` as a !!{core}",
            super::limits::excerpt(value, super::limits::MAX_EXCERPT_BYTES)
        ))
    }
}

/// Standard base64 (with padding), as Go's `!!binary`.
fn decode_base64(text: &str) -> Result<String, String> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bad = || "!!binary value contains invalid base64 data".to_owned();
    let clean: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    if clean.len() % 4 != 0 {
        return Err(bad());
    }
    let mut out = Vec::new();
    for chunk in clean.chunks(4) {
        let mut n = 0u32;
        let mut pad = 0;
        for &c in chunk {
            n <<= 6;
            if c == b'=' {
                pad += 1;
            } else if pad > 0 {
                return Err(bad());
            } else {
                let v = ALPHABET.iter().position(|&a| a == c).ok_or_else(bad)?;
                n |= v as u32;
            }
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad.min(2)]);
    }
    String::from_utf8(out).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2(s: &str) -> Resolved {
        resolve_plain(Schema::V2, s)
    }

    #[test]
    fn yaml_1_1_scalars() {
        use Resolved::*;
        assert_eq!(v2("on"), Bool(true));
        assert_eq!(v2("yes"), Bool(true));
        assert_eq!(v2("N"), Bool(false));
        assert_eq!(v2("yES"), Str("yES".into()));
        assert_eq!(resolve_plain(Schema::V3, "on"), Str("on".into()));
        assert_eq!(v2("~"), Null);
        assert_eq!(v2("256"), Int(256));
        assert_eq!(v2("0666"), Int(0o666));
        assert_eq!(v2("0x1F"), Int(31));
        assert_eq!(v2("0o17"), Int(15));
        assert_eq!(v2("0b101"), Int(5));
        assert_eq!(v2("-0b11"), Int(-3));
        assert_eq!(v2("1_000"), Int(1000));
        assert_eq!(v2("+5"), Int(5));
        assert_eq!(v2("08"), Float(8.0));
        assert_eq!(v2("1.0"), Float(1.0));
        assert_eq!(v2("1e1"), Float(10.0));
        assert_eq!(v2("1."), Float(1.0));
        assert_eq!(v2(".5"), Float(0.5));
        assert_eq!(v2("1e400"), Str("1e400".into()));
        assert_eq!(v2("18446744073709551615"), Uint(u64::MAX));
        assert_eq!(v2("-9223372036854775808"), Int(i64::MIN));
        assert_eq!(v2("2001-12-14"), Str("2001-12-14".into()));
        assert_eq!(v2("1m"), Str("1m".into()));
        assert_eq!(v2("-"), Str("-".into()));
        assert!(matches!(v2(".inf"), Float(f) if f.is_infinite()));
    }

    #[test]
    fn tags() {
        use Resolved::*;
        let t =
            |tag: &str, v: &str| resolve(Schema::V2, v, true, Some(&format!("{CORE_TAG}{tag}")));
        assert_eq!(t("str", "12"), Ok(Str("12".into())));
        assert_eq!(t("float", "12"), Ok(Float(12.0)));
        assert!(t("int", "abc").is_err());
        assert_eq!(t("binary", "aGk="), Ok(Str("hi".into())));
        assert!(t("binary", "a").is_err());
        assert_eq!(
            resolve(Schema::V2, "12", true, Some("!custom")),
            Ok(Str("12".into()))
        );
        assert_eq!(resolve(Schema::V2, "12", false, None), Ok(Str("12".into())));
    }
}
