//! Unit tests of the scenario model and its checks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::time::Duration;

use super::*;
use crate::error::Error;

fn parse(text: &str) -> Result<Scenario, Error> {
    Scenario::parse("t.yaml", Path::new("."), text)
}

#[test]
fn durations_and_quantities() {
    assert_eq!(
        parse_duration("250ms").ok(),
        Some(Duration::from_millis(250))
    );
    assert_eq!(
        parse_duration("1.5s").ok(),
        Some(Duration::from_millis(1500))
    );
    assert_eq!(parse_duration("1m").ok(), Some(Duration::from_secs(60)));
    assert!(matches!(parse_duration("5"), Err(Error::BadValue { .. })));
    assert!(parse_duration("-1s").is_err());
    assert_eq!(parse_quantity("256Mi").ok(), Some(256 << 20));
    assert_eq!(parse_quantity("1G").ok(), Some(1_000_000_000));
    let e = parse_quantity("3Q").unwrap_err();
    assert!(
        matches!(&e, Error::UnknownUnit { unit, .. } if unit == "Q"),
        "{e}"
    );
}

#[test]
fn minimal_scenario_parses() {
    let sc = parse(
        "name: x\npods:\n  - name: web\n    containers:\n      - name: app\nsteps:\n  - up: web\n  - down: web\n",
    )
    .unwrap();
    assert_eq!(sc.steps.len(), 2);
    assert!(sc.container("web/app").is_some());
    assert!(sc.container("web/nope").is_none());
}

