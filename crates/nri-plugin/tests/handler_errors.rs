//! Errors returned by plugin methods become ttRPC statuses with the message.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::*;
use nri_api::api::{
    Container, CreateContainerRequest, CreateContainerResponse, PodSandbox, StartContainerRequest,
};
use nri_api::method;
use nri_plugin::{Builder, Code, HandlerError, HandlerResult, Plugin};

struct Failing;

#[nri_plugin::plugin]
impl Plugin for Failing {
    async fn create_container(
        &self,
        _p: PodSandbox,
        c: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        // Any std error converts with `?`, its causes joined into the message.
        let n: u32 = c.name.parse()?;
        Ok(CreateContainerResponse {
            update: vec![recorder_update(&n.to_string())],
            ..Default::default()
        })
    }

    async fn start_container(&self, _p: PodSandbox, c: Container) -> HandlerResult<()> {
        Err(HandlerError::msg(format!("cannot start {}", c.id)).with_code(Code::FailedPrecondition))
    }
}

#[tokio::test]
async fn handler_errors_map_to_status() {
    let rt = FakeRuntime::new();
    let stub = Builder::new(Failing)
        .name("failing")
        .index("10")
        .socket_path(&rt.path)
        .build()
        .unwrap();
    let handle = stub.handle();
    let driver = async {
        let conn = rt.accept_ready().await;
        let mut c = container("c1", "p1");
        c.name = "not-a-number".into();
        let err = conn
            .call::<_, CreateContainerResponse>(
                method::CREATE_CONTAINER,
                &CreateContainerRequest {
                    pod: Some(pod("p1")),
                    container: Some(c),
                },
            )
            .await
            .unwrap_err();
        match &err {
            nri_ttrpc::Error::Status { code, message } => {
                assert_eq!(*code, Code::Unknown);
                assert_eq!(message, "invalid digit found in string");
            }
            other => panic!("unexpected {other:?}"),
        }
        let mut c = container("c1", "p1");
        c.name = "7".into();
        let ok: CreateContainerResponse = conn
            .call(
                method::CREATE_CONTAINER,
                &CreateContainerRequest {
                    pod: Some(pod("p1")),
                    container: Some(c),
                },
            )
            .await
            .unwrap();
        assert_eq!(ok.update, vec![recorder_update("7")]);

        let err = conn
            .call::<_, nri_api::api::StartContainerResponse>(
                method::START_CONTAINER,
                &StartContainerRequest {
                    pod: Some(pod("p1")),
                    container: Some(container("c9", "p1")),
                },
            )
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::FailedPrecondition);
        assert!(err.to_string().contains("cannot start c9"), "{err}");
        // The connection survives handler errors.
        assert!(handle.is_connected());
        handle.stop();
    };
    let (res, ()) = tokio::join!(stub.run(), driver);
    res.unwrap();
}
