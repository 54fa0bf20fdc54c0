//! The configuration file: YAML and TOML with the same keys, policy
//! inheritance, and errors naming the file, the line and the valid values.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use nri_api::api::Event;
use nri_runtime::{
    Adaptation, Config, ConfigFormat, Error, FailurePolicy, PluginId, PluginPolicy, ValidationMode,
};

fn yaml(text: &str) -> Result<Config, Error> {
    let mut c = Config::new("rt", "1");
    c.apply_str("nri.yaml", ConfigFormat::Yaml, text)?;
    Ok(c)
}

fn toml(text: &str) -> Result<Config, Error> {
    let mut c = Config::new("rt", "1");
    c.apply_str("nri.toml", ConfigFormat::Toml, text)?;
    Ok(c)
}

const FULL_YAML: &str = r#"
socket-path: /run/nri/nri.sock
plugin-dir: /usr/lib/nri/plugins
config-dir: /etc/nri/plugins.d
registration-timeout: 10s
request-timeout: 1500ms
disable-connections: false
disable-launch: true
strike-limit: 5
allowed-uids: [0, 1000]
allowed-gids: [0]
stop-grace: 3s
spin-budget: 50us
default-policy: ignore
exempt-namespaces: [kube-system, nri]
startup-grace: 30s
default-validator:
  reject-oci-hook-adjustment: true
  required-plugins: [netplug]
  reject-fields: [Mounts]
plugins:
  10-netplug:
    policy: required
    request-timeout: 5s
    strike-limit: 0
  resmgr:
    policy: fail
    events:
      UpdateContainer: required
    ignore-events: [StartContainer, PostStartContainer]
  guard:
    validation: fail-open
    supersede: false
"#;

const FULL_TOML: &str = r#"
socket-path = "/run/nri/nri.sock"
plugin-dir = "/usr/lib/nri/plugins"
config-dir = "/etc/nri/plugins.d"
registration-timeout = "10s"
request-timeout = "1500ms"
disable-connections = false
disable-launch = true
strike-limit = 5
allowed-uids = [0, 1000]
allowed-gids = [0]
stop-grace = "3s"
spin-budget = "50us"
default-policy = "ignore"
exempt-namespaces = ["kube-system", "nri"]
startup-grace = "30s"

[default-validator]
reject-oci-hook-adjustment = true
required-plugins = ["netplug"]
reject-fields = ["Mounts"]

[plugins.10-netplug]
policy = "required"
request-timeout = "5s"
strike-limit = 0

[plugins.resmgr]
policy = "fail"
events = { UpdateContainer = "required" }
ignore-events = ["StartContainer", "PostStartContainer"]

[plugins.guard]
validation = "fail-open"
supersede = false
"#;

fn id(s: &str) -> PluginId {
    let (idx, name) = s.split_once('-').unwrap();
    PluginId::new(idx, name).unwrap()
}

fn check_full(c: &Config) {
    assert_eq!(c.socket_path.to_str(), Some("/run/nri/nri.sock"));
    assert_eq!(c.plugin_dir.to_str(), Some("/usr/lib/nri/plugins"));
    assert_eq!(c.config_dir.to_str(), Some("/etc/nri/plugins.d"));
    assert_eq!(c.registration_timeout, Duration::from_secs(10));
    assert_eq!(c.request_timeout, Duration::from_millis(1500));
    assert!(!c.disable_connections);
    assert!(c.disable_launch);
    assert_eq!(c.strike_limit, 5);
    assert_eq!(c.allowed_uids, [0, 1000]);
    assert_eq!(c.allowed_gids, [0]);
    assert_eq!(c.stop_grace, Duration::from_secs(3));
    assert_eq!(c.spin_budget, Duration::from_micros(50));
    assert_eq!(c.exempt_namespaces, ["kube-system", "nri"]);
    assert_eq!(c.startup_grace, Duration::from_secs(30));
    let v = c.default_validator.as_ref().expect("validator enabled");
    assert!(v.reject_oci_hook_adjustment && !v.reject_namespace_adjustment);
    assert_eq!(v.required_plugins, ["netplug"]);
    assert_eq!(v.reject_fields, ["Mounts"]);

    let net = id("10-netplug");
    assert_eq!(
        c.failure_policy(&net, Event::RunPodSandbox),
        FailurePolicy::Required
    );
    assert_eq!(c.request_timeout_for(&net), Duration::from_secs(5));
    assert_eq!(c.plugin_entry(&net).unwrap().strike_limit, Some(0));
    assert_eq!(
        c.required_plugins(Event::CreateContainer)
            .collect::<Vec<_>>(),
        ["10-netplug"]
    );

    let rm = id("30-resmgr");
    assert_eq!(
        c.failure_policy(&rm, Event::CreateContainer),
        FailurePolicy::Fail
    );
    assert_eq!(
        c.failure_policy(&rm, Event::UpdateContainer),
        FailurePolicy::Required
    );
    assert_eq!(
        c.failure_policy(&rm, Event::StartContainer),
        FailurePolicy::Ignore
    );
    assert_eq!(
        c.failure_policy(&rm, Event::PostStartContainer),
        FailurePolicy::Ignore
    );
    assert_eq!(c.request_timeout_for(&rm), Duration::from_millis(1500));

    // An entry without a policy inherits the default policy (ignore).
    let guard = id("90-guard");
    assert_eq!(
        c.failure_policy(&guard, Event::CreateContainer),
        FailurePolicy::Ignore
    );
    assert_eq!(
        c.plugin_entry(&guard).unwrap().validation,
        Some(ValidationMode::FailOpen)
    );
    // Upgrades without a gap: off for this entry, on by default.
    assert!(!c.supersede_for(&guard));
    assert!(c.supersede_for(&net));
    assert!(c.supersede_for(&id("50-other")));
    // No entry at all: the default.
    assert_eq!(
        c.failure_policy(&id("50-other"), Event::CreateContainer),
        FailurePolicy::Ignore
    );
}

