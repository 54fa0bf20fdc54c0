//! Methods a plugin does not implement answer UNIMPLEMENTED (code 12), so
//! that a v0.12 runtime falls back to StateChange; StateChange for an event
//! without handler is acknowledged, as the Go stub does.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::*;
use nri_api::api::{
    Container, CreateContainerResponse, Event, PodSandbox, RunPodSandboxRequest,
    StartContainerRequest, StateChangeEvent, ValidateContainerAdjustmentRequest,
};
use nri_api::method;
use nri_plugin::{Builder, EventMask, HandlerResult, Plugin};
use nri_ttrpc::Code;
use prost::Message;

/// Declares CreateContainer and StartContainer, implements only CreateContainer.
struct OnlyCreate;

impl Plugin for OnlyCreate {
    const EVENTS: EventMask =
        EventMask::from_events(&[Event::CreateContainer, Event::StartContainer]);

    async fn create_container(
        &self,
        _pod: PodSandbox,
        _ctr: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        Ok(CreateContainerResponse::default())
    }
}

#[tokio::test]
async fn unhandled_methods_answer_unimplemented() {
    let rt = FakeRuntime::new();
    let stub = Builder::new(OnlyCreate)
        .name("only-create")
        .index("20")
        .socket_path(&rt.path)
        .build()
        .unwrap();
    let handle = stub.handle();
    let driver = async {
        let conn = rt.accept_ready().await;
        assert_eq!(
            handle.subscribed_events(),
            EventMask::from_events(&[Event::CreateContainer, Event::StartContainer])
        );
        let raw = |m: &'static str, msg: Vec<u8>| {
            let conn = &conn;
            async move { conn.call_raw(m, bytes::Bytes::from(msg)).await }
        };
        // Not declared, not implemented.
        let err = raw(
            method::RUN_POD_SANDBOX,
            RunPodSandboxRequest {
                pod: Some(pod("p")),
            }
            .encode_to_vec(),
        )
        .await
        .unwrap_err();
        assert_eq!(err.code(), Code::Unimplemented, "{err}");
        // Declared but not implemented.
        let err = raw(
            method::START_CONTAINER,
            StartContainerRequest::default().encode_to_vec(),
        )
        .await
        .unwrap_err();
        assert_eq!(err.code(), Code::Unimplemented, "{err}");
        let err = raw(
            method::VALIDATE_CONTAINER_ADJUSTMENT,
            ValidateContainerAdjustmentRequest::default().encode_to_vec(),
        )
        .await
        .unwrap_err();
        assert_eq!(err.code(), Code::Unimplemented, "{err}");
        // Unknown method.
        let err = raw("NoSuchMethod", vec![]).await.unwrap_err();
        assert_eq!(err.code(), Code::Unimplemented, "{err}");
        // The implemented one works.
        raw(method::CREATE_CONTAINER, vec![]).await.unwrap();
        // StateChange for events without handler: acknowledged (OK).
        for event in [Event::RunPodSandbox, Event::StartContainer] {
            raw(
                method::STATE_CHANGE,
                StateChangeEvent {
                    event: event as i32,
                    pod: Some(pod("p")),
                    container: Some(container("c", "p")),
                }
                .encode_to_vec(),
            )
            .await
            .unwrap();
        }
        // An undecodable request is INVALID_ARGUMENT, not a crash.
        let err = raw(method::CREATE_CONTAINER, vec![0xff, 0xff, 0xff])
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err}");
        handle.stop();
    };
    let (res, ()) = tokio::join!(stub.run(), driver);
    res.unwrap();
}
