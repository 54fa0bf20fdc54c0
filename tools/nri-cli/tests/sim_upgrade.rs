//! `nri sim` shows an upgrade without a gap: the documented example
//! (docs/sim/examples/upgrade.yaml) upgrades its required plugin while
//! containers are created (`start-plugin` of the running plugin). Its outcome, from the run's records: no
//! creation refused, a second instance registered while the first still
//! ran and the first stopped after, and each container adjusted by exactly
//! one CreateContainer call (of one instance or the other).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Command;

use serde_json::Value;

#[test]
fn the_upgrade_example_refuses_nothing_and_adjusts_each_container_once() {
    let scenario =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/sim/examples/upgrade.yaml");
    let o = Command::new(env!("CARGO_BIN_EXE_nri"))
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .args(["sim", "--json"])
        .arg(&scenario)
        .output()
        .expect("run nri");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let t = format!(
        "{stdout}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(0), "{t}");
    let recs: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let of = |ty: &'static str| recs.iter().filter(move |r| r["type"] == ty);

    // Every creation admitted, and the containers' specs adjusted.
    let creates: Vec<&Value> = of("event")
        .filter(|r| r["event"] == "CreateContainer")
        .collect();
    assert_eq!(creates.len(), 4, "{t}");
    for c in &creates {
        assert_eq!(c["ok"], true, "{c}");
        assert!(c["plugin_failures"].as_array().unwrap().is_empty(), "{c}");
        let changes = c["changes"].as_array().unwrap();
        assert_eq!(changes.len(), 1, "{c}");
        assert_eq!(changes[0]["key"], "ZONE", "{c}");
    }

    // Two instances registered (each with its Synchronize); the old one
    // stopped after the new one was there, by the step.
    let order: Vec<&str> = recs
        .iter()
        .filter_map(|r| match r["type"].as_str() {
            Some(ty @ ("plugin_registered" | "plugin_exited")) => Some(ty),
            Some("step") if r["action"] == "start-plugin" => Some("start-plugin"),
            _ => None,
        })
        .collect();
    assert_eq!(
        order,
        [
            "plugin_registered",
            "start-plugin",
            "plugin_registered",
            "plugin_exited",
            "plugin_exited"
        ],
        "{t}"
    );
    let upgrade_ok = of("step_end").any(|r| {
        r["ok"] == true
            && recs.iter().any(|s| {
                s["type"] == "step" && s["action"] == "start-plugin" && s["index"] == r["index"]
            })
    });
    assert!(upgrade_ok, "{t}");

    // Each container once: four CreateContainer calls in all, wherever
    // they were reported (in an event, or during a registration when the
    // creation waited for the new instance's Synchronize).
    let calls = |op: &str| {
        recs.iter()
            .flat_map(|r| r["calls"].as_array().cloned().unwrap_or_default())
            .filter(|c| c["plugin"] == "10-env" && c["operation"] == op)
            .count()
    };
    assert_eq!(calls("CreateContainer"), 4, "{t}");
    assert_eq!(calls("Synchronize"), 2, "{t}");
    assert!(of("expectation").all(|e| e["held"] == true), "{t}");
}
