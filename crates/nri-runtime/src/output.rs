//! The output of launched plugins, forwarded to `tracing` within limits: a
//! plugin that writes without a newline, or writes fast, costs the runtime
//! a bounded buffer and a bounded log rate, and never stalls on a full
//! pipe (the pipe is always drained; what is over the limits is dropped
//! and counted).

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::Instant;

use crate::adaptation::Shared;
use crate::metrics::Metrics;

/// Default of [`OutputLimits::max_line`]: 4 KiB.
pub const DEFAULT_MAX_OUTPUT_LINE: usize = 4 * 1024;
/// Default of [`OutputLimits::lines_per_second`].
pub const DEFAULT_OUTPUT_LINES_PER_SECOND: u32 = 100;
/// Marker appended to a line cut at [`OutputLimits::max_line`].
pub const TRUNCATED_MARKER: &str = " [truncated]";

/// Bytes read from a plugin's pipe at a time.
const READ_CHUNK: usize = 8 * 1024;
/// Longest time lines dropped by the rate limit wait to be reported.
const REPORT_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

/// Limits on the output of each launched plugin (per stream: stdout and
/// stderr each have their own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutputLimits {
    /// Longest line logged (bytes); the rest of a longer line is dropped
    /// and the line is logged with [`TRUNCATED_MARKER`] and
    /// `truncated = true` (default 4 KiB).
    pub max_line: usize,
    /// Lines logged per second on average, with bursts of twice as many;
    /// lines beyond are dropped and counted (default 100).
    pub lines_per_second: u32,
}

impl Default for OutputLimits {
    fn default() -> Self {
        Self {
            max_line: DEFAULT_MAX_OUTPUT_LINE,
            lines_per_second: DEFAULT_OUTPUT_LINES_PER_SECOND,
        }
    }
}

/// What [`Lines`] hands on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Emitted {
    /// A line to log (without its newline).
    Line { text: String, truncated: bool },
    /// Lines dropped by the rate limit since the last report.
    Dropped { lines: u64 },
}

/// Splits a byte stream into lines within [`OutputLimits`] (sans-io).
#[derive(Debug)]
pub(crate) struct Lines {
    limits: OutputLimits,
    buf: Vec<u8>,
    /// Inside a line already cut at `max_line`: discard up to its newline.
    skipping: bool,
    tokens: f64,
    refilled: Instant,
    dropped: u64,
}

impl Lines {
    pub(crate) fn new(limits: OutputLimits, now: Instant) -> Self {
        Self {
            limits,
            buf: Vec::new(),
            skipping: false,
            tokens: Self::burst(limits),
            refilled: now,
            dropped: 0,
        }
    }

    fn burst(limits: OutputLimits) -> f64 {
        2.0 * f64::from(limits.lines_per_second.max(1))
    }

    /// Takes the next bytes of the stream.
    pub(crate) fn feed(&mut self, mut data: &[u8], now: Instant, out: &mut impl FnMut(Emitted)) {
        while !data.is_empty() {
            let newline = data.iter().position(|&b| b == b'\n');
            let (part, rest, ends) = match newline {
                Some(i) => (&data[..i], &data[i + 1..], true),
                None => (data, &data[data.len()..], false),
            };
            data = rest;
            if !self.skipping {
                let room = self.limits.max_line.saturating_sub(self.buf.len());
                let take = part.len().min(room);
                self.buf.extend_from_slice(&part[..take]);
                if take < part.len() {
                    self.emit(true, now, out);
                    self.skipping = true;
                }
            }
            if ends {
                if self.skipping {
                    self.skipping = false;
                } else {
                    self.emit(false, now, out);
                }
            }
        }
    }

    /// The end of the stream: the last unfinished line, and the count of
    /// lines dropped since the last report.
    pub(crate) fn finish(&mut self, now: Instant, out: &mut impl FnMut(Emitted)) {
        if !self.buf.is_empty() {
            self.emit(false, now, out);
        }
        self.report_dropped(out);
    }

    /// Reports the lines dropped since the last report, if any.
    pub(crate) fn report_dropped(&mut self, out: &mut impl FnMut(Emitted)) {
        if self.dropped > 0 {
            out(Emitted::Dropped {
                lines: std::mem::take(&mut self.dropped),
            });
        }
    }

    fn emit(&mut self, truncated: bool, now: Instant, out: &mut impl FnMut(Emitted)) {
        let rate = f64::from(self.limits.lines_per_second.max(1));
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(Self::burst(self.limits));
        self.refilled = now;
        if self.tokens < 1.0 {
            self.dropped += 1;
            self.buf.clear();
            return;
        }
        self.tokens -= 1.0;
        self.report_dropped(out);
        let text = String::from_utf8_lossy(&self.buf).into_owned();
        self.buf.clear();
        out(Emitted::Line { text, truncated });
    }
}

/// Forwards the stdout and stderr of a launched plugin (see
/// [`forward_output`]) in tasks owned by `shared`.
pub(crate) fn forward_child(shared: &Shared, plugin: &str, child: &mut tokio::process::Child) {
    let limits = shared.config.peer_limits.output;
    if let Some(out) = child.stdout.take() {
        let metrics = shared.metrics.clone();
        shared.spawn(forward_output(
            plugin.to_owned(),
            "stdout",
            out,
            limits,
            metrics,
        ));
    }
    if let Some(err) = child.stderr.take() {
        let metrics = shared.metrics.clone();
        shared.spawn(forward_output(
            plugin.to_owned(),
            "stderr",
            err,
            limits,
            metrics,
        ));
    }
}

