//! The value parsers of the scenario format: durations, quantities,
//! failure policies, event and field names.

use std::time::Duration;

use crate::error::{Error, Unknown};

/// Bytes of a quantity: a number with an optional binary (`Ki`, `Mi`,
/// `Gi`, `Ti`) or decimal (`k`, `M`, `G`) suffix.
pub(crate) fn parse_quantity(s: &str) -> Result<i64, Error> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '-'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: i64 = num.parse().map_err(|_| Error::BadValue {
        value: s.to_owned(),
        expected: "a quantity like 256Mi or 1G",
    })?;
    let mult: i64 = match unit {
        "" => 1,
        "k" | "K" => 1000,
        "M" => 1000_i64.pow(2),
        "G" => 1000_i64.pow(3),
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        _ => {
            return Err(Error::UnknownUnit {
                unit: unit.to_owned(),
                value: s.to_owned(),
            });
        }
    };
    n.checked_mul(mult).ok_or_else(|| Error::QuantityTooLarge {
        value: s.to_owned(),
    })
}

/// Parses `100ms`, `2s`, `1.5s`, `1m`.
///
/// # Errors
///
/// [`Error::BadValue`] for anything else.
pub fn parse_duration(s: &str) -> Result<Duration, Error> {
    let s = s.trim();
    let bad = || Error::BadValue {
        value: s.to_owned(),
        expected: "a duration like 250ms, 2s or 1m",
    };
    let (num, mult_ms) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1000.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60_000.0)
    } else {
        return Err(bad());
    };
    let v: f64 = num.trim().parse().map_err(|_| bad())?;
    if !v.is_finite() || v < 0.0 {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(v * mult_ms / 1000.0))
}

/// Parses a failure policy (`ignore`, `fail`, `required`).
pub fn parse_policy(s: &str) -> Option<nri_runtime::FailurePolicy> {
    nri_runtime::FailurePolicy::parse(s)
}

/// The names of the NRI events, in their canonical spelling and wire
/// order.
pub fn event_names() -> Vec<String> {
    nri_api::api::Event::ALL_EVENTS
        .iter()
        .map(|e| e.pretty_name().to_owned())
        .collect()
}

/// Operations a plugin expectation can count beside the events.
pub const PLUGIN_OPERATIONS: [&str; 3] = ["Synchronize", "Configure", "Shutdown"];

/// Parses an event name (`CreateContainer`, case-insensitive).
///
/// # Errors
///
/// [`Unknown::Event`] with the valid names and the closest one.
pub fn parse_event(name: &str) -> Result<nri_api::api::Event, Unknown> {
    nri_api::api::Event::ALL_EVENTS
        .into_iter()
        .find(|e| e.pretty_name().eq_ignore_ascii_case(name.trim()))
        .ok_or_else(|| unknown_event(name, event_names()))
}

/// The error for event `name` that is none of `valid`.
pub(crate) fn unknown_event(name: &str, valid: Vec<String>) -> Unknown {
    Unknown::Event {
        name: name.to_owned(),
        suggestion: closest(name, &valid),
        valid,
    }
}

/// The NRI field names owners are recorded under, in kebab-case
/// (`mem-limit`, `oci-hooks`), in wire order.
pub fn field_names() -> Vec<String> {
    (1..)
        .map_while(|i| nri_api::api::Field::try_from(i).ok())
        .map(|f| kebab(&format!("{f:?}")))
        .collect()
}

/// The kebab-case name of NRI field number `f` (`field-N` if unknown).
pub(crate) fn field_name(f: i32) -> String {
    nri_api::api::Field::try_from(f)
        .map(|f| kebab(&format!("{f:?}")))
        .unwrap_or_else(|_| format!("field-{f}"))
}

/// `CamelCase` to `camel-case`.
fn kebab(name: &str) -> String {
    let mut out = String::new();
    for (i, ch) in name.chars().enumerate() {
        if ch.is_ascii_uppercase() && i > 0 {
            out.push('-');
        }
        out.push(ch.to_ascii_lowercase());
    }
    out
}

/// The entry of `candidates` closest to `name` (ignoring case), if it is
/// close enough to be a typo: at most a third of its letters differ.
pub(crate) fn closest(name: &str, candidates: &[String]) -> Option<String> {
    let name = name.trim().to_ascii_lowercase();
    candidates
        .iter()
        .map(|c| (distance(&name, &c.to_ascii_lowercase()), c))
        .filter(|(d, c)| *d > 0 && *d <= (c.len() / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c.clone())
}

/// Edit distance of two strings: insertions, deletions, substitutions
/// and swaps of neighbours, one each.
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // d[i][j]: distance of a[..i] and b[..j].
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let sub = d[i - 1][j - 1] + usize::from(a[i - 1] != b[j - 1]);
            let mut best = sub.min(d[i - 1][j] + 1).min(d[i][j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}
