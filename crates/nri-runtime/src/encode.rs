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

use bytes::{BufMut, Bytes, BytesMut};
use nri_api::api::{Container, Event, PodSandbox};
use prost::Message;
use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, key_len};
use tokio::sync::mpsc;

use crate::config::Snapshot;

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

/// Writes `m`, whose encoded body is `body` bytes, as length-delimited
/// field `tag`.
fn encode_field<M: Message>(tag: u32, m: &M, body: usize, buf: &mut impl BufMut) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(body as u64, buf);
    m.encode_raw(buf);
}

/// A message to write as a length-delimited field, measured once (prost's
/// `message::encode` walks the message again to write its length: a
/// second walk over ~100 strings of a container).
struct Measured<'a, M> {
    tag: u32,
    msg: &'a M,
    body: usize,
}

impl<'a, M: Message> Measured<'a, M> {
    fn new(tag: u32, msg: &'a M) -> Self {
        Self {
            tag,
            msg,
            body: msg.encoded_len(),
        }
    }

    /// Bytes of the whole field.
    fn len(&self) -> usize {
        key_len(self.tag) + encoded_len_varint(self.body as u64) + self.body
    }

    fn encode(&self, buf: &mut impl BufMut) {
        encode_field(self.tag, self.msg, self.body, buf);
    }
}

/// `{pod = 1, container = 2}`: the request of every per-event RPC (the
/// container is absent for pod events).
pub(crate) fn pod_container_request(pod: &PodSandbox, container: Option<&Container>) -> Bytes {
    let pod = Measured::new(REQUEST_POD, pod);
    let container = container.map(|c| Measured::new(REQUEST_CONTAINER, c));
    let mut buf = Vec::with_capacity(pod.len() + container.as_ref().map_or(0, Measured::len));
    pod.encode(&mut buf);
    if let Some(c) = container {
        c.encode(&mut buf);
    }
    Bytes::from(buf)
}

/// `StateChangeEvent {event = 1, pod = 2, container = 3}`.
pub(crate) fn state_change(event: Event, pod: &PodSandbox, container: Option<&Container>) -> Bytes {
    let ev = event as i32;
    let pod = Measured::new(STATE_CHANGE_POD, pod);
    let container = container.map(|c| Measured::new(STATE_CHANGE_CONTAINER, c));
    let mut len = pod.len() + container.as_ref().map_or(0, Measured::len);
    if ev != 0 {
        len += 1 + encoded_len_varint(i64::from(ev) as u64);
    }
    let mut buf = Vec::with_capacity(len);
    if ev != 0 {
        encode_key(STATE_CHANGE_EVENT, WireType::Varint, &mut buf);
        // Enums are int32 on the wire: negative values sign-extend to 64 bits.
        encode_varint(i64::from(ev) as u64, &mut buf);
    }
    pod.encode(&mut buf);
    if let Some(c) = container {
        c.encode(&mut buf);
    }
    Bytes::from(buf)
}

/// Room left after a request for the additions of later plugins
/// ([`CreatePayload::request`] with a delta), so that they are appended in
/// place.
const DELTA_HEADROOM: usize = 1024;

/// The CreateContainer requests of one event: the pod encoded once, the
/// container encoded again only when a plugin changed it other than by
/// appending.
///
/// Few allocations: each request is a few KiB, which glibc's malloc serves
/// down its slow path (consolidating its free lists first). The first
/// request (shared with the synchronization barrier) is one buffer; the
/// requests after adjustments go to a second one, with room for what later
/// plugins append, extended in place while nobody else holds it.
pub(crate) struct CreatePayload {
    /// The request for the unadjusted container; it starts with the pod
    /// field (`pod_len` bytes).
    first: Bytes,
    pod_len: usize,
    cached: (u64, Bytes),
}

impl CreatePayload {
    /// Encodes the request for the unadjusted `container` (revision 0).
    pub(crate) fn new(pod: &PodSandbox, container: &Container) -> Self {
        let pod = Measured::new(REQUEST_POD, pod);
        let container = Measured::new(REQUEST_CONTAINER, container);
        let pod_len = pod.len();
        let mut buf = BytesMut::with_capacity(pod_len + container.len());
        pod.encode(&mut buf);
        container.encode(&mut buf);
        let first = buf.freeze();
        Self {
            cached: (0, first.clone()),
            first,
            pod_len,
        }
    }