/// Where [`forward_output`] reports, and the totals it keeps for its
/// end-of-stream summary.
struct Sink<'a> {
    plugin: &'a str,
    stream: &'static str,
    metrics: &'a dyn Metrics,
    logged: u64,
    truncated: u64,
    dropped: u64,
}

impl Sink<'_> {
    fn take(&mut self, e: Emitted) {
        let (plugin, stream) = (self.plugin, self.stream);
        match e {
            Emitted::Line { text, truncated } => {
                self.logged += 1;
                if truncated {
                    self.truncated += 1;
                    tracing::info!(target: "nri::plugin", plugin = %plugin, stream, truncated, "{text}{TRUNCATED_MARKER}");
                } else {
                    tracing::info!(target: "nri::plugin", plugin = %plugin, stream, truncated, "{text}");
                }
            }
            Emitted::Dropped { lines } => {
                self.dropped += lines;
                self.metrics.plugin_output_dropped(plugin, stream, lines);
                tracing::warn!(
                    target: "nri::plugin",
                    plugin = %plugin,
                    stream,
                    dropped = lines,
                    "dropped {lines} lines of NRI plugin output (over the rate limit)"
                );
            }
        }
    }
}

/// Forwards a plugin's output to `tracing` (target `nri::plugin`, fields
/// `plugin`, `stream`, `truncated`) within `limits`, until the stream ends.
/// Lines dropped by the rate limit are reported (a warning with `dropped`,
/// and [`Metrics::plugin_output_dropped`]) with the next line logged, or
/// within a second. The end of the stream is logged (debug) with the
/// totals: `lines`, `truncated`, `dropped`.
pub(crate) async fn forward_output<R: AsyncRead + Unpin>(
    plugin: String,
    stream: &'static str,
    mut r: R,
    limits: OutputLimits,
    metrics: Arc<dyn Metrics>,
) {
    let mut lines = Lines::new(limits, Instant::now());
    let mut chunk = vec![0u8; READ_CHUNK];
    let mut sink = Sink {
        plugin: &plugin,
        stream,
        metrics: &*metrics,
        logged: 0,
        truncated: 0,
        dropped: 0,
    };
    loop {
        // Lines dropped and not reported yet are reported within a second,
        // even if nothing else comes. (`read` is cancel-safe.)
        let read = if lines.dropped > 0 {
            match tokio::time::timeout(REPORT_DELAY, r.read(&mut chunk)).await {
                Ok(read) => read,
                Err(_elapsed) => {
                    lines.report_dropped(&mut |e| sink.take(e));
                    continue;
                }
            }
        } else {
            r.read(&mut chunk).await
        };
        match read {
            Ok(0) => break,
            Ok(n) => lines.feed(&chunk[..n], Instant::now(), &mut |e| sink.take(e)),
            Err(e) => {
                tracing::debug!(target: "nri::plugin", plugin = %plugin, stream, error = %e, "cannot read NRI plugin output");
                break;
            }
        }
    }
    lines.finish(Instant::now(), &mut |e| sink.take(e));
    tracing::debug!(
        target: "nri::plugin",
        plugin = %plugin,
        stream,
        lines = sink.logged,
        truncated = sink.truncated,
        dropped = sink.dropped,
        "NRI plugin output ended"
    );
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn run(limits: OutputLimits, input: &[&[u8]], step: Duration) -> Vec<Emitted> {
        let start = Instant::now();
        let mut lines = Lines::new(limits, start);
        let mut out = Vec::new();
        let mut now = start;
        for chunk in input {
            lines.feed(chunk, now, &mut |e| out.push(e));
            now += step;
        }
        lines.finish(now, &mut |e| out.push(e));
        out
    }

    fn line(s: &str, truncated: bool) -> Emitted {
        Emitted::Line {
            text: s.into(),
            truncated,
        }
    }

    #[test]
    fn lines_across_chunks_and_the_last_unfinished_one() {
        let out = run(
            OutputLimits::default(),
            &[b"he", b"llo\nwor", b"ld\n\nlast"],
            Duration::ZERO,
        );
        assert_eq!(
            out,
            [
                line("hello", false),
                line("world", false),
                line("", false),
                line("last", false)
            ]
        );
    }

    #[test]
    fn long_lines_are_cut_and_marked_and_the_buffer_stays_small() {
        let limits = OutputLimits {
            max_line: 8,
            ..OutputLimits::default()
        };
        let mut lines = Lines::new(limits, Instant::now());
        let mut out = Vec::new();
        let now = Instant::now();
        for _ in 0..1000 {
            lines.feed(&[b'x'; 1000], now, &mut |e| out.push(e));
            assert!(lines.buf.capacity() <= 1024);
        }
        lines.feed(b"tail\nnext\n", now, &mut |e| out.push(e));
        assert_eq!(out, [line("xxxxxxxx", true), line("next", false)]);
    }

    #[test]
    fn over_the_rate_lines_are_dropped_counted_and_reported() {
        let limits = OutputLimits {
            lines_per_second: 10,
            ..OutputLimits::default()
        };
        // 100 lines at once: a burst of 20 logged, 80 dropped.
        let burst: Vec<u8> = b"l\n".repeat(100);
        let out = run(limits, &[&burst, b"after\n"], Duration::from_secs(1));
        let logged = out
            .iter()
            .filter(|e| matches!(e, Emitted::Line { .. }))
            .count();
        assert_eq!(logged, 21);
        assert!(out.contains(&Emitted::Dropped { lines: 80 }));
        assert_eq!(out.last(), Some(&line("after", false)));
    }
}
