//! [`SyncChunk`]: one `Synchronize` message, kept as its wire bytes and
//! decoded one pod or container at a time.

use std::fmt;
use std::iter::FusedIterator;
use std::marker::PhantomData;

use bytes::Bytes;
use nri_api::api::{Container, PodSandbox};
use prost::Message;
use prost::encoding::{DecodeContext, WireType, decode_key, decode_varint, skip_field};

use crate::Error;

/// Field number of `SynchronizeRequest.pods` (repeated `PodSandbox`), as in
/// the NRI protocol's `SynchronizeRequest` message.
const FIELD_PODS: u32 = 1;
/// Field number of `SynchronizeRequest.containers` (repeated `Container`),
/// as in the NRI protocol's `SynchronizeRequest` message.
const FIELD_CONTAINERS: u32 = 2;
/// Field number of `SynchronizeRequest.more` (`bool`), as in the NRI
/// protocol's `SynchronizeRequest` message.
const FIELD_MORE: u32 = 3;

/// One message of the runtime's synchronization, as received: the encoded
/// `SynchronizeRequest`, decoded lazily.
///
/// Handed to [`Plugin::synchronize_chunk`](crate::Plugin::synchronize_chunk)
/// under [`SyncMode::Streaming`](crate::SyncMode::Streaming). The chunk holds
/// the message's bytes as received (no copy, at most 4 MiB) and decodes a
/// pod or container only when [`pods`](SyncChunk::pods) or
/// [`containers`](SyncChunk::containers) yields it, so a plugin that looks
/// at one item at a time and keeps little never has a whole message's
/// decoded structs (about three times its wire size) in memory.
///
/// The message's framing (field tags, wire types, lengths) is checked once
/// when the chunk is made; a message that fails the check is answered with
/// an error before the plugin is called. A pod or container whose own bytes
/// cannot be decoded is reported by the iterator as
/// [`Error::MalformedSync`] when it is reached.
///
/// ```
/// use nri_plugin::SyncChunk;
/// use nri_plugin::api::{Container, PodSandbox, SynchronizeRequest};
/// use prost::Message;
///
/// # fn main() -> Result<(), nri_plugin::Error> {
/// let req = SynchronizeRequest {
///     pods: vec![PodSandbox { id: "pod-1".into(), ..Default::default() }],
///     containers: vec![Container { id: "ctr-1".into(), ..Default::default() }],
///     more: true,
/// };
/// let chunk = SyncChunk::new(req.encode_to_vec().into())?;
/// assert_eq!((chunk.pod_count(), chunk.container_count(), chunk.more()), (1, 1, true));
/// for pod in chunk.pods() {
///     let pod = pod?;
///     assert_eq!(pod.id, "pod-1");
/// }
/// let (pods, containers) = chunk.into_vecs()?;
/// assert_eq!((pods.len(), containers[0].id.as_str()), (1, "ctr-1"));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct SyncChunk {
    bytes: Bytes,
    pods: usize,
    containers: usize,
    more: bool,
}

impl fmt::Debug for SyncChunk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyncChunk")
            .field("pods", &self.pods)
            .field("containers", &self.containers)
            .field("more", &self.more)
            .field("wire_len", &self.bytes.len())
            .finish()
    }
}

/// A framing error at `offset`.
fn malformed(
    offset: usize,
    reason: impl Into<String>,
    source: Option<prost::DecodeError>,
) -> Error {
    Error::MalformedSync {
        offset,
        reason: reason.into(),
        source,
    }
}

/// The name of a wire type, for error messages.
fn wire_name(w: WireType) -> &'static str {
    match w {
        WireType::Varint => "varint",
        WireType::SixtyFourBit => "64-bit",
        WireType::LengthDelimited => "length-delimited",
        WireType::StartGroup => "start-group",
        WireType::EndGroup => "end-group",
        WireType::ThirtyTwoBit => "32-bit",
    }
}

