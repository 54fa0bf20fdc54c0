//! The trunk writer: a message goes straight to the socket from the
//! writing task; what the socket does not take at once waits in a backlog
//! that the flusher task writes out.

use std::io::{self, IoSlice, Write};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::{Buf, BufMut, BytesMut};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use crate::codec::{Extension, MessageFrames};
use crate::mux::{End, Inner, RETRY_PAUSE, push_waker};
use crate::sync::lock;
use crate::{ConnId, Error};

/// Write backlog limit. A write is accepted as long as fewer than this many
/// bytes wait for the trunk socket to become writable; beyond that writers
/// wait. The backlog can therefore reach this limit plus one message.
pub const WRITE_BACKLOG_LIMIT: usize = 256 * 1024;

#[derive(Default)]
pub(crate) struct WriteState {
    /// Bytes accepted but not yet written to the socket. Always ends at a
    /// message boundary, so new messages can be appended without
    /// interleaving.
    pub(crate) pending: BytesMut,
    /// Tasks waiting for the backlog to drain (writers over the limit,
    /// flushers).
    pub(crate) waiters: Vec<Waker>,
}

impl Inner {
    fn socket(&self) -> io::Result<&StdUnixStream> {
        self.stream
            .as_ref()
            .ok_or_else(|| io::ErrorKind::NotConnected.into())
    }

