//! Thin tokio driver around the [`Decoder`](crate::codec::Decoder).

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::codec::{Decoder, Frame};
use crate::error::Error;

/// Bytes asked for per read when no large payload is expected.
const READ_CHUNK: usize = 8 * 1024;

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
    buf: BytesMut,
    decoder: Decoder,
}

impl<R: AsyncRead + Unpin> Reader<R> {
    pub(crate) fn new(io: R) -> Self {
        Reader {
            io,
            buf: BytesMut::with_capacity(READ_CHUNK),
            decoder: Decoder::new(),
        }
    }

    /// The next event. Fatal errors (I/O, truncation, corrupt header) are
    /// returned as `Err`.
    ///
    /// Cancel safe: nothing is lost if the future is dropped, because the
    /// only await point is a read into the buffer.
    pub(crate) async fn next(&mut self) -> Result<ReadEvent, Error> {
        loop {
            match self.decoder.decode(&mut self.buf) {
                Ok(Some(frame)) => return Ok(ReadEvent::Frame(frame)),
                Ok(None) => {}
                Err(e @ (Error::FrameTooLarge { .. } | Error::UnsupportedMessageType { .. })) => {
                    return Ok(ReadEvent::Rejected(e));
                }
                Err(e) => return Err(e),
            }
            let want = READ_CHUNK.max(self.decoder.payload_bytes_missing(self.buf.len()));
            self.buf.reserve(want);
            let n = self.io.read_buf(&mut self.buf).await?;
            if n == 0 {
                if self.decoder.is_at_boundary() && self.buf.is_empty() {
                    return Ok(ReadEvent::Eof);
                }
                return Err(Error::Truncated {
                    buffered: self.buf.len(),
                });
            }
        }
    }
}
