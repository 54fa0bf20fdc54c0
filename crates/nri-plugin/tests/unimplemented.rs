//! The subscription follows the implemented methods (`#[nri_plugin::plugin]`),
//! and an event the plugin is subscribed to without a method is answered
//! with an empty success, on the dedicated RPC and through StateChange, as
//! the Go stub answers events without a handler: never UNIMPLEMENTED, which
//! a v0.12 runtime logs as a deprecated interface (and fails the request
//! for the events without a StateChange form).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::*;
use nri_api::api::{
    Container, CreateContainerResponse, Event, PodSandbox, RunPodSandboxRequest,
    StartContainerRequest, StateChangeEvent, StopContainerRequest, StopContainerResponse,
    UpdateContainerRequest, UpdateContainerResponse, ValidateContainerAdjustmentRequest,
    ValidateContainerAdjustmentResponse,
};
use nri_api::method;
use nri_plugin::{Builder, EventMask, HandlerError, HandlerResult, Plugin};
use nri_ttrpc::Code;
use prost::Message;

/// Implements only CreateContainer; subscribes to what it implements.
struct OnlyCreate;

#[nri_plugin::plugin]
impl Plugin for OnlyCreate {
    async fn create_container(
        &self,
        _pod: PodSandbox,
        _ctr: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        Ok(CreateContainerResponse::default())
    }
}

/// Implements only CreateContainer and overrides its events to all events.
struct AllButOnlyCreate;

#[nri_plugin::plugin]
impl Plugin for AllButOnlyCreate {
    const EVENTS: EventMask = EventMask::ALL;

    async fn create_container(
        &self,
        _pod: PodSandbox,
        _ctr: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        Ok(CreateContainerResponse::default())
    }

    // Not an event method: does not count.
    async fn shutdown(&self) {}
}

/// Returns UNIMPLEMENTED itself from an implemented method.
struct SaysUnimplemented;

#[nri_plugin::plugin]
impl Plugin for SaysUnimplemented {
    async fn start_container(&self, _pod: PodSandbox, _ctr: Container) -> HandlerResult<()> {
        Err(HandlerError::unimplemented())
    }
}

#[test]
fn events_are_derived_from_the_methods() {
    let create = EventMask::from_events(&[Event::CreateContainer]);
    assert_eq!(OnlyCreate::IMPLEMENTED.events(), create);
    assert_eq!(OnlyCreate::EVENTS, create);
    assert_eq!(AllButOnlyCreate::IMPLEMENTED.events(), create);
    assert_eq!(AllButOnlyCreate::EVENTS, EventMask::ALL);
    // The recorder of the common test code defines every event method: the
    // attribute knows every one of them.
    assert_eq!(Recorder::IMPLEMENTED.events(), EventMask::ALL);
    assert_eq!(Recorder::EVENTS, EventMask::ALL);
}

#[tokio::test]
async fn the_subscription_is_the_implemented_events() {
    let rt = FakeRuntime::new();
    let stub = Builder::new(OnlyCreate)
        .name("only-create")
        .index("20")
        .socket_path(&rt.path)
        .build()
        .unwrap();
    let handle = stub.handle();
    let driver = async {
        let conn = rt.accept(Register::Accept).await;
        conn.registered().await;
        let resp = conn.configure(configure_req("v0.12.2")).await.unwrap();
        assert_eq!(
            EventMask::from_i32(resp.events),
            EventMask::from_events(&[Event::CreateContainer])
        );
        handle.stop();
    };
    let (res, ()) = tokio::join!(stub.run(), driver);
    res.unwrap();
}

async fn raw_ok(conn: &RuntimeConn, m: &'static str, msg: Vec<u8>) -> bytes::Bytes {
    conn.call_raw(m, bytes::Bytes::from(msg))
        .await
        .unwrap_or_else(|e| panic!("{m}: {e}"))
}

