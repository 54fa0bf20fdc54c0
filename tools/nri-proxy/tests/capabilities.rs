//! The proxy promises its plugins no more than the runtime it registered
//! with applies: it declares that runtime's capabilities and events to
//! them, so a plugin behind it that requires more fails at start-up, and a
//! merged adjustment that still uses something the runtime drops is
//! reported (`nri_proxy_unapplied_adjustments_total`). The runtime above
//! is our runtime library declaring less than everything, as containerd
//! 2.1 would be inferred.
//!
//! Budget: about two seconds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use nri_api::api::{Container, ContainerAdjustment, CreateContainerResponse, Event, PodSandbox};
use nri_api::{Capability, CapabilityBasis, CapabilitySet, EventMask};
use nri_plugin::{Builder, Error, HandlerResult, Plugin, Requirement};
use nri_runtime::Adaptation;

const SYSCTL: Capability = Capability::AdjustLinuxSysctl;

/// Sets one sysctl on every container.
struct Tuner;

#[nri_plugin::plugin]
impl Plugin for Tuner {
    async fn create_container(
        &self,
        _pod: PodSandbox,
        _ctr: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        let mut adjust = ContainerAdjustment::default();
        adjust
            .linux_mut()
            .sysctl
            .insert("net.core.somaxconn".into(), "1024".into());
        Ok(CreateContainerResponse {
            adjust: Some(adjust),
            ..Default::default()
        })
    }
}

fn tuner(env: &Env, index: &str) -> Builder<Tuner> {
    Builder::new(Tuner)
        .name("tuner")
        .index(index)
        .socket_path(&env.proxy_socket)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_behind_the_proxy_get_what_the_runtime_above_applies() {
    let env = Env::new();
    let without = CapabilitySet::all().without(SYSCTL);
    let up = Adaptation::builder("old-runtime", "v1")
        .socket_path(&env.upstream_socket)
        .disable_launch(true)
        .capabilities(without, EventMask::ALL_BEFORE_V0_10)
        .build(env.runtime.clone())
        .unwrap();
    up.start().await.unwrap();
    let proxy = Running::start(env.config("", "")).await;
    proxy.wait_serving(&env.proxy_socket).await;
    assert_eq!(proxy.proxy.adaptation().declared().supported, without);

    // A plugin that requires sysctls and pod updates fails at start-up.
    let stub = tuner(&env, "10")
        .requires([SYSCTL])
        .requires([Event::UpdatePodSandbox])
        .build()
        .unwrap();
    let res = tokio::time::timeout(Duration::from_secs(10), stub.run())
        .await
        .unwrap();
    let Err(Error::Unsupported { missing, basis, .. }) = res else {
        panic!("want Unsupported, got {res:?}");
    };
    assert_eq!(basis, CapabilityBasis::Declared);
    assert_eq!(
        &missing[..],
        [Requirement::from(SYSCTL), Event::UpdatePodSandbox.into()]
    );

    // One that requires nothing runs; what it sets that the runtime drops
    // is reported.
    let stub = tuner(&env, "11").build().unwrap();
    let handle = stub.handle();
    let task = tokio::spawn(async move { stub.run().await });
    until("the plugin behind the proxy", || {
        proxy.proxy.adaptation().plugins().len() == 1
    })
    .await;
    up.run_pod_sandbox(&pod("p")).await.unwrap();
    let out = up
        .create_container(&pod("p"), &ctr("p", "c"))
        .await
        .unwrap();
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    let sysctl = out.adjustment.linux.as_ref().map(|l| l.sysctl.clone());
    assert_eq!(sysctl.unwrap()["net.core.somaxconn"], "1024");
    let name = "nri_proxy_unapplied_adjustments_total{capability=\"ADJUST_LINUX_SYSCTL\"}";
    assert_eq!(metric(&proxy.proxy, name), Some(1.0));

    handle.stop();
    task.await.unwrap().unwrap();
    proxy.stop().await;
    up.stop().await;
}
