//! Plugin identity: "NN-name", ordered by index then name.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use nri_merge::PluginId;

#[test]
fn display_parse_and_order() {
    let a = PluginId::new("10", "zeta").unwrap();
    assert_eq!(a.to_string(), "10-zeta");
    assert_eq!(PluginId::parse("10-zeta").unwrap(), a);
    assert_eq!("05-a-b".parse::<PluginId>().unwrap().name(), "a-b");
    let mut v = [
        PluginId::parse("10-b").unwrap(),
        PluginId::parse("05-z").unwrap(),
        PluginId::parse("10-a").unwrap(),
    ];
    v.sort();
    let s: Vec<_> = v.iter().map(ToString::to_string).collect();
    assert_eq!(s, ["05-z", "10-a", "10-b"]);
    let inst = a.to_instance();
    assert_eq!((inst.index.as_str(), inst.name.as_str()), ("10", "zeta"));
}

#[test]
fn invalid_identities() {
    for bad in ["1-a", "100-a", "ab-c", "10-", "10", "10-a,b", "10-a b"] {
        assert!(PluginId::parse(bad).is_err(), "{bad}");
    }
}
