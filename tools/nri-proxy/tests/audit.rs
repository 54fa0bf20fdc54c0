//! The audit trail: the proxy's own runtime library names the plugin
//! behind the proxy that changed each field of each container (target
//! `nri::audit`), where the runtime above sees only the proxy. Its own
//! test binary: the log capture is process-wide.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;

/// Log lines written by the subscriber, shared with the test.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    /// The audit events (JSON lines on target `nri::audit`).
    fn audit(&self) -> Vec<String> {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .filter(|l| l.contains("\"target\":\"nri::audit\""))
            .map(str::to_owned)
            .collect()
    }
}

/// The audit lines about `container` naming `plugin` as the owner of
/// field `field` (key `key`).
fn owned(lines: &[String], plugin: &str, container: &str, field: &str, key: &str) -> usize {
    lines
        .iter()
        .filter(|l| {
            l.contains(&format!("\"plugin\":\"{plugin}\""))
                && l.contains(&format!("\"container\":\"{container}\""))
                && l.contains(&format!("\"field\":\"{field}\""))
                && l.contains(&format!("\"key\":\"{key}\""))
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_trail_names_the_plugin_behind_the_proxy() {
    let lines = Lines::default();
    let writer = lines.clone();
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(tracing_subscriber::EnvFilter::new("nri::audit=info"))
        .with_writer(move || writer.clone())
        .init();

    let env = Env::new();
    let up = env.upstream(Duration::from_secs(2)).await;
    let proxy = Running::start(env.config("", "")).await;
    proxy.wait_serving(&env.proxy_socket).await;
    let mut behind = Behind::default();
    behind.connect(&env.proxy_socket, "10", "ay", TestPlugin::adding("A", "1"));
    behind.connect(&env.proxy_socket, "20", "bee", TestPlugin::adding("B", "2"));
    until("two plugins behind the proxy", || {
        proxy.proxy.adaptation().plugins().len() == 2
    })
    .await;
    until("the proxy upstream", || up.plugins().len() == 1).await;

    up.run_pod_sandbox(&pod("p")).await.unwrap();
    let out = up
        .create_container(&pod("p"), &ctr("p", "c"))
        .await
        .unwrap();
    assert_eq!(env_of(&out.adjustment), ["A=1", "B=2"]);

    let audit = lines.audit();
    // Behind the proxy: each plugin, its own key.
    assert_eq!(owned(&audit, "10-ay", "c", "Env", "A"), 1, "{audit:#?}");
    assert_eq!(owned(&audit, "20-bee", "c", "Env", "B"), 1, "{audit:#?}");
    assert_eq!(owned(&audit, "10-ay", "c", "Env", "B"), 0, "{audit:#?}");
    // The runtime above (our library in this test) sees the proxy.
    assert_eq!(owned(&audit, "50-proxy", "c", "Env", "A"), 1, "{audit:#?}");
    assert_eq!(owned(&audit, "50-proxy", "c", "Env", "B"), 1, "{audit:#?}");
    // Besides each plugin's admission (its identity, at registration),
    // only the creation's changes.
    assert_eq!(
        audit
            .iter()
            .filter(|l| l.contains("\"NRI plugin admitted\""))
            .count(),
        3,
        "{audit:#?}"
    );
    assert!(
        audit
            .iter()
            .filter(|l| !l.contains("\"NRI plugin admitted\""))
            .all(|l| l.contains("\"operation\":\"CreateContainer\"")),
        "{audit:#?}"
    );

    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}
