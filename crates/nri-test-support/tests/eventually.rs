//! `eventually` and `eventually_some`: they return as soon as the check
//! holds, and give up at the deadline, also under paused time.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use nri_test_support::{eventually, eventually_some};
use tokio::time::Instant;

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_check_that_holds_returns_at_once() {
    let t0 = Instant::now();
    let mut tries = 0;
    assert!(
        eventually(Duration::from_secs(5), || {
            tries += 1;
            true
        })
        .await
    );
    assert_eq!(tries, 1);
    assert_eq!(t0.elapsed(), Duration::ZERO);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_check_that_never_holds_gives_up_at_the_deadline() {
    let t0 = Instant::now();
    let mut tries = 0u32;
    let held = eventually(Duration::from_millis(50), || {
        tries += 1;
        false
    })
    .await;
    assert!(!held);
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(50),
        "gave up after {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(60),
        "gave up after {waited:?}"
    );
    // About one try a millisecond, not a busy spin.
    assert!((40..=60).contains(&tries), "{tries} tries");
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_check_that_comes_to_hold_is_seen() {
    let t0 = Instant::now();
    let mut tries = 0;
    let found = eventually_some(Duration::from_secs(5), || {
        tries += 1;
        (tries == 10).then_some("ten")
    })
    .await;
    assert_eq!(found, Some("ten"));
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn another_task_makes_it_hold() {
    let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let setter = tokio::spawn({
        let flag = flag.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    });
    let t0 = Instant::now();
    assert!(
        eventually(Duration::from_secs(5), || flag
            .load(std::sync::atomic::Ordering::SeqCst))
        .await
    );
    assert!(t0.elapsed() >= Duration::from_millis(30));
    assert!(t0.elapsed() < Duration::from_millis(40));
    setter.await.unwrap();
}

#[tokio::test]
async fn real_time_too() {
    let t0 = std::time::Instant::now();
    assert!(!eventually(Duration::from_millis(20), || false).await);
    assert!(t0.elapsed() >= Duration::from_millis(20));
}
