//! `Plugin::create_container_encoded`: the plugin gets the CreateContainer
//! request undecoded and decodes what it needs; the method subscribes the
//! plugin to CreateContainer like `create_container` does; decoding errors
//! reach the runtime with the codes the SDK answers them with when it
//! decodes the request itself; and a plugin without the method still gets
//! its `create_container` called with the whole request.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::sync::Mutex;

use bytes::Bytes;
use common::*;
use nri_api::api::{
    ContainerAdjustment, CreateContainerRequest, CreateContainerResponse, Event, Mount,
};
use nri_api::method;
use nri_plugin::{Code, Encoded, HandlerResult, Plugin};
use prost::Message;

/// Adjusts containers whose name starts with `debug-`, decoding only the
/// container; records what it saw.
#[derive(Default)]
struct ByName {
    seen: Mutex<Vec<String>>,
}

#[nri_plugin::plugin]
impl Plugin for ByName {
    async fn create_container_encoded(
        &self,
        request: Encoded<CreateContainerRequest>,
    ) -> HandlerResult<CreateContainerResponse> {
        let ctr = request.container()?;
        self.seen.lock().unwrap().push(ctr.id.clone());
        let mut resp = CreateContainerResponse::default();
        if ctr.name.starts_with("debug-") {
            let mut adjust = ContainerAdjustment::default();
            adjust.add_env("DEBUG", "1");
            resp.adjust = Some(adjust);
        }
        Ok(resp)
    }
}

/// Answers every CreateContainer without looking at it.
struct Blind;

#[nri_plugin::plugin]
impl Plugin for Blind {
    async fn create_container_encoded(
        &self,
        _request: Encoded<CreateContainerRequest>,
    ) -> HandlerResult<CreateContainerResponse> {
        Ok(CreateContainerResponse::default())
    }
}

fn request(ctr_id: &str, name: &str) -> CreateContainerRequest {
    let mut c = container(ctr_id, "p0");
    c.name = name.into();
    CreateContainerRequest {
        pod: Some(pod("p0")),
        container: Some(c),
    }
}

/// A CreateContainerRequest whose container field (2) says 100 bytes and
/// has 3.
fn truncated() -> Bytes {
    Bytes::from_static(&[0x12, 100, 1, 2, 3])
}

#[test]
fn the_encoded_method_subscribes_to_create_container() {
    assert_eq!(
        ByName::IMPLEMENTED.events(),
        mask(&[Event::CreateContainer])
    );
}

#[tokio::test]
async fn the_plugin_decodes_the_part_it_needs_and_answers() {
    let rt = FakeRuntime::new();
    let stub = test_stub(ByName::default(), &rt);
    let handle = stub.handle();
    let driver = async {
        let conn = rt.accept(Register::Accept).await;
        conn.registered().await;
        let cfg = conn.configure(configure_req("v0.12.2")).await.unwrap();
        assert_eq!(cfg.events, 1 << (Event::CreateContainer as i32 - 1));
        conn.sync(vec![], vec![]).await.unwrap();
        let plain: CreateContainerResponse = conn
            .call(method::CREATE_CONTAINER, &request("c1", "web"))
            .await
            .unwrap();
        assert_eq!(plain, CreateContainerResponse::default());
        let debug: CreateContainerResponse = conn
            .call(method::CREATE_CONTAINER, &request("c2", "debug-web"))
            .await
            .unwrap();
        let env = debug.adjust.unwrap().env;
        assert_eq!((env[0].key.as_str(), env[0].value.as_str()), ("DEBUG", "1"));
        // A broken container: the plugin's `?` answers INVALID_ARGUMENT.
        let err = conn
            .call_raw(method::CREATE_CONTAINER, truncated())
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err}");
        // A container that would decode to far more than its size:
        // RESOURCE_EXHAUSTED, not decoded.
        let mut bomb = request("c3", "bomb");
        if let Some(c) = bomb.container.as_mut() {
            c.mounts = vec![Mount::default(); 200_000];
        }
        let err = conn
            .call_raw(method::CREATE_CONTAINER, bomb.encode_to_vec().into())
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
        handle.stop();
        conn
    };
    let (res, _conn) = tokio::join!(stub.run(), driver);
    res.unwrap();
    assert_eq!(*stub.plugin().seen.lock().unwrap(), ["c1", "c2"]);
}

#[tokio::test]
async fn a_plugin_that_does_not_look_does_not_decode() {
    // Nothing is checked before the method runs: a request the plugin never
    // decodes cannot fail it.
    let rt = FakeRuntime::new();
    let stub = test_stub(Blind, &rt);
    let handle = stub.handle();
    let driver = async {
        let conn = rt.accept_ready().await;
        let answer = conn
            .call_raw(method::CREATE_CONTAINER, truncated())
            .await
            .unwrap();
        assert!(answer.is_empty());
        handle.stop();
        conn
    };
    let (res, _conn) = tokio::join!(stub.run(), driver);
    res.unwrap();
}

#[tokio::test]
async fn without_the_method_create_container_gets_the_whole_request() {
    let rt = FakeRuntime::new();
    let (rec, mut calls) = Recorder::new();
    let stub = test_stub(rec, &rt);
    let handle = stub.handle();
    let driver = async {
        let conn = rt.accept_ready().await;
        let err = conn
            .call_raw(method::CREATE_CONTAINER, truncated())
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err}");
        let _: CreateContainerResponse = conn
            .call(method::CREATE_CONTAINER, &request("c1", "web"))
            .await
            .unwrap();
        // The broken request never reached the plugin; the good one did,
        // pod and container.
        let call = next_call_of(&mut calls, "CreateContainer").await;
        assert_eq!((call.pod.as_str(), call.container.as_str()), ("p0", "c1"));
        handle.stop();
        conn
    };
    let (res, _conn) = tokio::join!(stub.run(), driver);
    res.unwrap();
}
