#![allow(clippy::unwrap_used)]
use super::*;
use crate::goyaml::Field;

#[test]
fn globs() {
    let g = |p: &str, n: &str| Glob::new(p).matches(n);
    assert!(g("gpu", "gpu"));
    assert!(!g("gpu", "gpu-a"));
    assert!(!g("gpu", "xgpu"));
    assert!(g("gpu-*", "gpu-a"));
    assert!(g("gpu-*", "gpu-"));
    assert!(!g("gpu-*", "gpu"));
    assert!(g("*", ""));
    assert!(g("*-prod", "ml-prod"));
    assert!(!g("*-prod", "ml-prod2"));
    assert!(g("a*b*c", "aXbYc"));
    assert!(g("a*b*c", "abc"));
    assert!(!g("a*b*c", "acb"));
    // The last literal must not reuse characters of the first.
    assert!(!g("ab*ba", "aba"));
    assert!(g("vendor.com/gpu=*", "vendor.com/gpu=0"));
    assert!(!g("vendor.com/gpu=*", "vendor.com/net=0"));
}

#[test]
fn glob_lists() {
    let none = Globs::new(None);
    assert!(!none.is_set());
    assert!(none.allows("anything"));
    let empty = Globs::new(Some(vec![]));
    assert!(empty.is_set());
    assert!(!empty.allows("x"));
    let l = Globs::new(Some(vec!["a".into(), "b-*".into()]));
    assert!(l.allows("a") && l.allows("b-1") && !l.allows("c"));
    assert_eq!(l.describe(), "[a, b-*]");
}

#[test]
fn path_prefixes_drop_empty_and_dot_components_and_refuse_dot_dot() {
    let p = Prefixes::new(
        "allow.mountSources",
        Some(vec!["/data".into(), "/srv/shared/".into(), "tmpfs".into()]),
        PrefixKind::Path,
    )
    .unwrap();
    for ok in ["/data", "/data/x", "//data/./x/", "/srv/shared", "tmpfs"] {
        assert!(p.allows(ok), "{ok}");
    }
    for bad in [
        "/database",
        "/",
        "/data/../etc",
        "/data/x/../../etc/shadow",
        // `/srv/shared/link/..` is wherever the link's parent is: a `..`
        // is refused even when the cleaned path would be inside.
        "/srv/shared/a/../b",
        "/data/x/..",
        "/data/..",
        "/srv",
        "data",
        "tmpfs/x",
        "",
        "none",
    ] {
        assert!(!p.allows(bad), "{bad}");
    }
    // Not even under `/`.
    let root = Prefixes::new("k", Some(vec!["/".into()]), PrefixKind::Path).unwrap();
    assert!(root.allows("/x") && !root.allows("/../../x") && !root.allows("relative"));
    // An entry with `..` is not a valid entry.
    assert!(Prefixes::new("k", Some(vec!["/srv/../data".into()]), PrefixKind::Path).is_err());
    assert!(
        Prefixes::new("k", None, PrefixKind::Path)
            .unwrap()
            .allows("/")
    );
}

#[test]
fn sysctl_prefixes_accept_both_spellings() {
    let p = Prefixes::new(
        "allow.sysctls",
        Some(vec![
            "net.ipv4.ip_unprivileged_port_start".into(),
            "net.core".into(),
        ]),
        PrefixKind::Sysctl,
    )
    .unwrap();
    assert!(p.allows("net.core.somaxconn"));
    assert!(p.allows("net/core/somaxconn"));
    assert!(p.allows("net.ipv4.ip_unprivileged_port_start"));
    assert!(!p.allows("net.core_x"));
    assert!(!p.allows("net.ipv4.ip_forward"));
    assert!(!p.allows("kernel.core_pattern"));
    assert!(!p.allows("kernel/core_pattern"));
    assert!(!p.allows("net.core..somaxconn"));
    assert!(!p.allows("net.core."));
    let e = Prefixes::new(
        "allow.sysctls",
        Some(vec!["net..core".into()]),
        PrefixKind::Sysctl,
    )
    .unwrap_err();
    assert!(e.to_string().contains("allow.sysctls[0]"), "{e}");
}

#[test]
fn refusal_names_pod_annotation_value_and_rule() {
    let ns = Globs::new(Some(vec!["gpu".into()]));
    assert!(check_namespace(&ns, "gpu", "p", "k").is_ok());
    let e = check_namespace(&ns, "default", "p", "devices.noderesource.dev/pod").unwrap_err();
    assert_eq!(e.pod, "default/p");
    assert_eq!(
        e.to_string(),
        "pod default/p: annotation \"devices.noderesource.dev/pod\": namespace \"default\" is not allowed by allow.namespaces [gpu]"
    );
    assert!(check_namespace(&Globs::new(None), "any", "p", "k").is_ok());
}

#[derive(serde::Deserialize, Debug, PartialEq, Default)]
#[serde(default)]
struct Allow {
    namespaces: Option<Vec<String>>,
    names: Option<Vec<String>>,
}

const SHAPE: Shape = Shape::Struct(&[
    Field::new("strict", Shape::Bool),
    Field::new(
        "allow",
        Shape::Struct(&[
            Field::new("namespaces", Shape::Seq(&Shape::Str)),
            Field::new("names", Shape::Seq(&Shape::Str)),
        ]),
    ),
]);

#[test]
fn config_absent_keys_stay_absent() {
    let c: Config<Allow> = read_config("", &SHAPE).unwrap();
    assert_eq!(c.strict, None);
    assert_eq!(c.allow, Allow::default());
    let c: Config<Allow> = read_config("strict: yes\nother: 1", &SHAPE).unwrap();
    assert_eq!(c.strict, Some(true));
    assert_eq!(c.allow, Allow::default());
    let c: Config<Allow> = read_config("allow:\n  Namespaces: [a, 7]\n", &SHAPE).unwrap();
    assert_eq!(c.allow.namespaces, Some(vec!["a".into(), "7".into()]));
    assert_eq!(c.allow.names, None);
    // Given but empty: a fence that allows nothing.
    let c: Config<Allow> = read_config("allow: {namespaces: [], names: }", &SHAPE).unwrap();
    assert_eq!(c.allow.namespaces, Some(vec![]));
    assert_eq!(c.allow.names, Some(vec![]));
}

#[test]
fn config_mistakes_in_allow_are_errors() {
    for bad in [
        "allow: {namespace: [a]}",
        "allow: {namespaces: [a], namespaces: [b]}",
        "allow: {namespaces: a}",
        "allow: [a]",
        "{not yaml",
    ] {
        assert!(read_config::<Allow>(bad, &SHAPE).is_err(), "{bad}");
    }
    let e = read_config::<Allow>("allow: {namespace: [a]}", &SHAPE).unwrap_err();
    assert!(matches!(e, ConfigError::Allow(_)), "{e}");
    assert!(e.to_string().contains("allow.namespace"), "{e}");
}

#[test]
fn current_is_replaced() {
    let c = Current::new(1);
    assert_eq!(*c.get(), 1);
    c.set(2);
    assert_eq!(*c.get(), 2);
}