#[tokio::test]
#[allow(clippy::too_many_lines)]
async fn subscribed_events_without_a_method_get_an_empty_success() {
    let rt = FakeRuntime::new();
    let stub = Builder::new(AllButOnlyCreate)
        .name("all-but-create")
        .index("20")
        .socket_path(&rt.path)
        .build()
        .unwrap();
    let handle = stub.handle();
    let driver = async {
        let conn = rt.accept_ready().await;
        assert_eq!(handle.subscribed_events(), EventMask::ALL);
        let run = RunPodSandboxRequest {
            pod: Some(pod("p")),
        };
        assert!(
            raw_ok(&conn, method::RUN_POD_SANDBOX, run.encode_to_vec())
                .await
                .is_empty()
        );
        raw_ok(
            &conn,
            method::START_CONTAINER,
            StartContainerRequest::default().encode_to_vec(),
        )
        .await;
        let upd = raw_ok(
            &conn,
            method::UPDATE_CONTAINER,
            UpdateContainerRequest::default().encode_to_vec(),
        )
        .await;
        assert_eq!(
            UpdateContainerResponse::decode(upd).unwrap(),
            UpdateContainerResponse::default()
        );
        let stop = raw_ok(
            &conn,
            method::STOP_CONTAINER,
            StopContainerRequest::default().encode_to_vec(),
        )
        .await;
        assert_eq!(
            StopContainerResponse::decode(stop).unwrap(),
            StopContainerResponse::default()
        );
        // A validator without a method accepts.
        let v = raw_ok(
            &conn,
            method::VALIDATE_CONTAINER_ADJUSTMENT,
            ValidateContainerAdjustmentRequest::default().encode_to_vec(),
        )
        .await;
        let v = ValidateContainerAdjustmentResponse::decode(v).unwrap();
        assert!(!v.reject, "{v:?}");
        // Every other event RPC as well.
        for event in Event::ALL_EVENTS {
            if event != Event::CreateContainer {
                let m = event.method_name().unwrap();
                raw_ok(&conn, m, Vec::new()).await;
            }
        }
        // StateChange for events without a method: acknowledged.
        for event in [Event::RunPodSandbox, Event::StartContainer] {
            let ev = StateChangeEvent {
                event: event as i32,
                pod: Some(pod("p")),
                container: Some(container("c", "p")),
            };
            raw_ok(&conn, method::STATE_CHANGE, ev.encode_to_vec()).await;
        }
        // The implemented one works; an undecodable request to it is
        // INVALID_ARGUMENT, not a crash.
        raw_ok(&conn, method::CREATE_CONTAINER, Vec::new()).await;
        let err = conn
            .call_raw(method::CREATE_CONTAINER, vec![0xff, 0xff, 0xff].into())
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err}");
        // A method that is no NRI method at all is still UNIMPLEMENTED.
        let err = conn
            .call_raw("NoSuchMethod", bytes::Bytes::new())
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unimplemented, "{err}");
        handle.stop();
    };
    let (res, ()) = tokio::join!(stub.run(), driver);
    res.unwrap();
}

#[tokio::test]
async fn an_explicit_unimplemented_from_a_method_is_sent() {
    let rt = FakeRuntime::new();
    let stub = Builder::new(SaysUnimplemented)
        .name("says-unimplemented")
        .index("20")
        .socket_path(&rt.path)
        .build()
        .unwrap();
    let handle = stub.handle();
    let driver = async {
        let conn = rt.accept_ready().await;
        let err = conn
            .call_raw(
                method::START_CONTAINER,
                StartContainerRequest::default().encode_to_vec().into(),
            )
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unimplemented, "{err}");
        handle.stop();
    };
    let (res, ()) = tokio::join!(stub.run(), driver);
    res.unwrap();
}

#[tokio::test]
async fn builder_events_may_add_events_without_a_method() {
    let rt = FakeRuntime::new();
    let events = EventMask::from_events(&[Event::CreateContainer, Event::StopPodSandbox]);
    let stub = Builder::new(OnlyCreate)
        .name("only-create")
        .index("20")
        .socket_path(&rt.path)
        .events(events)
        .build()
        .unwrap();
    let handle = stub.handle();
    let driver = async {
        let conn = rt.accept_ready().await;
        assert_eq!(handle.subscribed_events(), events);
        raw_ok(&conn, method::STOP_POD_SANDBOX, Vec::new()).await;
        handle.stop();
    };
    let (res, ()) = tokio::join!(stub.run(), driver);
    res.unwrap();
}
