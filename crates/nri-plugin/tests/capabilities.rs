//! `Builder::requires`: a plugin whose runtime cannot serve it fails at
//! `Configure` with `Error::Unsupported` naming what is missing, the runtime
//! gets the same text, and a reconnect policy does not retry it; a runtime
//! that has what it needs runs it. The fake runtime announces itself as
//! several containerd versions, an unknown runtime and a declaring one.
//!
//! Budget: under a second (no sleeps; every wait is on a message).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::time::Duration;

use common::*;
use nri_api::api::{ConfigureRequest, Event};
use nri_plugin::{
    Builder, Capability, CapabilityBasis, CapabilitySet, Error, EventMask, ReconnectPolicy,
    Requirement, UnknownCapabilities,
};

const SYSCTL: Capability = Capability::AdjustLinuxSysctl;
const SCHED: Capability = Capability::AdjustLinuxSchedulingPolicy;

fn recorder() -> Builder<Recorder> {
    Builder::new(Recorder::new().0).name("caps").index("10")
}

/// Runs `builder` against one connection configured with `req`; returns
/// what `run` returned, the runtime's view of Configure, and the handle.
async fn against(
    builder: Builder<Recorder>,
    req: ConfigureRequest,
) -> (
    Result<(), Error>,
    Result<i32, nri_ttrpc::Error>,
    nri_plugin::PluginHandle,
    usize,
) {
    let rt = FakeRuntime::new();
    let stub = builder.socket_path(&rt.path).build().unwrap();
    let handle = stub.handle();
    let driver = async {
        let conn = rt.accept(Register::Accept).await;
        conn.registered().await;
        let r = conn.configure(req).await.map(|r| r.events);
        if r.is_ok() {
            conn.sync(vec![], vec![]).await.unwrap();
            handle.stop();
        } else {
            conn.close();
        }
        r
    };
    let (res, configured) =
        tokio::time::timeout(TIMEOUT, async { tokio::join!(stub.run(), driver) })
            .await
            .expect("the plugin neither ran nor failed");
    let configure_calls = stub.plugin().configs.lock().unwrap().len();
    (res, configured, handle, configure_calls)
}

#[tokio::test]
async fn containerd_2_1_cannot_serve_sysctls_and_the_plugin_fails_fast() {
    let (res, configured, handle, configure_calls) = against(
        recorder().requires([SYSCTL, Capability::AdjustEnv]),
        configure_as("containerd", "v2.1.9", ""),
    )
    .await;
    let err = res.unwrap_err();
    let Error::Unsupported {
        runtime,
        version,
        missing,
        unknown,
        basis,
    } = &err
    else {
        panic!("want Unsupported, got {err:?}");
    };
    assert_eq!(
        (runtime.as_str(), version.as_str()),
        ("containerd", "v2.1.9")
    );
    assert_eq!(&missing[..], [Requirement::from(SYSCTL)]);
    assert!(unknown.is_empty());
    assert_eq!(*basis, CapabilityBasis::Inferred);
    assert_eq!(
        err.to_string(),
        "runtime containerd v2.1.9 cannot serve this plugin: ADJUST_LINUX_SYSCTL not supported \
         (capabilities inferred from its name and version)"
    );
    assert!(!err.is_retryable());
    // The runtime got the same text as the error of its Configure call.
    let Err(nri_ttrpc::Error::Status { message, .. }) = configured else {
        panic!("Configure answered {configured:?}");
    };
    assert_eq!(message, err.to_string());
    // The plugin's own configure never ran; the runtime is known.
    assert_eq!(configure_calls, 0);
    let info = handle.runtime().unwrap();
    assert_eq!(info.supports(SYSCTL), Some(false));
    assert_eq!(info.supports(Capability::AdjustCdiDevices), Some(true));
}

#[tokio::test]
async fn the_same_plugin_runs_on_containerd_2_3_and_2_4() {
    for (version, nri) in [("v2.3.7", "v0.12.0"), ("v2.4.2", "v0.12.3")] {
        let (res, configured, handle, configure_calls) = against(
            recorder().requires([SYSCTL, SCHED]),
            configure_as("containerd", version, nri),
        )
        .await;
        res.unwrap_or_else(|e| panic!("{version}: {e}"));
        configured.unwrap();
        assert_eq!(configure_calls, 1);
        let info = handle.runtime().unwrap();
        assert_eq!(info.capabilities.basis, CapabilityBasis::Inferred);
        assert_eq!(info.supports(SYSCTL), Some(true), "{version}");
    }
}

#[tokio::test]
async fn containerd_2_2_1_has_the_scheduler_but_not_sysctls() {
    let (res, ..) = against(
        recorder().requires([SCHED]),
        configure_as("containerd", "v2.2.1", ""),
    )
    .await;
    res.unwrap();
    let (res, ..) = against(
        recorder().requires([SCHED, SYSCTL]),
        configure_as("containerd", "v2.2.1", ""),
    )
    .await;
    let Err(Error::Unsupported { missing, .. }) = res else {
        panic!("{res:?}");
    };
    assert_eq!(&missing[..], [Requirement::from(SYSCTL)]);
}

