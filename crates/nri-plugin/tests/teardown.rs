//! Teardown errors: an error returned by the method of StopPodSandbox,
//! RemovePodSandbox, StopContainer, RemoveContainer or a Post* event is
//! answered with success by default (logged, counted, handed to
//! `Plugin::teardown_failed`), on the dedicated RPCs and through
//! StateChange, so that a runtime that stops a teardown event at the first
//! plugin error still delivers it to the plugins after this one.
//! `Builder::send_teardown_errors(true)` sends them as before. Errors of
//! the other events always reach the runtime.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use nri_api::api::{
    Container, CreateContainerResponse, Event, LinuxResources, PodSandbox, StateChangeEvent,
    StopContainerResponse, UpdateContainerResponse, ValidateContainerAdjustmentRequest,
    ValidateContainerAdjustmentResponse,
};
use nri_api::method;
use nri_plugin::{Builder, EventMask, HandlerError, HandlerResult, Plugin};
use nri_ttrpc::Code;
use prost::Message;

/// The teardown events.
const TEARDOWN: [Event; 8] = [
    Event::StopPodSandbox,
    Event::RemovePodSandbox,
    Event::StopContainer,
    Event::RemoveContainer,
    Event::PostCreateContainer,
    Event::PostStartContainer,
    Event::PostUpdateContainer,
    Event::PostUpdatePodSandbox,
];

/// Fails every event; records what `teardown_failed` saw.
#[derive(Default)]
struct FailsEverything {
    seen: Arc<Mutex<Vec<(Event, String)>>>,
}

fn fail<T>(event: &str) -> HandlerResult<T> {
    Err(HandlerError::msg(format!("{event} failed on purpose")))
}

#[nri_plugin::plugin]
impl Plugin for FailsEverything {
    fn teardown_failed(&self, event: Event, error: &HandlerError) {
        self.seen
            .lock()
            .unwrap()
            .push((event, error.message().to_owned()));
    }
    async fn run_pod_sandbox(&self, _pod: PodSandbox) -> HandlerResult<()> {
        fail("RunPodSandbox")
    }
    async fn update_pod_sandbox(
        &self,
        _pod: PodSandbox,
        _o: Option<LinuxResources>,
        _r: Option<LinuxResources>,
    ) -> HandlerResult<()> {
        fail("UpdatePodSandbox")
    }
    async fn post_update_pod_sandbox(&self, _pod: PodSandbox) -> HandlerResult<()> {
        fail("PostUpdatePodSandbox")
    }
    async fn stop_pod_sandbox(&self, _pod: PodSandbox) -> HandlerResult<()> {
        fail("StopPodSandbox")
    }
    async fn remove_pod_sandbox(&self, _pod: PodSandbox) -> HandlerResult<()> {
        fail("RemovePodSandbox")
    }
    async fn create_container(
        &self,
        _pod: PodSandbox,
        _c: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        fail("CreateContainer")
    }
    async fn post_create_container(&self, _pod: PodSandbox, _c: Container) -> HandlerResult<()> {
        fail("PostCreateContainer")
    }
    async fn start_container(&self, _pod: PodSandbox, _c: Container) -> HandlerResult<()> {
        fail("StartContainer")
    }
    async fn post_start_container(&self, _pod: PodSandbox, _c: Container) -> HandlerResult<()> {
        fail("PostStartContainer")
    }
    async fn update_container(
        &self,
        _pod: PodSandbox,
        _c: Container,
        _r: Option<LinuxResources>,
    ) -> HandlerResult<UpdateContainerResponse> {
        fail("UpdateContainer")
    }
    async fn post_update_container(&self, _pod: PodSandbox, _c: Container) -> HandlerResult<()> {
        fail("PostUpdateContainer")
    }
    async fn stop_container(
        &self,
        _pod: PodSandbox,
        _c: Container,
    ) -> HandlerResult<StopContainerResponse> {
        fail("StopContainer")
    }
    async fn remove_container(&self, _pod: PodSandbox, _c: Container) -> HandlerResult<()> {
        fail("RemoveContainer")
    }
    async fn validate_container_adjustment(
        &self,
        _r: ValidateContainerAdjustmentRequest,
    ) -> HandlerResult<()> {
        fail("ValidateContainerAdjustment")
    }
}

fn state_change(event: Event) -> bytes::Bytes {
    StateChangeEvent {
        event: event as i32,
        pod: Some(pod("p")),
        container: Some(container("c", "p")),
    }
    .encode_to_vec()
    .into()
}