    /// The request for the unadjusted container.
    pub(crate) fn first(&self) -> Bytes {
        self.first.clone()
    }

    /// The request bytes for `container` at `revision` (a change of the
    /// revision means the container may have changed).
    ///
    /// `delta`, when given, is what the response that led to `revision`
    /// appended to the container at `revision - 1`
    /// (`crate::merge::append_delta`). If the request cached is the one at
    /// `revision - 1`, the new request is that one followed by `delta` as
    /// a second `container` field, which every protobuf decoder merges
    /// into the first: a copy (or nothing, when the previous request is in
    /// a buffer of ours with room) and a small encoding instead of
    /// encoding the whole container again.
    pub(crate) fn request(
        &mut self,
        revision: u64,
        container: &Container,
        delta: Option<&Container>,
    ) -> Bytes {
        let (r, _) = self.cached;
        if r == revision {
            return self.cached.1.clone();
        }
        let buf = match delta {
            Some(d) if r.checked_add(1) == Some(revision) => {
                let d = Measured::new(REQUEST_CONTAINER, d);
                let extra = d.len();
                let prev = std::mem::take(&mut self.cached.1);
                let mut buf = match prev.try_into_mut() {
                    Ok(buf) if buf.capacity() - buf.len() >= extra => buf,
                    Ok(buf) => Self::copy(&buf, extra),
                    Err(prev) => Self::copy(&prev, extra),
                };
                d.encode(&mut buf);
                buf
            }
            _ => {
                let container = Measured::new(REQUEST_CONTAINER, container);
                let mut buf =
                    BytesMut::with_capacity(self.pod_len + container.len() + DELTA_HEADROOM);
                buf.extend_from_slice(self.first.get(..self.pod_len).unwrap_or_default());
                container.encode(&mut buf);
                buf
            }
        };
        let b = buf.freeze();
        self.cached = (revision, b.clone());
        b
    }

    /// `bytes` in a new buffer with room for `extra` bytes and the
    /// additions of later plugins.
    fn copy(bytes: &[u8], extra: usize) -> BytesMut {
        let mut buf = BytesMut::with_capacity(bytes.len() + extra + DELTA_HEADROOM);
        buf.extend_from_slice(bytes);
        buf
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

/// Size of one length-delimited field of body length `len`.
fn field_len(len: usize) -> usize {
    // Field numbers 1..=3: a one-byte key.
    1 + encoded_len_varint(len as u64) + len
}

/// Where one Synchronize message ends: objects are added in order while
/// the message stays within the limit; an object that does not fit starts
/// the next message, unless the message is still empty (an object larger
/// than the limit goes alone). `more = true` is counted against the limit
/// whether or not the message ends up carrying it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Packer {
    limit: usize,
    len: usize,
}

impl Packer {
    pub(crate) fn new(limit: usize) -> Self {
        Packer {
            limit,
            len: SYNC_MORE_LEN,
        }
    }

    fn is_empty(&self) -> bool {
        self.len == SYNC_MORE_LEN
    }

    /// Takes an object whose encoded body is `len` bytes if it belongs in
    /// the current message; `false` means: send the message, start a new
    /// one ([`Packer::new`]) and offer the object again.
    pub(crate) fn admit(&mut self, len: usize) -> bool {
        let n = field_len(len);
        if self.len.saturating_add(n) > self.limit && !self.is_empty() {
            return false;
        }
        self.len = self.len.saturating_add(n);
        true
    }
}

/// Bytes encoded between two yields of [`SyncEncoder::next_message`]:
/// well under a millisecond of work, so other tasks of the runtime run
/// while a large single message is encoded.
const ENCODE_SLICE: usize = 128 * 1024;

/// Sizes of the messages of a synchronization.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SyncLimits {
    /// Largest message. A snapshot that fits goes in one message (plugins
    /// that predate split synchronization still take it); a larger one is
    /// split.
    pub(crate) message: usize,
    /// Size of each message of a split synchronization. Smaller than
    /// `message` so the plugin starts decoding sooner and the runtime
    /// encodes message i+1 while the plugin decodes message i.
    pub(crate) part: usize,
}

