//! A runtime that sends no request timeout in Configure (0: NRI before
//! v0.7.0 has no such field, so containerd 1.7.0-1.7.25 and CRI-O before
//! 1.32 send none) is taken to use NRI's default of 2 s, as those runtimes
//! do: the plugins behind the proxy are called and share that budget
//! (minus the safety margin), instead of none of them being called.
//! Paused time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use nri_api::api::{ConfigureRequest, CreateContainerRequest, CreateContainerResponse};
use nri_api::method;
use nri_test_support::fake_runtime::{FakeRuntime, Register};
use tokio::time::Instant;

async fn with_configure(configure: ConfigureRequest) {
    let fake = FakeRuntime::new();
    let mut env = Env::new();
    env.upstream_socket = fake.path.clone();
    let proxy = Running::start(env.config("request-timeout: 5s\n", "")).await;
    let conn = fake.accept(Register::Accept).await;
    conn.registered().await;
    conn.configure(configure).await.unwrap();
    conn.sync(vec![pod("p")], vec![]).await.unwrap();
    proxy.wait_serving(&env.proxy_socket).await;
    let mut behind = Behind::default();
    behind.connect(
        &env.proxy_socket,
        "10",
        "fast",
        TestPlugin::adding("FAST", "1"),
    );
    behind.connect(
        &env.proxy_socket,
        "20",
        "hang",
        TestPlugin::adding("HANG", "1").slow(Duration::from_secs(3600)),
    );
    until("two plugins", || {
        proxy.proxy.adaptation().plugins().len() == 2
    })
    .await;

    let t0 = Instant::now();
    let resp: CreateContainerResponse = conn
        .call(
            method::CREATE_CONTAINER,
            &CreateContainerRequest {
                pod: Some(pod("p")),
                container: Some(ctr("p", "c")),
            },
        )
        .await
        .unwrap();
    let took = t0.elapsed();
    assert_eq!(env_of(&resp.adjust.unwrap_or_default()), ["FAST=1"]);
    // 2 s minus the 250 ms margin: the hanging plugin is cut there.
    assert!(
        took >= Duration::from_millis(1750) && took < Duration::from_secs(2),
        "{took:?}"
    );
    let strikes: Vec<u32> = (proxy.proxy.adaptation().plugins().iter())
        .map(|p| p.strikes)
        .collect();
    assert_eq!(
        strikes,
        [0, 1],
        "the hanging plugin was called and timed out"
    );

    behind.stop().await;
    drop(conn);
    proxy.stop().await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_configure_without_timeouts_means_the_default_of_2s() {
    // As a runtime before NRI v0.7.0 encodes it: no timeout fields.
    with_configure(ConfigureRequest {
        runtime_name: "containerd".into(),
        runtime_version: "v1.7.13".into(),
        ..Default::default()
    })
    .await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_request_timeout_of_zero_means_the_default_of_2s() {
    // A runtime that reports its NRI version and a registration timeout,
    // but a request timeout of 0.
    with_configure(ConfigureRequest {
        runtime_name: "cri-o".into(),
        runtime_version: "1.33.0".into(),
        registration_timeout: 5000,
        request_timeout: 0,
        nri_version: "v0.9.0".into(),
        ..Default::default()
    })
    .await;
}
