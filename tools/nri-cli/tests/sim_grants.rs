//! `nri sim` with grants (the `grants:` section of the runtime's
//! configuration file, `--config`): the documented example shows an answer
//! refused for exceeding its grant and a plugin refused at registration,
//! in the run's outcome; a grants section the runtime would refuse is
//! refused before anything runs.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nri"))
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .args(args)
        .output()
        .expect("run nri")
}

fn text(o: &Output) -> String {
    format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn records(o: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The example's directory: `scenario.yaml` and `runtime.yaml`.
fn example(file: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/sim/examples/grants")
        .join(file)
        .to_str()
        .expect("utf8")
        .to_owned()
}

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).expect("write");
    p
}

/// The `CreateContainer` event record of the run.
fn create_event(records: &[Value]) -> &Value {
    records
        .iter()
        .find(|r| r["type"] == "event" && r["event"] == "CreateContainer")
        .expect("a CreateContainer event")
}

#[test]
fn the_example_shows_a_refused_answer_and_a_refused_registration() {
    let o = run(&[
        "sim",
        "--json",
        "--config",
        &example("runtime.yaml"),
        &example("scenario.yaml"),
    ]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    let recs = records(&o);

    // env's answer sets an env variable, which its grant does not allow:
    // a plugin failure of class not_granted, naming the field and grant.
    let ev = create_event(&recs);
    assert_eq!(ev["ok"], true, "{ev}");
    let failures = ev["plugin_failures"].as_array().expect("plugin_failures");
    assert_eq!(failures.len(), 1, "{ev}");
    let f = &failures[0];
    assert_eq!(f["plugin"], "20-env", "{f}");
    assert_eq!(f["class"], "not_granted", "{f}");
    let msg = f["message"].as_str().expect("message");
    assert!(
        msg.contains("sets env (ADJUST_ENV)") && msg.contains("grant #1 (plugins env)"),
        "{msg}"
    );
    let env_call = ev["calls"]
        .as_array()
        .expect("calls")
        .iter()
        .find(|c| c["plugin"] == "20-env")
        .expect("20-env was called");
    assert_eq!(env_call["result"], "not_granted", "{ev}");
    // lim's rlimit, within its grant, is applied; nothing of env's is.
    let changes = ev["changes"].as_array().expect("changes");
    assert!(!changes.is_empty(), "{ev}");
    assert!(changes.iter().all(|c| c["plugin"] == "10-lim"), "{ev}");

    // logger's executable is not the one its grant requires: refused at
    // registration, with the runtime's reason in its output.
    let refused = recs
        .iter()
        .find(|r| r["type"] == "plugin_failed" && r["plugin"] == "30-logger")
        .unwrap_or_else(|| panic!("30-logger refused: {t}"));
    let out = refused["output"].to_string();
    assert!(
        out.contains("refused by the grants") && out.contains("matches none of"),
        "{refused}"
    );
    assert!(
        !recs
            .iter()
            .any(|r| r["type"] == "plugin_registered" && r["plugin"] == "30-logger"),
        "{t}"
    );

    let summary = recs.last().expect("records");
    assert_eq!(summary["type"], "summary");
    assert_eq!(summary["plugin_failures"], 1, "{summary}");
    assert_eq!(summary["expectations_failed"], 0, "{summary}");
}

#[test]
fn without_the_grants_the_example_fails_its_expectations() {
    // The refusals above are the grants' doing: without the runtime's
    // file, env's variable is set and logger registers.
    let o = run(&["sim", "--json", &example("scenario.yaml")]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    let recs = records(&o);
    assert_eq!(
        create_event(&recs)["plugin_failures"],
        serde_json::json!([])
    );
    let summary = recs.last().expect("records");
    assert_eq!(summary["expectations_failed"], 2, "{summary}");
}

#[test]
fn a_grant_that_allows_the_answer_lets_it_through() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = write(
        dir.path(),
        "runtime.yaml",
        "grants:\n  - plugins: [env]\n    adjust: [env, annotations]\n",
    );
    let scenario = write(
        dir.path(),
        "s.yaml",
        "plugins:\n\
         \x20 - name: env\n\
         \x20   bundled: env\n\
         \x20   config: { env: { GREETING: hello } }\n\
         pods:\n\
         \x20 - name: web\n\
         \x20   containers: [{ name: app }]\n\
         steps:\n\
         \x20 - up: web\n\
         expect:\n\
         \x20 - container: web/app\n\
         \x20   env: { GREETING: hello }\n",
    );
    let o = run(&[
        "sim",
        "--json",
        "--config",
        cfg.to_str().expect("utf8"),
        scenario.to_str().expect("utf8"),
    ]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    let recs = records(&o);
    let ev = create_event(&recs);
    assert_eq!(ev["plugin_failures"], serde_json::json!([]), "{ev}");
}

#[test]
fn a_grants_section_the_runtime_refuses_is_refused_before_the_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = write(
        dir.path(),
        "bad.yaml",
        "grants:\n  - plugins: [env]\n    adjust: [telepathy]\n",
    );
    for extra in [&[][..], &["--check"][..]] {
        let mut args = vec!["sim", "--config", cfg.to_str().expect("utf8")];
        args.extend_from_slice(extra);
        let scenario = example("scenario.yaml");
        args.push(&scenario);
        let o = run(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(
            err.contains("bad.yaml:") && err.contains("unknown adjustment kind \"telepathy\""),
            "{err}"
        );
    }
}