/// The objects of one synchronization: the runtime's snapshot and which
/// of its pods and containers go out, in snapshot order. Owned (the lists
/// are shared, not copied), so the encoding can run on another thread.
pub(crate) struct SyncObjects {
    snapshot: Snapshot,
    pods: Vec<usize>,
    containers: Vec<usize>,
}

impl SyncObjects {
    /// The pods and containers of `snapshot` that `keep_pod` and
    /// `keep_container` accept.
    pub(crate) fn new(
        snapshot: Snapshot,
        keep_pod: impl Fn(&PodSandbox) -> bool,
        keep_container: impl Fn(&Container) -> bool,
    ) -> Self {
        let pods = (snapshot.pods.iter().enumerate())
            .filter(|(_, p)| keep_pod(p))
            .map(|(i, _)| i)
            .collect();
        let containers = (snapshot.containers.iter().enumerate())
            .filter(|(_, c)| keep_container(c))
            .map(|(i, _)| i)
            .collect();
        Self {
            snapshot,
            pods,
            containers,
        }
    }

    fn len(&self) -> usize {
        self.pods.len() + self.containers.len()
    }

    fn pod(&self, i: usize) -> Option<&PodSandbox> {
        self.pods.get(i).and_then(|&k| self.snapshot.pods.get(k))
    }

    fn container(&self, i: usize) -> Option<&Container> {
        (self.containers.get(i)).and_then(|&k| self.snapshot.containers.get(k))
    }
}

/// Encodes a synchronization message by message, straight from the
/// snapshot's objects (the bytes prost writes for the owned
/// `SynchronizeRequest {pods = 1, containers = 2, more = 3}`), pods first,
/// in order. `more` is set on every message but the last; an empty
/// snapshot is one empty message.
///
/// Nothing is measured up front beyond what decides whether the snapshot
/// fits in one message, so the first message is ready after the work of
/// that message, not of the whole snapshot.
pub(crate) struct SyncEncoder {
    objects: SyncObjects,
    /// Encoded body lengths of the first objects (pods, then containers),
    /// measured while deciding whether to split.
    lens: Vec<usize>,
    /// Encoded size of the whole snapshot, when it fits in one message.
    single: Option<usize>,
    part_limit: usize,
    next: usize,
    started: bool,
}

/// A message being encoded by a [`SyncEncoder`].
pub(crate) struct PendingMessage {
    buf: Vec<u8>,
    packer: Packer,
}

impl SyncEncoder {
    pub(crate) fn new(objects: SyncObjects, limits: SyncLimits) -> Self {
        let mut enc = SyncEncoder {
            objects,
            lens: Vec::new(),
            single: None,
            part_limit: limits.part,
            next: 0,
            started: false,
        };
        let mut packer = Packer::new(limits.message);
        let mut fits = true;
        for i in 0..enc.objects() {
            let len = enc.measure(i);
            enc.lens.push(len);
            if !packer.admit(len) {
                fits = false;
                break;
            }
        }
        if fits {
            enc.single = Some(packer.len);
            enc.part_limit = limits.message;
        }
        enc
    }

    /// `true` when the whole snapshot goes in one message.
    pub(crate) fn is_single(&self) -> bool {
        self.single.is_some()
    }

    fn objects(&self) -> usize {
        self.objects.len()
    }

    fn measure(&self, i: usize) -> usize {
        match i.checked_sub(self.objects.pods.len()) {
            None => self.objects.pod(i).map_or(0, |p| p.encoded_len()),
            Some(c) => self.objects.container(c).map_or(0, |c| c.encoded_len()),
        }
    }

    /// `true` once every message has been produced.
    pub(crate) fn is_done(&self) -> bool {
        self.started && self.next >= self.objects()
    }

