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

mod delta;
pub(crate) use delta::append_delta;

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
        let mut buf = Vec::with_capacity(pod_len + container.len());
        pod.encode(&mut buf);
        container.encode(&mut buf);
        let first = Bytes::from(buf);
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
    /// ([`append_delta`]). If the request cached is the one at
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
                // A delta is a few fields: written straight into the
                // buffer, without a second one.
                let d = Measured::new(REQUEST_CONTAINER, d);
                let extra = d.len();
                let prev = std::mem::take(&mut self.cached.1);
                let mut buf = match prev.try_into_mut() {
                    Ok(buf) if buf.capacity() - buf.len() >= extra => buf,
                    Ok(buf) => Self::copy(&buf, extra),
                    Err(prev) => Self::copy(&prev, extra),
                };
                d.encode(&mut buf);
                buf.freeze()
            }
            _ => {
                let container = Measured::new(REQUEST_CONTAINER, container);
                let mut buf = Vec::with_capacity(self.pod_len + container.len() + DELTA_HEADROOM);
                buf.extend_from_slice(self.first.get(..self.pod_len).unwrap_or_default());
                container.encode(&mut buf);
                Bytes::from(buf)
            }
        };
        self.cached = (revision, buf.clone());
        buf
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
mod tests;

#[cfg(test)]
mod schema_tests;