/// Sends every event on its dedicated RPC, then the StateChange events
/// through StateChange; returns the events whose answer was an error (for
/// ValidateContainerAdjustment: a rejection).
async fn send_all(conn: &RuntimeConn) -> (Vec<Event>, Vec<Event>) {
    let mut dedicated = Vec::new();
    for event in Event::ALL_EVENTS {
        let m = event.method_name().unwrap();
        match conn.call_raw(m, bytes::Bytes::new()).await {
            Ok(payload) if event == Event::ValidateContainerAdjustment => {
                // A validator's error is a rejection, never swallowed.
                let r = ValidateContainerAdjustmentResponse::decode(payload).unwrap();
                assert!(r.reject, "{r:?}");
                assert!(r.reason.contains("failed on purpose"), "{r:?}");
                dedicated.push(event);
            }
            Ok(payload) => {
                if event == Event::StopContainer {
                    // An empty answer: no updates.
                    let r = StopContainerResponse::decode(payload).unwrap();
                    assert!(r.update.is_empty(), "{r:?}");
                }
            }
            Err(e) => {
                assert_eq!(e.code(), Code::Unknown, "{event}: {e}");
                assert!(e.to_string().contains("failed on purpose"), "{e}");
                dedicated.push(event);
            }
        }
    }
    let mut legacy = Vec::new();
    for event in Event::ALL_EVENTS
        .into_iter()
        .filter(|e| e.is_state_change_event())
    {
        if conn
            .call_raw(method::STATE_CHANGE, state_change(event))
            .await
            .is_err()
        {
            legacy.push(event);
        }
    }
    (dedicated, legacy)
}

#[tokio::test]
async fn teardown_errors_are_answered_with_success_logged_counted_and_shown() {
    let rt = FakeRuntime::new();
    let plugin = FailsEverything::default();
    let seen = Arc::clone(&plugin.seen);
    let stub = Builder::new(plugin)
        .name("fails")
        .index("10")
        .socket_path(&rt.path)
        .build()
        .unwrap();
    let handle = stub.handle();
    let driver = async {
        let conn = rt.accept_ready().await;
        let (dedicated, legacy) = send_all(&conn).await;
        // Only the request events fail.
        assert_eq!(
            EventMask::from_events(&dedicated),
            EventMask::ALL.difference(EventMask::from_events(&TEARDOWN))
        );
        assert_eq!(legacy, [Event::RunPodSandbox, Event::StartContainer]);
        handle.stop();
    };
    let (res, ()) = tokio::join!(stub.run(), driver);
    res.unwrap();

    // 8 dedicated teardown RPCs and 7 teardown events through StateChange
    // (StopContainer has no StateChange form).
    assert_eq!(handle.teardown_errors(), 15);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 15);
    for (event, message) in &seen {
        assert!(TEARDOWN.contains(event), "{event}");
        assert_eq!(*message, format!("{event} failed on purpose"));
    }
    for event in TEARDOWN {
        assert!(seen.iter().any(|(e, _)| *e == event), "{event} not shown");
    }
}

#[tokio::test]
async fn send_teardown_errors_sends_them() {
    let rt = FakeRuntime::new();
    let plugin = FailsEverything::default();
    let seen = Arc::clone(&plugin.seen);
    let stub = Builder::new(plugin)
        .name("fails")
        .index("10")
        .socket_path(&rt.path)
        .send_teardown_errors(true)
        .build()
        .unwrap();
    let handle = stub.handle();
    let driver = async {
        let conn = rt.accept_ready().await;
        let (dedicated, legacy) = send_all(&conn).await;
        assert_eq!(EventMask::from_events(&dedicated), EventMask::ALL);
        let state_change_events: Vec<Event> = Event::ALL_EVENTS
            .into_iter()
            .filter(|e| e.is_state_change_event())
            .collect();
        assert_eq!(legacy, state_change_events);
        handle.stop();
    };
    let (res, ()) = tokio::join!(stub.run(), driver);
    res.unwrap();
    assert_eq!(handle.teardown_errors(), 0);
    assert!(seen.lock().unwrap().is_empty());
}

/// Panics in every method; records what `teardown_failed` saw.
#[derive(Default)]
struct PanicsEverywhere {
    seen: Arc<Mutex<Vec<(Event, String, Code)>>>,
}

