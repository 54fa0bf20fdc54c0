//! Grants hold for WebAssembly plugins: a module is known by its file,
//! admitted only under a grant whose identity its file meets, and its
//! answers are held to the grant like a socket plugin's.
//! Budget: under 1 s.
#![cfg(feature = "wasm")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod wasm_util;

use common::*;
use nri_api::{Capability, CapabilitySet};
use nri_runtime::{FailurePolicy, Grant, GrantIdentity, PluginFailure};
use wasm_util::Wat;

/// A guest whose CreateContainer sets env `K=v`.
fn env_setter() -> Wat {
    Wat::env_setter()
}

#[tokio::test]
async fn a_wasm_plugin_is_known_by_its_file_and_held_to_its_grant() {
    let env = TestEnv::new();
    let dir = env.dir.path().join("plugins");
    env_setter().install(&dir, "10-wat");
    let mut file = GrantIdentity::default();
    file.executables = vec![format!("{}/*", dir.display())];
    let grant = Grant::new(["wat"])
        .identity(file)
        .allow(CapabilitySet::of(&[Capability::AdjustAnnotations]));
    let b = env
        .builder()
        .disable_connections(true)
        .grant(grant)
        .failure_policy("wat", FailurePolicy::Ignore);
    let a = env.start(b).await;
    let [info] = a.plugins().try_into().unwrap();
    assert_eq!(info.identity.executable, Some(dir.join("10-wat")));
    assert_eq!(info.identity.pid, None, "no process of its own");

    let out = a.create_container(&pod("p"), &ctr("p", "c")).await.unwrap();
    assert!(out.adjustment.env.is_empty(), "{:?}", out.adjustment);
    let [e] = out.errors.as_slice() else {
        panic!("{:?}", out.errors)
    };
    assert!(
        matches!(&e.failure, PluginFailure::NotGranted { field, .. } if field == "env"),
        "{}",
        e.failure
    );
    a.stop().await;
}

#[tokio::test]
async fn a_wasm_plugin_whose_file_meets_no_grant_is_not_started() {
    let env = TestEnv::new();
    let dir = env.dir.path().join("plugins");
    env_setter().install(&dir, "10-wat");
    let mut file = GrantIdentity::default();
    file.executables = vec!["/opt/trusted/*".into()];
    let grant = Grant::new(["wat"])
        .identity(file)
        .allow(CapabilitySet::of(&[Capability::AdjustEnv]));
    let a = env
        .start(env.builder().disable_connections(true).grant(grant))
        .await;
    assert!(a.plugins().is_empty(), "{:?}", a.plugins());
    let out = a.create_container(&pod("p"), &ctr("p", "c")).await.unwrap();
    assert!(out.adjustment.env.is_empty());
    a.stop().await;
}
