//! What a wake-up costs on this machine, measured without NRI: the floor
//! under every cell, printed with the report so that runs on different
//! machines can be read side by side.
//!
//! Two threads of this process play runtime and plugin over a socketpair
//! with blocking reads and writes: a request of the size of the
//! benchmark's CreateContainer request, an answer of the size of a small
//! response. Back to back, both threads stay warm and a round trip is
//! mostly the two system calls; one round trip every 2 ms (a node's pace),
//! both sleep between events and each round trip pays two wake-ups of an
//! idle CPU. The difference is what the latency machinery of `nri-mux` can
//! save, and what the Go runtime's spinning scheduler hides; on virtual
//! machines it varies several-fold from one host to another, and with it
//! Go's latency and CPU per event (and so every ratio of the report).

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::stats::{median, round1};

/// Bytes of a request: about the benchmark's CreateContainer request.
pub(crate) const REQUEST_LEN: usize = 4200;
/// Bytes of an answer.
pub(crate) const ANSWER_LEN: usize = 200;
/// Time between round trips at a node's pace (the paced cell's).
pub(crate) const PACE: Duration = Duration::from_millis(2);

/// Median round trips over a socketpair between two threads.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct RoundTrips {
    /// Back to back, µs.
    pub busy_us: f64,
    /// One every 2 ms, µs.
    pub idle_us: f64,
}

/// Measures [`RoundTrips`]: `busy` round trips back to back, then `idle`
/// round trips 2 ms apart (`quick`: a tenth of each).
///
/// # Errors
///
/// An I/O error of the socketpair or the echo thread.
pub fn round_trips(quick: bool) -> io::Result<RoundTrips> {
    let (busy, idle) = if quick { (2_000, 50) } else { (20_000, 500) };
    let (mut a, b) = UnixStream::pair()?;
    let echo = std::thread::spawn(move || echo(b));
    let busy_us = timed(&mut a, busy, None)?;
    let idle_us = timed(&mut a, idle, Some(PACE))?;
    // Closing our end ends the echo thread.
    drop(a);
    echo.join()
        .map_err(|_| io::Error::other("the echo thread panicked"))??;
    Ok(RoundTrips {
        busy_us: round1(busy_us),
        idle_us: round1(idle_us),
    })
}

/// The median of `n` round trips on `s`, each after `pause` if given, µs.
fn timed(s: &mut UnixStream, n: usize, pause: Option<Duration>) -> io::Result<f64> {
    let request = vec![7u8; REQUEST_LEN];
    let mut answer = vec![0u8; ANSWER_LEN];
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        if let Some(p) = pause {
            std::thread::sleep(p);
        }
        let t = Instant::now();
        s.write_all(&request)?;
        s.read_exact(&mut answer)?;
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok(median(&times).unwrap_or(0.0))
}

/// Answers every whole request read from `s` until it is closed.
fn echo(mut s: UnixStream) -> io::Result<()> {
    let mut request = vec![0u8; REQUEST_LEN];
    let answer = vec![9u8; ANSWER_LEN];
    loop {
        match s.read_exact(&mut request) {
            Ok(()) => s.write_all(&answer)?,
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_are_measured_both_ways() {
        let r = round_trips(true).expect("a socketpair between two threads");
        assert!(r.busy_us > 0.0, "{r:?}");
        assert!(r.idle_us > 0.0, "{r:?}");
    }
}
