//! Sans-io ttRPC framing: bytes in, frames out; frames in, bytes out.
//!
//! Every ttRPC message is a 10-byte header followed by the payload:
//!
//! ```text
//! +------------+--------------+---------+---------+-----------------+
//! | length u32 | stream id u32| type u8 | flags u8| payload (length)|
//! | big endian | big endian   |         |         |                 |
//! +------------+--------------+---------+---------+-----------------+
//! ```
//!
//! [`Decoder`] turns a byte stream into [`Frame`]s. It never loses its place
//! in the stream for a frame it can parse: an oversized frame or a frame of an
//! unsupported type is reported as an error *for that frame* and its payload
//! is skipped, so the caller can answer on that stream and keep going.
//! Only a header with a message type unknown to the protocol
//! ([`Error::InvalidMessageType`]) is fatal.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::Error;
use crate::proto::KeyValue;

/// Length of the ttRPC message header (mirrors ttrpc `messageHeaderLength`).
pub const HEADER_LEN: usize = 10;

/// Maximum payload length of one ttRPC message, 4 MiB (mirrors ttrpc
/// `messageLengthMax = 4 << 20`). Longer messages are refused on send and
/// discarded (answered with `RESOURCE_EXHAUSTED`) on receive.
pub const MAX_MESSAGE_LEN: usize = 4 << 20;

/// Message type of a request (mirrors ttrpc `messageTypeRequest`).
pub const MESSAGE_TYPE_REQUEST: u8 = 0x1;

/// Message type of a response (mirrors ttrpc `messageTypeResponse`).
pub const MESSAGE_TYPE_RESPONSE: u8 = 0x2;

/// Message type of a streaming data message (mirrors ttrpc
/// `messageTypeData`). Defined by the protocol but not supported here: only
/// unary calls are implemented.
pub const MESSAGE_TYPE_DATA: u8 = 0x3;

/// The message types this crate handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageType {
    /// A request ([`MESSAGE_TYPE_REQUEST`]).
    Request,
    /// A response ([`MESSAGE_TYPE_RESPONSE`]).
    Response,
}

impl MessageType {
    /// The wire value of this type.
    pub const fn as_u8(self) -> u8 {
        match self {
            MessageType::Request => MESSAGE_TYPE_REQUEST,
            MessageType::Response => MESSAGE_TYPE_RESPONSE,
        }
    }
}

/// A parsed ttRPC message header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Header {
    /// Payload length (excluding the header).
    pub length: u32,
    /// Stream id.
    pub stream_id: u32,
    /// Raw message type.
    pub message_type: u8,
    /// Raw flags (0 for unary calls).
    pub flags: u8,
}

impl Header {
    /// Parses a header from exactly [`HEADER_LEN`] bytes.
    pub fn parse(b: &[u8; HEADER_LEN]) -> Self {
        Header {
            length: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            stream_id: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
            message_type: b[8],
            flags: b[9],
        }
    }

    /// The header's wire bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let l = self.length.to_be_bytes();
        let s = self.stream_id.to_be_bytes();
        [
            l[0],
            l[1],
            l[2],
            l[3],
            s[0],
            s[1],
            s[2],
            s[3],
            self.message_type,
            self.flags,
        ]
    }
}

/// One complete ttRPC message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Stream id.
    pub stream_id: u32,
    /// Message type.
    pub message_type: MessageType,
    /// Raw flags.
    pub flags: u8,
    /// The payload (an encoded envelope), without the header.
    pub payload: Bytes,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for a header.
    Header,
    /// Header read; waiting for the payload.
    Payload(Header),
    /// Discarding the payload of a rejected frame; this many bytes remain.
    Skip(u32),
    /// A corrupt header was seen; nothing more can be decoded.
    Failed(Header),
}

