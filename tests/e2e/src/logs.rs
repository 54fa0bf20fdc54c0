//! Reading logs: ANSI stripping, polling, tails, and the NRI event
//! sequences our logger plugins print.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

/// Removes ANSI escape sequences (`ESC [ ... letter`).
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Polls `cond` every 50 ms until it returns `Some` or `deadline` passes.
pub fn poll<T>(
    what: &str,
    deadline: Duration,
    mut cond: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = cond()? {
            return Ok(v);
        }
        if start.elapsed() > deadline {
            bail!("timed out after {deadline:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The last `n` lines of a file (empty if unreadable).
pub fn tail(path: &Path, n: usize) -> String {
    let text = fs::read(path)
        .map(|b| strip_ansi(&String::from_utf8_lossy(&b)))
        .unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// NRI event names as our logger plugins print them, in lifecycle order.
pub const EVENT_NAMES: [&str; 15] = [
    "RunPodSandbox",
    "UpdatePodSandbox",
    "PostUpdatePodSandbox",
    "CreateContainer",
    "ValidateContainerAdjustment",
    "PostCreateContainer",
    "StartContainer",
    "PostStartContainer",
    "UpdateContainer",
    "PostUpdateContainer",
    "StopContainer",
    "RemoveContainer",
    "StopPodSandbox",
    "RemovePodSandbox",
    "Synchronize",
];

/// The event names found in `log` on lines that contain `marker`, in order
/// (the first whole word on the line that is an event name, see
/// [`EVENT_NAMES`]).
pub fn events_in_log(log: &str, marker: &str) -> Vec<String> {
    strip_ansi(log)
        .lines()
        .filter(|l| l.contains(marker))
        .filter_map(|l| {
            l.split(|c: char| !c.is_ascii_alphanumeric())
                .find(|w| EVENT_NAMES.contains(w))
                .map(str::to_owned)
        })
        .collect()
}

/// The events of a log that prints each event over several lines, every
/// line prefixed `<Event>:` (the sample `logger`): the first event name
/// followed by `:` on each line, runs of the same event collapsed into one.
/// (Lines merely listing event names, e.g. the subscription, do not count.)
pub fn event_blocks(log: &str) -> Vec<String> {
    let mut out: Vec<String> = strip_ansi(log)
        .lines()
        .filter_map(|l| {
            EVENT_NAMES
                .iter()
                .filter_map(|e| l.find(&format!(" {e}:")).map(|i| (i, *e)))
                .min()
                .map(|(_, e)| e.to_owned())
        })
        .collect();
    out.dedup();
    out
}

/// Whether `want` is a subsequence of `got`.
pub fn is_subsequence(want: &[&str], got: &[String]) -> bool {
    let mut it = got.iter();
    want.iter().all(|w| it.any(|g| g == w))
}
