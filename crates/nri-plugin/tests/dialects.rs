//! Both event dialects (dedicated RPCs of NRI v0.12 and StateChange of
//! older runtimes) reach the same plugin methods, with replies intact.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::*;
use nri_api::api::{
    CreateContainerRequest, CreateContainerResponse, Event, PostCreateContainerRequest,
    PostStartContainerRequest, PostUpdateContainerRequest, PostUpdatePodSandboxRequest,
    RemoveContainerRequest, RemovePodSandboxRequest, RunPodSandboxRequest, StartContainerRequest,
    StateChangeEvent, StopContainerRequest, StopContainerResponse, StopPodSandboxRequest,
    UpdateContainerRequest, UpdateContainerResponse, UpdatePodSandboxRequest,
    ValidateContainerAdjustmentRequest, ValidateContainerAdjustmentResponse,
};
use nri_api::method;
use prost::Message;

async fn empty_call<Req: Message>(conn: &RuntimeConn, m: &str, req: &Req) {
    let resp = conn
        .call_raw(m, bytes::Bytes::from(req.encode_to_vec()))
        .await
        .unwrap_or_else(|e| panic!("{m}: {e}"));
    assert!(resp.is_empty(), "{m}: empty response expected");
}

#[tokio::test]
#[allow(clippy::too_many_lines)]
async fn every_event_through_dedicated_rpcs_and_state_change() {
    let rt = FakeRuntime::new();
    let (rec, mut calls) = Recorder::new();
    let stub = test_stub(rec, &rt);
    let handle = stub.handle();
    let driver = async {
        let conn = rt.accept_ready().await;
        assert_eq!(next_call(&mut calls).await.what, "Synchronize Initial");
        let p = || Some(pod("p1"));
        let c = || Some(container("c1", "p1"));

        // Dedicated RPCs (NRI v0.12).
        empty_call(
            &conn,
            method::RUN_POD_SANDBOX,
            &RunPodSandboxRequest { pod: p() },
        )
        .await;
        empty_call(
            &conn,
            method::UPDATE_POD_SANDBOX,
            &UpdatePodSandboxRequest {
                pod: p(),
                ..Default::default()
            },
        )
        .await;
        empty_call(
            &conn,
            method::POST_UPDATE_POD_SANDBOX,
            &PostUpdatePodSandboxRequest { pod: p() },
        )
        .await;
        let created: CreateContainerResponse = conn
            .call(
                method::CREATE_CONTAINER,
                &CreateContainerRequest {
                    pod: p(),
                    container: c(),
                },
            )
            .await
            .unwrap();
        assert_eq!(
            created.adjust,
            Some(recorder_adjustment(&container("c1", "p1")))
        );
        empty_call(
            &conn,
            method::POST_CREATE_CONTAINER,
            &PostCreateContainerRequest {
                pod: p(),
                container: c(),
            },
        )
        .await;
        empty_call(
            &conn,
            method::START_CONTAINER,
            &StartContainerRequest {
                pod: p(),
                container: c(),
            },
        )
        .await;
        empty_call(
            &conn,
            method::POST_START_CONTAINER,
            &PostStartContainerRequest {
                pod: p(),
                container: c(),
            },
        )
        .await;
        let updated: UpdateContainerResponse = conn
            .call(
                method::UPDATE_CONTAINER,
                &UpdateContainerRequest {
                    pod: p(),
                    container: c(),
                    linux_resources: None,
                },
            )
            .await
            .unwrap();
        assert_eq!(updated.update, vec![recorder_update("c1")]);
        empty_call(
            &conn,
            method::POST_UPDATE_CONTAINER,
            &PostUpdateContainerRequest {
                pod: p(),
                container: c(),
            },
        )
        .await;
        let _: StopContainerResponse = conn
            .call(
                method::STOP_CONTAINER,
                &StopContainerRequest {
                    pod: p(),
                    container: c(),
                },
            )
            .await
            .unwrap();
        empty_call(
            &conn,
            method::REMOVE_CONTAINER,
            &RemoveContainerRequest {
                pod: p(),
                container: c(),
            },
        )
        .await;
        empty_call(
            &conn,
            method::STOP_POD_SANDBOX,
            &StopPodSandboxRequest { pod: p() },
        )
        .await;
        empty_call(
            &conn,
            method::REMOVE_POD_SANDBOX,
            &RemovePodSandboxRequest { pod: p() },
        )
        .await;
        let v: ValidateContainerAdjustmentResponse = conn
            .call(
                method::VALIDATE_CONTAINER_ADJUSTMENT,
                &ValidateContainerAdjustmentRequest {
                    pod: p(),
                    container: c(),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert!(!v.reject);

        let expect = [
            ("RunPodSandbox", ""),
            ("UpdatePodSandbox", ""),
            ("PostUpdatePodSandbox", ""),
            ("CreateContainer", "c1"),
            ("PostCreateContainer", "c1"),
            ("StartContainer", "c1"),
            ("PostStartContainer", "c1"),
            ("UpdateContainer", "c1"),
            ("PostUpdateContainer", "c1"),
            ("StopContainer", "c1"),
            ("RemoveContainer", "c1"),
            ("StopPodSandbox", ""),
            ("RemovePodSandbox", ""),
            ("ValidateContainerAdjustment", "c1"),
        ];
        for (what, ctr) in expect {
            let call = next_call(&mut calls).await;
            assert_eq!(call.what, what);
            assert_eq!(call.pod, "p1");
            assert_eq!(call.container, ctr);
        }

        // The StateChange dialect (NRI < v0.12) for the nine legacy events.
        let legacy = [
            (Event::RunPodSandbox, false),
            (Event::PostUpdatePodSandbox, false),
            (Event::PostCreateContainer, true),
            (Event::StartContainer, true),
            (Event::PostStartContainer, true),
            (Event::PostUpdateContainer, true),
            (Event::RemoveContainer, true),
            (Event::StopPodSandbox, false),
            (Event::RemovePodSandbox, false),
        ];
        for (event, with_ctr) in legacy {
            assert!(event.is_state_change_event());
            empty_call(
                &conn,
                method::STATE_CHANGE,
                &StateChangeEvent {
                    event: event as i32,
                    pod: p(),
                    container: if with_ctr { c() } else { None },
                },
            )
            .await;
            let call = next_call(&mut calls).await;
            assert_eq!(call.what, event.pretty_name());
            assert_eq!(call.pod, "p1");
            assert_eq!(call.container, if with_ctr { "c1" } else { "" });
        }

        // A StateChange with an event that never travels there is refused.
        let err = conn
            .call_raw(
                method::STATE_CHANGE,
                bytes::Bytes::from(
                    StateChangeEvent {
                        event: Event::CreateContainer as i32,
                        pod: p(),
                        container: c(),
                    }
                    .encode_to_vec(),
                ),
            )
            .await
            .unwrap_err();
        assert_eq!(err.code(), nri_ttrpc::Code::InvalidArgument);
        handle.stop();
    };
    let (res, ()) = tokio::join!(stub.run(), driver);
    res.unwrap();
}

#[tokio::test]
async fn validator_rejection_is_an_answer_not_an_error() {
    let rt = FakeRuntime::new();
    let (rec, _calls) = Recorder::new();
    let stub = test_stub(rec, &rt);
    let handle = stub.handle();
    let driver = async {
        let conn = rt.accept_ready().await;
        let v: ValidateContainerAdjustmentResponse = conn
            .call(
                method::VALIDATE_CONTAINER_ADJUSTMENT,
                &ValidateContainerAdjustmentRequest {
                    pod: Some(pod("p1")),
                    container: Some(container("reject-me", "p1")),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert!(v.reject);
        assert_eq!(v.reason, "rejected by recorder");
        handle.stop();
    };
    let (res, ()) = tokio::join!(stub.run(), driver);
    res.unwrap();
}
