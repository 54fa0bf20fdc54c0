//! Launched plugins: discovery (bad names skipped, not fatal), environment
//! (NRI_PLUGIN_NAME/IDX/SOCKET=3, PATH), output forwarded to tracing,
//! configuration lookup.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use nri_runtime::launch::discover;

/// Serialises the tests of this file: tracing caches per-callsite interest,
/// and the discovery test hitting the "invalid name" callsite on a thread
/// without a subscriber, at the same moment as the log-capturing test,
/// can leave that callsite disabled for the capturing test.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write_exec(path: &Path, body: &str) {
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn discovery_skips_bad_names_and_finds_config() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    let conf = dir.path().join("conf.d");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::create_dir_all(&conf).unwrap();
    write_exec(&plugins.join("10-good"), "#!/bin/sh\n");
    write_exec(&plugins.join("05-other"), "#!/bin/sh\n");
    write_exec(&plugins.join("badname"), "#!/bin/sh\n");
    write_exec(&plugins.join("1-short"), "#!/bin/sh\n");
    std::fs::write(plugins.join("20-notexec"), "x").unwrap();
    std::fs::create_dir(plugins.join("30-dir")).unwrap();
    std::fs::write(conf.join("10-good.conf"), "full: 1").unwrap();
    std::fs::write(conf.join("other.conf"), "base: 1").unwrap();
    let found = discover(&plugins, &conf).unwrap();
    let names: Vec<_> = found.iter().map(|d| d.id.to_string()).collect();
    assert_eq!(names, ["05-other", "10-good"]);
    assert_eq!(found[0].config, "base: 1");
    assert_eq!(found[1].config, "full: 1");
    assert!(
        discover(&dir.path().join("missing"), &conf)
            .unwrap()
            .is_empty()
    );
}

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);
impl Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "current_thread")]
// The guard only keeps the other test of this file from running at the same
// time; nothing else in this test takes it, so holding it across awaits is fine.
#[allow(clippy::await_holding_lock)]
async fn launched_plugin_gets_env_fd3_path_and_its_output_is_logged() {
    let _serial = serial();
    let buf = Buf::default();
    let b2 = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || b2.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _g = tracing::subscriber::set_default(subscriber);

    let env = TestEnv::new();
    let plugins = env.dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let out = env.dir.path().join("env.txt");
    write_exec(
        &plugins.join("10-shell"),
        &format!(
            "#!/bin/sh\nenv > {}\n[ -S /proc/self/fd/3 ] || ls -l /proc/self/fd/3 >> {}\necho hello-from-stderr >&2\necho hello-from-stdout\nsleep 30\n",
            out.display(),
            out.display()
        ),
    );
    write_exec(&plugins.join("not-a-plugin"), "#!/bin/sh\n");
    let a = env
        .start(
            env.builder()
                .registration_timeout(Duration::from_millis(500)),
        )
        .await;
    // The shell cannot register: it is dropped after the registration
    // timeout, and the start still succeeds (a bad plugin is never fatal).
    let env_txt = std::fs::read_to_string(&out).unwrap();
    assert!(env_txt.contains("NRI_PLUGIN_NAME=shell"), "{env_txt}");
    assert!(env_txt.contains("NRI_PLUGIN_IDX=10"));
    assert!(env_txt.contains("NRI_PLUGIN_SOCKET=3"));
    assert!(env_txt.contains(&format!("PATH={}", nri_runtime::LAUNCHED_PLUGIN_PATH)));
    assert!(a.plugins().is_empty());
    a.stop().await;
    let log = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    assert!(
        log.contains("hello-from-stderr") && log.contains("plugin=10-shell"),
        "{log}"
    );
    assert!(log.contains("hello-from-stdout"));
    assert!(
        log.contains("not-a-plugin") && log.contains("invalid name"),
        "{log}"
    );
}
