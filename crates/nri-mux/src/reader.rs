//! The trunk reader: reads the socket, cuts frames and hands each piece to
//! its connection. How it waits when there is nothing to read is the
//! [latency](crate::latency) module's business ([`ReadSide`]).

use std::io;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::Arc;

use bytes::BytesMut;

use crate::codec::{Decoder, EXTENSION_CONN, Piece};
use crate::conn::READ_BUFFER_LIMIT;
use crate::latency::{Parked, ReadSide};
use crate::mux::{End, Inner};
use crate::sync::lock;
use crate::{ConnId, Error};

/// Read chunk size of the trunk reader.
const READ_CHUNK: usize = 64 * 1024;

/// What the reader keeps between reads.
struct ReadState {
    buf: BytesMut,
    dec: Decoder,
    /// Whether the last message delivered to a sink is unfinished.
    partial: bool,
    /// Whether the rest of the frame being read is dropped.
    dropping: bool,
}

impl Inner {
    pub(crate) async fn read_loop(self: Arc<Self>, rd: io::Result<StdUnixStream>) {
        // One cancellation future for the whole loop, not one per turn.
        let ended = self.ended.cancelled();
        tokio::pin!(ended);
        tokio::select! {
            biased;
            _ = &mut ended => return,
            _ = self.started.cancelled() => {}
        }
        let mut side = match rd {
            Ok(sock) => ReadSide::new(Arc::clone(&self.latency), sock),
            Err(e) => return self.finish(End::Failed(Error::io("duplicate trunk socket", e))),
        };
        let mut st = ReadState {
            buf: BytesMut::with_capacity(READ_CHUNK),
            dec: Decoder::new(),
            partial: false,
            dropping: false,
        };
        // Reads land here first (initialized once), then are appended to
        // `buf`: safe code cannot read into `buf`'s uninitialized capacity.
        let mut chunk = vec![0u8; READ_CHUNK];
        loop {
            if let Err(end) = self.deliver_all(&mut st, &mut side).await {
                return end.map_or((), |end| self.finish(end));
            }
            let mid_message = st.partial || !st.buf.is_empty() || st.dec.is_mid_frame();
            let polled = side.poll_before_park(&mut chunk, mid_message, &self.ended);
            let res = match polled {
                Some(r) => r,
                None => tokio::select! {
                    biased;
                    _ = &mut ended => return,
                    parked = side.park(&mut chunk) => match parked {
                        Parked::Read(r) => r,
                        // A write while parked: go back and poll for the answer.
                        Parked::Wrote => continue,
                    },
                },
            };
            match res {
                Ok(0) => {
                    let end = match st.dec.check_eof(&st.buf) {
                        Ok(()) => End::PeerEof,
                        Err(e) => End::Failed(e),
                    };
                    return self.finish(end);
                }
                Ok(n) => st.buf.extend_from_slice(chunk.get(..n).unwrap_or_default()),
                Err(e) => return self.finish(End::Failed(Error::io("read from trunk", e))),
            }
        }
    }

    /// Hands every complete piece in the buffer to its connection. `Err`
    /// when the reader must stop: with the trunk's end to record, or
    /// `None` if it has ended already.
    async fn deliver_all(
        &self,
        st: &mut ReadState,
        side: &mut ReadSide,
    ) -> Result<(), Option<End>> {
        loop {
            // Frames longer than a read come in pieces as they arrive: no
            // frame is held whole, and one nobody takes is dropped piece by
            // piece.
            let piece = match st.dec.decode_piece(&mut st.buf, READ_CHUNK) {
                Ok(Some(piece)) => piece,
                Ok(None) => return Ok(()),
                Err(e) => return Err(Some(End::Failed(e))),
            };
            self.counters.received(piece.first, piece.data.len());
            if piece.conn == EXTENSION_CONN {
                if piece.first && piece.last {
                    side.on_extension(&piece.data);
                }
                continue;
            }
            side.on_message(piece.first);
            if piece.data.len() > READ_CHUNK {
                st.buf = release_large_buffer(std::mem::take(&mut st.buf));
            }
            if !self.deliver(piece, &mut st.partial, &mut st.dropping).await {
                return Err(None);
            }
        }
    }