#[test]
fn a_full_yaml_file() {
    check_full(&yaml(FULL_YAML).unwrap());
}

#[test]
fn the_same_file_in_toml() {
    check_full(&toml(FULL_TOML).unwrap());
}

#[test]
fn the_format_follows_the_file_name() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [
        ("nri.yaml", FULL_YAML),
        ("nri.toml", FULL_TOML),
        ("nri", FULL_YAML),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let b = Adaptation::builder("rt", "1").config_file(&path).unwrap();
        check_full(b.current_config());
    }
    let missing = dir.path().join("missing.yaml");
    let err = Adaptation::builder("rt", "1")
        .config_file(&missing)
        .unwrap_err();
    assert!(
        matches!(&err, Error::ConfigFile { file, line: None, .. } if file.ends_with("missing.yaml")),
        "{err:?}"
    );
}

#[test]
fn an_empty_file_changes_nothing_and_keys_left_out_keep_their_values() {
    let mut c = Config::new("rt", "1");
    c.request_timeout = Duration::from_secs(7);
    c.apply_str("e.yaml", ConfigFormat::Yaml, "").unwrap();
    c.apply_str("e.toml", ConfigFormat::Toml, "").unwrap();
    c.apply_str("s.yaml", ConfigFormat::Yaml, "strike-limit: 1\n")
        .unwrap();
    assert_eq!(c.request_timeout, Duration::from_secs(7));
    assert_eq!(c.strike_limit, 1);
    assert_eq!(c.exempt_namespaces, ["kube-system"]);
    assert_eq!(c.startup_grace, Duration::ZERO);
}

#[test]
fn a_plugin_entry_without_a_policy_inherits_the_default_policy() {
    // Through the API: an entry that only sets a timeout.
    let mut c = Config::new("rt", "1");
    c.default_policy = PluginPolicy::new(FailurePolicy::Ignore);
    c.plugin_policies.insert(
        "slow".into(),
        PluginPolicy::default().with_request_timeout(Duration::from_secs(9)),
    );
    let slow = id("10-slow");
    assert_eq!(
        c.failure_policy(&slow, Event::CreateContainer),
        FailurePolicy::Ignore
    );
    assert_eq!(c.request_timeout_for(&slow), Duration::from_secs(9));
    // A default of `required` makes a named entry without a policy required.
    c.default_policy = PluginPolicy::new(FailurePolicy::Required);
    assert_eq!(
        c.required_plugins(Event::RunPodSandbox).collect::<Vec<_>>(),
        ["slow"]
    );
}

/// Asserts a config error: file, line, and that the message contains all
/// of `parts`.
fn assert_error(err: Error, file: &str, line: usize, parts: &[&str]) {
    let text = err.to_string();
    match &err {
        Error::ConfigFile {
            file: f, line: l, ..
        } => {
            assert_eq!(f, file, "{text}");
            assert_eq!(*l, Some(line), "{text}");
        }
        other => panic!("not a config file error: {other:?}"),
    }
    assert!(text.starts_with(&format!("{file}:{line}:")), "{text}");
    for p in parts {
        assert!(text.contains(p), "{text:?} lacks {p:?}");
    }
}

