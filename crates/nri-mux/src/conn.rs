//! The logical connections of a trunk: [`MuxConn`], its halves, and the
//! [`ConnSink`] that takes a connection's data straight from the reader.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::latency::WriterDrives;
use crate::mux::{End, Inner, Owner, closed};
use crate::sync::lock;
use crate::{ConnId, Error, MAX_PAYLOAD};
#[cfg(doc)]
use crate::{Mux, MuxStats, WRITE_BACKLOG_LIMIT};

/// Per-connection read buffer limit. While a connection holds more than this
/// many received bytes that its owner has not read yet, the trunk reader
/// stops reading the socket (for all connections) until the owner catches up.
/// Data for an open connection is never dropped. One full-size message always
/// fits.
pub const READ_BUFFER_LIMIT: usize = MAX_PAYLOAD;

#[derive(Default)]
pub(crate) struct ConnState {
    pub(crate) queue: VecDeque<Bytes>,
    pub(crate) buffered: usize,
    pub(crate) waker: Option<Waker>,
    /// Set by the trunk reader when `buffered` went over the limit.
    pub(crate) over_limit: bool,
    pub(crate) read_closed: bool,
    pub(crate) write_closed: bool,
}

pub(crate) struct ConnShared {
    pub(crate) id: ConnId,
    /// See [`WriterDrives`].
    pub(crate) writer_drives: WriterDrives,
    pub(crate) state: Mutex<ConnState>,
    /// Takes the connection's data in place of `state.queue` once set (see
    /// [`MuxReadHalf::into_sink`]).
    pub(crate) sink: Mutex<Option<Box<dyn ConnSink>>>,
}

/// Takes a connection's data straight from the trunk reader, in the reader's
/// task, instead of a read half (see [`MuxReadHalf::into_sink`]).
///
/// A sink must not block or wait: the trunk reader serves every connection
/// and does nothing else while a sink runs. A sink may end its own trunk
/// from within [`data`](ConnSink::data) ([`Mux::close`], or by dropping the
/// last handle); it is then told so once `data` has returned.
pub trait ConnSink: Send + 'static {
    /// The next bytes of the connection, in order. Message boundaries are
    /// not kept, as on a read half: a message may come in several pieces.
    fn data(&mut self, bytes: Bytes);

    /// The trunk ended (no more data will come): `None` if the peer closed
    /// it or it was closed locally, else why it failed.
    fn ended(&mut self, error: Option<&Error>);

    /// Whether the sink holds the first bytes of a message whose rest has
    /// not come yet. The trunk reader then polls briefly for the rest
    /// before it sleeps (with [`ReadStrategy::Spin`](crate::ReadStrategy::Spin)). The default
    /// says no.
    fn holds_partial(&self) -> bool {
        false
    }
}

/// Keeps a connection registered; removes it when the last half is dropped.
pub(crate) struct ConnHandle {
    pub(crate) owner: Arc<Owner>,
    pub(crate) shared: Arc<ConnShared>,
}

impl Drop for ConnHandle {
    fn drop(&mut self) {
        let inner = &self.owner.inner;
        {
            let mut map = lock(&inner.conns);
            if map
                .get(&self.shared.id)
                .is_some_and(|c| Arc::ptr_eq(c, &self.shared))
            {
                map.remove(&self.shared.id);
            }
        }
        inner.read_space.notify_one();
    }
}

impl ConnHandle {
    pub(crate) fn inner(&self) -> &Inner {
        &self.owner.inner
    }

    fn poll_read(&self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        let mut st = lock(&self.shared.state);
        if !st.queue.is_empty() {
            let mut copied = 0;
            while buf.remaining() > 0 {
                let Some(front) = st.queue.front_mut() else {
                    break;
                };
                let n = front.len().min(buf.remaining());
                buf.put_slice(&front[..n]);
                front.advance(n);
                copied += n;
                if front.is_empty() {
                    st.queue.pop_front();
                }
            }
            st.buffered -= copied;
            if st.over_limit && st.buffered <= READ_BUFFER_LIMIT {
                st.over_limit = false;
                drop(st);
                self.inner().read_space.notify_one();
            }
            return Poll::Ready(Ok(()));
        }
        match self.inner().end.get() {
            None => {
                match &st.waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => st.waker = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
            Some(End::PeerEof) | Some(End::Failed(Error::Closed)) => Poll::Ready(Ok(())),
            Some(End::Failed(e)) => Poll::Ready(Err(e.clone().into())),
        }
    }

    fn poll_write(&self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if lock(&self.shared.state).write_closed {
            return Poll::Ready(Err(Error::WriteShutdown {
                conn: self.shared.id,
            }
            .into()));
        }
        let drives = self.shared.writer_drives.get();
        self.inner().write_message(self.shared.id, drives, cx, buf)
    }

    fn poll_shutdown(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        lock(&self.shared.state).write_closed = true;
        self.inner().poll_flush(cx)
    }

    fn close_read(&self) {
        {
            let mut st = lock(&self.shared.state);
            st.read_closed = true;
            st.queue.clear();
            st.buffered = 0;
            st.over_limit = false;
        }
        self.inner().read_space.notify_one();
    }
}

/// One logical connection of a [`Mux`].
///
/// Reading gives the connection's bytes as a stream, reassembled from
/// frames of any size. Writing follows a message contract: **each
/// `poll_write(buf)` is one whole message**. It is framed as the Go peer
/// expects (see [`encode_message`](crate::encode_message)) and either
/// accepted entirely (`Ok(buf.len())`) or refused with an error
/// (`InvalidInput` carrying [`Error::MessageTooLarge`] above
/// [`MAX_PAYLOAD`]); never partially. Frames of different messages never
/// interleave on the trunk, whichever connections write concurrently. An
/// empty write sends nothing. A write normally completes with one `writev`
/// on the socket from the calling task; when the socket is full, the rest
/// goes to a backlog that a background task writes out (`poll_flush` waits
/// for it; writers wait once it exceeds [`WRITE_BACKLOG_LIMIT`]).
///
/// `poll_shutdown` flushes and stops further writes on this connection only;
/// nothing is signalled to the peer (the protocol has no close message).
/// Dropping the connection unregisters its id; frames arriving for it later
/// are dropped and counted in [`MuxStats`].
///
/// When the trunk ends, reads return the data already buffered and then end
/// of file (peer closed cleanly, or local close) or the trunk's error;
/// writes fail.
pub struct MuxConn {
    pub(crate) h: Arc<ConnHandle>,
}

impl std::fmt::Debug for MuxConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MuxConn")
            .field("id", &self.h.shared.id)
            .finish_non_exhaustive()
    }
}

