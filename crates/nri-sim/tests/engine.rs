//! The engine without plugin processes: lifecycle semantics, records,
//! expectations, and plugins that cannot start.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use nri_sim::report::EventResult;
use nri_sim::{Collect, Options, Record, Scenario};

async fn run(yaml: &str) -> (nri_sim::Summary, Vec<Record>) {
    let sc = Scenario::parse("t.yaml", Path::new("."), yaml).unwrap();
    let mut rec = Collect::default();
    let s = nri_sim::run(&sc, &Options::default(), &mut rec)
        .await
        .unwrap();
    (s, rec.0)
}

fn events(recs: &[Record]) -> Vec<&EventResult> {
    recs.iter()
        .filter_map(|r| match r {
            Record::Event(e) => Some(e),
            _ => None,
        })
        .collect()
}

const PODS: &str = "pods:\n  - name: p\n    containers:\n      - name: c\n        env: { A: '1' }\n        resources: { memory: { limit: 64Mi } }\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_without_plugins_delivers_every_event_in_order() {
    let (s, recs) = run(&format!(
        "{PODS}steps:\n  - up: p\n  - update: p/c\n    resources: {{ cpu: {{ shares: 10 }} }}\n  - down: p\nexpect:\n  - container: p/c\n    env: {{ A: '1' }}\n"
    ))
    .await;
    let names: Vec<&str> = events(&recs).iter().map(|e| e.event.as_str()).collect();
    assert_eq!(
        names,
        [
            "RunPodSandbox",
            "CreateContainer",
            "PostCreateContainer",
            "StartContainer",
            "PostStartContainer",
            "UpdateContainer",
            "PostUpdateContainer",
            "StopContainer",
            "RemoveContainer",
            "StopPodSandbox",
            "RemovePodSandbox"
        ]
    );
    assert!(events(&recs).iter().all(|e| e.ok));
    assert!(s.passed());
    assert_eq!((s.expectations_held, s.events, s.failed_events), (1, 11, 0));
    // No plugin changed anything; the update step did.
    let diff = recs.iter().find_map(|r| match r {
        Record::Spec {
            container, diff, ..
        } if container == "p/c" => Some(diff.clone()),
        _ => None,
    });
    assert_eq!(
        diff,
        Some(vec![nri_sim::spec::DiffLine::Added {
            path: "linux.resources.cpu".into(),
            value: serde_json::json!({"shares": 10})
        }])
    );
    assert!(matches!(recs.last(), Some(Record::Summary(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_order_steps_fail_without_reaching_the_runtime() {
    let (s, recs) = run(&format!(
        "{PODS}steps:\n  - create: p/c\n    expect: fail\n  - run-pod: p\n  - run-pod: p\n    label: twice\n  - start: p/c\n    expect: fail\nexpect:\n  - step: twice\n    outcome: fail\n"
    ))
    .await;
    let evs = events(&recs);
    assert!(
        evs[0]
            .error
            .as_deref()
            .unwrap()
            .contains("pod p is not running")
    );
    assert!(evs[2].error.as_deref().unwrap().contains("already running"));
    assert!(evs[3].error.as_deref().unwrap().contains("was not created"));
    assert!(s.passed(), "{recs:#?}");
    assert_eq!(s.expectations_held, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_expectations_are_counted_with_their_position() {
    let (s, recs) = run(&format!(
        "{PODS}steps:\n  - up: p\nexpect:\n  - container: p/c\n    env: {{ A: '2' }}\n    mounts: [/nowhere]\n  - conflict: true\n"
    ))
    .await;
    assert!(!s.passed());
    assert_eq!(s.expectations_failed, 3);
    let at: Vec<&str> = recs
        .iter()
        .filter_map(|r| match r {
            Record::Expectation {
                at, held: false, ..
            } => Some(at.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(at, ["t.yaml:10:5", "t.yaml:10:5", "t.yaml:13:5"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_that_cannot_start_are_reported_and_required_ones_refuse_requests() {
    let (s, recs) = run(&format!(
        "plugins:\n  - name: b\n    bundled: logger\n  - name: x\n    path: /nonexistent/x\n    policy: required\n{PODS}steps:\n  - up: p\n    expect: fail\n"
    ))
    .await;
    let failed: Vec<(&str, &str)> = recs
        .iter()
        .filter_map(|r| match r {
            Record::PluginFailed { plugin, reason, .. } => Some((plugin.as_str(), reason.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(failed.len(), 2, "{failed:?}");
    assert!(failed[0].1.contains("self_exe"), "{failed:?}"); // bundled without the nri binary
    assert!(
        failed[1].1.contains("cannot start /nonexistent/x"),
        "{failed:?}"
    );
    assert_eq!(s.plugin_problems, 2);
    assert_eq!(s.unexpected_plugin_problems, 2);
    assert!(
        !s.passed(),
        "problems the scenario did not expect fail the run"
    );
    let ev = events(&recs)[0];
    assert!(
        ev.error
            .as_deref()
            .unwrap()
            .contains("required plugin 20-x")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expected_plugin_problems_do_not_fail_the_run() {
    // `registered: false` expects the plugin's problems.
    let (s, _) = run(&format!(
        "plugins:\n  - name: x\n    path: /nonexistent/x\n{PODS}steps:\n  - up: p\nexpect:\n  - plugin: x\n    registered: false\n"
    ))
    .await;
    assert_eq!((s.plugin_problems, s.unexpected_plugin_problems), (1, 0));
    assert!(s.passed());
    // So does a step expected to fail; the same start elsewhere does not.
    let yaml = "plugins:\n  - {name: x, path: /nonexistent/x, start: false}\nsteps:\n  - start-plugin: x\n    expect: EXPECT\n";
    let (s, _) = run(&yaml.replace("EXPECT", "fail")).await;
    assert_eq!((s.plugin_problems, s.unexpected_plugin_problems), (1, 0));
    assert!(s.passed());
    let (s, _) = run(&yaml.replace("EXPECT", "ok")).await;
    assert_eq!((s.plugin_problems, s.unexpected_plugin_problems), (1, 1));
    assert_eq!(s.expectations_failed, 1);
    assert!(!s.passed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_directory_that_is_missing_or_empty_is_an_error() {
    let sc = Scenario::parse("t.yaml", Path::new("."), PODS).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (d, want) in [
        (dir.path().join("nope"), "reading the plugin directory"),
        (dir.path().to_owned(), "no plugins in it"),
    ] {
        let opts = Options {
            plugin_dir: Some(d.clone()),
            ..Default::default()
        };
        let e = nri_sim::run(&sc, &opts, &mut Collect::default())
            .await
            .unwrap_err();
        assert!(e.to_string().contains(want), "{}: {e}", d.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_directory_plugins_that_fail_are_reported_with_their_output() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("10-broken");
    std::fs::write(
        &exe,
        "#!/bin/sh\necho starting up\necho bad config >&2\nexit 4\n",
    )
    .unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let sc = Scenario::parse(
        "t.yaml",
        Path::new("."),
        &format!("{PODS}steps:\n  - up: p\n"),
    )
    .unwrap();
    let opts = Options {
        plugin_dir: Some(dir.path().to_owned()),
        plugin_output: true,
        ..Default::default()
    };
    let mut rec = Collect::default();
    let s = nri_sim::run(&sc, &opts, &mut rec).await.unwrap();
    let failed = rec.0.iter().find_map(|r| match r {
        Record::PluginFailed {
            plugin,
            reason,
            output,
        } if plugin == "10-broken" => Some((reason.clone(), output.clone())),
        _ => None,
    });
    let (reason, output) = failed.expect("a plugin_failed record");
    assert!(reason.contains("did not register"), "{reason}");
    assert_eq!(output, ["starting up", "bad config"]);
    let lines: Vec<&str> = rec
        .0
        .iter()
        .filter_map(|r| match r {
            Record::PluginOutput { plugin, line } if plugin == "10-broken" => Some(line.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(lines, ["starting up", "bad config"]);
    assert_eq!((s.plugin_problems, s.unexpected_plugin_problems), (1, 1));
    assert!(!s.passed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_creations_all_land() {
    let (s, recs) = run(
        "pods:\n  - name: p\n    containers: [{name: a}, {name: b}, {name: c}]\nsteps:\n  - run-pod: p\n  - parallel:\n      - create: p/a\n      - create: p/b\n      - create: p/c\n",
    )
    .await;
    assert_eq!(s.failed_events, 0);
    let specs = recs
        .iter()
        .filter(|r| matches!(r, Record::Spec { .. }))
        .count();
    assert_eq!(specs, 3);
    let subs: Vec<&str> = recs
        .iter()
        .filter_map(|r| match r {
            Record::Step { index, .. } => Some(index.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(subs, ["1", "2", "2.1", "2.2", "2.3"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_creation_is_undone_without_post_event_or_spec() {
    // A mount without destination: the runtime cannot build the spec.
    let (s, recs) = run(
        "pods:\n  - name: p\n    containers:\n      - name: bad\n        mounts: [{destination: '', source: /x}]\n      - name: good\nsteps:\n  - run-pod: p\n  - create: p/bad\n    expect: fail\n  - start: p/bad\n    expect: fail\n  - create: p/good\n",
    )
    .await;
    assert!(s.passed(), "{recs:#?}");
    let names: Vec<(&str, &str, bool)> = events(&recs)
        .iter()
        .map(|e| (e.event.as_str(), e.target.as_str(), e.ok))
        .collect();
    assert_eq!(
        names,
        [
            ("RunPodSandbox", "p", true),
            ("CreateContainer", "p/bad", false),
            ("StopContainer", "p/bad", true),
            ("RemoveContainer", "p/bad", true),
            ("StartContainer", "p/bad", false),
            ("CreateContainer", "p/good", true),
            ("PostCreateContainer", "p/good", true),
        ]
    );
    let specs: Vec<&str> = recs
        .iter()
        .filter_map(|r| match r {
            Record::Spec { container, .. } => Some(container.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(specs, ["p/good"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_records_carry_the_schema_version_and_stable_capabilities() {
    let (_, recs) = run(&format!("{PODS}steps:\n  - up: p\n")).await;
    match &recs[0] {
        Record::Start { schema, .. } => assert_eq!(*schema, nri_sim::report::SCHEMA_VERSION),
        other => panic!("first record {other:?}"),
    }
    let line = serde_json::to_value(&recs[0]).unwrap();
    assert_eq!(line["schema"], nri_sim::report::SCHEMA_VERSION);
    let spec = recs
        .iter()
        .find_map(|r| match r {
            Record::Spec { spec, .. } => Some(spec.clone()),
            _ => None,
        })
        .unwrap();
    let caps: Vec<String> = spec["process"]["capabilities"]["bounding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_owned())
        .collect();
    let mut sorted = caps.clone();
    sorted.sort();
    assert!(!caps.is_empty());
    assert_eq!(caps, sorted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launched_plugins_are_checked_and_reported() {
    for (yaml, want) in [
        (
            "plugins:\n  - {name: x, path: /bin/true, config-text: 'a: 1'}\n",
            "`config-text` needs `launch: true`",
        ),
        (
            "plugins:\n  - {name: x, bundled: logger, launch: true}\n",
            "`launch` applies to executables",
        ),
        (
            "plugins:\n  - {name: x, path: /bin/true, launch: true}\nsteps:\n  - kill-plugin: x\n",
            "launched by the runtime",
        ),
    ] {
        let e = Scenario::parse("t.yaml", Path::new("."), yaml).unwrap_err();
        assert!(e.to_string().contains(want), "{yaml}: {e}");
    }
    // A launched executable that exits at once: reported, the run goes on.
    let (s, recs) = run(&format!(
        "plugins:\n  - {{name: gone, path: /bin/false, launch: true, config-text: 'x: 1'}}\n{PODS}steps:\n  - up: p\n"
    ))
    .await;
    assert!(
        recs.iter()
            .any(|r| matches!(r, Record::PluginFailed { plugin, reason, .. }
            if plugin == "10-gone" && reason.contains("did not register"))),
        "{recs:#?}"
    );
    assert_eq!((s.plugin_problems, s.failed_events), (1, 0));
    assert_eq!(s.unexpected_plugin_problems, 1);
    let o = nri_sim::Outcome::from_records(&recs);
    assert!(!o.plugins["10-gone"].registered);
    assert!(o.steps[0].ok);
    assert_eq!(o.specs.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_namespaces_reach_the_plugins_view() {
    let sc = Scenario::parse(
        "t.yaml",
        Path::new("."),
        "pods:\n  - name: p\n    namespaces: {network: /var/run/netns/p, ipc: /proc/1/ns/ipc}\n",
    )
    .unwrap();
    let p = sc.pod("p").unwrap();
    assert_eq!(p.namespaces["network"], "/var/run/netns/p");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_named_but_not_in_the_plugin_directory_are_plugin_problems() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("10-quiet");
    std::fs::write(&exe, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let opts = Options {
        plugin_dir: Some(dir.path().to_owned()),
        ..Default::default()
    };
    let yaml = format!(
        "{PODS}expect:\n  - plugin: wanted\n    registered: true\n  - plugin: gone\n    registered: false\n"
    );
    // Without the plugin directory these names are refused when parsed.
    let err = Scenario::parse("t.yaml", Path::new("."), &yaml).unwrap_err();
    assert!(
        err.to_string().contains("unknown plugin \"wanted\""),
        "{err}"
    );
    let sc = Scenario::parse_with("t.yaml", Path::new("."), &yaml, &opts.parse_options()).unwrap();
    let mut rec = Collect::default();
    let s = nri_sim::run(&sc, &opts, &mut rec).await.unwrap();
    let failed: Vec<(String, String)> = rec
        .0
        .iter()
        .filter_map(|r| match r {
            Record::PluginFailed { plugin, reason, .. } => Some((plugin.clone(), reason.clone())),
            _ => None,
        })
        .collect();
    let reason = |name: &str| {
        failed
            .iter()
            .find(|(p, _)| p == name)
            .map(|(_, r)| r.clone())
            .unwrap_or_else(|| panic!("no plugin_failed for {name}: {failed:?}"))
    };
    let want = format!(
        "not found in the plugin directory {} (it has 10-quiet)",
        dir.path().display()
    );
    assert_eq!(reason("wanted"), want);
    assert_eq!(reason("gone"), want);
    assert!(
        reason("10-quiet").contains("did not register"),
        "{failed:?}"
    );
    // `gone` is expected not to be there; `wanted` and the quiet plugin are
    // problems the scenario did not expect.
    assert_eq!((s.plugin_problems, s.unexpected_plugin_problems), (3, 2));
    assert!(!s.passed());
}
