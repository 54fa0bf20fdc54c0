//! Sans-io frame codec of the NRI multiplexer.
//!
//! A trunk (one unix stream socket) carries frames. Each frame is an
//! 8-byte header followed by the payload:
//!
//! | bytes | meaning                              |
//! |-------|--------------------------------------|
//! | 0..4  | connection id, `u32` big-endian      |
//! | 4..8  | payload length, `u32` big-endian     |
//! | 8..   | payload                              |
//!
//! The [`Decoder`] turns bytes into `(ConnId, Bytes)` frames; the encoder
//! [`encode_message`] turns one message into the one- or two-frame pattern
//! that the Go reader (which hands out one frame per read into a 4096-byte
//! buffer) can consume.

use std::fmt;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::Error;

/// Length of a frame header: connection id (`u32` BE) + payload length
/// (`u32` BE). Mirrors `headerLen` in containerd/nri `pkg/net/multiplex`.
pub const HEADER_LEN: usize = 8;

/// Largest frame payload we accept, and largest message we send:
/// ttRPC header (10 bytes) + ttRPC maximum message size (4 MiB) =
/// 4,194,314 bytes. Mirrors `maxPayloadSize` in containerd/nri
/// `pkg/net/multiplex`.
pub const MAX_PAYLOAD: usize = 10 + (4 << 20);

/// Largest first frame of a message: the Go peer reads each frame with one
/// read into the 4096-byte buffer of ttRPC's `bufio.Reader`, so the frame that
/// carries the start of a message (and with it the ttRPC header) must not be
/// longer. Mirrors the default `bufio` size used by containerd/ttrpc's channel.
pub const FIRST_FRAME_MAX: usize = 4096;

/// Identifier of a logical connection on a trunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u32);

impl ConnId {
    /// Returns the numeric id.
    pub const fn get(self) -> u32 {
        self.0
    }
}

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<u32> for ConnId {
    fn from(v: u32) -> Self {
        ConnId(v)
    }
}

/// Connection id 0, reserved: it can never be opened. Mirrors
/// `reservedConnID` in containerd/nri `pkg/net/multiplex`.
pub const RESERVED_CONN: ConnId = ConnId(0);

/// Connection carrying the NRI `Plugin` service: the runtime is the ttRPC
/// client, the plugin serves. Mirrors `PluginServiceConn` (1).
pub const PLUGIN_SERVICE_CONN: ConnId = ConnId(1);

/// Connection carrying the NRI `Runtime` service: the plugin is the ttRPC
/// client, the runtime serves. Mirrors `RuntimeServiceConn` (2).
pub const RUNTIME_SERVICE_CONN: ConnId = ConnId(2);

/// Connection id of our extension frames (see [`Extension`]). No NRI side
/// opens it (NRI uses 1 and 2, and 0 is reserved), and the Go mux drops a
/// frame for a connection it has not opened without a word, in every
/// release since the mux came in (v0.3.0 to v0.12.x), so a Go peer reads
/// these frames and ignores them. Not part of containerd/nri.
pub const EXTENSION_CONN: ConnId = ConnId(u32::MAX);

/// What an extension frame (a frame on [`EXTENSION_CONN`] with a one-byte
/// payload) tells the peer. Our own addition to the wire, ignored by Go
/// peers; a frame with an unknown payload is ignored by ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Extension {
    /// The sender polls for a while when it gets a [`Extension::WakeHint`],
    /// so it is worth sending it hints. Sent once, right after connecting.
    WakeHintsAccepted,
    /// A message for the receiver is on its way soon: it may poll for it
    /// instead of going to sleep (and paying a wake-up when it comes).
    WakeHint,
}

impl Extension {
    /// Length of an extension frame on the wire.
    pub const FRAME_LEN: usize = HEADER_LEN + 1;

    const fn byte(self) -> u8 {
        match self {
            Extension::WakeHintsAccepted => 1,
            Extension::WakeHint => 2,
        }
    }

    /// The extension a frame payload carries, if it is one we know.
    pub fn from_payload(payload: &[u8]) -> Option<Extension> {
        match payload {
            [1] => Some(Extension::WakeHintsAccepted),
            [2] => Some(Extension::WakeHint),
            _ => None,
        }
    }

    /// The whole frame: header for [`EXTENSION_CONN`] and the payload byte.
    pub fn frame(self) -> [u8; Extension::FRAME_LEN] {
        let mut f = [0u8; Extension::FRAME_LEN];
        f[..HEADER_LEN].copy_from_slice(&header(EXTENSION_CONN, 1));
        f[HEADER_LEN] = self.byte();
        f
    }
}

/// Writes a frame header for `conn` with payload length `len`.
fn header(conn: ConnId, len: usize) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..4].copy_from_slice(&conn.0.to_be_bytes());
    // `len` is at most MAX_PAYLOAD here (checked by callers), which fits u32.
    h[4..].copy_from_slice(&(len as u32).to_be_bytes());
    h
}