impl MuxConn {
    /// The connection's id.
    pub fn id(&self) -> ConnId {
        self.h.shared.id
    }

    /// Waits until the trunk has ended; see [`Mux::closed`].
    pub async fn trunk_closed(&self) -> Result<(), Error> {
        closed(&self.h.owner.inner).await
    }

    /// Splits into a read half and a write half that can move to different
    /// tasks, without a lock between them.
    pub fn into_split(self) -> (MuxReadHalf, MuxWriteHalf) {
        (
            MuxReadHalf {
                h: Some(Arc::clone(&self.h)),
            },
            MuxWriteHalf { h: self.h },
        )
    }
}

impl AsyncRead for MuxConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.h.poll_read(cx, buf)
    }
}

impl AsyncWrite for MuxConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.h.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.h.inner().poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.h.poll_shutdown(cx)
    }
}

/// Read half of a [`MuxConn`], from [`MuxConn::into_split`]. Dropping it
/// discards buffered and later data of the connection (counted as dropped).
pub struct MuxReadHalf {
    /// `None` only once [`into_sink`](MuxReadHalf::into_sink) took it.
    h: Option<Arc<ConnHandle>>,
}

impl std::fmt::Debug for MuxReadHalf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MuxReadHalf")
            .field("id", &self.h.as_ref().map(|h| h.shared.id))
            .finish_non_exhaustive()
    }
}

impl Drop for MuxReadHalf {
    fn drop(&mut self) {
        if let Some(h) = &self.h {
            h.close_read();
        }
    }
}

impl MuxReadHalf {
    /// Hands the connection's received data to `sink`, which the trunk
    /// reader calls as frames arrive, instead of keeping it for reads: one
    /// task hand-off less per message. Data already received goes to the
    /// sink first, in order. When the trunk ends (or if it has already
    /// ended), the sink is told, once ([`ConnSink::ended`]), and dropped;
    /// until then it lives as long as the connection (its write half).
    ///
    /// A sink that holds a write half of its own trunk (a server that
    /// answers from the sink) keeps the trunk open by itself: it then ends
    /// only when the peer closes it, it fails, or [`Mux::close`] is called,
    /// not when the other handles are dropped.
    pub fn into_sink(mut self, sink: impl ConnSink) {
        let Some(h) = self.h.take() else {
            return;
        };
        {
            let mut slot = lock(&h.shared.sink);
            let mut sink: Box<dyn ConnSink> = Box::new(sink);
            let queued = {
                let mut st = lock(&h.shared.state);
                st.buffered = 0;
                st.over_limit = false;
                std::mem::take(&mut st.queue)
            };
            queued.into_iter().for_each(|b| sink.data(b));
            match h.inner().end.get() {
                Some(end) => sink.ended(end.sink_error()),
                None => *slot = Some(sink),
            }
        }
        h.inner().read_space.notify_one();
    }
}

impl AsyncRead for MuxReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &self.h {
            Some(h) => h.poll_read(cx, buf),
            // Unreachable: `into_sink` consumes the half.
            None => Poll::Ready(Ok(())),
        }
    }
}

/// Write half of a [`MuxConn`], from [`MuxConn::into_split`]; same write
/// contract as [`MuxConn`].
pub struct MuxWriteHalf {
    h: Arc<ConnHandle>,
}

impl MuxWriteHalf {
    pub(crate) fn handle(&self) -> &Arc<ConnHandle> {
        &self.h
    }
}

impl std::fmt::Debug for MuxWriteHalf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MuxWriteHalf")
            .field("id", &self.h.shared.id)
            .finish_non_exhaustive()
    }
}

impl AsyncWrite for MuxWriteHalf {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.h.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.h.inner().poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.h.poll_shutdown(cx)
    }
}
