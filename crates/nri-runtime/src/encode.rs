//! Encoding event requests straight from borrowed pods and containers.
//!
//! Every per-event request of the plugin service (`RunPodSandboxRequest`,
//! `StartContainerRequest`, `CreateContainerRequest`, ...) is the pod as
//! field 1 and, for container events, the container as field 2; so is
//! `StateChangeEvent` with the event as field 1, pod 2, container 3 (see the
//! schema in `nri-api`). Writing those fields from references gives the very
//! bytes prost produces for the owned request, without deep-cloning the pod
//! and container into a request struct first. The pod part of a
//! CreateContainer request is encoded once per event and reused for every
//! plugin ([`CreatePayload`]).

use bytes::Bytes;
use nri_api::api::{Container, Event, PodSandbox};
use prost::Message;
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, message};

/// Field number of the pod in the per-event requests (`pod = 1`).
const REQUEST_POD: u32 = 1;
/// Field number of the container in the per-event requests (`container = 2`).
const REQUEST_CONTAINER: u32 = 2;
/// Field number of the event in `StateChangeEvent` (`event = 1`).
const STATE_CHANGE_EVENT: u32 = 1;
/// Field number of the pod in `StateChangeEvent` (`pod = 2`).
const STATE_CHANGE_POD: u32 = 2;
/// Field number of the container in `StateChangeEvent` (`container = 3`).
const STATE_CHANGE_CONTAINER: u32 = 3;

fn message_len<M: Message>(tag: u32, m: &M) -> usize {
    message::encoded_len(tag, m)
}

/// `{pod = 1, container = 2}`: the request of every per-event RPC (the
/// container is absent for pod events).
pub(crate) fn pod_container_request(pod: &PodSandbox, container: Option<&Container>) -> Bytes {
    let len =
        message_len(REQUEST_POD, pod) + container.map_or(0, |c| message_len(REQUEST_CONTAINER, c));
    let mut buf = Vec::with_capacity(len);
    message::encode(REQUEST_POD, pod, &mut buf);
    if let Some(c) = container {
        message::encode(REQUEST_CONTAINER, c, &mut buf);
    }
    Bytes::from(buf)
}

/// `StateChangeEvent {event = 1, pod = 2, container = 3}`.
pub(crate) fn state_change(event: Event, pod: &PodSandbox, container: Option<&Container>) -> Bytes {
    let ev = event as i32;
    let mut len = message_len(STATE_CHANGE_POD, pod)
        + container.map_or(0, |c| message_len(STATE_CHANGE_CONTAINER, c));
    if ev != 0 {
        len += 1 + encoded_len_varint(i64::from(ev) as u64);
    }
    let mut buf = Vec::with_capacity(len);
    if ev != 0 {
        encode_key(
            STATE_CHANGE_EVENT,
            prost::encoding::WireType::Varint,
            &mut buf,
        );
        // Enums are int32 on the wire: negative values sign-extend to 64 bits.
        encode_varint(i64::from(ev) as u64, &mut buf);
    }
    message::encode(STATE_CHANGE_POD, pod, &mut buf);
    if let Some(c) = container {
        message::encode(STATE_CHANGE_CONTAINER, c, &mut buf);
    }
    Bytes::from(buf)
}

/// The CreateContainer request of one event: the pod encoded once, the
/// container re-encoded only when a plugin changed it.
pub(crate) struct CreatePayload {
    pod: Vec<u8>,
    cached: Option<(u64, Bytes)>,
}

impl CreatePayload {
    /// Encodes the pod part (field 1) once.
    pub(crate) fn new(pod: &PodSandbox) -> Self {
        let mut buf = Vec::with_capacity(message_len(REQUEST_POD, pod));
        message::encode(REQUEST_POD, pod, &mut buf);
        Self {
            pod: buf,
            cached: None,
        }
    }

    /// The request bytes for `container` at `revision` (a change of the
    /// revision means the container may have changed).
    pub(crate) fn request(&mut self, revision: u64, container: &Container) -> Bytes {
        if let Some((r, b)) = &self.cached
            && *r == revision
        {
            return b.clone();
        }
        let mut buf =
            Vec::with_capacity(self.pod.len() + message_len(REQUEST_CONTAINER, container));
        buf.extend_from_slice(&self.pod);
        message::encode(REQUEST_CONTAINER, container, &mut buf);
        let b = Bytes::from(buf);
        self.cached = Some((revision, b.clone()));
        b
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use nri_api::api::{
        CreateContainerRequest, LinuxContainer, RemovePodSandboxRequest, StartContainerRequest,
        StateChangeEvent,
    };

    use super::*;

    fn pod() -> PodSandbox {
        PodSandbox {
            id: "pod-1".into(),
            name: "web".into(),
            namespace: "default".into(),
            labels: BTreeMap::from([("app".into(), "web".into())]),
            ..Default::default()
        }
    }

    fn ctr(n: u32) -> Container {
        Container {
            id: format!("ctr-{n}"),
            pod_sandbox_id: "pod-1".into(),
            args: vec!["/bin/sh".into(), "-c".into(), "x".repeat(300)],
            env: vec!["A=1".into()],
            annotations: BTreeMap::from([("k".into(), "v".into())]),
            linux: Some(LinuxContainer::default()),
            ..Default::default()
        }
    }

    #[test]
    fn requests_are_byte_identical_to_prost() {
        for p in [pod(), PodSandbox::default()] {
            for c in [ctr(1), Container::default()] {
                let want = StartContainerRequest {
                    pod: Some(p.clone()),
                    container: Some(c.clone()),
                }
                .encode_to_vec();
                assert_eq!(&pod_container_request(&p, Some(&c))[..], &want[..]);
                let want = CreateContainerRequest {
                    pod: Some(p.clone()),
                    container: Some(c.clone()),
                }
                .encode_to_vec();
                let mut payload = CreatePayload::new(&p);
                assert_eq!(&payload.request(0, &c)[..], &want[..]);
                for ev in [
                    Event::StartContainer,
                    Event::RemoveContainer,
                    Event::Unknown,
                ] {
                    let want = StateChangeEvent {
                        event: ev as i32,
                        pod: Some(p.clone()),
                        container: Some(c.clone()),
                    }
                    .encode_to_vec();
                    assert_eq!(&state_change(ev, &p, Some(&c))[..], &want[..]);
                }
            }
            let want = RemovePodSandboxRequest {
                pod: Some(p.clone()),
            }
            .encode_to_vec();
            assert_eq!(&pod_container_request(&p, None)[..], &want[..]);
            let want = StateChangeEvent {
                event: Event::StopPodSandbox as i32,
                pod: Some(p.clone()),
                container: None,
            }
            .encode_to_vec();
            assert_eq!(
                &state_change(Event::StopPodSandbox, &p, None)[..],
                &want[..]
            );
        }
    }

    #[test]
    fn create_payload_reencodes_only_on_a_new_revision() {
        let p = pod();
        let mut payload = CreatePayload::new(&p);
        let a = payload.request(0, &ctr(1));
        // Same revision: the cached bytes, even if handed another container.
        let b = payload.request(0, &ctr(2));
        assert_eq!(a.as_ptr(), b.as_ptr());
        let c = payload.request(1, &ctr(2));
        let want = CreateContainerRequest {
            pod: Some(p),
            container: Some(ctr(2)),
        }
        .encode_to_vec();
        assert_eq!(&c[..], &want[..]);
    }
}