/// One top-level field of the message.
enum Field {
    /// A pod or container: its tag and the byte range of its payload.
    Item { tag: u32, start: usize, end: usize },
    /// `more`, with its value.
    More(bool),
    /// A field this SDK does not know, skipped.
    Unknown,
}

/// Reads the top-level field starting at `*pos` of `bytes` and moves `*pos`
/// past it. Checks the tag, the wire type of the known fields and that
/// every length stays inside the message.
fn next_field(bytes: &[u8], pos: &mut usize) -> Result<Field, Error> {
    let start = *pos;
    let mut buf = bytes.get(start..).unwrap_or_default();
    let total = buf.len();
    let (tag, wire) =
        decode_key(&mut buf).map_err(|e| malformed(start, "invalid field key", Some(e)))?;
    let field = match tag {
        FIELD_PODS | FIELD_CONTAINERS => {
            let what = if tag == FIELD_PODS {
                "pods"
            } else {
                "containers"
            };
            if wire != WireType::LengthDelimited {
                return Err(malformed(
                    start,
                    format!(
                        "field {tag} ({what}) has wire type {}, expected length-delimited",
                        wire_name(wire)
                    ),
                    None,
                ));
            }
            let len = decode_varint(&mut buf).map_err(|e| {
                malformed(start, format!("invalid length of a {what} entry"), Some(e))
            })?;
            let len = usize::try_from(len).unwrap_or(usize::MAX);
            if len > buf.len() {
                return Err(malformed(
                    start,
                    format!(
                        "a {what} entry of {len} bytes overruns the message ({} bytes left)",
                        buf.len()
                    ),
                    None,
                ));
            }
            let item_start = start + (total - buf.len());
            buf = buf.get(len..).unwrap_or_default();
            Field::Item {
                tag,
                start: item_start,
                end: item_start + len,
            }
        }
        FIELD_MORE => {
            if wire != WireType::Varint {
                return Err(malformed(
                    start,
                    format!(
                        "field {tag} (more) has wire type {}, expected varint",
                        wire_name(wire)
                    ),
                    None,
                ));
            }
            let v = decode_varint(&mut buf)
                .map_err(|e| malformed(start, "invalid value of field 3 (more)", Some(e)))?;
            Field::More(v != 0)
        }
        _ => {
            skip_field(wire, tag, &mut buf, DecodeContext::default()).map_err(|e| {
                malformed(start, format!("cannot skip unknown field {tag}"), Some(e))
            })?;
            Field::Unknown
        }
    };
    *pos = start + (total - buf.len());
    Ok(field)
}

impl SyncChunk {
    /// Takes the encoded `SynchronizeRequest` `bytes` (no copy) and checks
    /// its framing in one pass without decoding any pod or container.
    ///
    /// Fails with [`Error::MalformedSync`] when a field key is invalid,
    /// `pods` (field 1) or `containers` (field 2) is not length-delimited,
    /// `more` (field 3) is not a varint, a length runs past the end of the
    /// message, or an unknown field cannot be skipped.
    pub fn new(bytes: Bytes) -> Result<SyncChunk, Error> {
        let (mut pods, mut containers, mut more) = (0, 0, false);
        let mut pos = 0;
        while pos < bytes.len() {
            match next_field(&bytes, &mut pos)? {
                Field::Item {
                    tag: FIELD_PODS, ..
                } => pods += 1,
                Field::Item { .. } => containers += 1,
                // As protobuf: the last value of a repeated scalar wins.
                Field::More(v) => more = v,
                Field::Unknown => {}
            }
        }
        Ok(SyncChunk {
            bytes,
            pods,
            containers,
            more,
        })
    }

    /// Whether more messages of this synchronization follow (false for the
    /// last one).
    pub fn more(&self) -> bool {
        self.more
    }

    /// Number of pods in this message (counted when the chunk was made,
    /// without decoding them).
    pub fn pod_count(&self) -> usize {
        self.pods
    }

