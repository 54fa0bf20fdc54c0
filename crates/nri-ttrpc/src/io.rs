//! Thin tokio driver around the [`Decoder`](crate::codec::Decoder).

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::codec::{Decoder, Frame};
use crate::error::Error;
use crate::limits::RequestLenLimit;

/// Bytes asked for per read when no large payload is expected.
pub(crate) const READ_CHUNK: usize = 8 * 1024;

/// What [`Reader::next`] produced.
pub(crate) enum ReadEvent {
    /// A complete frame.
    Frame(Frame),
    /// A frame the decoder rejected but skipped; the stream continues.
    /// Always [`Error::FrameTooLarge`] or [`Error::UnsupportedMessageType`].
    Rejected(Error),
    /// Clean end of stream between messages.
    Eof,
}

pub(crate) struct Reader<R> {
    io: R,
    frames: Frames,
}

impl<R: AsyncRead + Unpin> Reader<R> {
    pub(crate) fn new(io: R) -> Self {
        Reader {
            io,
            frames: Frames::with_capacity(READ_CHUNK),
        }
    }

    /// Has every header from now on checked against `limit` as it is then.
    pub(crate) fn follow_limit(&mut self, limit: RequestLenLimit) {
        self.frames.follow_limit(limit);
    }

    /// The next event. Fatal errors (I/O, truncation, corrupt header) are
    /// returned as `Err`.
    ///
    /// Cancel safe: nothing is lost if the future is dropped, because the
    /// only await point is a read into the buffer.
    pub(crate) async fn next(&mut self) -> Result<ReadEvent, Error> {
        loop {
            if let Some(ev) = self.frames.next_event()? {
                return Ok(ev);
            }
            let f = &mut self.frames;
            let want = READ_CHUNK.max(f.decoder.payload_bytes_missing(f.buf.len()));
            f.buf.reserve(want);
            let n = self.io.read_buf(&mut f.buf).await?;
            if n == 0 {
                return self.frames.end_of_stream();
            }
        }
    }
}

/// The bytes of a ttRPC stream received but not decoded yet, with their
/// decoder: what every receiver keeps, whether it reads the stream itself
/// ([`Reader`]) or is fed it (`ClientFeed`, `ServerFeed`).
pub(crate) struct Frames {
    decoder: Decoder,
    buf: BytesMut,
    /// A payload cap that may change while the stream is read.
    limit: Option<RequestLenLimit>,
}

impl Frames {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Frames {
            decoder: Decoder::new(),
            buf: BytesMut::with_capacity(capacity),
            limit: None,
        }
    }

    /// Appends received bytes.
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Has every header from now on checked against `limit` as it is then.
    pub(crate) fn follow_limit(&mut self, limit: RequestLenLimit) {
        self.limit = Some(limit);
    }

    /// Bytes buffered.
    pub(crate) fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Whether a frame has begun and not yet fully arrived.
    pub(crate) fn is_mid_frame(&self) -> bool {
        !self.decoder.is_at_boundary() || !self.buf.is_empty()
    }

    /// Drops what is buffered (the stream is over).
    pub(crate) fn clear(&mut self) {
        self.buf = BytesMut::new();
    }

    /// Decodes the next buffered frame, if it is complete. A frame the
    /// decoder skips is [`ReadEvent::Rejected`]; fatal errors are `Err`.
    pub(crate) fn next_event(&mut self) -> Result<Option<ReadEvent>, Error> {
        if let Some(limit) = &self.limit {
            // Applies to the next header; a payload under way is not cut.
            self.decoder.set_max_message_len(limit.get());
        }
        match self.decoder.decode(&mut self.buf) {
            Ok(Some(frame)) => {
                if frame.payload.len() > READ_CHUNK {
                    release_large_buffer(&mut self.buf);
                }
                Ok(Some(ReadEvent::Frame(frame)))
            }
            Ok(None) => Ok(None),
            Err(e @ (Error::FrameTooLarge { .. } | Error::UnsupportedMessageType { .. })) => {
                Ok(Some(ReadEvent::Rejected(e)))
            }
            Err(e) => Err(e),
        }
    }

    /// What the end of the byte stream means given what is still
    /// buffered: a clean end between messages, or a truncated message.
    pub(crate) fn end_of_stream(&self) -> Result<ReadEvent, Error> {
        if !self.is_mid_frame() {
            Ok(ReadEvent::Eof)
        } else {
            Err(Error::Truncated {
                buffered: self.buf.len(),
            })
        }
    }
}

/// Leaves the allocation a large frame was read into to that frame's
/// payload (it is freed when the payload is dropped) and goes on with a
/// buffer of the normal size holding the bytes read past the frame.
///
/// Without this the buffer keeps sharing the large allocation and takes it
/// back once the payload is dropped, so a connection that once received a
/// 4 MiB message would hold 4 MiB for the rest of its life. The copy is of
/// the few bytes read beyond the frame only.
fn release_large_buffer(buf: &mut BytesMut) {
    let rest = std::mem::take(buf);
    let mut fresh = BytesMut::with_capacity(READ_CHUNK.max(rest.len()));
    fresh.extend_from_slice(&rest);
    *buf = fresh;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::codec::{MessageType, encode_frame};

    fn frames(payloads: &[&[u8]]) -> Vec<u8> {
        let mut b = BytesMut::new();
        for (i, p) in payloads.iter().enumerate() {
            encode_frame(2 * i as u32 + 1, MessageType::Request, 0, p, &mut b).unwrap();
        }
        b.to_vec()
    }

    async fn frame<R: AsyncRead + Unpin>(r: &mut Reader<R>) -> Frame {
        match r.next().await.unwrap() {
            ReadEvent::Frame(f) => f,
            _ => panic!("expected a frame"),
        }
    }

    /// After a large frame the reader no longer shares (and later reuses)
    /// the allocation the frame was read into: the payload owns it alone,
    /// and the buffer is back to its normal size.
    #[tokio::test]
    async fn large_frame_leaves_its_allocation_to_the_payload() {
        let big = vec![7u8; 1 << 20];
        let input = frames(&[b"small", &big, b"after", b"tail"]);
        let mut r = Reader::new(&input[..]);
        let small = frame(&mut r).await;
        assert_eq!(&small.payload[..], b"small");
        drop(small);
        let f = frame(&mut r).await;
        assert_eq!(f.payload.len(), big.len());
        assert!(
            f.payload.is_unique(),
            "the reader must not keep a reference to the large allocation"
        );
        assert!(
            r.frames.buf.capacity() <= 2 * READ_CHUNK,
            "{}",
            r.frames.buf.capacity()
        );
        drop(f);
        // Bytes read past the large frame are kept.
        assert_eq!(&frame(&mut r).await.payload[..], b"after");
        assert_eq!(&frame(&mut r).await.payload[..], b"tail");
        assert!(matches!(r.next().await.unwrap(), ReadEvent::Eof));
        assert!(
            r.frames.buf.capacity() <= 2 * READ_CHUNK,
            "{}",
            r.frames.buf.capacity()
        );
    }
}
