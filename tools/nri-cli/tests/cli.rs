//! `nri conformance`, `nri bench` and `nri proxy` with the real binary: help, and the
//! failures that must be clear (no socket, no benchmark binaries). No real
//! conformance run or benchmark here.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Output};

fn nri() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nri"));
    c.env_remove("RUST_LOG").env("NO_COLOR", "1");
    c
}

fn text(o: &Output) -> String {
    format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn conformance_help_shows_examples_and_flags() {
    let o = nri().args(["conformance", "--help"]).output().unwrap();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    for needle in [
        "Examples:",
        "nri conformance --cri-endpoint unix://",
        "--passive",
        "--socket",
        "--image",
        "--crictl",
        "--namespace",
        "--cgroup-parent",
        "--no-timeout",
        "--stop-runtime",
        "--json",
        "Exit status:",
    ] {
        assert!(t.contains(needle), "missing {needle:?} in:\n{t}");
    }
}

#[test]
fn bench_help_shows_examples_and_build_commands() {
    let o = nri().args(["bench", "--help"]).output().unwrap();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    for needle in [
        "Examples:",
        "nri bench --quick",
        "--reps",
        "--json-out",
        "--tokio",
        "--go-bin-dir",
        "bash scripts/build-go-peers.sh",
        "cargo build --release -p nri-bench",
    ] {
        assert!(t.contains(needle), "missing {needle:?} in:\n{t}");
    }
}

#[test]
fn top_level_help_lists_the_subcommands() {
    let o = nri().arg("--help").output().unwrap();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    for needle in ["sim", "conformance", "bench"] {
        assert!(t.contains(needle), "missing {needle:?} in:\n{t}");
    }
}

#[test]
fn conformance_without_socket_exits_2_naming_it() {
    let o = nri()
        .args([
            "conformance",
            "--socket",
            "/nonexistent/x.sock",
            "--passive",
            "1",
        ])
        .output()
        .unwrap();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("/nonexistent/x.sock"), "{t}");
    assert!(err.contains("does not exist"), "{t}");
    assert!(o.stdout.is_empty(), "{t}");
}

#[test]
fn conformance_needs_a_mode() {
    let o = nri().args(["conformance"]).output().unwrap();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains("--cri-endpoint") && t.contains("--passive"),
        "{t}"
    );

    let o = nri()
        .args(["conformance", "--cri-endpoint", "unix:///x.sock"])
        .output()
        .unwrap();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("--image"), "{t}");

    let o = nri()
        .args(["conformance", "--passive", "-3"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

#[test]
fn bench_without_go_peers_exits_2_with_build_hint() {
    let empty = tempfile::tempdir().unwrap();
    for how in ["env", "flag"] {
        let mut c = nri();
        c.args(["bench", "--quick"]);
        match how {
            "env" => c.env("NRI_INTEROP_BIN", empty.path()),
            _ => c
                .env("NRI_INTEROP_BIN", "/nonexistent/interop-bin")
                .arg("--go-bin-dir")
                .arg(empty.path()),
        };
        let o = c.output().unwrap();
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{how}: {t}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("bash scripts/build-go-peers.sh"), "{how}: {t}");
        assert!(err.contains("nri-go-bench"), "{how}: {t}");
        assert!(
            err.contains(&empty.path().display().to_string()),
            "{how}: {t}"
        );
        assert!(o.stdout.is_empty(), "{how}: {t}");
    }
}

#[test]
fn bench_without_rust_helpers_exits_2_with_build_hint() {
    let empty = tempfile::tempdir().unwrap();
    let o = nri()
        .args(["bench", "--quick", "--no-go", "--rust-bin-dir"])
        .arg(empty.path())
        .output()
        .unwrap();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("cargo build --release -p nri-bench"), "{t}");
    assert!(t.contains("nri-bench-runtime"), "{t}");
    assert!(!t.contains("build-go-peers"), "{t}");
}

#[test]
fn bench_rejects_bad_values() {
    for args in [
        &["bench", "--tokio", "fast"][..],
        &["bench", "--only", "everything"][..],
        &["bench", "--reps", "0", "--no-go"][..],
    ] {
        let o = nri().args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
    }
}

/// `nri proxy` is the nri-proxy binary: `--check` reads the configuration
/// file, a good one is "ok", a bad one fails naming the line and the key.
#[test]
fn proxy_checks_its_configuration_file() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.yaml");
    std::fs::write(
        &good,
        "socket-path: /run/p/nri.sock\nproxy:\n  name: proxy\n  index: \"50\"\n",
    )
    .unwrap();
    let o = nri()
        .args(["proxy", "--check", "--config"])
        .arg(&good)
        .output()
        .unwrap();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(t.contains("good.yaml: ok"), "{t}");

    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "socket-path: /run/p/nri.sock\nproxy:\n  nmae: proxy\n",
    )
    .unwrap();
    let o = nri()
        .args(["proxy", "--check", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        t.contains("bad.yaml") && t.contains("nmae") && t.contains('3'),
        "{t}"
    );
}
