//! The subscription never carries a bit the runtime cannot take: the
//! runtime's NRI version comes from ConfigureRequest.NRI_version or is
//! inferred from its name and version; unsupported events are dropped and
//! reported, or fail registration in strict mode.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::*;
use nri_api::api::{ConfigureRequest, Container, Event, PodSandbox};
use nri_plugin::{Builder, Error, EventMask, HandlerResult, NriVersion, Plugin, VersionOrigin};

const NEW_EVENTS: EventMask = EventMask::from_events(&[
    Event::UpdatePodSandbox,
    Event::PostUpdatePodSandbox,
    Event::ValidateContainerAdjustment,
]);

async fn negotiate(
    builder: Builder<Recorder>,
    rt: &FakeRuntime,
    req: ConfigureRequest,
) -> (
    Result<(), Error>,
    Result<i32, nri_ttrpc::Error>,
    nri_plugin::PluginHandle,
) {
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
    let (res, events) = tokio::join!(stub.run(), driver);
    (res, events, handle)
}

fn recorder() -> Builder<Recorder> {
    Builder::new(Recorder::new().0).name("test").index("10")
}

#[tokio::test]
async fn old_runtime_inferred_from_name_and_version_gets_0x7ff() {
    let rt = FakeRuntime::new();
    // containerd 2.1 sends no NRI version; it ships NRI v0.8.0.
    let mut req = configure_req("");
    req.runtime_name = "containerd".into();
    req.runtime_version = "v2.1.4".into();
    let (res, events, handle) = negotiate(recorder(), &rt, req).await;
    res.unwrap();
    assert_eq!(events.unwrap(), 0x7FF);
    assert_eq!(handle.dropped_events(), NEW_EVENTS);
    assert_eq!(handle.dropped_events().as_i32(), 0x3800);
    let info = handle.runtime().unwrap();
    assert_eq!(info.nri_version.version, NriVersion::new(0, 8, 0));
    assert_eq!(info.nri_version.origin, VersionOrigin::Inferred);
}

#[tokio::test]
async fn reported_version_decides() {
    let rt = FakeRuntime::new();
    let (res, events, handle) = negotiate(recorder(), &rt, configure_req("v0.9.0")).await;
    res.unwrap();
    assert_eq!(events.unwrap(), 0x7FF);
    assert_eq!(handle.dropped_events(), NEW_EVENTS);

    let (res, events, handle) = negotiate(recorder(), &rt, configure_req("v0.10.0")).await;
    res.unwrap();
    assert_eq!(events.unwrap(), 0x3FFF);
    assert!(handle.dropped_events().is_empty());
}

#[tokio::test]
async fn unknown_runtime_assumes_the_conservative_mask() {
    let rt = FakeRuntime::new();
    let mut req = configure_req("");
    req.runtime_name = "some-runtime".into();
    let (res, events, handle) = negotiate(recorder(), &rt, req).await;
    res.unwrap();
    assert_eq!(events.unwrap(), 0x7FF);
    assert_eq!(
        handle.runtime().unwrap().nri_version.origin,
        VersionOrigin::Assumed
    );
}

#[tokio::test]
async fn strict_mode_fails_with_unsupported_events() {
    let rt = FakeRuntime::new();
    let (res, events, _) =
        negotiate(recorder().strict_events(true), &rt, configure_req("v0.8.0")).await;
    let err = events.unwrap_err();
    assert!(err.to_string().contains("cannot deliver"), "{err}");
    match res {
        Err(Error::UnsupportedEvents {
            requested,
            dropped,
            runtime_version,
        }) => {
            assert_eq!(requested, EventMask::ALL);
            assert_eq!(dropped, NEW_EVENTS);
            assert_eq!(runtime_version, NriVersion::new(0, 8, 0));
        }
        other => panic!("expected UnsupportedEvents, got {other:?}"),
    }
}

#[tokio::test]
async fn nothing_left_is_unsupported_even_when_not_strict() {
    let rt = FakeRuntime::new();
    let b = recorder().events(EventMask::from_events(&[
        Event::ValidateContainerAdjustment,
    ]));
    let (res, events, _) = negotiate(b, &rt, configure_req("v0.8.0")).await;
    assert!(events.is_err());
    assert!(
        matches!(res, Err(Error::UnsupportedEvents { .. })),
        "{res:?}"
    );
}

#[tokio::test]
async fn configure_may_narrow_but_not_widen() {
    let rt = FakeRuntime::new();
    let (mut rec, _) = Recorder::new();
    rec.configure_events = Some(EventMask::from_events(&[Event::StartContainer]));
    let b = Builder::new(rec).name("test").index("10");
    let (res, events, handle) = negotiate(b, &rt, configure_req("v0.12.2")).await;
    res.unwrap();
    assert_eq!(events.unwrap(), 0x20);
    assert_eq!(handle.subscribed_events().as_i32(), 0x20);

    struct Narrow;
    #[nri_plugin::plugin]
    impl Plugin for Narrow {
        const EVENTS: EventMask = EventMask::from_events(&[Event::StartContainer]);
        async fn configure(
            &self,
            _i: &nri_plugin::ConfigureInfo,
        ) -> HandlerResult<Option<EventMask>> {
            Ok(Some(EventMask::from_events(&[Event::CreateContainer])))
        }
        async fn start_container(&self, _p: PodSandbox, _c: Container) -> HandlerResult<()> {
            Ok(())
        }
    }
    let stub = Builder::new(Narrow)
        .name("narrow")
        .index("10")
        .socket_path(&rt.path)
        .build()
        .unwrap();
    let driver = async {
        let conn = rt.accept(Register::Accept).await;
        conn.registered().await;
        let err = conn.configure(configure_req("v0.12.2")).await.unwrap_err();
        assert!(err.to_string().contains("not a non-empty subset"), "{err}");
        conn.close();
    };
    let (res, ()) = tokio::join!(stub.run(), driver);
    assert!(matches!(res, Err(Error::ConfigureFailed { .. })), "{res:?}");
}