#[allow(clippy::panic)]
fn boom<T>(event: &str) -> HandlerResult<T> {
    panic!("{event} panicked on purpose")
}

#[nri_plugin::plugin]
impl Plugin for PanicsEverywhere {
    fn teardown_failed(&self, event: Event, error: &HandlerError) {
        self.seen
            .lock()
            .unwrap()
            .push((event, error.message().to_owned(), error.code()));
    }
    async fn run_pod_sandbox(&self, _pod: PodSandbox) -> HandlerResult<()> {
        boom("RunPodSandbox")
    }
    async fn post_update_pod_sandbox(&self, _pod: PodSandbox) -> HandlerResult<()> {
        boom("PostUpdatePodSandbox")
    }
    async fn stop_pod_sandbox(&self, _pod: PodSandbox) -> HandlerResult<()> {
        boom("StopPodSandbox")
    }
    async fn remove_pod_sandbox(&self, _pod: PodSandbox) -> HandlerResult<()> {
        boom("RemovePodSandbox")
    }
    async fn create_container(
        &self,
        _pod: PodSandbox,
        _c: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        boom("CreateContainer")
    }
    async fn post_create_container(&self, _pod: PodSandbox, _c: Container) -> HandlerResult<()> {
        boom("PostCreateContainer")
    }
    async fn start_container(&self, _pod: PodSandbox, _c: Container) -> HandlerResult<()> {
        boom("StartContainer")
    }
    async fn post_start_container(&self, _pod: PodSandbox, _c: Container) -> HandlerResult<()> {
        boom("PostStartContainer")
    }
    async fn post_update_container(&self, _pod: PodSandbox, _c: Container) -> HandlerResult<()> {
        boom("PostUpdateContainer")
    }
    async fn stop_container(
        &self,
        _pod: PodSandbox,
        _c: Container,
    ) -> HandlerResult<StopContainerResponse> {
        boom("StopContainer")
    }
    async fn remove_container(&self, _pod: PodSandbox, _c: Container) -> HandlerResult<()> {
        boom("RemoveContainer")
    }
}

/// A teardown method that panics is answered with success, as its errors
/// are (the panic reported: logged, counted, handed to `teardown_failed`
/// with code INTERNAL and the panic's message); a panic in any other
/// method is an INTERNAL error, and the plugin serves on.
#[tokio::test]
async fn teardown_panics_are_answered_with_success_and_reported() {
    let rt = FakeRuntime::new();
    let plugin = PanicsEverywhere::default();
    let seen = Arc::clone(&plugin.seen);
    let stub = Builder::new(plugin)
        .name("panics")
        .index("10")
        .socket_path(&rt.path)
        .build()
        .unwrap();
    let handle = stub.handle();
    let driver = async {
        let conn = rt.accept_ready().await;
        let mut failed = Vec::new();
        for event in TEARDOWN.into_iter().chain([
            Event::RunPodSandbox,
            Event::CreateContainer,
            Event::StartContainer,
        ]) {
            let m = event.method_name().unwrap();
            if let Err(e) = conn.call_raw(m, bytes::Bytes::new()).await {
                assert_eq!(e.code(), Code::Internal, "{event}: {e}");
                failed.push(event);
            }
        }
        assert_eq!(
            failed,
            [
                Event::RunPodSandbox,
                Event::CreateContainer,
                Event::StartContainer
            ]
        );
        let mut legacy = Vec::new();
        for event in TEARDOWN.into_iter().filter(|e| e.is_state_change_event()) {
            if conn
                .call_raw(method::STATE_CHANGE, state_change(event))
                .await
                .is_err()
            {
                legacy.push(event);
            }
        }
        assert!(legacy.is_empty(), "{legacy:?}");
        // Still serving.
        assert!(
            conn.call_raw(method::STATE_CHANGE, state_change(Event::StopPodSandbox))
                .await
                .is_ok()
        );
        handle.stop();
    };
    let (res, ()) = tokio::join!(stub.run(), driver);
    res.unwrap();
    assert_eq!(handle.teardown_errors(), 16);
    let seen = seen.lock().unwrap().clone();
    for (event, message, code) in &seen {
        assert!(TEARDOWN.contains(event), "{event}");
        assert_eq!(*code, Code::Internal);
        assert!(
            message.contains(&format!("{event} panicked on purpose")),
            "{message}"
        );
    }
    assert_eq!(seen.len(), 16);
}
