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
use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, message};

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

/// Field number of the pods in `SynchronizeRequest` (`pods = 1`).
const SYNC_PODS: u32 = 1;
/// Field number of the containers in `SynchronizeRequest` (`containers = 2`).
const SYNC_CONTAINERS: u32 = 2;
/// Field number of `more` in `SynchronizeRequest` (`more = 3`).
const SYNC_MORE: u32 = 3;
/// Bytes of `more = true` on the wire (key and value), counted against the
/// message limit whether or not the message carries it.
const SYNC_MORE_LEN: usize = 2;

/// One Synchronize message of a split synchronization: ranges of the pods
/// and containers it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyncPart {
    pub(crate) pods: std::ops::Range<usize>,
    pub(crate) containers: std::ops::Range<usize>,
    /// Encoded size of the message with `more = true`.
    pub(crate) len: usize,
}

/// A split synchronization: the messages, and the encoded length of every
/// pod and container (computed once: prost's `encoded_len` walks the whole
/// object, and a 5000-container sync would otherwise pay for it three times).
#[derive(Debug)]
pub(crate) struct SyncPlan {
    pub(crate) parts: Vec<SyncPart>,
    pod_lens: Vec<usize>,
    container_lens: Vec<usize>,
}

/// Size of one length-delimited field of body length `len`.
fn field_len(len: usize) -> usize {
    // Field numbers 1..=3: a one-byte key.
    1 + encoded_len_varint(len as u64) + len
}

/// Splits a synchronization into messages of at most `limit` bytes (an
/// object larger than that goes alone in its message), pods first, in
/// order. Always at least one message (possibly empty).
pub(crate) fn plan_sync(pods: &[&PodSandbox], containers: &[&Container], limit: usize) -> SyncPlan {
    let pod_lens: Vec<usize> = pods.iter().map(|p| p.encoded_len()).collect();
    let container_lens: Vec<usize> = containers.iter().map(|c| c.encoded_len()).collect();
    let mut parts = Vec::new();
    let mut cur = SyncPart {
        pods: 0..0,
        containers: 0..0,
        len: SYNC_MORE_LEN,
    };
    let empty = |p: &SyncPart| p.pods.is_empty() && p.containers.is_empty();
    for (i, len) in pod_lens.iter().enumerate() {
        let n = field_len(*len);
        if cur.len + n > limit && !empty(&cur) {
            let next = SyncPart {
                pods: i..i,
                containers: 0..0,
                len: SYNC_MORE_LEN,
            };
            parts.push(std::mem::replace(&mut cur, next));
        }
        cur.len += n;
        cur.pods.end = i + 1;
    }
    for (i, len) in container_lens.iter().enumerate() {
        let n = field_len(*len);
        if cur.len + n > limit && !empty(&cur) {
            let next = SyncPart {
                pods: pods.len()..pods.len(),
                containers: i..i,
                len: SYNC_MORE_LEN,
            };
            parts.push(std::mem::replace(&mut cur, next));
        }
        cur.len += n;
        if cur.containers.is_empty() {
            cur.containers = i..i;
        }
        cur.containers.end = i + 1;
    }
    parts.push(cur);
    SyncPlan {
        parts,
        pod_lens,
        container_lens,
    }
}