#[tokio::test]
async fn configure_error_is_configure_failed() {
    struct Bad;
    #[nri_plugin::plugin]
    impl Plugin for Bad {
        const EVENTS: EventMask = EventMask::from_events(&[Event::StartContainer]);
        async fn configure(
            &self,
            i: &nri_plugin::ConfigureInfo,
        ) -> HandlerResult<Option<EventMask>> {
            Err(nri_plugin::HandlerError::msg(format!(
                "bad config {:?}",
                i.config
            )))
        }
    }
    let rt = FakeRuntime::new();
    let stub = Builder::new(Bad)
        .name("bad")
        .index("10")
        .socket_path(&rt.path)
        .build()
        .unwrap();
    let driver = async {
        let conn = rt.accept(Register::Accept).await;
        conn.registered().await;
        let mut req = configure_req("v0.12.2");
        req.config = "x".into();
        let err = conn.configure(req).await.unwrap_err();
        assert!(err.to_string().contains("bad config \"x\""), "{err}");
        // The runtime does not even close the connection: the stub ends it.
    };
    let (res, ()) = tokio::join!(stub.run(), driver);
    match res {
        Err(Error::ConfigureFailed { reason }) => assert_eq!(reason, "bad config \"x\""),
        other => panic!("expected ConfigureFailed, got {other:?}"),
    }
}

#[test]
#[allow(clippy::too_many_lines)]
fn build_checks_events_names_and_indices() {
    struct NoEvents;
    #[nri_plugin::plugin]
    impl Plugin for NoEvents {
        const EVENTS: EventMask = EventMask::EMPTY;
    }
    let err = Builder::new(NoEvents)
        .name("x")
        .index("10")
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidEvents { .. }), "{err:?}");

    struct Unknown;
    #[nri_plugin::plugin]
    impl Plugin for Unknown {
        const EVENTS: EventMask = EventMask::from_i32(0x4000);
    }
    let err = Builder::new(Unknown)
        .name("x")
        .index("10")
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidEvents { .. }), "{err:?}");

    // No event method and no events: nothing to subscribe to.
    struct Nothing;
    #[nri_plugin::plugin]
    impl Plugin for Nothing {}
    let err = Builder::new(Nothing)
        .name("x")
        .index("10")
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidEvents { .. }), "{err:?}");
    // ... unless the builder names events.
    Builder::new(Nothing)
        .name("x")
        .index("10")
        .events(EventMask::from_events(&[Event::RunPodSandbox]))
        .build()
        .unwrap();

    struct Start;
    #[nri_plugin::plugin]
    impl Plugin for Start {
        const EVENTS: EventMask = EventMask::from_events(&[Event::StartContainer]);
    }
    // The builder's events are an override: they may name events the
    // plugin has no method for (answered with an empty success).
    Builder::new(Start)
        .name("x")
        .index("10")
        .events(EventMask::from_events(&[Event::CreateContainer]))
        .build()
        .unwrap();
    let err = Builder::new(Start)
        .name("x")
        .index("10")
        .events(EventMask::from_i32(0x4000))
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidEvents { .. }), "{err:?}");

    let err = Builder::new(Start)
        .name("x")
        .index("1")
        .build()
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidIndex { ref index, .. } if index == "1"),
        "{err:?}"
    );
    let err = Builder::new(Start)
        .name("bad/name")
        .index("10")
        .build()
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidName { ref name, .. } if name == "bad/name"),
        "{err:?}"
    );
    let err = Builder::new(Start)
        .name("")
        .index("10")
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidName { .. }), "{err:?}");
    // No name and no index at all (the test binary's name is not NN-name).
    // The error names the executable and says where an index comes from.
    let err = Builder::new(Start).build().unwrap_err();
    let exe = std::env::args_os()
        .next()
        .and_then(|p| {
            std::path::Path::new(&p)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
        })
        .unwrap();
    assert!(
        matches!(err, Error::MissingIndex { ref executable } if *executable == exe),
        "{err:?}"
    );
    let text = err.to_string();
    for part in [
        format!("no plugin index for executable {exe:?}"),
        format!("NN-name (e.g. 10-{exe})"),
        "-idx NN".to_owned(),
        "Builder::index".to_owned(),
        "NRI_PLUGIN_IDX".to_owned(),
    ] {
        assert!(text.contains(&part), "{part:?} not in {text:?}");
    }
    // A name alone does not make an index.
    let err = Builder::new(Start).name("mine").build().unwrap_err();
    assert!(matches!(err, Error::MissingIndex { .. }), "{err:?}");
}
