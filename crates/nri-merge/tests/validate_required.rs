//! Required plugins: global and per pod/container, toleration annotation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod merge_util;

use merge_util::*;
use nri_merge::CreateResult;
use nri_merge::validate::{
    DefaultValidator, DefaultValidatorConfig, REQUIRED_PLUGINS_ANNOTATION, build_request,
    parse_string_list,
};

const TOLERATE: &str = "tolerate-missing-nri-plugins.noderesource.dev";

fn validator(required: &[&str]) -> DefaultValidator {
    let mut c = DefaultValidatorConfig::default();
    c.enable = true;
    c.required_plugins = required.iter().map(|s| s.to_string()).collect();
    c.tolerate_missing_plugins_annotation = TOLERATE.into();
    DefaultValidator::new(c).unwrap()
}

fn with_annotations(anns: &[(&str, &str)]) -> CreateResult {
    let mut p = pod();
    for (k, v) in anns {
        p.annotations.insert(k.to_string(), v.to_string());
    }
    CreateResult::new(p, ctr())
}

#[test]
fn absent_required_plugin_rejects() {
    let v = validator(&["policy"]);
    let mut r = result();
    apply(&mut r, "10-other", adj(|_| {})).unwrap();
    let rej = v.validate(&build_request(&r)).unwrap_err();
    assert_eq!(rej.plugins, ["policy"]);
    assert!(rej.reason.contains("\"policy\""), "{}", rej.reason);
}

#[test]
fn present_by_name_or_full_id() {
    let mut r = result();
    apply(&mut r, "10-policy", adj(|_| {})).unwrap();
    r.note_plugin(&pid("20-quiet"));
    assert!(
        validator(&["policy", "20-quiet"])
            .validate(&build_request(&r))
            .is_ok()
    );
    assert!(
        validator(&["11-policy"])
            .validate(&build_request(&r))
            .is_err()
    );
}

#[test]
fn failed_plugin_does_not_count_as_present() {
    let mut r = result();
    apply(
        &mut r,
        "10-policy",
        adj(|a| {
            a.add_env("A", "1");
        }),
    )
    .unwrap();
    // A conflicting plugin whose response was not applied.
    assert!(
        apply(
            &mut r,
            "20-req",
            adj(|a| {
                a.add_env("A", "2");
            })
        )
        .is_err()
    );
    assert!(validator(&["req"]).validate(&build_request(&r)).is_err());
}

#[test]
fn annotation_adds_required_plugins_with_scoping() {
    let v = validator(&[]);
    // Pod-wide.
    let r = with_annotations(&[(REQUIRED_PLUGINS_ANNOTATION, r#"["special"]"#)]);
    assert_eq!(
        v.validate(&build_request(&r)).unwrap_err().plugins,
        ["special"]
    );
    // Container-scoped wins over pod-scoped.
    let key = format!("{REQUIRED_PLUGINS_ANNOTATION}/container.ctr0");
    let r = with_annotations(&[
        (key.as_str(), "[ mine ]"),
        (REQUIRED_PLUGINS_ANNOTATION, "[ special ]"),
    ]);
    assert_eq!(
        v.validate(&build_request(&r)).unwrap_err().plugins,
        ["mine"]
    );
    // Another container's scope does not apply.
    let key = format!("{REQUIRED_PLUGINS_ANNOTATION}/container.other");
    let r = with_annotations(&[(key.as_str(), "[ mine ]")]);
    assert!(v.validate(&build_request(&r)).is_ok());
    // Unparsable value rejects (fail closed).
    let r = with_annotations(&[(REQUIRED_PLUGINS_ANNOTATION, "{not: a list}")]);
    assert!(v.validate(&build_request(&r)).is_err());
}

#[test]
fn toleration_annotation_skips_the_check() {
    let v = validator(&["policy"]);
    let r = with_annotations(&[(TOLERATE, "true")]);
    assert!(v.validate(&build_request(&r)).is_ok());
    let key = format!("{TOLERATE}/pod");
    let r = with_annotations(&[(key.as_str(), "1")]);
    assert!(v.validate(&build_request(&r)).is_ok());
    let r = with_annotations(&[(TOLERATE, "false")]);
    assert!(v.validate(&build_request(&r)).is_err());
    let r = with_annotations(&[(TOLERATE, "yes please")]);
    assert!(
        v.validate(&build_request(&r))
            .unwrap_err()
            .reason
            .contains("invalid")
    );
}

#[test]
fn yaml_list_forms() {
    assert_eq!(parse_string_list(r#"["a", "b"]"#).unwrap(), ["a", "b"]);
    assert_eq!(parse_string_list("[ a , 'b''c' ]").unwrap(), ["a", "b'c"]);
    assert_eq!(
        parse_string_list("- a\n- \"b\"  # comment\n").unwrap(),
        ["a", "b"]
    );
    assert_eq!(parse_string_list("[]").unwrap(), Vec::<String>::new());
    assert_eq!(parse_string_list("").unwrap(), Vec::<String>::new());
    assert_eq!(parse_string_list(r#"["\u0041"]"#).unwrap(), ["A"]);
    for bad in ["plain", "[a", "{a: b}", "- a: b", r#"["a"#, "[[a]]"] {
        assert!(parse_string_list(bad).is_err(), "{bad}");
    }
}

#[test]
fn yaml_errors_say_where() {
    let err = parse_string_list("- a\n- b\n- [c]\n").unwrap_err();
    assert!(err.contains("line 3, column 3"), "{err}");
    assert!(!err.contains('\n'), "one line: {err}");
}