/// How one message is laid out on the wire: the headers of its one or two
/// frames and where the payload is split.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MessageFrames {
    pub(crate) first_header: [u8; HEADER_LEN],
    /// Length of the first frame's payload.
    pub(crate) first_len: usize,
    /// Header of the second frame, when the message needs one.
    pub(crate) second_header: Option<[u8; HEADER_LEN]>,
}

impl MessageFrames {
    /// Plans the frames for a message of `len` bytes on `conn`.
    pub(crate) fn plan(conn: ConnId, len: usize) -> Result<Self, Error> {
        if len > MAX_PAYLOAD {
            return Err(Error::MessageTooLarge {
                len,
                max: MAX_PAYLOAD,
            });
        }
        if len <= FIRST_FRAME_MAX {
            Ok(MessageFrames {
                first_header: header(conn, len),
                first_len: len,
                second_header: None,
            })
        } else {
            Ok(MessageFrames {
                first_header: header(conn, FIRST_FRAME_MAX),
                first_len: FIRST_FRAME_MAX,
                second_header: Some(header(conn, len - FIRST_FRAME_MAX)),
            })
        }
    }

    /// Total bytes on the wire for a message of `len` bytes.
    pub(crate) fn wire_len(&self, len: usize) -> usize {
        len + HEADER_LEN * if self.second_header.is_some() { 2 } else { 1 }
    }
}

/// Appends `msg` to `dst` framed for connection `conn` the way the Go peer
/// expects one (ttRPC) message:
///
/// * one frame holding the whole message if it is at most
///   [`FIRST_FRAME_MAX`] (4096) bytes long (an empty message gives one
///   zero-length frame);
/// * otherwise a first frame of exactly 4096 bytes and one second frame with
///   the rest.
///
/// Never more than two frames, so a message never costs more than two slots of
/// the Go reader's 256-frame queue.
///
/// # Errors
///
/// [`Error::MessageTooLarge`] if `msg` is longer than [`MAX_PAYLOAD`];
/// nothing is written to `dst` then.
pub fn encode_message(conn: ConnId, msg: &[u8], dst: &mut BytesMut) -> Result<(), Error> {
    let plan = MessageFrames::plan(conn, msg.len())?;
    dst.reserve(plan.wire_len(msg.len()));
    let (first, rest) = msg.split_at(plan.first_len);
    dst.put_slice(&plan.first_header);
    dst.put_slice(first);
    if let Some(h) = plan.second_header {
        dst.put_slice(&h);
        dst.put_slice(rest);
    }
    Ok(())
}

/// Incremental frame decoder: feed it the bytes read from the trunk, take
/// frames out, either whole ([`decode`](Self::decode)) or in pieces as their
/// bytes arrive ([`decode_piece`](Self::decode_piece)). Use one of the two
/// on a decoder, not both.
///
/// A frame announcing a payload longer than [`MAX_PAYLOAD`] is fatal: the
/// decoder can no longer find frame boundaries, so it returns
/// [`Error::OversizedFrame`] and keeps returning it (it is poisoned).
#[derive(Debug, Default)]
pub struct Decoder {
    /// Set after a fatal error: the error to repeat.
    poisoned: Option<(ConnId, u32)>,
    /// The frame [`decode_piece`](Self::decode_piece) is in the middle of:
    /// its connection, announced length and bytes still to come.
    frame: Option<(ConnId, u32, u32)>,
}

/// Part of a frame's payload, from [`Decoder::decode_piece`]: the whole
/// payload of a small frame, or what has arrived of a large one.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Piece {
    /// Connection the frame is for.
    pub conn: ConnId,
    /// Payload length the frame's header announced.
    pub frame_len: u32,
    /// The bytes of this piece, in order (empty only for the first piece
    /// of a large frame whose header came alone).
    pub data: Bytes,
    /// This piece starts the frame.
    pub first: bool,
    /// This piece ends the frame.
    pub last: bool,
}

impl Decoder {
    /// Creates a decoder at a frame boundary.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the next complete frame from the front of `src`.
    ///
    /// Returns `Ok(None)` when `src` holds no complete frame yet (in that case
    /// `src` may have been given more capacity for the announced payload).
    /// The payload shares `src`'s allocation (no copy).
    ///
    /// # Errors
    ///
    /// [`Error::OversizedFrame`] if the next header announces a payload over
    /// [`MAX_PAYLOAD`]; the trunk must then be closed.
    pub fn decode(&mut self, src: &mut BytesMut) -> Result<Option<(ConnId, Bytes)>, Error> {
        let Some((conn, len)) = self.header(src)? else {
            return Ok(None);
        };
        let total = HEADER_LEN + len as usize;
        if src.len() < total {
            src.reserve(total - src.len());
            return Ok(None);
        }
        src.advance(HEADER_LEN);
        let payload = src.split_to(len as usize).freeze();
        Ok(Some((conn, payload)))
    }

