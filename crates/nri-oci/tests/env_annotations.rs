//! Annotations, env, args, hooks, rlimits and OOM score.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;

use common::*;
use nri_api::api;
use serde_json::json;

fn annotations(pairs: &[(&str, &str)]) -> api::ContainerAdjustment {
    api::ContainerAdjustment {
        annotations: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
        ..Default::default()
    }
}

fn env(entries: &[(&str, &str)]) -> api::ContainerAdjustment {
    api::ContainerAdjustment {
        env: entries.iter().map(|(k, v)| kv(k, v)).collect(),
        ..Default::default()
    }
}

#[test]
fn empty_adjustment_changes_nothing() {
    let spec = adjusted(&api::ContainerAdjustment::default());
    assert_eq!(spec, base_spec());
}

#[test]
fn annotations_add_replace_remove() {
    let spec = adjusted(&annotations(&[
        ("io.kubernetes.cri.container-name", "renamed"),
        ("example.com/new", "yes"),
        ("-example.com/absent", ""),
    ]));
    let a = &json(&spec)["annotations"];
    assert_eq!(a["io.kubernetes.cri.container-name"], "renamed");
    assert_eq!(a["example.com/new"], "yes");
    assert_eq!(a.as_object().unwrap().len(), 2);
    snap!("annotations_add_replace_remove", spec);
}

#[test]
fn annotation_remove_then_add_same_key_is_present() {
    let spec = adjusted(&annotations(&[
        ("-io.kubernetes.cri.container-name", ""),
        ("io.kubernetes.cri.container-name", "again"),
    ]));
    assert_eq!(
        json(&spec)["annotations"]["io.kubernetes.cri.container-name"],
        "again"
    );
}

#[test]
fn annotation_removal_only() {
    let spec = adjusted(&annotations(&[("-io.kubernetes.cri.container-name", "")]));
    assert_eq!(json(&spec)["annotations"], json!({}));
}

#[test]
fn env_set_in_place_remove_and_append() {
    let spec = adjusted(&env(&[
        ("HOME", "/home/app"),
        ("-TERM", ""),
        ("NEW", "1"),
        ("-NOT_THERE", ""),
        ("WITH_EQ", "a=b"),
    ]));
    assert_eq!(
        json(&spec)["process"]["env"],
        json!([
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME=/home/app",
            "LANG=C.UTF-8",
            "NEW=1",
            "WITH_EQ=a=b"
        ])
    );
    snap!("env_set_in_place_remove_and_append", spec);
}

#[test]
fn env_remove_then_add_same_key_is_present_in_place() {
    let spec = adjusted(&env(&[("-TERM", ""), ("TERM", "dumb")]));
    let env = json(&spec)["process"]["env"].clone();
    assert_eq!(env[1], "TERM=dumb");
    assert_eq!(env.as_array().unwrap().len(), 4);
}

#[test]
fn env_last_value_wins_and_duplicates_collapse() {
    let mut spec = base_spec();
    let mut e = spec.process().as_ref().unwrap().env().clone().unwrap();
    e.push("TERM=second".into());
    spec.process_mut().as_mut().unwrap().set_env(Some(e));
    applier()
        .apply_adjustment(&mut spec, &env(&[("TERM", "a"), ("TERM", "b")]))
        .unwrap();
    let env = json(&spec)["process"]["env"].clone();
    let terms: Vec<_> = env
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e.as_str().unwrap().starts_with("TERM="))
        .collect();
    assert_eq!(terms, vec!["TERM=b"]);
}

#[test]
fn args_replace_and_override_marker() {
    let spec = adjusted(&api::ContainerAdjustment {
        args: vec!["/bin/other".into(), "-v".into()],
        ..Default::default()
    });
    assert_eq!(json(&spec)["process"]["args"], json!(["/bin/other", "-v"]));

    let spec = adjusted(&api::ContainerAdjustment {
        args: vec!["".into(), "/bin/override".into()],
        ..Default::default()
    });
    assert_eq!(json(&spec)["process"]["args"], json!(["/bin/override"]));

    // Only the marker: nothing to set.
    let spec = adjusted(&api::ContainerAdjustment {
        args: vec!["".into()],
        ..Default::default()
    });
    assert_eq!(json(&spec)["process"]["args"], json!(["/app", "--serve"]));
}

fn hook(path: &str) -> api::Hook {
    api::Hook {
        path: path.into(),
        args: vec![path.into(), "--flag".into()],
        env: vec!["A=1".into()],
        timeout: api::OptionalInt::some(5i64),
    }
}

#[test]
fn hooks_are_appended_per_phase() {
    let adj = api::ContainerAdjustment {
        hooks: Some(api::Hooks {
            prestart: vec![hook("/hooks/prestart")],
            create_runtime: vec![hook("/hooks/create-runtime")],
            create_container: vec![hook("/hooks/create-container")],
            start_container: vec![hook("/hooks/start-container")],
            poststart: vec![hook("/hooks/poststart")],
            poststop: vec![hook("/hooks/poststop"), hook("/hooks/poststop2")],
        }),
        ..Default::default()
    };
    let mut spec = adjusted(&adj);
    // A second adjustment appends after the first.
    applier().apply_adjustment(&mut spec, &adj).unwrap();
    let h = &json(&spec)["hooks"];
    assert_eq!(h["poststop"].as_array().unwrap().len(), 4);
    assert_eq!(h["createRuntime"][1]["path"], "/hooks/create-runtime");
    assert_eq!(h["prestart"][0]["timeout"], 5);
    snap!("hooks_are_appended_per_phase", json(&spec)["hooks"]);
}

#[test]
fn rlimits_replace_by_type_and_append() {
    let spec = adjusted(&api::ContainerAdjustment {
        rlimits: vec![
            api::PosixRlimit {
                r#type: "RLIMIT_NOFILE".into(),
                hard: 65536,
                soft: 4096,
            },
            api::PosixRlimit {
                r#type: "RLIMIT_MEMLOCK".into(),
                hard: u64::MAX,
                soft: u64::MAX,
            },
        ],
        ..Default::default()
    });
    assert_eq!(
        json(&spec)["process"]["rlimits"],
        json!([
            {"type": "RLIMIT_NOFILE", "hard": 65536, "soft": 4096},
            {"type": "RLIMIT_MEMLOCK", "hard": u64::MAX, "soft": u64::MAX},
        ])
    );
    snap!("rlimits_replace_by_type_and_append", spec);
}

#[test]
fn oom_score_adj_is_set() {
    let spec = adjusted(&linux(api::LinuxContainerAdjustment {
        oom_score_adj: api::OptionalInt::some(-998i64),
        ..Default::default()
    }));
    assert_eq!(json(&spec)["process"]["oomScoreAdj"], -998);
}

#[test]
fn process_is_created_when_missing() {
    let mut spec = base_spec();
    spec.set_process(None);
    applier()
        .apply_adjustment(&mut spec, &env(&[("ONLY", "me")]))
        .unwrap();
    assert_eq!(
        json(&spec)["process"],
        json!({"user": {"uid": 0, "gid": 0}, "cwd": "/", "env": ["ONLY=me"]})
    );
}
