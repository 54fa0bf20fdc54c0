//! Updates in a Synchronize answer get the structural checks and the audit
//! trail of every other update path (alone in its test binary: it captures
//! the log of its thread, and tracing's per-callsite caching makes that
//! unreliable while other tests log on other threads).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use common::*;
use nri_api::api::*;
use nri_runtime::Metrics;

/// Records `peer_refused` calls.
#[derive(Default)]
struct Refusals(Mutex<Vec<(String, String)>>);

impl Metrics for Refusals {
    fn peer_refused(&self, peer: &str, reason: &str) {
        self.0.lock().unwrap().push((peer.into(), reason.into()));
    }
}

/// Captures the log lines of this thread (the tests run on a
/// current-thread runtime: the runtime's tasks log here too).
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn install(&self) -> tracing::subscriber::DefaultGuard {
        let me = self.clone();
        let sub = tracing_subscriber::fmt()
            .with_writer(move || me.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .finish();
        tracing::subscriber::set_default(sub)
    }
    fn lines(&self, needle: &str) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_owned)
            .collect()
    }
}

fn mem_update(id: &str, limit: i64) -> ContainerUpdate {
    let mut u = ContainerUpdate::new(id);
    u.linux_resources_mut().memory = Some(LinuxMemory {
        limit: Some(OptionalInt64 { value: limit }),
        ..Default::default()
    });
    u
}

#[tokio::test]
async fn synchronize_answers_are_checked_and_audited() {
    let log = Captured::default();
    let _g = log.install();
    let env = TestEnv::new();
    env.runtime.add_pod(pod("pod0"));
    for id in ["c0", "c1"] {
        env.runtime.add_container(ctr("pod0", id));
    }
    let metrics = Arc::new(Refusals::default());
    let a = env.start(env.builder().metrics(metrics.clone())).await;
    // A negative memory limit: refused, the plugin stays.
    let mut bad = FakePlugin::new("10", "bad");
    bad.sync_updates = vec![mem_update("c0", -5)];
    let _b = bad.connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    assert!(env.runtime.updates.lock().unwrap().is_empty());
    assert_eq!(
        metrics.0.lock().unwrap().as_slice(),
        [("10-bad".to_owned(), "invalid_update".to_owned())]
    );
    // A good one: applied, one audit line per field.
    let mut good = FakePlugin::new("20", "good");
    good.sync_updates = vec![mem_update("c1", 1 << 30)];
    let _g2 = good.connect(&env.socket).await.unwrap();
    wait_active(&a, 2).await;
    let applied = env.runtime.updates.lock().unwrap().clone();
    assert_eq!(applied, [mem_update("c1", 1 << 30)]);
    let audit = log.lines("nri::audit");
    assert!(
        audit.iter().any(|l| l.contains("operation=\"Synchronize\"")
            && l.contains("plugin=\"20-good\"")
            && l.contains("container=\"c1\"")
            && l.contains("field=\"MemLimit\"")),
        "{audit:#?}"
    );
    a.stop().await;
}