    /// Waits until the trunk takes more bytes, through a duplicate of the
    /// socket registered for writability only while we wait (so the
    /// reactor is not woken by write space the rest of the time).
    ///
    /// Without a spare descriptor (or reactor slot) for the watch, it waits
    /// a short while instead and lets the caller try the write again, so a
    /// process at its descriptor limit slows down rather than loses the
    /// trunk.
    async fn wait_writable(&self) -> io::Result<()> {
        let watch = self
            .socket()?
            .try_clone()
            .and_then(|dup| register(dup, Interest::WRITABLE));
        match watch {
            Ok(watch) => {
                let _ready = watch.writable().await?;
            }
            Err(e) => {
                tracing::debug!(error = %e, "mux: no writability watch, retrying the write shortly");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
        Ok(())
    }

    /// Writes as much of the backlog as the socket takes. `Ok(true)` when
    /// the backlog is empty.
    fn drain(&self, w: &mut WriteState) -> io::Result<bool> {
        while !w.pending.is_empty() {
            match self.socket().and_then(|mut s| s.write(&w.pending)) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => w.pending.advance(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    pub(crate) async fn flush_loop(self: Arc<Self>) {
        let ended = self.ended.cancelled();
        tokio::pin!(ended);
        loop {
            tokio::select! {
                biased;
                _ = &mut ended => return,
                _ = self.flush_needed.notified() => {}
            }
            loop {
                let res = {
                    let mut w = lock(&self.write);
                    match self.drain(&mut w) {
                        Ok(true) => Ok(Some(std::mem::take(&mut w.waiters))),
                        Ok(false) => Ok(None),
                        Err(e) => Err(e),
                    }
                };
                match res {
                    Ok(Some(waiters)) => {
                        waiters.into_iter().for_each(Waker::wake);
                        break;
                    }
                    Ok(None) => {
                        tokio::select! {
                            biased;
                            _ = &mut ended => return,
                            r = self.wait_writable() => {
                                if let Err(e) = r {
                                    return self.finish(End::Failed(Error::io("write to trunk", e)));
                                }
                            }
                        }
                    }
                    Err(e) => return self.finish(End::Failed(Error::io("write to trunk", e))),
                }
            }
        }
    }

    /// Writes one message on connection `id` (see [`crate::MuxConn`] for
    /// the contract). `driving`: the writer drives the reader itself while
    /// it waits for the answer ([`crate::ReaderDriver`]).
    pub(crate) fn write_message(
        &self,
        id: ConnId,
        driving: bool,
        cx: &mut Context<'_>,
        msg: &[u8],
    ) -> Poll<io::Result<usize>> {
        if msg.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if let Some(e) = self.end_error() {
            return Poll::Ready(Err(e.into()));
        }
        let plan = match MessageFrames::plan(id, msg.len()) {
            Ok(p) => p,
            Err(e) => return Poll::Ready(Err(e.into())),
        };
        let (first, rest) = msg.split_at(plan.first_len);
        let second_header = plan.second_header.unwrap_or_default();
        let all = [
            IoSlice::new(&plan.first_header),
            IoSlice::new(first),
            IoSlice::new(&second_header),
            IoSlice::new(rest),
        ];
        let slices = if plan.second_header.is_some() {
            &all[..]
        } else {
            &all[..2]
        };
        let total = plan.wire_len(msg.len());
        let frames = slices.len() as u64 / 2;

        let reader_wants = self.latency.writing();
        let mut w = lock(&self.write);
        if !w.pending.is_empty() {
            if w.pending.len() >= WRITE_BACKLOG_LIMIT {
                push_waker(&mut w.waiters, cx.waker());
                drop(w);
                self.flush_needed.notify_one();
                return Poll::Pending;
            }
            append_unsent(&mut w.pending, slices, 0);
        } else {
            match self.write_now(slices) {
                Ok(n) if n < total => append_unsent(&mut w.pending, slices, n),
                Ok(_) => {}
                Err(e) => {
                    drop(w);
                    let err = Error::io("write to trunk", e);
                    self.finish(End::Failed(err.clone()));
                    return Poll::Ready(Err(err.into()));
                }
            }
        }
        let backlog = !w.pending.is_empty();
        drop(w);
        if backlog {
            self.flush_needed.notify_one();
        }
        self.latency.written(reader_wants, driving);
        self.counters.sent(frames);
        Poll::Ready(Ok(msg.len()))
    }

    /// One non-blocking write of `slices` to the socket (the caller holds
    /// the write lock, with nothing queued): the bytes written, 0 when the
    /// socket takes nothing now. Retried when interrupted.
    fn write_now(&self, slices: &[IoSlice<'_>]) -> io::Result<usize> {
        loop {
            match self.socket().and_then(|mut s| s.write_vectored(slices)) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes an extension frame. With `or_queue`, a frame the socket does
    /// not take at once is queued behind the backlog like a message;
    /// without, it is written only if it goes out at once and whole (a wake
    /// hint is worth nothing late). Returns whether it was written or
    /// queued.
    pub(crate) fn write_extension(&self, ext: Extension, or_queue: bool) -> bool {
        if self.end_error().is_some() {
            return false;
        }
        let frame = ext.frame();
        let slices = [IoSlice::new(&frame)];
        let mut w = lock(&self.write);
        if !w.pending.is_empty() {
            if !or_queue {
                return false;
            }
            append_unsent(&mut w.pending, &slices, 0);
            return true;
        }
        let written = match self.write_now(&slices) {
            Ok(n) => n,
            Err(e) => {
                drop(w);
                self.finish(End::Failed(Error::io("write to trunk", e)));
                return false;
            }
        };
        if written == frame.len() {
            return true;
        }
        if written == 0 && !or_queue {
            return false;
        }
        // Part of a frame went out: the rest must follow before anything else.
        append_unsent(&mut w.pending, &slices, written);
        drop(w);
        self.flush_needed.notify_one();
        true
    }

    pub(crate) fn poll_flush(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(e) = self.end_error() {
            return Poll::Ready(Err(e.into()));
        }
        let mut w = lock(&self.write);
        if w.pending.is_empty() {
            return Poll::Ready(Ok(()));
        }
        push_waker(&mut w.waiters, cx.waker());
        drop(w);
        self.flush_needed.notify_one();
        Poll::Pending
    }
}

/// Registers a socket with the reactor for `interest` only.
#[allow(unsafe_code)]
fn register(sock: StdUnixStream, interest: Interest) -> io::Result<AsyncFd<StdUnixStream>> {
    // SAFETY: a `StdUnixStream` owns its descriptor: `as_raw_fd` always
    // returns that same open fd, which refers to the same file description
    // until the stream is dropped, and the `AsyncFd` owns the stream for
    // its whole life (nothing else can close or replace the fd).
    unsafe { AsyncFd::register_with_interest(sock, interest) }.map_err(io::Error::from)
}

/// Appends the bytes of `slices` after the first `skip` to `dst`.
fn append_unsent(dst: &mut BytesMut, slices: &[IoSlice<'_>], mut skip: usize) {
    for s in slices {
        if skip >= s.len() {
            skip -= s.len();
            continue;
        }
        dst.put_slice(&s[skip..]);
        skip = 0;
    }
}
