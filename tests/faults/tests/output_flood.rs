//! Launched plugins flooding their output, against a runtime in its own
//! process (the victim, `src/bin/victim.rs`, launching a plugin
//! directory): one writes a 300 MB line, another writes short lines as
//! fast as it can. The runtime reads both pipes with its line-length cap
//! and rate limit: the long line is logged cut and marked, the flood's
//! surplus lines are dropped and counted, the victim's peak memory stays
//! under 100 MB, and a well-behaved socket plugin gets its creations
//! through meanwhile.
//!
//! Neither flooding plugin registers: each starts its flood in the
//! background on the output pipes it inherited, closes its end of the
//! runtime's socket (fd 3), and exits, so the runtime's start-up goes on
//! (the plugin failed to start) while it keeps draining the pipes. The
//! flood is started before fd 3 is closed: the runtime kills a plugin
//! whose registration failed, and a shell killed before it forked would
//! leave no flood. The background writers end when the victim closes the
//! pipes.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;
mod victim_proc;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::Duration;

use common::*;
use nri_api::api::Event;
use nri_fault_tests::peak_rss_kib;
use victim_proc::VictimProc;

/// The victim's peak RSS bound (KiB): 100 MB. Before the output cap a
/// 300 MB line took the runtime to about 303 MB.
const PEAK_LIMIT_KIB: u64 = 100_000_000 / 1024;
/// Creations the socket plugin must complete during the flood.
const CREATIONS: u64 = 100;
/// Bytes of the long line (no newline until all are written).
const LONG_LINE: u64 = 300_000_000;

fn install(dir: &Path, name: &str, script: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Waits until the victim's log has a line containing every one of
/// `needles`, and returns that line (`None` if there is none after
/// [`WAIT`]). The log is a file written by another process, so it is read
/// again until the line is there or the time is up.
async fn log_line(log: &Path, needles: &[&str]) -> Option<String> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(l) = text.lines().find(|l| needles.iter().all(|n| l.contains(n))) {
            return Some(l.to_owned());
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The victim's log for a failure message: its first and last lines (the
/// flood makes it long), each cut to 300 bytes.
fn log_excerpt(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let cut = |l: &&str| l.chars().take(300).collect::<String>();
    let head = lines.iter().take(40).map(cut);
    let tail = lines
        .iter()
        .skip(lines.len().saturating_sub(20).max(40))
        .map(cut);
    let mut out: Vec<String> = head.collect();
    out.push(format!("... ({} lines in all)", lines.len()));
    out.extend(tail);
    out.join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flooding_plugin_output_is_cut_and_dropped_and_costs_no_memory() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    install(
        &plugins,
        "10-longline",
        &format!("(exec 3>&-; head -c {LONG_LINE} /dev/zero | tr '\\0' x; echo) &\nexec 3>&-"),
    );
    install(
        &plugins,
        "11-chatty",
        "(exec 3>&-; exec yes 'chatty chatty chatty') &\nexec 3>&-",
    );
    let socket = dir.path().join("nri/nri.sock");
    let log = dir.path().join("victim.log");
    let mut cmd = VictimProc::command();
    cmd.arg("--socket")
        .arg(&socket)
        .arg("--plugin-dir")
        .arg(&plugins)
        // The cut line is logged at info on the plugin-output target.
        .env("RUST_LOG", "warn,nri::plugin=info")
        .stderr(std::fs::File::create(&log).unwrap());
    let mut victim = VictimProc::spawn(cmd).await;

    let mut good = GoodPlugin::start(&socket);
    victim.active(1).await;
    victim.send(&format!("cycle {CREATIONS}")).await;
    let l = victim.line().await;
    assert_eq!(
        l,
        format!("cycled {CREATIONS} 0"),
        "the socket plugin's creations go through"
    );
    assert_eq!(good.next().await.0, Event::CreateContainer);

    // The flood's surplus is dropped and reported, naming the plugin.
    let Some(dropped) = log_line(&log, &["11-chatty", "dropped"]).await else {
        panic!(
            "the dropped lines are not reported; the victim's log:\n{}",
            log_excerpt(&log)
        );
    };
    assert!(dropped.contains("over the rate limit"), "{dropped}");
    // The whole long line has been read once it is logged; the peak is
    // taken then (or when the wait is over), and the line must have been cut
    // and marked.
    // (`truncated=` is a field of output lines only.)
    let long = log_line(&log, &["10-longline", "truncated="]).await;
    let peak = peak_rss_kib(&victim.pid()).unwrap();
    eprintln!("victim peak RSS {peak} KiB with {LONG_LINE} bytes in one line");
    assert!(peak < PEAK_LIMIT_KIB, "victim peak {peak} KiB");
    let long = long.expect("the long line is logged");
    assert!(
        long.len() < 8 * 1024 && long.contains("truncated=true") && long.contains("[truncated]"),
        "the logged line is cut and marked ({} bytes)",
        long.len()
    );
    good.stop().await;
    victim.quit().await;
}
