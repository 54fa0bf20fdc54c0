#![allow(clippy::unwrap_used)]
use std::collections::BTreeMap;

use super::*;
use crate::hooks::parse_hook;

fn hook(path: &str, when: &str) -> HookConfig {
    parse_hook(
        format!(r#"{{"version": "1.0.0", "hook": {{"path": "{path}"}}, "when": {when}, "stages": ["createContainer"]}}"#)
            .as_bytes(),
        |_| true,
    )
    .unwrap()
}

fn hooks() -> Vec<(String, HookConfig)> {
    vec![
        (
            "always.json".into(),
            hook("/usr/libexec/oci/hooks.d/trace", r#"{"always": true}"#),
        ),
        (
            "gpu.json".into(),
            hook(
                "/usr/libexec/oci/hooks.d/gpu",
                r#"{"annotations": {"^gpu\\.example\\.com/enable$": "^true$"}}"#,
            ),
        ),
        (
            "rogue.json".into(),
            hook("/tmp/rogue", r#"{"annotations": {"rogue": ".*"}}"#),
        ),
        (
            "cmd.json".into(),
            hook("/opt/x/hook", r#"{"commands": ["^nginx$"]}"#),
        ),
    ]
}

const FENCED: &str = "allow:\n  namespaces: [gpu-*]\n  hookPaths: [/usr/libexec/oci/hooks.d]\n";

fn names(l: &[(String, HookConfig)]) -> Vec<&str> {
    l.iter().map(|(n, _)| n.as_str()).collect()
}

fn admit(
    f: &Fence,
    ns: &str,
    args: &[String],
    ann: &[(&str, &str)],
) -> Result<Vec<(String, HookConfig)>, Refused> {
    let a: BTreeMap<String, String> = ann
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let t = Target {
        args,
        annotations: &a,
        has_bind_mounts: false,
    };
    f.admit(
        &hooks(),
        t,
        Pod {
            namespace: ns,
            name: "p",
        },
    )
}

#[test]
fn allowed_hooks_are_kept() {
    let f = Fence::configure(FENCED).unwrap();
    let args = vec!["sleep".to_owned()];
    let got = admit(&f, "gpu-a", &args, &[("gpu.example.com/enable", "true")]).unwrap();
    assert_eq!(names(&got), ["always.json", "gpu.json"]);
}

#[test]
fn a_hook_asked_for_by_annotation_outside_the_fence_is_refused() {
    let f = Fence::configure(FENCED).unwrap();
    let args = vec!["sleep".to_owned()];
    let r = admit(&f, "default", &args, &[("gpu.example.com/enable", "true")]).unwrap_err();
    assert_eq!(r.pod, "default/p");
    assert_eq!(r.annotation, "gpu.example.com/enable");
    assert!(
        r.value.contains("\"true\"") && r.value.contains("gpu.json"),
        "{}",
        r.value
    );
    assert_eq!(r.rule, "allow.namespaces [gpu-*] (namespace \"default\")");
    // In an allowed namespace, a hook whose executable is outside hookPaths.
    let r = admit(&f, "gpu-a", &args, &[("rogue", "1")]).unwrap_err();
    assert_eq!(r.annotation, "rogue");
    assert!(r.value.contains("/tmp/rogue"), "{}", r.value);
    assert_eq!(r.rule, "allow.hookPaths [/usr/libexec/oci/hooks.d]");
    assert!(
        r.to_string()
            .starts_with("pod gpu-a/p: annotation \"rogue\": \"1\""),
        "{r}"
    );
}

/// A hook path with `..` is outside hookPaths even when it would be
/// inside once cleaned: the runtime resolves symbolic links before `..`.
#[test]
fn a_hook_path_with_dot_dot_is_outside() {
    let f = Fence::configure(FENCED).unwrap();
    let sneaky = hook(
        "/usr/libexec/oci/hooks.d/link/../trace",
        r#"{"always": true}"#,
    );
    let t = Target {
        args: &[],
        annotations: &BTreeMap::new(),
        has_bind_mounts: false,
    };
    let pod = Pod {
        namespace: "gpu-a",
        name: "p",
    };
    let got = f.admit(&[("sneaky.json".into(), sneaky)], t, pod).unwrap();
    assert!(got.is_empty(), "{:?}", names(&got));
    // Nor can an entry hold one.
    assert!(Fence::configure("allow: {hookPaths: [/usr/../opt]}").is_err());
}

#[test]
fn a_hook_nobody_asked_for_is_left_out() {
    let f = Fence::configure(FENCED).unwrap();
    let nginx = vec!["nginx".to_owned()];
    // Outside the namespaces: the always hook is left out, no error.
    assert!(admit(&f, "default", &nginx, &[]).unwrap().is_empty());
    // Inside: the command hook's executable is outside hookPaths.
    assert_eq!(
        names(&admit(&f, "gpu-a", &nginx, &[]).unwrap()),
        ["always.json"]
    );
    // A hook whose conditions cannot be evaluated stays for the caller
    // to report.
    let got = admit(&f, "gpu-a", &[], &[]).unwrap();
    assert_eq!(names(&got), ["always.json", "cmd.json"]);
}

#[test]
fn without_an_allow_list_every_matching_hook_is_kept() {
    for text in ["", "allow: {}", "other: 1"] {
        let f = Fence::configure(text).unwrap();
        let nginx = vec!["nginx".to_owned()];
        let got = admit(
            &f,
            "default",
            &nginx,
            &[("rogue", "x"), ("gpu.example.com/enable", "true")],
        )
        .unwrap();
        assert_eq!(
            names(&got),
            ["always.json", "gpu.json", "rogue.json", "cmd.json"]
        );
    }
}

#[test]
fn bad_allow_lists_are_refused() {
    for bad in [
        "allow: {paths: [/x]}",
        "allow: {hookPaths: /x}",
        "allow: {hookPaths: ['']}",
        "{x",
    ] {
        assert!(Fence::configure(bad).is_err(), "{bad}");
    }
}

/// The example of the DaemonSet's ConfigMap (deploy/hook-injector).
#[test]
fn the_deploy_example_is_a_valid_fence() {
    let cm = include_str!("../../../deploy/hook-injector/configmap.yaml");
    let doc = nri_sample_common::parse_yaml(cm).unwrap();
    let f = Fence::configure(doc["data"]["config.yaml"].as_str().unwrap()).unwrap();
    let args = vec!["sleep".to_owned()];
    let got = admit(&f, "gpu-jobs", &args, &[("gpu.example.com/enable", "true")]).unwrap();
    assert_eq!(names(&got), ["always.json", "gpu.json"]);
    assert!(admit(&f, "default", &args, &[("gpu.example.com/enable", "true")]).is_err());
}