#[test]
fn unknown_keys_are_refused_with_the_valid_keys() {
    assert_error(
        yaml("socket-path: /x\nsocket_pth: /y\n").unwrap_err(),
        "nri.yaml",
        2,
        &["socket_pth", "socket-path", "request-timeout", "plugins"],
    );
    assert_error(
        toml("socket-path = \"/x\"\nsocket_pth = \"/y\"\n").unwrap_err(),
        "nri.toml",
        2,
        &["socket_pth", "socket-path", "request-timeout", "plugins"],
    );
    assert_error(
        yaml("plugins:\n  a:\n    polcy: fail\n").unwrap_err(),
        "nri.yaml",
        3,
        &["polcy", "policy", "ignore-events", "validation"],
    );
    assert_error(
        toml("[plugins.a]\npolcy = \"fail\"\n").unwrap_err(),
        "nri.toml",
        2,
        &["polcy", "policy", "ignore-events", "validation"],
    );
    assert_error(
        yaml("default-validator:\n  reject-hooks: true\n").unwrap_err(),
        "nri.yaml",
        2,
        &["reject-hooks", "reject-oci-hook-adjustment"],
    );
}

#[test]
fn unknown_policy_names_are_refused_with_the_valid_ones() {
    for text in [
        "default-policy: maybe\n",
        "plugins:\n  a:\n    policy: maybe\n",
    ] {
        let line = text.lines().count();
        assert_error(
            yaml(text).unwrap_err(),
            "nri.yaml",
            line,
            &["maybe", "ignore", "fail", "required"],
        );
    }
    assert_error(
        toml("[plugins.a]\nevents = { StartContainer = \"maybe\" }\n").unwrap_err(),
        "nri.toml",
        2,
        &["maybe", "ignore", "fail", "required"],
    );
    assert_error(
        yaml("plugins:\n  a:\n    validation: sometimes\n").unwrap_err(),
        "nri.yaml",
        3,
        &["sometimes", "fail-closed", "fail-open"],
    );
}

#[test]
fn unknown_event_names_are_refused_with_the_valid_ones() {
    assert_error(
        yaml("plugins:\n  a:\n    events:\n      StartContainr: ignore\n").unwrap_err(),
        "nri.yaml",
        4,
        &[
            "StartContainr",
            "StartContainer",
            "ValidateContainerAdjustment",
        ],
    );
    assert_error(
        yaml("plugins:\n  a:\n    ignore-events: [StartContainr]\n").unwrap_err(),
        "nri.yaml",
        3,
        &["StartContainr", "RunPodSandbox"],
    );
    assert_error(
        toml("[plugins.a]\nignore-events = [\"StartContainr\"]\n").unwrap_err(),
        "nri.toml",
        2,
        &["StartContainr", "RunPodSandbox"],
    );
    // Case does not matter.
    let c = yaml("plugins:\n  a:\n    events: {startcontainer: ignore}\n").unwrap();
    assert_eq!(
        c.failure_policy(&id("10-a"), Event::StartContainer),
        FailurePolicy::Ignore
    );
}

#[test]
fn bad_values_are_refused_where_they_are() {
    assert_error(
        yaml("strike-limit: 2\nrequest-timeout: 2\n").unwrap_err(),
        "nri.yaml",
        2,
        &["250ms"],
    );
    assert_error(
        toml("request-timeout = 2\n").unwrap_err(),
        "nri.toml",
        1,
        &["250ms"],
    );
    assert_error(
        yaml("plugins:\n  bad/name:\n    policy: fail\n").unwrap_err(),
        "nri.yaml",
        2,
        &["bad/name", "NN-name"],
    );
    assert_error(
        yaml("strike-limit: 1\nrequest-timeout: 0s\n").unwrap_err(),
        "nri.yaml",
        2,
        &["request-timeout must be positive"],
    );
    assert_error(
        yaml("plugins:\n  a:\n    events: {StartContainer: fail}\n    ignore-events: [StartContainer]\n")
            .unwrap_err(),
        "nri.yaml",
        2,
        &["StartContainer", "ignore-events"],
    );
    assert_error(
        toml("[default-validator]\nreject-fields = [\"Nope\"]\n").unwrap_err(),
        "nri.toml",
        2,
        &["Nope"],
    );
    assert_error(
        yaml("allowed-uids: root\n").unwrap_err(),
        "nri.yaml",
        1,
        &["sequence"],
    );
}

#[test]
fn the_default_validator_can_be_disabled() {
    let mut c = yaml("default-validator: {}\n").unwrap();
    assert!(c.default_validator.is_some(), "a section enables it");
    c.apply_str(
        "x.yaml",
        ConfigFormat::Yaml,
        "default-validator: {enable: false}\n",
    )
    .unwrap();
    assert!(c.default_validator.is_none());
}