#[tokio::test]
async fn a_required_event_the_runtime_does_not_deliver_is_missing() {
    let (res, ..) = against(
        recorder().requires([Event::ValidateContainerAdjustment]),
        configure_as("containerd", "v2.1.9", ""),
    )
    .await;
    let err = res.unwrap_err();
    assert!(
        err.to_string()
            .contains("event ValidateContainerAdjustment not supported"),
        "{err}"
    );
    let (res, ..) = against(
        recorder().requires([Event::ValidateContainerAdjustment]),
        configure_as("containerd", "v2.2.0", ""),
    )
    .await;
    res.unwrap();
}

#[tokio::test]
async fn an_unknown_runtime_warns_by_default_and_fails_when_asked() {
    let req = || configure_as("my-runtime", "v1.0.0", "v0.12.2");
    let (res, _, handle, _) = against(recorder().requires([SYSCTL]), req()).await;
    res.unwrap();
    assert_eq!(handle.runtime().unwrap().supports(SYSCTL), None);

    let (res, configured, ..) = against(
        recorder()
            .requires([SYSCTL])
            .requires([Event::UpdatePodSandbox])
            .unknown_capabilities(UnknownCapabilities::Fail),
        req(),
    )
    .await;
    let err = res.unwrap_err();
    let Error::Unsupported {
        missing,
        unknown,
        basis,
        ..
    } = &err
    else {
        panic!("{err:?}");
    };
    // The NRI version tells the events; nothing tells the adjustments.
    assert!(missing.is_empty());
    assert_eq!(&unknown[..], [Requirement::from(SYSCTL)]);
    assert_eq!(*basis, CapabilityBasis::Unknown);
    assert!(
        err.to_string().contains("ADJUST_LINUX_SYSCTL unknown"),
        "{err}"
    );
    assert!(configured.is_err());
}

#[tokio::test]
async fn a_declaring_runtime_is_taken_at_its_word() {
    let declared = CapabilitySet::all().without(SYSCTL);
    let nri = nri_api::declared_nri_version(
        false,
        &nri_plugin::RuntimeCapabilities::declared(declared, EventMask::ALL_BEFORE_V0_10),
    );
    // Named containerd 2.4, but its declaration decides.
    let req = || configure_as("containerd", "v2.4.2", &nri);
    let (res, ..) = against(recorder().requires([SCHED]), req()).await;
    res.unwrap();
    let (res, ..) = against(recorder().requires([SYSCTL]), req()).await;
    let Err(Error::Unsupported { missing, basis, .. }) = res else {
        panic!("{res:?}");
    };
    assert_eq!(&missing[..], [Requirement::from(SYSCTL)]);
    assert_eq!(basis, CapabilityBasis::Declared);
    // Events it declares it does not deliver leave the subscription.
    let (res, configured, handle, _) = against(
        recorder().events(EventMask::from_events(&[
            Event::CreateContainer,
            Event::UpdatePodSandbox,
        ])),
        req(),
    )
    .await;
    res.unwrap();
    assert_eq!(
        configured.unwrap(),
        EventMask::from(Event::CreateContainer).as_i32()
    );
    assert_eq!(handle.dropped_events(), Event::UpdatePodSandbox.into());
}

#[tokio::test]
async fn no_requirements_no_check() {
    let (res, ..) = against(recorder(), configure_as("containerd", "v2.1.9", "")).await;
    res.unwrap();
}

/// With a reconnect policy, an unsupported runtime ends `run` after the
/// one attempt: no reconnect storm against a runtime that would refuse
/// again. Another connection is checked anew.
#[tokio::test]
async fn unsupported_is_not_retried_by_the_reconnect_policy() {
    let rt = FakeRuntime::new();
    let stub = recorder()
        .requires([SYSCTL])
        .reconnect(ReconnectPolicy::new(
            Duration::from_millis(1),
            Duration::from_millis(1),
        ))
        .socket_path(&rt.path)
        .build()
        .unwrap();
    let driver = async {
        let conn = rt.accept(Register::Accept).await;
        conn.registered().await;
        let r = conn
            .configure(configure_as("containerd", "v2.1.9", ""))
            .await;
        conn.close();
        r
    };
    let (res, configured) =
        tokio::time::timeout(TIMEOUT, async { tokio::join!(stub.run(), driver) })
            .await
            .expect("run kept retrying");
    assert!(matches!(res, Err(Error::Unsupported { .. })), "{res:?}");
    assert!(configured.is_err());

    // The same stub against an upgraded runtime: checked anew, runs.
    let handle = stub.handle();
    let driver = async {
        let conn = rt.accept(Register::Accept).await;
        conn.registered().await;
        conn.configure(configure_as("containerd", "v2.4.2", "v0.12.3"))
            .await
            .unwrap();
        conn.sync(vec![], vec![]).await.unwrap();
        handle.stop();
    };
    let (res, ()) = tokio::time::timeout(TIMEOUT, async { tokio::join!(stub.run(), driver) })
        .await
        .unwrap();
    res.unwrap();
}

/// `Error::Unsupported` keeps the SDK's error small enough that a plugin's
/// own error wrapping it (with a name or a path beside it) stays under
/// clippy's `result_large_err` threshold (128 bytes).
#[test]
fn the_error_is_small_enough_to_wrap() {
    let size = std::mem::size_of::<Error>();
    assert!(size <= 96, "nri_plugin::Error is {size} bytes");
}
