//! Waiting for a condition that another task or process makes true: poll
//! it, sleep 1 ms between tries, give up at a deadline.
//!
//! The sleep (not a `yield_now`) matters under paused tokio time: a sleep
//! lets the clock advance to the next timer, so a condition that never
//! holds ends at the deadline instead of spinning for ever.

use std::time::Duration;

use tokio::time::Instant;

/// How long the helpers sleep between two tries.
const POLL: Duration = Duration::from_millis(1);

/// Polls `check` until it holds and returns `true`, or returns `false`
/// once `deadline` (from now, in tokio time) has passed without it holding.
/// `check` is tried at least once.
pub async fn eventually(deadline: Duration, mut check: impl FnMut() -> bool) -> bool {
    eventually_some(deadline, || check().then_some(()))
        .await
        .is_some()
}

/// Polls `check` until it finds a value and returns it, or returns `None`
/// once `deadline` (from now, in tokio time) has passed without one.
/// `check` is tried at least once.
pub async fn eventually_some<T>(
    deadline: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> Option<T> {
    let end = Instant::now() + deadline;
    loop {
        if let Some(v) = check() {
            return Some(v);
        }
        if Instant::now() >= end {
            return None;
        }
        tokio::time::sleep(POLL).await;
    }
}