    /// Reports a dropped frame (once per frame, with its announced length;
    /// the rest of a frame handed out in pieces goes without a word).
    fn drop_frame(&self, conn: ConnId, len: usize, first: bool) {
        if first {
            self.counters.dropped(conn, len);
        }
    }

    /// Hands one piece of a frame's payload to its connection. Returns
    /// `false` if the trunk ended while waiting for buffer space. `partial`
    /// is set when the connection's sink now holds the start of an
    /// unfinished message. `dropping` is set when the frame's first piece
    /// was dropped: so is the rest of the frame, even if its connection is
    /// opened meanwhile.
    async fn deliver(&self, piece: Piece, partial: &mut bool, dropping: &mut bool) -> bool {
        let (id, first) = (piece.conn, piece.first);
        let frame_len = piece.frame_len as usize;
        let conn = if first || !*dropping {
            lock(&self.conns).get(&id).cloned()
        } else {
            None
        };
        let Some(conn) = conn else {
            self.drop_frame(id, frame_len, first);
            *dropping = !piece.last;
            return true;
        };
        *dropping = false;
        let payload = piece.data;
        let len = payload.len();
        if len == 0 {
            return true;
        }
        // Queued under the sink lock, so that `into_sink` cannot slip in
        // between and see this payload after later ones.
        let (waker, over) = {
            let mut slot = lock(&conn.sink);
            if let Some(sink) = slot.as_mut() {
                sink.data(payload);
                *partial = sink.holds_partial();
                if let Some(end) = self.end.get() {
                    // The trunk ended while the sink ran (see `finish`).
                    if let Some(mut sink) = slot.take() {
                        sink.ended(end.sink_error());
                    }
                }
                return true;
            }
            let mut st = lock(&conn.state);
            if st.read_closed {
                drop(st);
                drop(slot);
                self.drop_frame(id, frame_len, first);
                *dropping = !piece.last;
                return true;
            }
            st.queue.push_back(payload);
            st.buffered += len;
            let over = st.buffered > READ_BUFFER_LIMIT;
            st.over_limit |= over;
            (st.waker.take(), over)
        };
        if let Some(w) = waker {
            w.wake();
        }
        if over {
            return self.wait_read_space(&conn).await;
        }
        true
    }

    /// The connection holds more unread data than its limit: waits until
    /// its owner reads (or closes it). `false` if the trunk ended.
    async fn wait_read_space(&self, conn: &Arc<crate::conn::ConnShared>) -> bool {
        tracing::debug!(
            conn = conn.id.0,
            "mux: connection read buffer full, pausing the trunk reader"
        );
        loop {
            let notified = self.read_space.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let st = lock(&conn.state);
                if !st.over_limit || st.read_closed {
                    return true;
                }
            }
            if Arc::strong_count(conn) == 1 {
                // The connection was closed and removed from the map.
                return true;
            }
            tokio::select! {
                biased;
                _ = self.ended.cancelled() => return false,
                _ = notified => {}
            }
        }
    }
}

/// After a payload larger than the read chunk was split off `buf`, `buf`
/// still shares that large allocation and would take it back once the
/// payload is dropped, so a trunk that carried one 4 MiB message would keep
/// 4 MiB for the rest of its life. Leaves the allocation to the payload
/// (freed with it) and goes on with a normal-size buffer holding the few
/// bytes already read past the frame.
fn release_large_buffer(rest: BytesMut) -> BytesMut {
    let mut buf = BytesMut::with_capacity(READ_CHUNK.max(rest.len()));
    buf.extend_from_slice(&rest);
    buf
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_large_payload_takes_its_allocation_with_it() {
        let mut buf = BytesMut::with_capacity(4 << 20);
        buf.extend_from_slice(&vec![7u8; (4 << 20) - 3]);
        buf.extend_from_slice(b"abc");
        let payload = buf.split_to((4 << 20) - 3).freeze();
        let buf = release_large_buffer(buf);
        assert_eq!(&buf[..], b"abc");
        assert!(buf.capacity() < 2 * READ_CHUNK, "{}", buf.capacity());
        // The payload is intact and owns the large allocation alone.
        assert_eq!(payload.len(), (4 << 20) - 3);
        assert!(payload.iter().all(|b| *b == 7));
    }
}
