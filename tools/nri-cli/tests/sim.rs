//! `nri sim` end to end: the real binary, its bundled plugins, scenarios.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../../crates/nri-runtime/tests/wasm_util/mod.rs"]
mod wasm_util;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn nri() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nri"));
    c.env_remove("RUST_LOG").env("NO_COLOR", "1");
    c
}

fn run(args: &[&str]) -> Output {
    nri().args(args).output().expect("run nri")
}

fn text(o: &Output) -> String {
    format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).expect("write");
    p
}

#[test]
fn default_scenario_passes_and_shows_the_features() {
    let o = run(&["sim"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    for needle in [
        "changed 10-env",                           // adjustments with owners
        "changed 20-ulimit rlimits",                // rlimit adjuster
        "changed 30-devices",                       // device/mount injector
        "both tried to set Env \"GREETING\"",       // conflict
        "60-sleepy",                                // hanging plugin ...
        "plugin CRASHED 70-crashy",                 // crash ...
        "StopContainer          web/sidecar",       // ... teardown goes on
        "Synchronize with 2 pods and 3 containers", // late registration
        "final OCI specs",
        "+ process.env: GREETING=hello",
        "~ process.rlimits[RLIMIT_NOFILE].hard: 1024 -> 4096",
        "expectations held",
    ] {
        assert!(t.contains(needle), "missing {needle:?} in:\n{t}");
    }
    // The hang ends by the runtime's deadline or by the plugin SDK's own
    // (ttRPC DEADLINE_EXCEEDED), whichever fires first.
    assert!(
        t.contains("60-sleepy timeout: no answer within") || t.contains("deadline exceeded"),
        "{t}"
    );
    assert!(!t.contains("\x1b["), "no colour when not a terminal");
}

#[test]
fn json_output_is_one_object_per_line() {
    let o = run(&["sim", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let recs: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let types: Vec<&str> = recs.iter().filter_map(|r| r["type"].as_str()).collect();
    for t in [
        "start",
        "plugin_registered",
        "step",
        "event",
        "spec",
        "expectation",
        "summary",
    ] {
        assert!(types.contains(&t), "no {t} record in {types:?}");
    }
    let summary = recs.last().expect("records");
    assert_eq!(summary["type"], "summary");
    assert_eq!(summary["expectations_failed"], 0);
    assert!(summary["conflicts"].as_u64() > Some(0));
    let create = recs
        .iter()
        .find(|r| {
            r["type"] == "event" && r["event"] == "CreateContainer" && r["target"] == "web/app"
        })
        .expect("CreateContainer web/app");
    assert!(create["changes"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["plugin"] == "10-env" && c["field"] == "env")
    }));
    assert_eq!(recs[0]["schema"], 2);
    // Diff values are JSON values: a mount is an object, a limit a number.
    let diff = recs
        .iter()
        .find(|r| r["type"] == "spec" && r["container"] == "web/app")
        .map(|r| r["diff"].clone())
        .expect("spec of web/app");
    let line = |path: &str| {
        diff.as_array()
            .and_then(|d| d.iter().find(|l| l["path"] == path))
            .cloned()
            .unwrap_or_else(|| panic!("no {path} in {diff:#}"))
    };
    assert_eq!(line("mounts[/cache]")["value"]["destination"], "/cache");
    assert_eq!(line("process.rlimits[RLIMIT_NOFILE].hard")["new"], 4096);
}

#[test]
fn expectations_check_values_and_say_what_was_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let body = "plugins:\n  - name: devices\n    bundled: devices\n  - name: ulimit\n    bundled: ulimit\npods:\n  - name: p\n    annotations: { rlimit.nri.example/nofile: '1024:4096' }\n    containers:\n      - name: c\n        resources: { memory: { limit: 256Mi }, cpu: { shares: 512 } }\n        annotations:\n          devices.nri.example/inject: /dev/fuse:c:10:229\n          mounts.nri.example/inject: /srv/cache:/cache:ro\nsteps:\n  - up: p\nexpect:\n  - container: p/c\n    resources: { memory: { limit: MEM }, cpu: { shares: 512 } }\n    mounts: [{ destination: /cache, options: [OPT] }]\n    devices: [{ path: /dev/fuse, type: c, major: 10, minor: 229 }]\n    rlimits: { nofile: { soft: 1024, hard: 4096 } }\n    spec:\n      linux.resources.memory.limit: MEM\n      process.rlimits[RLIMIT_NOFILE].soft: 1024\n";
    let good = write(
        dir.path(),
        "good.yaml",
        &body.replace("MEM", "256Mi").replace("OPT", "ro"),
    );
    let o = run(&["sim", good.to_str().expect("utf8")]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(t.contains("7 expectations held"), "{t}");
    let bad = write(
        dir.path(),
        "bad.yaml",
        &body.replace("MEM", "128Mi").replace("OPT", "rw"),
    );
    let o = run(&["sim", bad.to_str().expect("utf8")]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    for needle in [
        "p/c: linux.resources.memory.limit is 134217728",
        "expected 134217728, found 268435456",
        "expected 128Mi, found 268435456",
        "p/c has a mount at {\"destination\":\"/cache\",\"options\":[\"rw\"]}",
        "3 of 7 expectations FAILED",
    ] {
        assert!(t.contains(needle), "missing {needle:?} in:\n{t}");
    }
}

#[test]
fn failing_expectation_exits_1() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = write(
        dir.path(),
        "s.yaml",
        "plugins:\n  - name: env\n    bundled: env\n    config: { env: { A: '1' } }\npods:\n  - name: p\n    containers: [{ name: c }]\nsteps:\n  - up: p\nexpect:\n  - container: p/c\n    env: { A: '2' }\n",
    );
    let o = run(&["sim", f.to_str().expect("utf8")]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("FAILED p/c has env A=2: A=1"), "{t}");
    assert!(t.contains("s.yaml:11:5"), "{t}");
}

#[test]
fn bad_scenarios_give_file_line_column_and_exit_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases = [
        (
            "pods:\n  - name: web\n    containers: 3\n",
            "bad.yaml:3:17",
            "expected",
        ),
        (
            "pods:\n  - name: web\nsteps:\n  - run-pod: db\n",
            "bad.yaml:4:14",
            "unknown pod \"db\"",
        ),
        (
            "name: x\nstepz: []\n",
            "bad.yaml:2:1",
            "unknown field `stepz`",
        ),
        (
            "plugins:\n  - name: a\n    bundled: env\n    policy: sometimes\n",
            "bad.yaml:4:13",
            "unknown failure policy",
        ),
    ];
    for (body, at, what) in cases {
        let f = write(dir.path(), "bad.yaml", body);
        let o = run(&["sim", f.to_str().expect("utf8")]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{body}: {}", text(&o));
        assert!(err.contains(at), "{body}: want {at} in {err}");
        assert!(err.contains(what), "{body}: want {what} in {err}");
    }
}

#[test]
fn names_that_refer_to_nothing_are_refused_before_the_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = write(
        dir.path(),
        "names.yaml",
        "pods:\n  - name: plain\n    containers: [{ name: app }]\nexpect:\n  - plugin: mine\n    registered: true\n",
    );
    let path = f.to_str().expect("utf8");
    let o = run(&["sim", "--check", path]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        err.contains("names.yaml:5:13: unknown plugin \"mine\"; the plugins are: none"),
        "{err}"
    );
    assert!(err.contains("   5 |   - plugin: mine"), "{err}");
    // A plugin of the command line may be named.
    let exe = executable(dir.path(), "mine", "#!/bin/sh\nexit 0\n");
    let o = run(&[
        "sim",
        "--check",
        path,
        "--plugin",
        exe.to_str().expect("utf8"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let f = write(
        dir.path(),
        "ctr.yaml",
        "pods:\n  - name: plain\n    containers: [{ name: app }]\nsteps:\n  - create: plain/ap\n",
    );
    let o = run(&["sim", "--check", f.to_str().expect("utf8")]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        err.contains("ctr.yaml:5:13: container \"ap\" does not exist in pod \"plain\"; its containers are: app"),
        "{err}"
    );
}

#[test]
fn missing_plugin_binary_is_reported_and_the_run_goes_on_per_policy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let body = "runtime:\n  registration-timeout: 1s\nplugins:\n  - name: ghost\n    path: /nonexistent/ghost-plugin\n    policy: POLICY\n  - name: env\n    bundled: env\n    config: { env: { A: '1' } }\npods:\n  - name: p\n    containers: [{ name: c }]\nsteps:\n  - up: p\n    expect: EXPECT\nexpect:\n  - plugin: ghost\n    registered: false\n";
    for (policy, expect) in [("ignore", "ok"), ("required", "fail")] {
        let f = write(
            dir.path(),
            "m.yaml",
            &body.replace("POLICY", policy).replace("EXPECT", expect),
        );
        let o = run(&["sim", f.to_str().expect("utf8")]);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(0), "{policy}: {t}");
        assert!(
            t.contains("plugin FAILED 10-ghost: cannot start /nonexistent/ghost-plugin"),
            "{t}"
        );
        assert!(t.contains("plugin 20-env"), "{t}");
        if policy == "required" {
            assert!(
                t.contains("required plugin 10-ghost is not connected"),
                "{t}"
            );
        }
    }
}

#[test]
fn a_plugin_speaking_garbage_is_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = write(
        dir.path(),
        "g.yaml",
        "runtime:\n  registration-timeout: 500ms\nplugins:\n  - name: junk\n    bundled: garbage\n    policy: ignore\npods:\n  - name: p\n    containers: [{ name: c }]\nsteps:\n  - up: p\n    expect: ok\nexpect:\n  - plugin: junk\n    registered: false\n",
    );
    let o = run(&["sim", f.to_str().expect("utf8")]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(t.contains("plugin FAILED 10-junk: did not register"), "{t}");
}

fn executable(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = write(dir, name, body);
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    p
}

#[test]
fn plugins_that_cannot_run_fail_the_run() {
    // Not an executable: a usage error before anything runs.
    let o = run(&["sim", "--plugin", "./does-not-exist"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains("nri sim: error: --plugin ./does-not-exist: no such file"),
        "{t}"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let plain = write(dir.path(), "plain", "not a program\n");
    let o = run(&["sim", "--plugin", plain.to_str().expect("utf8")]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("plain: not executable"), "{t}");
    // Exits before registering: a plugin problem, exit status 1.
    let o = run(&["sim", "--plugin", "/bin/true"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        t.contains("plugin FAILED 50-true: exited before registering"),
        "{t}"
    );
    assert!(t.contains("1 plugin problems (1 UNEXPECTED)"), "{t}");
    // A plugin directory that does not exist (inside a fresh temporary
    // directory: a fixed path such as /nonexistent may exist on a host).
    let missing = dir.path().join("missing");
    let missing = missing.to_str().expect("utf8");
    let o = run(&["sim", "--plugin-dir", missing]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains(&format!(
            "nri sim: error: reading the plugin directory {missing}"
        )),
        "{t}"
    );
}

#[test]
fn a_plugin_dir_plugin_failing_configure_is_a_reported_problem() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nri = env!("CARGO_BIN_EXE_nri");
    executable(
        dir.path(),
        "10-env",
        &format!("#!/bin/sh\nexec '{nri}' __bundled-plugin env\n"),
    );
    executable(
        dir.path(),
        "20-logger",
        &format!("#!/bin/sh\nexec '{nri}' __bundled-plugin logger\n"),
    );
    write(dir.path(), "10-env.conf", "env: { A: '1' }\nbogus: 1\n");
    let d = dir.path().to_str().expect("utf8");
    let o = run(&["sim", "--plugin-dir", d, "--plugin-output"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        t.contains("plugin FAILED 10-env: launched by the runtime from"),
        "{t}"
    );
    // Why is in its output, shown with the failure.
    assert!(
        t.contains("| ERROR nri-plugin: configuration failed: invalid configuration: unknown setting \"bogus\""),
        "{t}"
    );
    // --plugin-output shows launched plugins' lines as they come.
    assert!(t.contains("Synchronize: 0 pods"), "{t}");
    assert!(t.contains("1 plugin problems (1 UNEXPECTED)"), "{t}");
    let o = run(&["sim", "--plugin-dir", d, "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let records: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    let failed: Vec<&serde_json::Value> = records
        .iter()
        .filter(|r| r["type"] == "plugin_failed")
        .collect();
    assert_eq!(failed.len(), 1, "{records:#?}");
    assert_eq!(failed[0]["plugin"], "10-env");
    assert!(
        failed[0]["output"]
            .as_array()
            .is_some_and(|o| o.iter().any(|l| l
                .as_str()
                .is_some_and(|l| l.contains("configuration failed")))),
        "{records:#?}"
    );
    let summary = records.last().expect("records");
    assert_eq!(summary["type"], "summary");
    assert_eq!(summary["unexpected_plugin_problems"], 1);
    // Fixed configuration: it registers and the run passes.
    write(dir.path(), "10-env.conf", "env: { A: '1' }\n");
    let o = run(&["sim", "--plugin-dir", d]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(t.contains("+ process.env: A=1"), "{t}");
}

#[test]
fn command_line_plugin_runs_the_lifecycle_scenario() {
    // Any executable that speaks NRI on fd 3 works; use the bundled logger
    // through a wrapper script named like a pre-launched plugin.
    let dir = tempfile::tempdir().expect("tempdir");
    let script = write(
        dir.path(),
        "15-mylogger",
        &format!(
            "#!/bin/sh\nexec '{}' __bundled-plugin logger\n",
            env!("CARGO_BIN_EXE_nri")
        ),
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let o = run(&["sim", "--plugin", script.to_str().expect("utf8")]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(t.contains("nri sim: lifecycle"), "{t}");
    assert!(t.contains("plugin 15-mylogger"), "{t}");
    assert!(t.contains("UpdateContainer        demo/app"), "{t}");
}

#[test]
fn every_documented_example_runs_and_holds() {
    // A `.yaml` file is a scenario; a directory holds `scenario.yaml` and
    // the runtime's configuration file it is run with, `runtime.yaml`.
    let dir = repo().join("docs/sim/examples");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("docs/sim/examples") {
        let p = entry.expect("entry").path();
        let mut args = vec!["sim".to_owned(), "--json".to_owned()];
        if p.is_dir() {
            let scenario = p.join("scenario.yaml");
            assert!(scenario.is_file(), "{}: no scenario.yaml", p.display());
            let config = p.join("runtime.yaml");
            if config.is_file() {
                args.extend(["--config".to_owned(), config.display().to_string()]);
            }
            args.push(scenario.display().to_string());
        } else if p.extension().is_some_and(|e| e == "yaml") {
            args.push(p.display().to_string());
        } else {
            continue;
        }
        n += 1;
        let o = nri().args(&args).output().expect("run nri");
        assert_eq!(o.status.code(), Some(0), "{}: {}", p.display(), text(&o));
    }
    assert!(n >= 5, "only {n} examples");
}

#[test]
fn help_of_every_subcommand_has_examples() {
    for args in [vec!["--help"], vec!["sim", "--help"]] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(0));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("Examples:"),
            "{args:?}"
        );
    }
    let o = run(&["sim", "--nope"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn print_check_and_list() {
    let o = run(&["sim", "--print-scenario"]);
    assert_eq!(o.status.code(), Some(0));
    let demo = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(demo.contains("name: demo"));
    let dir = tempfile::tempdir().expect("tempdir");
    let f = write(dir.path(), "demo.yaml", &demo);
    let o = run(&["sim", "--check", f.to_str().expect("utf8")]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = run(&["sim", "--list-bundled"]);
    let out = String::from_utf8_lossy(&o.stdout);
    for k in [
        "env", "ulimit", "devices", "logger", "crash", "hang", "slow", "garbage",
    ] {
        assert!(out.contains(k), "{out}");
    }
}

#[test]
fn the_runtime_config_file_is_applied_and_checked_at_start_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scenario = write(
        dir.path(),
        "s.yaml",
        "runtime:\n  registration-timeout: 1s\nplugins:\n  - name: ghost\n    path: /nonexistent/ghost-plugin\n  - name: env\n    bundled: env\npods:\n  - name: p\n    containers: [{ name: c }]\nsteps:\n  - up: p\n    expect: fail\nexpect:\n  - plugin: ghost\n    registered: false\n",
    );
    let yaml = write(
        dir.path(),
        "nri.yaml",
        "request-timeout: 1s\nplugins:\n  ghost:\n    policy: required\n",
    );
    let toml = write(
        dir.path(),
        "nri.toml",
        "request-timeout = \"1s\"\n[plugins.ghost]\npolicy = \"required\"\n",
    );
    for cfg in [&yaml, &toml] {
        let o = run(&[
            "sim",
            "--config",
            cfg.to_str().expect("utf8"),
            scenario.to_str().expect("utf8"),
        ]);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(0), "{}: {t}", cfg.display());
        assert!(t.contains("required plugin ghost is not connected"), "{t}");
    }
    // Bad files are refused before anything runs, with file, line and the
    // valid values; --check checks the file too.
    for (name, body, at, what) in [
        (
            "bad.yaml",
            "strike-limit: 1\nplugins:\n  ghost:\n    policy: always\n",
            "bad.yaml:4:13",
            "expected one of ignore, fail, required",
        ),
        (
            "bad.toml",
            "[plugins.ghost.events]\nStartContaner = \"ignore\"\n",
            "bad.toml:2:1",
            "StartContainer",
        ),
        (
            "bad.yaml",
            "request-timout: 1s\n",
            "bad.yaml:1:1",
            "request-timeout",
        ),
    ] {
        let f = write(dir.path(), name, body);
        for extra in [&[][..], &["--check"][..]] {
            let mut args = vec!["sim", "--config", f.to_str().expect("utf8")];
            args.extend_from_slice(extra);
            args.push(scenario.to_str().expect("utf8"));
            let o = run(&args);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{body}: {}", text(&o));
            assert!(err.contains(at), "{body}: want {at} in {err}");
            assert!(err.contains(what), "{body}: want {what} in {err}");
        }
    }
}

#[test]
fn a_plugin_without_a_policy_inherits_the_default_policy() {
    // The plugin sets only its timeout: it inherits `required`, so its
    // timeout fails the creation (under `fail` it would be skipped).
    let dir = tempfile::tempdir().expect("tempdir");
    let f = write(
        dir.path(),
        "s.yaml",
        "runtime:\n  default-policy: required\nplugins:\n  - name: stuck\n    bundled: hang\n    timeout: 300ms\npods:\n  - name: p\n    containers: [{ name: c }]\nsteps:\n  - run-pod: p\n  - create: p/c\n    expect: fail\n",
    );
    let o = run(&["sim", f.to_str().expect("utf8")]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
}

/// A plugin that registers, then exits while it handles CreateContainer.
const CRASH_MID_RUN: &str = "\
plugins:
  - name: crashy
    bundled: crash
    config: { event: CreateContainer }
  - name: env
    bundled: env
    config: { env: { A: '1' } }
pods:
  - name: web
    containers: [{ name: app }, { name: side }]
steps:
  - up: web
";

#[test]
fn a_plugin_crashing_mid_run_is_a_problem_unless_expected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sc = write(dir.path(), "crash.yaml", CRASH_MID_RUN);
    let sc = sc.to_str().expect("utf8");
    let o = run(&["sim", sc]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("plugin 10-crashy"), "it registered first: {t}");
    assert!(t.contains("plugin CRASHED 10-crashy"), "{t}");
    assert!(t.contains("exit status: 3"), "{t}");
    assert!(t.contains("crashing on event #"), "its last output: {t}");
    assert!(t.contains("1 plugin problems (1 UNEXPECTED)"), "{t}");
    // The other plugin goes on: the containers get its change.
    assert!(t.contains("+ process.env: A=1"), "{t}");

    let o = run(&["sim", sc, "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let records: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    let of = |ty: &str| -> Vec<&serde_json::Value> {
        records
            .iter()
            .filter(|r| r["type"] == ty && r["plugin"] == "10-crashy")
            .collect()
    };
    assert_eq!(of("plugin_registered").len(), 1, "{records:#?}");
    let exited = of("plugin_exited");
    assert_eq!(exited.len(), 1, "{records:#?}");
    assert_eq!(exited[0]["expected"], false, "{records:#?}");
    assert!(
        exited[0]["status"]
            .as_str()
            .is_some_and(|s| s.contains("exit status: 3")),
        "{records:#?}"
    );
    let summary = records.last().expect("records");
    assert_eq!(summary["type"], "summary");
    assert_eq!(summary["plugin_problems"], 1, "{summary}");
    assert_eq!(summary["unexpected_plugin_problems"], 1, "{summary}");

    // Expected by the scenario: the same crash, and the run passes.
    let expected = format!("{CRASH_MID_RUN}expect:\n  - plugin: crashy\n    registered: false\n");
    let sc = write(dir.path(), "crash-expected.yaml", &expected);
    let o = run(&["sim", sc.to_str().expect("utf8")]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(t.contains("plugin CRASHED 10-crashy"), "{t}");
    assert!(t.contains("1 plugin problems;"), "{t}");
    assert!(!t.contains("UNEXPECTED"), "{t}");
}

#[test]
fn plugin_output_shows_a_wasm_plugins_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let guest = dir.path().join("30-talker.wasm");
    std::fs::write(&guest, wasm_util::talker().wasm()).expect("write");
    let g = guest.to_str().expect("utf8");
    let o = run(&["sim", "--plugin", g, "--plugin-output"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    for line in wasm_util::talker_output() {
        assert!(t.contains(&format!("[30-talker] {line}")), "{t}");
    }
    // The same lines as plugin_output records in JSON.
    let o = run(&["sim", "--plugin", g, "--plugin-output", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let lines: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json line"))
        .filter(|r| r["type"] == "plugin_output" && r["plugin"] == "30-talker")
        .map(|r| r["line"].as_str().unwrap_or_default().to_owned())
        .collect();
    for line in wasm_util::talker_output() {
        assert!(lines.contains(&line), "{lines:?}");
    }
    // Without --plugin-output, none of it.
    let o = run(&["sim", "--plugin", g]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(
        !t.contains(wasm_util::TALKER_STDOUT) && !t.contains(wasm_util::TALKER_LOG),
        "{t}"
    );
}
