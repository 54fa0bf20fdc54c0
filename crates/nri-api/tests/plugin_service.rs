//! The generated `Plugin` service: method names, events and the dispatcher
//! from a method name and its encoded request to the typed handler.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use nri_api::api::{self, Event};
use nri_api::method;
use nri_api::service::{PluginHandlers, PluginMethod, dispatch_plugin};
use prost::Message;
use prost::bytes::Bytes;

#[test]
fn methods_are_the_services_in_schema_order_with_their_events() {
    let names: Vec<&str> = PluginMethod::ALL.iter().map(|m| m.name()).collect();
    assert_eq!(names, method::PLUGIN_METHODS);
    for m in PluginMethod::ALL {
        assert_eq!(PluginMethod::from_name(m.name()), Some(m));
        if let Some(e) = m.event() {
            assert_eq!(PluginMethod::of_event(e), Some(m));
            assert_eq!(e.method_name(), Some(m.name()));
        }
    }
    assert_eq!(PluginMethod::from_name("Nope"), None);
    assert_eq!(PluginMethod::from_name(method::REGISTER_PLUGIN), None);
    // Every event has its dedicated RPC; the other methods have no event.
    for e in Event::ALL_EVENTS {
        assert!(PluginMethod::of_event(e).is_some(), "{e:?}");
    }
    let without: Vec<PluginMethod> = PluginMethod::ALL
        .into_iter()
        .filter(|m| m.event().is_none())
        .collect();
    assert_eq!(
        without,
        [
            PluginMethod::Configure,
            PluginMethod::Synchronize,
            PluginMethod::Shutdown,
            PluginMethod::StateChange
        ]
    );
    assert_eq!(Event::Unknown.method_name(), None);
}

/// Records what the dispatcher called: (what, detail).
#[derive(Default)]
struct Recorder {
    /// Methods whose `raw` hook answers (no decoding, no handler).
    raw_answers: Vec<PluginMethod>,
}

type Slot = Vec<(String, String)>;

macro_rules! record {
    ($($name:ident: $req:ty => |$r:ident| $detail:expr;)*) => {
        $(
            fn $name(&self, $r: $req, slot: &mut Slot) {
                slot.push((stringify!($name).to_owned(), $detail));
            }
        )*
    };
}

impl PluginHandlers for Recorder {
    type Slot = Slot;

    fn raw(&self, m: PluginMethod, payload: Bytes, slot: &mut Slot) -> Option<Bytes> {
        if self.raw_answers.contains(&m) {
            slot.push(("raw".into(), format!("{} {}", m.name(), payload.len())));
            return None;
        }
        Some(payload)
    }

    fn decode<M: Message + prost::Name + Default>(
        &self,
        m: PluginMethod,
        payload: Bytes,
        slot: &mut Slot,
    ) -> Option<M> {
        match M::decode(payload) {
            Ok(req) => Some(req),
            Err(_) => {
                slot.push(("decode failed".into(), format!("{} {}", m.name(), M::NAME)));
                None
            }
        }
    }

    fn unknown(&self, m: &str, slot: &mut Slot) {
        slot.push(("unknown".into(), m.to_owned()));
    }

    record! {
        configure: api::ConfigureRequest => |r| r.runtime_name;
        synchronize: api::SynchronizeRequest => |r| r.pods.len().to_string();
        shutdown: api::Empty => |_r| String::new();
        run_pod_sandbox: api::RunPodSandboxRequest => |r| r.pod.unwrap_or_default().id;
        update_pod_sandbox: api::UpdatePodSandboxRequest => |r| r.pod.unwrap_or_default().id;
        post_update_pod_sandbox: api::PostUpdatePodSandboxRequest => |r| r.pod.unwrap_or_default().id;
        stop_pod_sandbox: api::StopPodSandboxRequest => |r| r.pod.unwrap_or_default().id;
        remove_pod_sandbox: api::RemovePodSandboxRequest => |r| r.pod.unwrap_or_default().id;
        create_container: api::CreateContainerRequest => |r| r.container.unwrap_or_default().id;
        post_create_container: api::PostCreateContainerRequest => |r| r.container.unwrap_or_default().id;
        start_container: api::StartContainerRequest => |r| r.container.unwrap_or_default().id;
        post_start_container: api::PostStartContainerRequest => |r| r.container.unwrap_or_default().id;
        update_container: api::UpdateContainerRequest => |r| r.container.unwrap_or_default().id;
        post_update_container: api::PostUpdateContainerRequest => |r| r.container.unwrap_or_default().id;
        stop_container: api::StopContainerRequest => |r| r.container.unwrap_or_default().id;
        remove_container: api::RemoveContainerRequest => |r| r.container.unwrap_or_default().id;
        state_change: api::StateChangeEvent => |r| r.event.to_string();
        validate_container_adjustment: api::ValidateContainerAdjustmentRequest => |r| r.pod.unwrap_or_default().id;
    }
}