    /// Number of containers in this message (counted when the chunk was
    /// made, without decoding them).
    pub fn container_count(&self) -> usize {
        self.containers
    }

    /// Size of the encoded message in bytes.
    pub fn wire_len(&self) -> usize {
        self.bytes.len()
    }

    /// The pods of this message in wire order, each decoded when the
    /// iterator reaches it. An item that cannot be decoded gives
    /// [`Error::MalformedSync`]; the iterator goes on with the next one.
    pub fn pods(&self) -> SyncItems<'_, PodSandbox> {
        SyncItems::new(&self.bytes, FIELD_PODS, self.pods)
    }

    /// The containers of this message in wire order, each decoded when the
    /// iterator reaches it. An item that cannot be decoded gives
    /// [`Error::MalformedSync`]; the iterator goes on with the next one.
    pub fn containers(&self) -> SyncItems<'_, Container> {
        SyncItems::new(&self.bytes, FIELD_CONTAINERS, self.containers)
    }

    /// Decodes everything: all pods and all containers of this message, for
    /// plugins that want them as vectors. Fails on the first item that
    /// cannot be decoded.
    pub fn into_vecs(self) -> Result<(Vec<PodSandbox>, Vec<Container>), Error> {
        let pods = self.pods().collect::<Result<Vec<_>, _>>()?;
        let containers = self.containers().collect::<Result<Vec<_>, _>>()?;
        Ok((pods, containers))
    }
}

/// Iterator over the pods ([`SyncChunk::pods`]) or containers
/// ([`SyncChunk::containers`]) of a [`SyncChunk`], decoding each item when
/// it is reached.
pub struct SyncItems<'a, M> {
    bytes: &'a [u8],
    tag: u32,
    pos: usize,
    /// Items not yet yielded (for `size_hint`).
    left: usize,
    index: usize,
    _item: PhantomData<fn() -> M>,
}

impl<M> fmt::Debug for SyncItems<'_, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyncItems")
            .field("field", &self.tag)
            .field("offset", &self.pos)
            .field("left", &self.left)
            .finish()
    }
}

impl<'a, M> SyncItems<'a, M> {
    fn new(bytes: &'a [u8], tag: u32, count: usize) -> Self {
        SyncItems {
            bytes,
            tag,
            pos: 0,
            left: count,
            index: 0,
            _item: PhantomData,
        }
    }
}

impl<M: Message + prost::Name + Default> Iterator for SyncItems<'_, M> {
    type Item = Result<M, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.left > 0 && self.pos < self.bytes.len() {
            let field = match next_field(self.bytes, &mut self.pos) {
                Ok(f) => f,
                Err(e) => {
                    // Cannot happen for a chunk made by `SyncChunk::new`
                    // (the framing was checked); stop rather than loop.
                    self.left = 0;
                    return Some(Err(e));
                }
            };
            let Field::Item { tag, start, end } = field else {
                continue;
            };
            if tag != self.tag {
                continue;
            }
            self.left -= 1;
            let index = self.index;
            self.index += 1;
            let item = self.bytes.get(start..end).unwrap_or_default();
            let what = if self.tag == FIELD_PODS {
                "pod"
            } else {
                "container"
            };
            // Sized before it is decoded (see `limits.rs`).
            if let Err(r) = crate::limits::check_request::<M>(item, &[])
                && !r.malformed
            {
                return Some(Err(malformed(
                    start,
                    format!("cannot decode {what} #{index}: {}", r.reason),
                    None,
                )));
            }
            return Some(
                M::decode(item).map_err(|e| {
                    malformed(start, format!("cannot decode {what} #{index}"), Some(e))
                }),
            );
        }
        self.left = 0;
        None
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl<M: Message + prost::Name + Default> ExactSizeIterator for SyncItems<'_, M> {}

impl<M: Message + prost::Name + Default> FusedIterator for SyncItems<'_, M> {}