#[test]
fn syntax_error_has_line_and_column() {
    let err = parse("name: x\npods:\n  - name: web\n    containers: 3\n").unwrap_err();
    let Error::Parse { at, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(at.line, 4, "{err}");
    assert!(at.column > 0, "{err}");
    assert!(err.to_string().starts_with("t.yaml:4:"), "{err}");
}

#[test]
fn unknown_key_is_reported() {
    let err = parse("name: x\nstepz: []\n").unwrap_err();
    assert!(err.to_string().contains("stepz"), "{err}");
    assert!(err.to_string().starts_with("t.yaml:2:"), "{err}");
}

#[test]
fn unknown_pod_in_step_has_position() {
    let err =
        parse("pods:\n  - name: web\nsteps:\n  - run-pod: web\n  - run-pod: db\n").unwrap_err();
    assert!(err.is_scenario_error());
    let s = err.to_string();
    assert!(s.starts_with("t.yaml:5:"), "{s}");
    assert!(
        s.contains("unknown pod \"db\": it does not exist; the pods are: web"),
        "{s}"
    );
}

#[test]
fn step_with_two_actions_is_refused() {
    let err =
        parse("pods:\n  - name: web\nsteps:\n  - run-pod: web\n    stop-pod: web\n").unwrap_err();
    let s = err.to_string();
    assert!(s.contains("exactly one action"), "{s}");
    assert!(s.contains("run-pod and stop-pod"), "{s}");
    assert!(s.starts_with("t.yaml:4:"), "{s}");
}

#[test]
fn plugin_checks() {
    let err = parse("plugins:\n  - name: a\n    bundled: nosuch\n").unwrap_err();
    assert!(err.to_string().contains("unknown bundled plugin"), "{err}");
    let err = parse("plugins:\n  - name: a\n").unwrap_err();
    assert!(err.to_string().contains("exactly one of"), "{err}");
    let err = parse("plugins:\n  - name: a\n    bundled: logger\n    policy: maybe\n").unwrap_err();
    assert!(err.to_string().starts_with("t.yaml:4:"), "{err}");
    let sc = parse("plugins:\n  - name: a\n    bundled: logger\n  - name: b\n    index: '05'\n    path: /bin/true\n").unwrap();
    assert_eq!(sc.plugin_index(0), "10");
    assert_eq!(sc.plugin_index(1), "05");
    assert!(sc.plugin("10-a").is_some());
}

#[test]
fn expectation_checks() {
    let err =
        parse("steps:\n  - sleep: 1ms\n    label: s\nexpect:\n  - step: t\n    outcome: ok\n")
            .unwrap_err();
    assert!(err.to_string().contains("no step has the label"), "{err}");
    let err = parse("expect:\n  - conflict: true\n    plugin: a\n").unwrap_err();
    assert!(err.to_string().contains("exactly one of"), "{err}");
    parse("steps:\n  - sleep: 1ms\n    label: s\nexpect:\n  - step: s\n    outcome: ok\n  - conflict: false\n").unwrap();
}

const PODS: &str = "plugins:\n  - name: env\n    bundled: env\n  - name: lim\n    index: '05'\n    bundled: ulimit\npods:\n  - name: plain\n    containers: [{ name: app }, { name: side }]\n  - name: empty\n";

/// Parses PODS followed by `tail`; the error, its position and text.
fn refused(tail: &str) -> (crate::Unknown, u64, String) {
    let text = format!("{PODS}{tail}");
    match parse(&text) {
        Err(Error::Unknown { at, what }) => {
            let shown = Error::Unknown {
                at: at.clone(),
                what: what.clone(),
            }
            .to_string();
            (what, at.line, shown)
        }
        other => panic!("{tail}: expected Error::Unknown, got {other:?}"),
    }
}

#[test]
fn unknown_plugin_names_are_refused_with_the_known_ones() {
    let (what, line, text) = refused("expect:\n  - plugin: evn\n    registered: true\n");
    assert_eq!(line, 12, "{text}");
    assert!(
        matches!(&what, crate::Unknown::Plugin { name, suggestion: Some(s), known }
            if name == "evn" && s == "env" && known == &["env", "lim"]),
        "{what:?}"
    );
    assert!(
        text.starts_with(
            "t.yaml:12:13: unknown plugin \"evn\" (did you mean env?); the plugins are: env, lim"
        ),
        "{text}"
    );
    // In a conflict's `by`, an owner, a runtime policy and a plugin step.
    let (what, line, _) = refused("expect:\n  - conflict: true\n    by: nobody\n");
    assert_eq!(line, 13);
    assert!(
        matches!(&what, crate::Unknown::Plugin { name, suggestion: None, .. } if name == "nobody"),
        "{what:?}"
    );
    let (what, line, _) =
        refused("expect:\n  - container: plain/app\n    owners: { env/A: lmi }\n");
    assert_eq!(line, 13);
    assert!(
        matches!(&what, crate::Unknown::Plugin { name, .. } if name == "lmi"),
        "{what:?}"
    );
    let text = format!("runtime:\n  policies:\n    ghost: required\n{PODS}");
    let err = parse(&text).unwrap_err();
    assert!(
        matches!(&err, Error::Unknown { at, what: crate::Unknown::Plugin { name, .. } } if name == "ghost" && at.line == 3),
        "{err}"
    );
    let (what, line, _) = refused("steps:\n  - kill-plugin: lim2\n");
    assert_eq!(line, 12);
    assert!(
        matches!(&what, crate::Unknown::Plugin { name, .. } if name == "lim2"),
        "{what:?}"
    );
    // Both spellings of a declared plugin are fine.
    parse(&format!("{PODS}expect:\n  - plugin: 05-lim\n    registered: true\n  - plugin: 10-env\n    registered: true\n")).unwrap();
}

#[test]
fn plugins_from_outside_the_scenario_may_be_named() {
    let text = format!("{PODS}expect:\n  - plugin: mine\n    registered: true\n");
    assert!(parse(&text).is_err());
    let with = |opts: ParseOptions| Scenario::parse_with("t.yaml", Path::new("."), &text, &opts);
    with(ParseOptions::default().extra_plugins(["mine"])).unwrap();
    with(ParseOptions::default().extra_plugins(["50-mine"])).unwrap();
    // A plugin directory may have any plugin: the run reports a missing one.
    with(ParseOptions::default().plugin_dir(true)).unwrap();
    let err = with(ParseOptions::default().extra_plugins(["other"])).unwrap_err();
    assert!(
        err.to_string()
            .contains("unknown plugin \"mine\"; the plugins are: env, lim, other"),
        "{err}"
    );
}

#[test]
fn unknown_owner_fields_list_the_fields() {
    let (what, line, text) =
        refused("expect:\n  - container: plain/app\n    owners: { envs/A: env }\n");
    assert_eq!(line, 13);
    let crate::Unknown::OwnerField {
        field,
        valid,
        suggestion,
    } = &what
    else {
        panic!("{what:?}")
    };
    assert_eq!(field, "envs");
    assert_eq!(suggestion.as_deref(), Some("env"));
    for f in [
        "annotations",
        "mounts",
        "env",
        "mem-limit",
        "rlimits",
        "oci-hooks",
    ] {
        assert!(valid.iter().any(|v| v == f), "{f} not in {valid:?}");
    }
    assert!(
        text.contains(
            "unknown owner field \"envs\" (did you mean env?); the fields are: annotations, mounts,"
        ),
        "{text}"
    );
    parse(&format!("{PODS}expect:\n  - container: plain/app\n    owners: {{ mem-limit: env, devices//dev/fuse: lim }}\n")).unwrap();
}

#[test]
fn unknown_events_keep_their_spelling_and_list_the_canonical_names() {
    let (what, line, text) =
        refused("expect:\n  - plugin: env\n    event: stopcontainr\n    calls: 1\n");
    assert_eq!(line, 13);
    let crate::Unknown::Event {
        name,
        valid,
        suggestion,
    } = &what
    else {
        panic!("{what:?}")
    };
    assert_eq!(name, "stopcontainr");
    assert_eq!(suggestion.as_deref(), Some("StopContainer"));
    assert!(valid.iter().any(|v| v == "Synchronize"), "{valid:?}");
    assert!(
        text.contains("unknown event \"stopcontainr\" (did you mean StopContainer?); the events are: RunPodSandbox, StopPodSandbox,"),
        "{text}"
    );
    // Plugin subscriptions and per-event policies: events only.
    let text =
        "plugins:\n  - name: a\n    bundled: logger\n    events: [CreateContainer, Synchronize]\n";
    let err = parse(text).unwrap_err();
    assert!(
        matches!(&err, Error::Unknown { at, what: crate::Unknown::Event { name, .. } } if name == "Synchronize" && at.line == 4),
        "{err}"
    );
    assert!(!err.to_string().contains("Shutdown"), "{err}");
    let text = "plugins:\n  - name: a\n    bundled: logger\n    event-policy: { createcontainer: ignore, Creat: fail }\n";
    let err = parse(text).unwrap_err();
    assert!(err.to_string().contains("unknown event \"Creat\""), "{err}");
    // Any case is accepted.
    parse("plugins:\n  - name: a\n    bundled: logger\n    events: [createcontainer]\nexpect:\n  - plugin: a\n    event: synchronize\n    calls: 1\n").unwrap();
}

#[test]
fn unknown_containers_say_what_does_not_exist() {
    let (what, line, text) = refused("steps:\n  - create: plain/ap\n");
    assert_eq!(line, 12);
    assert_eq!(
        what,
        crate::Unknown::Container {
            pod: "plain".into(),
            container: "ap".into(),
            containers: vec!["app".into(), "side".into()],
        }
    );
    assert!(
        text.ends_with(
            "container \"ap\" does not exist in pod \"plain\"; its containers are: app, side"
        ),
        "{text}"
    );
    let (_, _, text) = refused("steps:\n  - start: empty/x\n");
    assert!(
        text.ends_with("does not exist in pod \"empty\"; its containers are: none"),
        "{text}"
    );
    let (what, _, text) = refused("expect:\n  - container: plian/app\n    env: { A: b }\n");
    assert!(
        matches!(&what, crate::Unknown::Pod { pod, pods } if pod == "plian" && pods == &["plain", "empty"]),
        "{what:?}"
    );
    assert!(
        text.ends_with("unknown pod \"plian\": it does not exist; the pods are: plain, empty"),
        "{text}"
    );
    let (what, _, text) = refused("steps:\n  - create: plain\n");
    assert!(
        matches!(&what, crate::Unknown::ContainerRef { target, .. } if target == "plain"),
        "{what:?}"
    );
    assert!(
        text.ends_with(
            "\"plain\" does not name a container: expected POD/CONTAINER, e.g. plain/app"
        ),
        "{text}"
    );
}

#[test]
fn closest_names_are_suggested_only_when_close() {
    let names: Vec<String> = ["env", "ulimit", "device-injector"]
        .map(String::from)
        .to_vec();
    assert_eq!(
        values::closest("devcie-injector", &names).as_deref(),
        Some("device-injector")
    );
    assert_eq!(values::closest("ULIMT", &names).as_deref(), Some("ulimit"));
    assert_eq!(values::closest("logger", &names), None);
    assert_eq!(values::closest("env", &names), None);
}