    fn start(&mut self) -> Option<PendingMessage> {
        if self.is_done() {
            return None;
        }
        self.started = true;
        let capacity = self.single.unwrap_or(self.part_limit);
        Some(PendingMessage {
            buf: Vec::with_capacity(capacity),
            packer: Packer::new(self.part_limit),
        })
    }

    /// Encodes whole objects into `m` until at least `budget` more bytes
    /// are written or the message is full; `true` once it is full.
    fn fill(&mut self, m: &mut PendingMessage, budget: usize) -> bool {
        let stop = m.buf.len().saturating_add(budget);
        while m.buf.len() < stop {
            let i = self.next;
            if i >= self.objects() {
                return true;
            }
            let len = match self.lens.get(i) {
                Some(len) => *len,
                None => self.measure(i),
            };
            if !m.packer.admit(len) {
                return true;
            }
            match i.checked_sub(self.objects.pods.len()) {
                None => {
                    if let Some(p) = self.objects.pod(i) {
                        encode_field(SYNC_PODS, p, len, &mut m.buf);
                    }
                }
                Some(c) => {
                    if let Some(c) = self.objects.container(c) {
                        encode_field(SYNC_CONTAINERS, c, len, &mut m.buf);
                    }
                }
            }
            self.next += 1;
        }
        self.next >= self.objects()
    }

    fn finish(&mut self, mut m: PendingMessage) -> Bytes {
        if self.next < self.objects() {
            prost::encoding::bool::encode(SYNC_MORE, &true, &mut m.buf);
        }
        Bytes::from(m.buf)
    }

    /// The next message, letting other tasks run after every
    /// [`ENCODE_SLICE`] bytes; `None` after the last. Encoding a message
    /// takes milliseconds: an encoder that never yields would hold the
    /// other tasks of a current-thread runtime until it is done.
    pub(crate) async fn next_message(&mut self) -> Option<Bytes> {
        let mut m = self.start()?;
        while !self.fill(&mut m, ENCODE_SLICE) {
            tokio::task::yield_now().await;
        }
        Some(self.finish(m))
    }

    /// [`SyncEncoder::next_message`] in one go, for a thread of its own.
    pub(crate) fn next_message_now(&mut self) -> Option<Bytes> {
        let mut m = self.start()?;
        while !self.fill(&mut m, usize::MAX) {}
        Some(self.finish(m))
    }
}

/// The messages of a split synchronization, encoded on tokio's blocking
/// pool ahead of the message being sent.
///
/// Encoding a part costs about as much as the plugin's decoding of it
/// (milliseconds of cache-cold walks over the runtime's objects): done on
/// the connection's task, it either delays each message's write or, run
/// beside it, slows the write to its own pace. On a thread of its own it
/// overlaps with the write and with the plugin's decoding. At most two
/// encoded messages wait (one in the channel, one on the encoder's hands).
///
/// The encoder stops by itself when the receiver is dropped (the
/// synchronization failed or was abandoned), after the message it is
/// encoding.
pub(crate) struct SyncParts {
    rx: mpsc::Receiver<(Bytes, bool)>,
    /// The encoder thread (its result: messages encoded), kept for tests.
    #[cfg_attr(not(test), allow(dead_code))]
    worker: tokio::task::JoinHandle<usize>,
}

impl SyncParts {
    /// Starts encoding `encoder`'s messages. Needs a tokio runtime.
    pub(crate) fn spawn(mut encoder: SyncEncoder) -> Self {
        let (tx, rx) = mpsc::channel(1);
        let worker = tokio::task::spawn_blocking(move || {
            let mut encoded = 0;
            while let Some(m) = encoder.next_message_now() {
                encoded += 1;
                let last = encoder.is_done();
                if tx.blocking_send((m, last)).is_err() {
                    tracing::debug!(encoded, "synchronization abandoned; its encoder stops");
                    break;
                }
            }
            encoded
        });
        Self { rx, worker }
    }