impl SyncPlan {
    /// `SynchronizeRequest {pods = 1, containers = 2, more = 3}` of part
    /// `i`, encoded from references (the bytes prost writes for the owned
    /// request); `more` is set on every part but the last. `None` past the
    /// last part.
    pub(crate) fn encode(
        &self,
        i: usize,
        pods: &[&PodSandbox],
        containers: &[&Container],
    ) -> Option<Bytes> {
        let part = self.parts.get(i)?;
        let more = i + 1 < self.parts.len();
        let mut buf = Vec::with_capacity(part.len);
        let pod_lens = self.pod_lens.get(part.pods.clone()).unwrap_or_default();
        let pods = pods.get(part.pods.clone()).unwrap_or_default();
        for (p, len) in pods.iter().zip(pod_lens) {
            encode_key(SYNC_PODS, WireType::LengthDelimited, &mut buf);
            encode_varint(*len as u64, &mut buf);
            p.encode_raw(&mut buf);
        }
        let container_lens = self
            .container_lens
            .get(part.containers.clone())
            .unwrap_or_default();
        let containers = containers.get(part.containers.clone()).unwrap_or_default();
        for (c, len) in containers.iter().zip(container_lens) {
            encode_key(SYNC_CONTAINERS, WireType::LengthDelimited, &mut buf);
            encode_varint(*len as u64, &mut buf);
            c.encode_raw(&mut buf);
        }
        if more {
            prost::encoding::bool::encode(SYNC_MORE, &true, &mut buf);
        }
        Some(Bytes::from(buf))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
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
    fn sync_requests_are_byte_identical_to_prost() {
        use nri_api::api::SynchronizeRequest;
        let pods = [pod(), PodSandbox::default()];
        let ctrs = [ctr(1), Container::default(), ctr(2)];
        let p: Vec<&PodSandbox> = pods.iter().collect();
        let c: Vec<&Container> = ctrs.iter().collect();
        for (np, nc) in [(0, 0), (2, 0), (0, 3), (2, 3), (1, 1)] {
            // One message (more = false).
            let plan = plan_sync(&p[..np], &c[..nc], 4 << 20);
            let want = SynchronizeRequest {
                pods: pods[..np].to_vec(),
                containers: ctrs[..nc].to_vec(),
                more: false,
            }
            .encode_to_vec();
            let got = plan.encode(0, &p[..np], &c[..nc]).unwrap();
            assert_eq!(got.as_ref(), &want[..]);
            assert!(plan.encode(1, &p[..np], &c[..nc]).is_none());
        }
        // One object per message: every message but the last has more = true.
        let plan = plan_sync(&p, &c, 1);
        assert_eq!(plan.parts.len(), 5);
        for (i, part) in plan.parts.iter().enumerate() {
            let want = SynchronizeRequest {
                pods: pods[part.pods.clone()].to_vec(),
                containers: ctrs[part.containers.clone()].to_vec(),
                more: i + 1 < plan.parts.len(),
            }
            .encode_to_vec();
            let got = plan.encode(i, &p, &c).unwrap();
            assert_eq!(got.as_ref(), &want[..], "part {i}");
            assert!(
                want.len() <= part.len,
                "part {i}: {} > {}",
                want.len(),
                part.len
            );
        }
    }

    #[test]
    fn sync_plan_keeps_every_object_in_order_and_respects_the_limit() {
        let pods: Vec<PodSandbox> = (0..50)
            .map(|k| PodSandbox {
                id: format!("p{k}"),
                ..pod()
            })
            .collect();
        let ctrs: Vec<Container> = (0..50).map(ctr).collect();
        let p: Vec<&PodSandbox> = pods.iter().collect();
        let c: Vec<&Container> = ctrs.iter().collect();
        let one = plan_sync(&p, &c, 4 << 20);
        assert_eq!(one.parts.len(), 1);
        assert_eq!(
            (one.parts[0].pods.clone(), one.parts[0].containers.clone()),
            (0..50, 0..50)
        );
        for limit in [1, 500, 1000, 5000] {
            let plan = plan_sync(&p, &c, limit);
            let (mut np, mut nc) = (0, 0);
            for (i, part) in plan.parts.iter().enumerate() {
                assert_eq!(part.pods.start, np.min(50), "{limit}: {:?}", plan.parts);
                np = part.pods.end;
                if !part.containers.is_empty() {
                    assert_eq!(part.containers.start, nc, "{limit}: {:?}", plan.parts);
                    nc = part.containers.end;
                }
                let bytes = plan.encode(i, &p, &c).unwrap();
                let objects = part.pods.len() + part.containers.len();
                assert!(bytes.len() <= limit || objects == 1, "{limit}: {part:?}");
            }
            assert_eq!((np, nc), (50, 50), "{limit}");
        }
        assert_eq!(plan_sync(&[], &[], 100).parts.len(), 1);
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
