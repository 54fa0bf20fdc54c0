//! Unit tests of the engine's helpers.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::ExtraPlugin;
use crate::scenario::field_name;

#[test]
fn extra_plugin_args() {
    let p = ExtraPlugin::parse("/x/10-my-plugin").unwrap();
    assert_eq!((p.name.as_str(), p.index.as_str()), ("my-plugin", "10"));
    let p = ExtraPlugin::parse("./target/debug/my_plugin:42").unwrap();
    assert_eq!((p.name.as_str(), p.index.as_str()), ("my_plugin", "42"));
    let p = ExtraPlugin::parse("plugin.bin").unwrap();
    assert_eq!((p.name.as_str(), p.index.as_str()), ("plugin-bin", "50"));
}

#[test]
fn field_names_are_kebab_case() {
    use nri_api::api::Field;
    assert_eq!(field_name(Field::Env as i32), "env");
    assert_eq!(field_name(Field::MemLimit as i32), "mem-limit");
}