    /// The next message and whether it is the last; `None` after the last
    /// (or if the encoder is gone).
    pub(crate) async fn next(&mut self) -> Option<(Bytes, bool)> {
        self.rx.recv().await
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

    /// Every object of these lists.
    fn objects(pods: &[PodSandbox], containers: &[Container]) -> SyncObjects {
        SyncObjects::new(
            Snapshot::new(pods.to_vec(), containers.to_vec()),
            |_| true,
            |_| true,
        )
    }

    fn all_messages(mut enc: SyncEncoder) -> Vec<Bytes> {
        let mut out = Vec::new();
        while let Some(m) = enc.next_message_now() {
            out.push(m);
        }
        out
    }

    #[test]
    fn sync_requests_are_byte_identical_to_prost() {
        use nri_api::api::SynchronizeRequest;
        let pods = [pod(), PodSandbox::default()];
        let ctrs = [ctr(1), Container::default(), ctr(2)];
        // A snapshot that fits goes in one message (more = false), however
        // small the parts of a split sync are.
        let fits = SyncLimits {
            message: 4 << 20,
            part: 1,
        };
        for (np, nc) in [(0, 0), (2, 0), (0, 3), (2, 3), (1, 1)] {
            let want = SynchronizeRequest {
                pods: pods[..np].to_vec(),
                containers: ctrs[..nc].to_vec(),
                more: false,
            }
            .encode_to_vec();
            let got = all_messages(SyncEncoder::new(objects(&pods[..np], &ctrs[..nc]), fits));
            assert_eq!(got.len(), 1);
            assert_eq!(got[0].as_ref(), &want[..]);
        }
        // One object per message: every message but the last has more =
        // true, and the split is split_sync's.
        let one = SyncLimits {
            message: 1,
            part: 1,
        };
        let got = all_messages(SyncEncoder::new(objects(&pods, &ctrs), one));
        let mut want = crate::split_sync(pods.to_vec(), ctrs.to_vec(), 1);
        assert_eq!(got.len(), 5);
        assert_eq!(want.len(), 5);
        let n = want.len();
        for (i, (got, want)) in got.iter().zip(want.iter_mut()).enumerate() {
            want.more = i + 1 < n;
            assert_eq!(got.as_ref(), &want.encode_to_vec()[..], "message {i}");
        }
    }

    #[test]
    fn a_split_sync_keeps_every_object_in_order_and_respects_the_part_size() {
        use nri_api::api::SynchronizeRequest;
        let pods: Vec<PodSandbox> = (0..50)
            .map(|k| PodSandbox {
                id: format!("p{k}"),
                ..pod()
            })
            .collect();
        let ctrs: Vec<Container> = (0..50).map(ctr).collect();
        let total = SynchronizeRequest {
            pods: pods.clone(),
            containers: ctrs.clone(),
            more: false,
        }
        .encoded_len();
        for part in [1, 500, 1000, 5000] {
            // The snapshot does not fit the message limit: it is split
            // into parts of at most `part` bytes.
            let limits = SyncLimits {
                message: total + SYNC_MORE_LEN - 1,
                part,
            };
            let messages = all_messages(SyncEncoder::new(objects(&pods, &ctrs), limits));
            assert!(messages.len() > 1, "{part}");
            let (mut seen_pods, mut seen_ctrs) = (Vec::new(), Vec::new());
            for (i, m) in messages.iter().enumerate() {
                let req = SynchronizeRequest::decode(m.as_ref()).unwrap();
                let objects = req.pods.len() + req.containers.len();
                assert!(objects >= 1, "{part}: message {i} is empty");
                assert!(m.len() <= part || objects == 1, "{part}: message {i}");
                assert_eq!(req.more, i + 1 < messages.len(), "{part}: message {i}");
                seen_pods.extend(req.pods);
                seen_ctrs.extend(req.containers);
            }
            assert_eq!(seen_pods, pods, "{part}");
            assert_eq!(seen_ctrs, ctrs, "{part}");
        }
        // Exactly at the limit (`more` is counted even when absent) it
        // still fits.
        let limits = SyncLimits {
            message: total + SYNC_MORE_LEN,
            part: 1,
        };
        assert_eq!(
            all_messages(SyncEncoder::new(objects(&pods, &ctrs), limits)).len(),
            1
        );
        // Nothing to send is one empty message.
        let empty = all_messages(SyncEncoder::new(objects(&[], &[]), limits));
        assert_eq!(empty.len(), 1);
        assert!(empty[0].is_empty());
    }

    /// A message larger than a slice is encoded in slices, and other tasks
    /// of a current-thread runtime (the mux writing the previous message)
    /// run in between.
    #[tokio::test]
    async fn encoding_a_large_message_lets_other_tasks_run() {
        let ctrs: Vec<Container> = (0..32)
            .map(|n| Container {
                args: vec!["x".repeat(64 * 1024)],
                ..ctr(n)
            })
            .collect();
        let limits = SyncLimits {
            message: 4 << 20,
            part: 4 << 20,
        };
        let mut enc = SyncEncoder::new(objects(&[], &ctrs), limits);
        let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let other = {
            let ran = std::sync::Arc::clone(&ran);
            tokio::spawn(async move { ran.store(true, std::sync::atomic::Ordering::SeqCst) })
        };
        let message = enc.next_message().await.unwrap();
        assert!(message.len() > 2 * ENCODE_SLICE);
        assert!(
            ran.load(std::sync::atomic::Ordering::SeqCst),
            "the encoder never let the other task run"
        );
        other.await.unwrap();
        assert!(enc.next_message().await.is_none());
    }

    #[test]
    fn only_the_kept_objects_are_sent_in_snapshot_order() {
        use nri_api::api::SynchronizeRequest;
        let pods: Vec<PodSandbox> = (0..4)
            .map(|k| PodSandbox {
                id: format!("p{k}"),
                ..pod()
            })
            .collect();
        let ctrs: Vec<Container> = (0..6).map(ctr).collect();
        let objects = SyncObjects::new(
            Snapshot::new(pods.clone(), ctrs.clone()),
            |p| p.id != "p1",
            |c| c.id != "ctr-0" && c.id != "ctr-4",
        );
        let limits = SyncLimits {
            message: 4 << 20,
            part: 1,
        };
        let got = all_messages(SyncEncoder::new(objects, limits));
        let want = SynchronizeRequest {
            pods: vec![pods[0].clone(), pods[2].clone(), pods[3].clone()],
            containers: [1, 2, 3, 5].iter().map(|&i| ctrs[i].clone()).collect(),
            more: false,
        };
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].as_ref(), &want.encode_to_vec()[..]);
    }

    fn split_limits() -> SyncLimits {
        SyncLimits {
            message: 1,
            part: 1,
        }
    }

    /// The threaded encoder hands out the inline encoder's messages, in
    /// order, with only the last one marked last.
    #[tokio::test]
    async fn sync_parts_are_the_encoders_messages_in_order() {
        let pods = [pod(), PodSandbox::default()];
        let ctrs: Vec<Container> = (0..20).map(ctr).collect();
        let want = all_messages(SyncEncoder::new(objects(&pods, &ctrs), split_limits()));
        assert_eq!(want.len(), 22);
        let mut parts = SyncParts::spawn(SyncEncoder::new(objects(&pods, &ctrs), split_limits()));
        let mut got = Vec::new();
        while let Some((m, last)) = parts.next().await {
            got.push(m);
            assert_eq!(last, got.len() == want.len(), "message {}", got.len());
        }
        assert_eq!(got, want);
        assert_eq!(parts.worker.await.unwrap(), want.len());
    }

    /// A synchronization given up half-way stops its encoder thread.
    #[tokio::test]
    async fn an_abandoned_sync_stops_its_encoder() {
        let ctrs: Vec<Container> = (0..1000).map(ctr).collect();
        let mut parts = SyncParts::spawn(SyncEncoder::new(objects(&[], &ctrs), split_limits()));
        let (_, last) = parts.next().await.unwrap();
        assert!(!last);
        let SyncParts { rx, worker } = parts;
        drop(rx);
        // At most the message taken, the one in the channel and the one
        // whose send failed; not the other 997.
        let encoded = worker.await.unwrap();
        assert!(encoded <= 3, "{encoded} messages encoded");
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
                let mut payload = CreatePayload::new(&p, &c);
                assert_eq!(&payload.first()[..], &want[..]);
                assert_eq!(&payload.request(0, &c, None)[..], &want[..]);
                assert_eq!(&payload.request(1, &c, None)[..], &want[..]);
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

    fn env_delta(n: u32) -> Container {
        Container {
            env: vec![format!("E{n}=x")],
            ..Default::default()
        }
    }

    #[test]
    fn deltas_are_appended_in_place_while_nobody_else_holds_the_request() {
        let p = pod();
        let mut c = ctr(1);
        let mut payload = CreatePayload::new(&p, &c);
        let first = payload.first();
        // The first request is shared (the barrier holds it): copied.
        c.env.push("E1=x".into());
        let r1 = payload.request(1, &c, Some(&env_delta(1)));
        assert_ne!(r1.as_ptr(), first.as_ptr());
        assert!(r1.starts_with(&first));
        let r1_ptr = r1.as_ptr();
        drop(r1);
        // Nobody holds the second buffer: appended in place.
        c.env.push("E2=x".into());
        let r2 = payload.request(2, &c, Some(&env_delta(2)));
        assert_eq!(r2.as_ptr(), r1_ptr);
        // Held (a request in flight): copied, the held one untouched.
        c.env.push("E3=x".into());
        let r3 = payload.request(3, &c, Some(&env_delta(3)));
        assert_ne!(r3.as_ptr(), r2.as_ptr());
        assert!(r3.starts_with(&r2));
        for (r, n) in [(&r2, 3), (&r3, 4)] {
            let got = CreateContainerRequest::decode(r.as_ref()).unwrap();
            assert_eq!(got.container.unwrap().env.len(), n);
        }
        assert_eq!(
            CreateContainerRequest::decode(r3.as_ref()).unwrap(),
            CreateContainerRequest {
                pod: Some(p),
                container: Some(c),
            }
        );
    }

    #[test]
    fn create_payload_reencodes_only_on_a_new_revision() {
        let p = pod();
        let mut payload = CreatePayload::new(&p, &ctr(1));
        let a = payload.request(0, &ctr(1), None);
        assert_eq!(a.as_ptr(), payload.first().as_ptr());
        // Same revision: the cached bytes, even if handed another container.
        let b = payload.request(0, &ctr(2), None);
        assert_eq!(a.as_ptr(), b.as_ptr());
        let c = payload.request(1, &ctr(2), None);
        let want = CreateContainerRequest {
            pod: Some(p),
            container: Some(ctr(2)),
        }
        .encode_to_vec();
        assert_eq!(&c[..], &want[..]);
    }

    /// A request built from the previous one and an appended delta
    /// decodes to the container merged with the delta; without the
    /// previous revision cached, the container is encoded in full.
    #[test]
    fn a_delta_request_decodes_to_the_merged_container() {
        use nri_api::api::Mount;
        let p = pod();
        let base = ctr(1);
        let delta = Container {
            env: vec!["B=2".into()],
            annotations: BTreeMap::from([("k".into(), "w".into()), ("n".into(), "x".into())]),
            mounts: vec![Mount {
                destination: "/m".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut merged = base.clone();
        merged.env.push("B=2".into());
        merged.annotations.insert("k".into(), "w".into());
        merged.annotations.insert("n".into(), "x".into());
        merged.mounts.extend(delta.mounts.clone());
        let mut payload = CreatePayload::new(&p, &base);
        let first = payload.request(0, &base, None);
        let second = payload.request(1, &merged, Some(&delta));
        assert!(second.starts_with(&first));
        assert!(
            second.len() < first.len() + 100,
            "the container was encoded again"
        );
        let got = CreateContainerRequest::decode(second.as_ref()).unwrap();
        assert_eq!(got.pod.as_ref(), Some(&p));
        assert_eq!(got.container.as_ref(), Some(&merged));
        // Cached: the same bytes again.
        assert_eq!(payload.request(1, &merged, Some(&delta)), second);
        // Two revisions on: the delta of one cannot be used.
        let third = payload.request(3, &merged, Some(&delta));
        let want = CreateContainerRequest {
            pod: Some(p),
            container: Some(merged),
        }
        .encode_to_vec();
        assert_eq!(&third[..], &want[..]);
    }
}