/// Incremental ttRPC frame decoder.
///
/// Feed it a `BytesMut` that accumulates input; each call to
/// [`decode`](Decoder::decode) consumes what it can and returns at most one
/// frame or one error. Call it again until it returns `Ok(None)` (need more
/// input).
///
/// Errors and what happens after them:
///
/// * [`Error::FrameTooLarge`]: the header announced a payload above the cap.
///   The decoder skips exactly that many bytes (across later calls if
///   needed) and continues with the next header.
/// * [`Error::UnsupportedMessageType`]: a data (type 3) message. Its payload
///   is skipped likewise.
/// * [`Error::InvalidMessageType`]: type 0 or above 3. The stream is
///   corrupt; every later call returns this error again.
#[derive(Debug, Clone)]
pub struct Decoder {
    state: State,
    max_len: usize,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Decoder {
    /// A decoder with the protocol's cap of [`MAX_MESSAGE_LEN`].
    pub fn new() -> Self {
        Self::with_max_message_len(MAX_MESSAGE_LEN)
    }

    /// A decoder with a different payload cap (for tests and tools).
    pub fn with_max_message_len(max_len: usize) -> Self {
        Decoder {
            state: State::Header,
            max_len,
        }
    }

    /// The payload cap of this decoder.
    pub fn max_message_len(&self) -> usize {
        self.max_len
    }

    /// Changes the payload cap; it applies to the headers decoded from now
    /// on (a payload being read or skipped is not affected).
    pub fn set_max_message_len(&mut self, max_len: usize) {
        self.max_len = max_len;
    }

    /// Whether the decoder sits between messages (nothing half read). At end
    /// of input, a decoder that is not at a boundary, or leftover bytes in
    /// the buffer, mean the stream was truncated.
    pub fn is_at_boundary(&self) -> bool {
        self.state == State::Header
    }

    /// How many more bytes beyond `buffered` the current message needs
    /// (a hint for sizing reads; 0 when not waiting for a payload).
    pub fn payload_bytes_missing(&self, buffered: usize) -> usize {
        match self.state {
            State::Payload(h) => (h.length as usize).saturating_sub(buffered),
            _ => 0,
        }
    }

    /// Consumes bytes from `src` and returns the next frame, `Ok(None)` if
    /// more input is needed, or an error for one frame (see the type docs).
    pub fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, Error> {
        loop {
            match self.state {
                State::Failed(h) => {
                    return Err(Error::InvalidMessageType {
                        stream_id: h.stream_id,
                        message_type: h.message_type,
                    });
                }
                State::Skip(remaining) => {
                    let n = src.len().min(remaining as usize);
                    src.advance(n);
                    // n <= remaining, and remaining fits u32.
                    let left = remaining - n as u32;
                    if left > 0 {
                        self.state = State::Skip(left);
                        return Ok(None);
                    }
                    self.state = State::Header;
                }
                State::Header => {
                    let Some(raw) = src.get(..HEADER_LEN) else {
                        return Ok(None);
                    };
                    let mut hb = [0u8; HEADER_LEN];
                    hb.copy_from_slice(raw);
                    let h = Header::parse(&hb);
                    src.advance(HEADER_LEN);
                    if !matches!(
                        h.message_type,
                        MESSAGE_TYPE_REQUEST | MESSAGE_TYPE_RESPONSE | MESSAGE_TYPE_DATA
                    ) {
                        self.state = State::Failed(h);
                        continue;
                    }
                    if h.length as usize > self.max_len {
                        self.state = State::Skip(h.length);
                        return Err(Error::FrameTooLarge {
                            stream_id: h.stream_id,
                            message_type: h.message_type,
                            len: h.length,
                            max: self.max_len,
                        });
                    }
                    if h.message_type == MESSAGE_TYPE_DATA {
                        self.state = if h.length == 0 {
                            State::Header
                        } else {
                            State::Skip(h.length)
                        };
                        return Err(Error::UnsupportedMessageType {
                            stream_id: h.stream_id,
                            message_type: h.message_type,
                        });
                    }
                    self.state = State::Payload(h);
                }
                State::Payload(h) => {
                    let len = h.length as usize;
                    if src.len() < len {
                        return Ok(None);
                    }
                    let payload = src.split_to(len).freeze();
                    self.state = State::Header;
                    let message_type = if h.message_type == MESSAGE_TYPE_REQUEST {
                        MessageType::Request
                    } else {
                        MessageType::Response
                    };
                    return Ok(Some(Frame {
                        stream_id: h.stream_id,
                        message_type,
                        flags: h.flags,
                        payload,
                    }));
                }
            }
        }
    }
}

fn check_len(len: usize) -> Result<u32, Error> {
    if len > MAX_MESSAGE_LEN {
        return Err(Error::MessageTooLarge {
            len,
            max: MAX_MESSAGE_LEN,
        });
    }
    u32::try_from(len).map_err(|_| Error::MessageTooLarge {
        len,
        max: MAX_MESSAGE_LEN,
    })
}

/// Appends one message (header and `payload`) to `dst` as one contiguous
/// run of bytes. Refuses payloads above [`MAX_MESSAGE_LEN`].
pub fn encode_frame(
    stream_id: u32,
    message_type: MessageType,
    flags: u8,
    payload: &[u8],
    dst: &mut BytesMut,
) -> Result<(), Error> {
    let length = check_len(payload.len())?;
    dst.reserve(HEADER_LEN + payload.len());
    let header = Header {
        length,
        stream_id,
        message_type: message_type.as_u8(),
        flags,
    };
    dst.put_slice(&header.to_bytes());
    dst.put_slice(payload);
    Ok(())
}

/// Appends one message whose payload is the protobuf encoding of `msg`
/// (header first, then the message encoded in place, no intermediate
/// buffer). Refuses messages whose encoding exceeds [`MAX_MESSAGE_LEN`];
/// `dst` is left unchanged then.
pub fn encode_message<M: prost::Message>(
    stream_id: u32,
    message_type: MessageType,
    flags: u8,
    msg: &M,
    dst: &mut BytesMut,
) -> Result<(), Error> {
    let len = msg.encoded_len();
    let length = check_len(len)?;
    dst.reserve(HEADER_LEN + len);
    let header = Header {
        length,
        stream_id,
        message_type: message_type.as_u8(),
        flags,
    };
    dst.put_slice(&header.to_bytes());
    msg.encode_raw(dst);
    Ok(())
}

/// Appends one request message built from borrowed parts, byte for byte
/// what [`encode_message`] gives for the equivalent [`Request`] (fields in
/// tag order, default values omitted), without building the `Request` (no
/// copies of `service`, `method`, `payload` or `metadata`). Refuses
/// messages whose encoding exceeds [`MAX_MESSAGE_LEN`]; `dst` is left
/// unchanged then.
///
/// [`Request`]: crate::proto::Request
pub fn encode_request(
    stream_id: u32,
    service: &str,
    method: &str,
    payload: &[u8],
    timeout_nano: i64,
    metadata: &[KeyValue],
    dst: &mut BytesMut,
) -> Result<(), Error> {
    use prost::encoding::{self, WireType};

    fn bytes_len(tag: u32, b: &[u8]) -> usize {
        if b.is_empty() {
            0
        } else {
            encoding::key_len(tag) + encoding::encoded_len_varint(b.len() as u64) + b.len()
        }
    }
    fn put_bytes(tag: u32, b: &[u8], dst: &mut BytesMut) {
        if !b.is_empty() {
            encoding::encode_key(tag, WireType::LengthDelimited, dst);
            encoding::encode_varint(b.len() as u64, dst);
            dst.put_slice(b);
        }
    }
    // Field numbers of `ttrpc.Request` (see `proto::Request`).
    const SERVICE: u32 = 1;
    const METHOD: u32 = 2;
    const PAYLOAD: u32 = 3;
    const TIMEOUT_NANO: u32 = 4;
    const METADATA: u32 = 5;

    let len = bytes_len(SERVICE, service.as_bytes())
        + bytes_len(METHOD, method.as_bytes())
        + bytes_len(PAYLOAD, payload)
        + if timeout_nano == 0 {
            0
        } else {
            encoding::key_len(TIMEOUT_NANO) + encoding::encoded_len_varint(timeout_nano as u64)
        }
        + encoding::message::encoded_len_repeated(METADATA, metadata);
    let length = check_len(len)?;
    dst.reserve(HEADER_LEN + len);
    let header = Header {
        length,
        stream_id,
        message_type: MESSAGE_TYPE_REQUEST,
        flags: 0,
    };
    dst.put_slice(&header.to_bytes());
    put_bytes(SERVICE, service.as_bytes(), dst);
    put_bytes(METHOD, method.as_bytes(), dst);
    put_bytes(PAYLOAD, payload, dst);
    if timeout_nano != 0 {
        encoding::encode_key(TIMEOUT_NANO, WireType::Varint, dst);
        // int64 is encoded as the two's complement u64 varint.
        encoding::encode_varint(timeout_nano as u64, dst);
    }
    for kv in metadata {
        encoding::message::encode(METADATA, kv, dst);
    }
    Ok(())
}

/// Decodes an envelope (or any protobuf message) from a frame payload.
pub fn decode_message<M: prost::Message + Default>(
    what: &'static str,
    payload: Bytes,
) -> Result<M, Error> {
    M::decode(payload).map_err(|e| Error::decode(what, e))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// Captured bytes: a request header, length 0x0102, stream 1.
    #[test]
    fn header_bytes_request() {
        let h = Header {
            length: 0x0102,
            stream_id: 1,
            message_type: MESSAGE_TYPE_REQUEST,
            flags: 0,
        };
        assert_eq!(h.to_bytes(), [0, 0, 1, 2, 0, 0, 0, 1, 1, 0]);
        assert_eq!(Header::parse(&h.to_bytes()), h);
    }

    /// Captured bytes: a response header with every byte distinct, to catch
    /// field order and endianness mistakes.
    #[test]
    fn header_bytes_response() {
        let h = Header::parse(&[0x00, 0x40, 0x00, 0x00, 0x7f, 0xff, 0xff, 0xfd, 0x02, 0x04]);
        assert_eq!(h.length, 4 << 20);
        assert_eq!(h.stream_id, 0x7fff_fffd);
        assert_eq!(h.message_type, MESSAGE_TYPE_RESPONSE);
        assert_eq!(h.flags, 4);
    }

    #[test]
    fn encode_frame_bytes() {
        let mut b = BytesMut::new();
        encode_frame(3, MessageType::Response, 0, b"hi", &mut b).unwrap();
        assert_eq!(&b[..], &[0, 0, 0, 2, 0, 0, 0, 3, 2, 0, b'h', b'i']);
    }

    #[test]
    fn constants() {
        assert_eq!(HEADER_LEN, 10);
        assert_eq!(MAX_MESSAGE_LEN, 4_194_304);
        assert_eq!(
            (
                MESSAGE_TYPE_REQUEST,
                MESSAGE_TYPE_RESPONSE,
                MESSAGE_TYPE_DATA
            ),
            (1, 2, 3)
        );
    }

    #[test]
    fn oversize_is_skipped_then_decoding_continues() {
        let mut d = Decoder::with_max_message_len(4);
        let mut b = BytesMut::new();
        b.extend_from_slice(&[0, 0, 0, 6, 0, 0, 0, 5, 1, 0]);
        b.extend_from_slice(b"abc");
        match d.decode(&mut b) {
            Err(Error::FrameTooLarge {
                stream_id: 5,
                len: 6,
                max: 4,
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
        assert!(d.decode(&mut b).unwrap().is_none());
        b.extend_from_slice(b"def");
        encode_frame(7, MessageType::Request, 0, b"ok", &mut b).unwrap();
        let f = d.decode(&mut b).unwrap().unwrap();
        assert_eq!((f.stream_id, &f.payload[..]), (7, &b"ok"[..]));
        assert!(b.is_empty());
        assert!(d.is_at_boundary());
    }

    #[test]
    fn invalid_type_is_sticky() {
        let mut d = Decoder::new();
        let mut b = BytesMut::from(&[0u8, 0, 0, 0, 0, 0, 0, 1, 9, 0][..]);
        assert!(matches!(
            d.decode(&mut b),
            Err(Error::InvalidMessageType {
                message_type: 9,
                ..
            })
        ));
        encode_frame(3, MessageType::Request, 0, b"", &mut b).unwrap();
        assert!(matches!(
            d.decode(&mut b),
            Err(Error::InvalidMessageType { .. })
        ));
    }

    #[test]
    fn encode_refuses_oversize() {
        let mut b = BytesMut::new();
        let big = vec![0u8; MAX_MESSAGE_LEN + 1];
        assert!(matches!(
            encode_frame(1, MessageType::Request, 0, &big, &mut b),
            Err(Error::MessageTooLarge { len, max }) if len == MAX_MESSAGE_LEN + 1 && max == MAX_MESSAGE_LEN
        ));
        assert!(b.is_empty());
        encode_frame(1, MessageType::Request, 0, &big[1..], &mut b).unwrap();
        assert_eq!(b.len(), HEADER_LEN + MAX_MESSAGE_LEN);
    }
}