#[test]
fn the_documented_examples_parse() {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/runtime/config.md"),
    )
    .unwrap();
    let block = |lang: &str| {
        let start = doc.find(&format!("```{lang}\n")).unwrap() + lang.len() + 4;
        let len = doc[start..].find("```").unwrap();
        doc[start..start + len].to_owned()
    };
    let y = yaml(&block("yaml")).unwrap();
    let t = toml(&block("toml")).unwrap();
    for c in [&y, &t] {
        let net = id("10-network");
        assert_eq!(
            c.failure_policy(&net, Event::CreateContainer),
            FailurePolicy::Required
        );
        assert_eq!(
            c.failure_policy(&id("20-resource-manager"), Event::StartContainer),
            FailurePolicy::Ignore
        );
        assert_eq!(
            c.plugin_entry(&id("30-policy-guard")).unwrap().validation,
            Some(ValidationMode::FailOpen)
        );
    }
}

/// The `wasm:` section: the limits of every WebAssembly plugin, in YAML
/// and TOML, with unknown keys and bad values refused naming the file, the
/// line and the key.
mod wasm_section {
    use super::*;
    use nri_runtime::WasmLimits;

    fn message(e: Error) -> (Option<usize>, String) {
        match e {
            Error::ConfigFile { line, message, .. } => (line, message),
            other => panic!("not a config file error: {other:?}"),
        }
    }

    #[test]
    fn every_key_in_yaml_and_toml() {
        let want = WasmLimits::default()
            .with_max_memory(32 << 20)
            .with_max_module_size(8 << 20)
            .with_fuel_slice(500_000);
        let y = yaml("request-timeout: 1s\nwasm:\n  max-memory: 32MiB\n  max-module-size: 8Mi\n  fuel-slice: 500000\n")
            .unwrap();
        assert_eq!(y.wasm, want);
        let t = toml(
            "[wasm]\nmax-memory = \"32 MiB\"\nmax-module-size = 8388608\nfuel-slice = 500000\n",
        )
        .unwrap();
        assert_eq!(t.wasm, want);
    }

    #[test]
    fn left_out_keys_keep_their_values() {
        let mut c = Config::new("rt", "1");
        c.wasm = WasmLimits::default().with_fuel_slice(7);
        c.apply_str(
            "nri.yaml",
            ConfigFormat::Yaml,
            "wasm:\n  max-memory: 1048576\n",
        )
        .unwrap();
        assert_eq!(c.wasm.max_memory, 1 << 20);
        assert_eq!(c.wasm.fuel_slice, 7);
        assert_eq!(
            c.wasm.max_module_size,
            WasmLimits::default().max_module_size
        );
        // No section: the defaults.
        assert_eq!(
            yaml("request-timeout: 1s\n").unwrap().wasm,
            WasmLimits::default()
        );
    }

    #[test]
    fn an_unknown_key_is_refused_with_the_valid_ones() {
        let (line, m) = message(yaml("wasm:\n  max-memroy: 1MiB\n").unwrap_err());
        assert_eq!(line, Some(2), "{m}");
        assert!(m.contains("max-memroy"), "{m}");
        assert!(
            m.contains("max-memory") && m.contains("fuel-slice") && m.contains("max-module-size"),
            "{m}"
        );
        let (_, m) = message(toml("[wasm]\nepoch = 1\n").unwrap_err());
        assert!(m.contains("epoch"), "{m}");
    }

    #[test]
    fn bad_sizes_and_zero_limits_are_refused() {
        for (text, line, needle) in [
            ("wasm:\n  max-memory: 64MB\n", Some(2), "64MB"),
            ("wasm:\n  max-memory: -1\n", Some(2), "-1"),
            ("wasm:\n  max-module-size: 1.5GiB\n", Some(2), "1.5GiB"),
        ] {
            let (l, m) = message(yaml(text).unwrap_err());
            assert_eq!(l, line, "{text}: {m}");
            assert!(m.contains(needle) && m.contains("KiB"), "{text}: {m}");
        }
        for (text, key) in [
            ("wasm:\n  max-memory: 0\n", "max-memory"),
            (
                "request-timeout: 1s\nwasm:\n  fuel-slice: 0\n",
                "fuel-slice",
            ),
            ("wasm:\n  max-module-size: 0B\n", "max-module-size"),
        ] {
            let (l, m) = message(yaml(text).unwrap_err());
            assert!(m.contains(&format!("wasm.{key} must be positive")), "{m}");
            assert!(l.is_some(), "{text}: the line of {key}");
        }
    }
}
