//! The `wasm:` section of the configuration file: the limits of every
//! WebAssembly plugin, in YAML and TOML, with unknown keys and bad values
//! refused naming the file, the line and the key.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use nri_runtime::{Config, ConfigFormat, Error, WasmLimits};

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
    let t =
        toml("[wasm]\nmax-memory = \"32 MiB\"\nmax-module-size = 8388608\nfuel-slice = 500000\n")
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
