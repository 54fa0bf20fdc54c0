//! An embedder's own section in the runtime's configuration file
//! (`ConfigSection`, `Config::apply_str_with`): both formats, the runtime's
//! keys still checked, errors in the section and outside it with positions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use nri_runtime::{Config, ConfigDuration, ConfigFormat, ConfigSection, Error};

#[derive(Debug, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Shim {
    name: String,
    #[serde(default)]
    grace: Option<ConfigDuration>,
}

impl ConfigSection for Shim {
    const KEY: &'static str = "shim";
}

fn yaml(text: &str) -> Result<(Config, Option<Shim>), Error> {
    let mut c = Config::new("rt", "1");
    let s = c.apply_str_with("nri.yaml", ConfigFormat::Yaml, text)?;
    Ok((c, s))
}

fn toml(text: &str) -> Result<(Config, Option<Shim>), Error> {
    let mut c = Config::new("rt", "1");
    let s = c.apply_str_with("nri.toml", ConfigFormat::Toml, text)?;
    Ok((c, s))
}

fn position(e: &Error) -> (Option<usize>, Option<usize>, String) {
    match e {
        Error::ConfigFile {
            line,
            column,
            message,
            ..
        } => (*line, *column, message.clone()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_section_and_the_runtime_keys_are_read_in_both_formats() {
    let (c, s) =
        yaml("request-timeout: 1500ms\nshim:\n  name: one\n  grace: 250ms\nstrike-limit: 7\n")
            .unwrap();
    assert_eq!(c.request_timeout, Duration::from_millis(1500));
    assert_eq!(c.strike_limit, 7, "keys after the section are read too");
    assert_eq!(
        s,
        Some(Shim {
            name: "one".into(),
            grace: Some(ConfigDuration(Duration::from_millis(250)))
        })
    );

    let (c, s) = toml(
        "request-timeout = \"1500ms\"\nstrike-limit = 7\n[shim]\nname = \"one\"\ngrace = \"250ms\"\n",
    )
    .unwrap();
    assert_eq!(c.request_timeout, Duration::from_millis(1500));
    assert_eq!(c.strike_limit, 7);
    assert_eq!(
        s.unwrap().grace,
        Some(ConfigDuration(Duration::from_millis(250)))
    );
}

#[test]
fn a_file_without_the_section_or_empty_gives_none() {
    let (c, s) = yaml("strike-limit: 1\n").unwrap();
    assert_eq!((c.strike_limit, s), (1, None));
    assert_eq!(yaml("").unwrap().1, None);
    assert_eq!(yaml("# only a comment\n").unwrap().1, None);
    assert_eq!(toml("").unwrap().1, None);
}

#[test]
fn unknown_runtime_keys_are_still_refused_with_their_line() {
    let err = yaml("shim:\n  name: x\nsocket-pth: /x\n").unwrap_err();
    let (line, _, msg) = position(&err);
    assert_eq!(line, Some(3), "{err}");
    assert!(
        msg.contains("socket-pth") && msg.contains("socket-path"),
        "{msg}"
    );

    let err = toml("socket-pth = \"/x\"\n[shim]\nname = \"x\"\n").unwrap_err();
    assert_eq!(position(&err).0, Some(1), "{err}");
}

#[test]
fn errors_in_the_section_name_the_line() {
    let err = yaml("request-timeout: 1s\nshim:\n  name: x\n  grace: soon\n").unwrap_err();
    let (line, _, msg) = position(&err);
    assert_eq!(line, Some(4), "{err}");
    assert!(msg.contains("duration"), "{msg}");

    let err = yaml("shim:\n  name: x\n  nmae: y\n").unwrap_err();
    let (line, _, msg) = position(&err);
    assert_eq!(line, Some(3), "{err}");
    assert!(msg.contains("nmae"), "{msg}");

    let err = toml("[shim]\nname = \"x\"\ngrace = 3\n").unwrap_err();
    assert_eq!(position(&err).0, Some(3), "{err}");
}

#[test]
fn the_runtime_checks_after_parsing_still_apply() {
    let err = yaml("shim:\n  name: x\nrequest-timeout: 0s\n").unwrap_err();
    assert_eq!(position(&err).0, Some(3), "{err}");
}

#[test]
fn without_a_section_type_the_key_is_unknown() {
    let mut c = Config::new("rt", "1");
    let err = c
        .apply_str("nri.yaml", ConfigFormat::Yaml, "shim:\n  name: x\n")
        .unwrap_err();
    assert!(err.to_string().contains("shim"), "{err}");
}