    /// Reads the header at the front of `src` without consuming it: the
    /// connection and payload length of the next frame, or `None` until the
    /// whole header is there. A payload over [`MAX_PAYLOAD`] poisons the
    /// decoder: this and every later call fail with
    /// [`Error::OversizedFrame`].
    fn header(&mut self, src: &BytesMut) -> Result<Option<(ConnId, u32)>, Error> {
        if let Some((conn, len)) = self.poisoned {
            return Err(oversized(conn, len));
        }
        if src.len() < HEADER_LEN {
            return Ok(None);
        }
        let mut h = &src[..HEADER_LEN];
        let conn = ConnId(h.get_u32());
        let len = h.get_u32();
        if len as usize > MAX_PAYLOAD {
            self.poisoned = Some((conn, len));
            return Err(oversized(conn, len));
        }
        Ok(Some((conn, len)))
    }

    /// Takes the next piece of frame payload from the front of `src`.
    ///
    /// A frame of at most `whole_max` payload bytes comes whole, once all of
    /// it is in `src` (as from [`decode`](Self::decode)). A larger one comes
    /// in pieces, each holding what `src` has of it, as soon as its header
    /// is complete: the caller never holds a large frame, and can drop the
    /// bytes of a frame it does not want as they arrive. Pieces share
    /// `src`'s allocation (no copy).
    ///
    /// # Errors
    ///
    /// [`Error::OversizedFrame`] as for [`decode`](Self::decode).
    pub fn decode_piece(
        &mut self,
        src: &mut BytesMut,
        whole_max: usize,
    ) -> Result<Option<Piece>, Error> {
        if let Some((conn, frame_len, remaining)) = self.frame {
            if src.is_empty() {
                return Ok(None);
            }
            let n = src.len().min(remaining as usize);
            // n <= remaining, which fits u32.
            let left = remaining - n as u32;
            self.frame = (left > 0).then_some((conn, frame_len, left));
            return Ok(Some(Piece {
                conn,
                frame_len,
                data: src.split_to(n).freeze(),
                first: false,
                last: left == 0,
            }));
        }
        let Some((conn, frame_len)) = self.header(src)? else {
            return Ok(None);
        };
        let len = frame_len as usize;
        let have = src.len() - HEADER_LEN;
        if have < len && len <= whole_max {
            src.reserve(len - have);
            return Ok(None);
        }
        src.advance(HEADER_LEN);
        let n = have.min(len);
        // n <= len, which fits u32.
        let left = frame_len - n as u32;
        self.frame = (left > 0).then_some((conn, frame_len, left));
        Ok(Some(Piece {
            conn,
            frame_len,
            data: src.split_to(n).freeze(),
            first: true,
            last: left == 0,
        }))
    }

    /// Whether the decoder is inside a frame it hands out in pieces
    /// ([`decode_piece`](Self::decode_piece)) whose end has not come yet.
    pub fn is_mid_frame(&self) -> bool {
        self.frame.is_some()
    }

    /// Checks the end of the trunk after [`decode_piece`](Self::decode_piece)
    /// has taken every piece it could.
    ///
    /// # Errors
    ///
    /// [`Error::TruncatedFrame`] if the trunk ended inside a frame (`src`
    /// holds part of one, or a frame handed out in pieces has not ended).
    pub fn check_eof(&self, src: &BytesMut) -> Result<(), Error> {
        if src.is_empty() && self.frame.is_none() {
            Ok(())
        } else {
            Err(Error::TruncatedFrame {
                buffered: src.len(),
            })
        }
    }

    /// Like [`decode`](Self::decode), for when the trunk reached end of file:
    /// leftover bytes that do not form a complete frame are an error.
    ///
    /// # Errors
    ///
    /// [`Error::OversizedFrame`] as for `decode`; [`Error::TruncatedFrame`] if
    /// `src` is non-empty but holds no complete frame.
    pub fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<(ConnId, Bytes)>, Error> {
        match self.decode(src)? {
            Some(frame) => Ok(Some(frame)),
            None if src.is_empty() => Ok(None),
            None => Err(Error::TruncatedFrame {
                buffered: src.len(),
            }),
        }
    }
}

fn oversized(conn: ConnId, len: u32) -> Error {
    Error::OversizedFrame {
        conn,
        len,
        max: MAX_PAYLOAD,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layout() {
        assert_eq!(
            header(ConnId(0x0102_0304), 0x0a0b_0c0d),
            [1, 2, 3, 4, 0x0a, 0x0b, 0x0c, 0x0d]
        );
    }

    #[test]
    fn partial_header_then_rest() -> Result<(), Error> {
        let mut d = Decoder::new();
        let mut b = BytesMut::from(&[0u8, 0, 0, 1, 0, 0][..]);
        assert!(d.decode(&mut b)?.is_none());
        b.extend_from_slice(&[0, 2, b'h']);
        assert!(d.decode(&mut b)?.is_none());
        b.extend_from_slice(b"i");
        let (c, p) = d.decode(&mut b)?.ok_or(Error::Closed)?;
        assert_eq!(c, PLUGIN_SERVICE_CONN);
        assert_eq!(&p[..], b"hi");
        assert!(b.is_empty());
        Ok(())
    }
}
