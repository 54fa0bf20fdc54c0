//! `GoFlags`: the Go sample plugins' flags in Go's `flag` syntax, a
//! plugin's own flags through the hook, and what they set on the builder.
#![allow(clippy::unwrap_used, missing_docs)]

use std::path::PathBuf;

use nri_plugin::{Error, GoFlags};

fn parse(args: &[&str]) -> Result<GoFlags, Error> {
    GoFlags::parse(args.iter().map(|s| s.to_string()), |_, _| Ok(false))
}

#[test]
fn go_forms() {
    let f = parse(&["-idx=05", "--name", "x", "-socket", "/s", "-verbose"]).unwrap();
    assert_eq!(f.index.as_deref(), Some("05"));
    assert_eq!(f.name.as_deref(), Some("x"));
    assert_eq!(f.socket_path, Some(PathBuf::from("/s")));
    assert!(f.verbose && !f.no_reconnect);
    let f = parse(&["--socket-path=/t", "-verbose=false", "-no-reconnect"]).unwrap();
    assert_eq!(f.socket_path, Some(PathBuf::from("/t")));
    assert!(!f.verbose && f.no_reconnect);
}

#[test]
fn arguments_after_the_flags_are_ignored() {
    let f = parse(&["-idx", "1", "pos", "-verbose"]).unwrap();
    assert_eq!(f.index.as_deref(), Some("1"));
    assert_eq!(f.ignored, ["pos", "-verbose"]);
    assert!(!f.verbose);
    assert_eq!(parse(&["--", "-x"]).unwrap().ignored, ["-x"]);
    assert!(parse(&["--"]).unwrap().ignored.is_empty());
}

#[test]
fn usage_errors_say_what_is_wrong() {
    let msg = |args: &[&str]| match parse(args) {
        Err(Error::Usage { message }) => message,
        other => panic!("{args:?}: {other:?}"),
    };
    assert_eq!(msg(&["-idx"]), "flag needs an argument: -idx");
    assert_eq!(msg(&["-bogus"]), "flag provided but not defined: -bogus");
    assert_eq!(
        msg(&["-verbose=maybe"]),
        "invalid boolean value \"maybe\" for -verbose"
    );
    assert_eq!(msg(&["---x"]), "bad flag syntax: ---x");
    assert!(matches!(parse(&["-help"]), Err(Error::HelpRequested)));
    assert!(matches!(parse(&["-h"]), Err(Error::HelpRequested)));
}

#[test]
fn own_flags_are_offered_first() {
    let mut dry_run = false;
    let mut level = String::new();
    let f = GoFlags::parse(
        ["-dry-run", "-verbose", "debug", "-idx", "7"].map(String::from),
        |name, value| {
            match name {
                "dry-run" => dry_run = value.bool()?,
                // A plugin may take over a common flag.
                "verbose" => level = value.string()?,
                _ => return Ok(false),
            }
            Ok(true)
        },
    )
    .unwrap();
    assert!(dry_run);
    assert_eq!(level, "debug");
    assert!(!f.verbose);
    assert_eq!(f.index.as_deref(), Some("7"));
    let e = GoFlags::parse(["-limit", "x"].map(String::from), |name, value| {
        if name == "limit" {
            let v = value.string()?;
            return v
                .parse::<u32>()
                .map(|_| true)
                .map_err(|_| Error::usage(format!("invalid value {v:?} for -limit")));
        }
        Ok(false)
    })
    .unwrap_err();
    assert_eq!(e.to_string(), "invalid value \"x\" for -limit");
}

#[test]
fn usage_exit_statuses_are_go_flag_s() {
    let code = |e: &Error| format!("{:?}", GoFlags::usage_exit(e, "usage"));
    assert_eq!(
        code(&Error::HelpRequested),
        format!("{:?}", std::process::ExitCode::SUCCESS)
    );
    assert_eq!(
        code(&Error::usage("bad")),
        format!("{:?}", std::process::ExitCode::from(2))
    );
}

struct Noop;

#[nri_plugin::plugin]
impl nri_plugin::Plugin for Noop {
    async fn run_pod_sandbox(
        &self,
        _pod: nri_plugin::api::PodSandbox,
    ) -> nri_plugin::HandlerResult<()> {
        Ok(())
    }
}

#[test]
fn flags_set_the_identity_and_the_reconnection() {
    let f = parse(&["-idx", "42", "-name", "mine", "-no-reconnect"]).unwrap();
    let stub = f.apply(nri_plugin::Builder::new(Noop)).build().unwrap();
    assert_eq!(stub.plugin_name(), "42-mine");
    assert!(format!("{:?}", f.runner()).contains("reconnect: None"));
    let f = parse(&["-idx", "42", "-name", "mine"]).unwrap();
    assert!(format!("{:?}", f.runner()).contains("reconnect: Some"));
    let e = parse(&["-idx", "x1", "-name", "mine"])
        .unwrap()
        .apply(nri_plugin::Builder::new(Noop))
        .build()
        .err()
        .unwrap();
    assert!(matches!(e, Error::InvalidIndex { .. }), "{e:?}");
}