/// A request with pod `p` and container `c` (both fields 1 and 2, as
/// every per-event request has them; StateChange gets event 1 too).
fn pod_container() -> Bytes {
    api::CreateContainerRequest {
        pod: Some(api::PodSandbox {
            id: "p".into(),
            ..Default::default()
        }),
        container: Some(api::Container {
            id: "c".into(),
            ..Default::default()
        }),
    }
    .encode_to_vec()
    .into()
}

#[test]
fn each_method_reaches_its_typed_handler_with_the_decoded_request() {
    let h = Recorder::default();
    let call = |m: &str, payload: Bytes| {
        let mut slot = Slot::new();
        dispatch_plugin(&h, m, payload, &mut slot);
        slot
    };
    let one = |what: &str, detail: &str| vec![(what.to_owned(), detail.to_owned())];
    let configure = api::ConfigureRequest {
        runtime_name: "rt".into(),
        ..Default::default()
    };
    let configure = Bytes::from(configure.encode_to_vec());
    assert_eq!(call("Configure", configure), one("configure", "rt"));
    assert_eq!(call("Shutdown", Bytes::new()), one("shutdown", ""));
    assert_eq!(
        call("CreateContainer", pod_container()),
        one("create_container", "c")
    );
    assert_eq!(
        call("RemovePodSandbox", pod_container()),
        one("remove_pod_sandbox", "p")
    );
    assert_eq!(
        call("ValidateContainerAdjustment", pod_container()),
        one("validate_container_adjustment", "p")
    );
    // Every method goes to the handler of its own name.
    for m in PluginMethod::ALL {
        let slot = call(m.name(), Bytes::new());
        assert_eq!(slot.len(), 1, "{m:?}");
        let snake: String = m
            .name()
            .chars()
            .enumerate()
            .flat_map(|(i, c)| {
                let sep = (i > 0 && c.is_ascii_uppercase()).then_some('_');
                sep.into_iter()
                    .chain(std::iter::once(c.to_ascii_lowercase()))
            })
            .collect();
        assert_eq!(slot[0].0, snake, "{m:?}");
    }
}

#[test]
fn unknown_methods_bad_requests_and_raw_answers_stop_before_the_handler() {
    let h = Recorder {
        raw_answers: vec![PluginMethod::Synchronize],
    };
    let call = |m: &str, payload: Bytes| {
        let mut slot = Slot::new();
        dispatch_plugin(&h, m, payload, &mut slot);
        slot
    };
    assert_eq!(
        call("RegisterPlugin", Bytes::new()),
        [("unknown".to_owned(), "RegisterPlugin".to_owned())]
    );
    assert_eq!(
        call("Synchronize", pod_container()),
        [(
            "raw".to_owned(),
            format!("Synchronize {}", pod_container().len())
        )]
    );
    // A truncated request: the decoder answers, no handler runs.
    let bad = pod_container().slice(..3);
    assert_eq!(
        call("CreateContainer", bad),
        [(
            "decode failed".to_owned(),
            "CreateContainer CreateContainerRequest".to_owned()
        )]
    );
}

#[test]
fn teardown_events_are_stop_remove_and_post() {
    let teardown: Vec<Event> = Event::ALL_EVENTS
        .into_iter()
        .filter(|e| e.is_teardown())
        .collect();
    assert_eq!(
        teardown,
        [
            Event::StopPodSandbox,
            Event::RemovePodSandbox,
            Event::PostCreateContainer,
            Event::PostStartContainer,
            Event::PostUpdateContainer,
            Event::StopContainer,
            Event::RemoveContainer,
            Event::PostUpdatePodSandbox,
        ]
    );
    assert!(!Event::Unknown.is_teardown());
    assert!(!Event::Last.is_teardown());
}
