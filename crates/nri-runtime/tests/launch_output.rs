//! A launched plugin's output costs the runtime a bounded buffer and a
//! bounded log rate: a 1 MiB line is cut at 4 KiB and marked, a flood of
//! lines is rate-limited with the drops counted (log and metrics), and the
//! pipes keep being drained, so the plugin never blocks on them. (Alone in
//! its test binary: it captures the log of its thread.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use nri_runtime::{Metrics, TRUNCATED_MARKER};
use tokio::sync::watch;

/// Upper bound for the plugin to write everything and exit (it takes well
/// under a second; only a blocked plugin reaches this).
const WAIT: Duration = Duration::from_secs(60);
/// Lines the plugin writes to stdout after its long line.
const FLOOD: u64 = 3000;

/// The captured log, published on a watch channel at every write, so the
/// test waits for what it expects without polling.
#[derive(Clone)]
struct Log(Arc<watch::Sender<String>>);

impl Write for Log {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(b);
        self.0.send_modify(|log| log.push_str(&text));
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Lines dropped, as reported to the metrics, per stream.
#[derive(Default)]
struct Dropped(Mutex<HashMap<String, u64>>);

impl Metrics for Dropped {
    fn plugin_output_dropped(&self, plugin: &str, stream: &str, lines: u64) {
        assert_eq!(plugin, "10-chatty");
        *self.0.lock().unwrap().entry(stream.into()).or_default() += lines;
    }
}

/// The value of `field=` in a log line.
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    line.split(&format!("{name}="))
        .nth(1)?
        .split_whitespace()
        .next()
}

#[tokio::test(flavor = "current_thread")]
#[allow(clippy::too_many_lines)]
async fn long_lines_are_cut_and_floods_are_rate_limited_without_blocking_the_plugin() {
    let (tx, mut rx) = watch::channel(String::new());
    let writer = Log(Arc::new(tx));
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_env_filter("nri::plugin=debug")
        .finish();
    let _g = tracing::subscriber::set_default(subscriber);

    let env = TestEnv::new();
    let plugins = env.dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    // Everything at once, as fast as the shell goes, then exit: the pipes
    // hold 64 KiB, so the plugin only gets to its end if the runtime keeps
    // reading while it logs at most 100 lines a second.
    let script = format!(
        "#!/bin/sh\n\
         head -c 1048576 /dev/zero | tr '\\0' x\n\
         echo\n\
         i=0; while [ $i -lt {FLOOD} ]; do echo line-$i; i=$((i+1)); done\n\
         echo last >&2\n"
    );
    let path = plugins.join("10-chatty");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let dropped = Arc::new(Dropped::default());
    let started = tokio::time::Instant::now();
    // The shell never registers: start() goes on when it exits (its end of
    // the connection closes).
    let a = env
        .start(
            env.builder()
                .registration_timeout(WAIT)
                .metrics(dropped.clone()),
        )
        .await;
    assert!(a.plugins().is_empty());
    let ended = |log: &String| log.matches("NRI plugin output ended").count() == 2;
    let log = tokio::time::timeout(WAIT, rx.wait_for(ended))
        .await
        .expect("both streams of the plugin ended: it was not blocked on a full pipe")
        .unwrap()
        .clone();
    let elapsed = started.elapsed();
    a.stop().await;

    // The long line: cut at 4 KiB, marked, logged once; the rest of it is
    // not logged as further lines.
    let cut: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("truncated=true"))
        .collect();
    assert_eq!(cut.len(), 1, "{cut:?}");
    assert!(cut[0].contains(&format!("{}{TRUNCATED_MARKER}", "x".repeat(4096))));
    assert!(!cut[0].contains(&"x".repeat(4097)));
    assert!(
        !log.lines()
            .any(|l| l.contains("xxxx") && !l.contains("truncated=true"))
    );

    // The flood: a burst of 200, then 100 a second; every other line is
    // dropped, counted, reported in the log and to the metrics.
    let logged = log.lines().filter(|l| l.contains(" line-")).count() as u64;
    let reported: u64 = log
        .lines()
        .filter(|l| l.contains("lines of NRI plugin output"))
        .filter_map(|l| field(l, "dropped"))
        .map(|v| v.parse::<u64>().unwrap())
        .sum();
    let most = 200 + 100 * (elapsed.as_secs() + 1);
    assert!(
        (200..=most).contains(&(logged + 1)),
        "{logged} lines (+1 long) logged out of {FLOOD} in {elapsed:?}"
    );
    assert_eq!(reported + logged, FLOOD, "{reported} reported dropped");
    let metrics = dropped.0.lock().unwrap().clone();
    assert_eq!(metrics.get("stdout"), Some(&reported), "{metrics:?}");
    assert_eq!(metrics.get("stderr"), None, "{metrics:?}");

    // The end-of-stream summaries agree; stderr had its own budget.
    let summary = |stream: &str| {
        let l = log
            .lines()
            .find(|l| l.contains("NRI plugin output ended") && l.contains(stream))
            .unwrap();
        (
            field(l, "lines").unwrap().to_owned(),
            field(l, "dropped").unwrap().to_owned(),
        )
    };
    assert_eq!(
        summary("stream=\"stdout\""),
        ((logged + 1).to_string(), reported.to_string())
    );
    assert_eq!(summary("stream=\"stderr\""), ("1".into(), "0".into()));
    assert!(
        log.lines()
            .any(|l| l.contains("stream=\"stderr\"") && l.contains("last"))
    );
}
