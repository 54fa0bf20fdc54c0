//! Tokio driver around the [codec](crate::codec): one trunk socket, many
//! logical connections. This file holds the trunk's shared state and its
//! life (start, end, the [`Mux`] handle); the [reader](crate::reader),
//! the [writer](crate::writer) and the [connections](crate::conn) have
//! files of their own, and so does the [latency](crate::latency)
//! machinery, chosen with a [`ReadStrategy`].

use std::collections::HashMap;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::{Arc, Mutex, OnceLock, TryLockError};
use std::task::Waker;

use bytes::BytesMut;
use tokio::net::UnixStream;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::codec::{EXTENSION_CONN, RESERVED_CONN};
use crate::conn::{ConnHandle, ConnShared, ConnState, MuxConn};
use crate::latency::{Latency, ReadStrategy, ReaderSlot, WriterDrives};
use crate::stats::{Counters, MuxStats};
use crate::sync::lock;
use crate::writer::WriteState;
use crate::{ConnId, Error};

/// Pause before retrying when no readiness watch could be set up (the
/// reactor is out of memory or epoll watches, the process at its
/// descriptor limit): the trunk slows down rather than ends.
pub(crate) const RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(1);

pub(crate) fn push_waker(list: &mut Vec<Waker>, w: &Waker) {
    if !list.iter().any(|x| x.will_wake(w)) {
        list.push(w.clone());
    }
}

/// Why the trunk ended.
#[derive(Debug)]
pub(crate) enum End {
    /// Clean end of file from the peer at a frame boundary.
    PeerEof,
    /// Anything else, including a local close ([`Error::Closed`]).
    Failed(Error),
}

impl End {
    fn error(&self) -> Error {
        match self {
            End::PeerEof => Error::PeerClosed,
            End::Failed(e) => e.clone(),
        }
    }

    /// What a [`ConnSink`](crate::ConnSink) is told: `None` for a clean
    /// end (by the peer or locally), else the failure.
    pub(crate) fn sink_error(&self) -> Option<&Error> {
        match self {
            End::PeerEof | End::Failed(Error::Closed) => None,
            End::Failed(e) => Some(e),
        }
    }
}

/// State shared by the handles and the two tasks.
pub(crate) struct Inner {
    /// The trunk socket (non-blocking), written to directly. The reader
    /// watches a duplicate of it registered with the reactor for
    /// readability only: were the socket registered for writability too (as
    /// a `tokio::net::UnixStream` is), every read by the peer would wake
    /// this side's reactor for nothing (the kernel reports write space on
    /// each read), doubling the wake-ups per round trip. Only a write that
    /// would block registers a short-lived writability watch
    /// (`wait_writable`). `None` only if the socket was lost while taking it
    /// over from tokio (the trunk then ends at once).
    pub(crate) stream: Option<StdUnixStream>,
    pub(crate) conns: Mutex<HashMap<ConnId, Arc<ConnShared>>>,
    pub(crate) write: Mutex<WriteState>,
    /// Wakes the flusher task when the backlog became non-empty.
    pub(crate) flush_needed: Notify,
    /// Wakes the trunk reader when a connection went below its read limit.
    pub(crate) read_space: Notify,
    /// Cancelled when the trunk has ended (`end` is set before).
    pub(crate) ended: CancellationToken,
    /// Cancelled when the reader may start.
    pub(crate) started: CancellationToken,
    pub(crate) end: OnceLock<End>,
    pub(crate) counters: Counters,
    /// The trunk reader, polled by its task (or by a writer waiting for
    /// its answer, see [`crate::ReaderDriver`]).
    pub(crate) reader: Arc<ReaderSlot>,
    /// Spinning and wake hints (see [`ReadStrategy`]).
    pub(crate) latency: Arc<Latency>,
}

impl Inner {
    pub(crate) fn finish(&self, end: End) {
        match &end {
            End::PeerEof => tracing::debug!("mux trunk closed by peer"),
            End::Failed(Error::Closed) => tracing::debug!("mux closed locally"),
            End::Failed(e) => tracing::warn!(error = %e, "mux trunk failed"),
        }
        if self.end.set(end).is_err() {
            return;
        }
        self.ended.cancel();
        // Shut the socket down now, even while handles still hold it, so the
        // peer sees end of file. A dup shares the socket, so shutting the dup
        // down shuts down ours; errors (already shut down) do not matter.
        if let Some(s) = &self.stream {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        let conns: Vec<_> = lock(&self.conns).values().cloned().collect();
        let error = self.end.get().and_then(End::sink_error);
        for c in conns {
            let w = lock(&c.state).waker.take();
            if let Some(w) = w {
                w.wake();
            }
            // The sink goes once told: it may hold a write half of this
            // trunk (a server answering requests), which would otherwise
            // keep the trunk's socket and memory alive for ever. A sink in
            // use (the reader is delivering to it, maybe on this very
            // thread: a sink that ends its own trunk) is told by the reader
            // when it is done (`deliver`).
            let sink = match c.sink.try_lock() {
                Ok(mut slot) => slot.take(),
                Err(TryLockError::Poisoned(p)) => p.into_inner().take(),
                Err(TryLockError::WouldBlock) => None,
            };
            if let Some(mut sink) = sink {
                sink.ended(error);
            }
        }
        let waiters = {
            let mut w = lock(&self.write);
            w.pending = BytesMut::new();
            std::mem::take(&mut w.waiters)
        };
        waiters.into_iter().for_each(Waker::wake);
    }

    pub(crate) fn end_error(&self) -> Option<Error> {
        self.end.get().map(End::error)
    }
}

/// Owns the tasks; dropping the last one (held by the [`Mux`] and every
/// [`MuxConn`]) closes the trunk.
pub(crate) struct Owner {
    pub(crate) inner: Arc<Inner>,
    tasks: [JoinHandle<()>; 2],
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.inner.finish(End::Failed(Error::Closed));
        // The reader future holds the `Inner` that holds it: drop it now
        // (unless it is being polled: then that poll sees the end and lets
        // go of it), and wake the reader task, which ends once the future
        // is gone or has returned. The task is not aborted: a task aborted
        // while another thread polls the reader would leave the cycle.
        self.inner.reader.release();
        let [_reader, flusher] = &self.tasks;
        flusher.abort();
    }
}

/// A multiplexer over one trunk socket.
///
/// Cheap to share by reference; the trunk stays up while the `Mux` or any
/// [`MuxConn`] opened from it is alive, until [`close`](Self::close) or
/// a trunk failure. Two tasks run on the current tokio runtime: a trunk
/// reader that demultiplexes frames into per-connection buffers, and a
/// flusher that only works when the socket was too full to take a write at
/// once. Writes go straight to the socket from the writing task.
pub struct Mux {
    pub(crate) owner: Arc<Owner>,
}

impl std::fmt::Debug for Mux {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mux")
            .field("ended", &self.owner.inner.end.get())
            .finish_non_exhaustive()
    }
}

impl Mux {
    /// Starts multiplexing over `stream`, with a plain reader
    /// ([`ReadStrategy::Plain`]).
    ///
    /// Frames that arrive for a connection id before it is [`open`](Self::open)ed
    /// are dropped (as the Go mux does). When frames may arrive before you
    /// open your connections (a multi-threaded runtime runs the reader at
    /// once), use [`new_paused`](Self::new_paused) instead.
    ///
    /// # Panics
    ///
    /// If called outside a tokio runtime.
    pub fn new(stream: UnixStream) -> Mux {
        Mux::with_strategy(stream, ReadStrategy::Plain)
    }

    /// Like [`new`](Self::new), with the trunk reader waiting for data as
    /// `strategy` says.
    ///
    /// # Panics
    ///
    /// If called outside a tokio runtime.
    pub fn with_strategy(stream: UnixStream, strategy: ReadStrategy) -> Mux {
        let m = Mux::paused_with_strategy(stream, strategy);
        m.start();
        m
    }

    /// Like [`new`](Self::new), but does not read the trunk until
    /// [`start`](Self::start) is called, so connections can be opened first
    /// and no early frame is lost (the Go runtime's `WithBlockedRead`).
    /// Writing works at once.
    ///
    /// # Panics
    ///
    /// If called outside a tokio runtime.
    pub fn new_paused(stream: UnixStream) -> Mux {
        Mux::paused_with_strategy(stream, ReadStrategy::Plain)
    }

    /// Like [`new_paused`](Self::new_paused), with the trunk reader waiting
    /// for data as `strategy` says.
    ///
    /// # Panics
    ///
    /// If called outside a tokio runtime.
    pub fn paused_with_strategy(stream: UnixStream, strategy: ReadStrategy) -> Mux {
        // `into_std` only fails if the socket cannot be deregistered, and
        // duplicating the reader's descriptor only at the descriptor limit:
        // either way the reader ends the trunk at once.
        let (stream, rd) = match stream.into_std() {
            Ok(s) => {
                let rd = s.try_clone();
                (Some(s), rd)
            }
            Err(e) => (None, Err(e)),
        };
        let inner = Arc::new(Inner {
            stream,
            conns: Mutex::new(HashMap::new()),
            write: Mutex::new(WriteState::default()),
            flush_needed: Notify::new(),
            read_space: Notify::new(),
            ended: CancellationToken::new(),
            started: CancellationToken::new(),
            end: OnceLock::new(),
            counters: Counters::default(),
            reader: Arc::new(ReaderSlot::new()),
            latency: Arc::new(Latency::new(strategy)),
        });
        // The reader future holds the `Inner` that holds it: the cycle ends
        // when the loop returns (the slot is emptied) or in `Owner::drop`.
        inner.reader.set(Box::pin(Arc::clone(&inner).read_loop(rd)));
        let reader = {
            let slot = Arc::clone(&inner.reader);
            tokio::spawn(std::future::poll_fn(move |cx| slot.poll(cx, true)))
        };
        let flusher = tokio::spawn(Arc::clone(&inner).flush_loop());
        Mux {
            owner: Arc::new(Owner {
                inner,
                tasks: [reader, flusher],
            }),
        }
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.owner.inner
    }

    /// Starts reading the trunk (no-op if already started).
    pub fn start(&self) {
        self.inner().started.cancel();
    }

    /// Calls `observe` with the connection id and announced payload length
    /// of every frame dropped from now on because its connection is not
    /// open (once per frame, in the trunk reader's task: it must not
    /// block), instead of logging a warning. The first observer set stays;
    /// returns `false` if one was set already.
    pub fn on_dropped_frame(
        &self,
        observe: impl Fn(ConnId, usize) + Send + Sync + 'static,
    ) -> bool {
        self.inner().counters.observe_drops(Box::new(observe))
    }

    /// Opens logical connection `id` on this side. Nothing is sent: the peer
    /// is assumed to open the same id.
    ///
    /// # Errors
    ///
    /// [`Error::ReservedConnId`] for id 0 and [`EXTENSION_CONN`], [`Error::AlreadyOpen`] if a
    /// [`MuxConn`] for `id` is alive, or the reason the trunk ended
    /// ([`Error::Closed`], [`Error::PeerClosed`], ...).
    pub fn open(&self, id: ConnId) -> Result<MuxConn, Error> {
        if id == RESERVED_CONN || id == EXTENSION_CONN {
            return Err(Error::ReservedConnId);
        }
        let inner = self.inner();
        let shared = {
            let mut map = lock(&inner.conns);
            if let Some(e) = inner.end_error() {
                return Err(e);
            }
            if map.contains_key(&id) {
                return Err(Error::AlreadyOpen { conn: id });
            }
            let shared = Arc::new(ConnShared {
                writer_drives: WriterDrives::default(),
                id,
                state: Mutex::new(ConnState::default()),
                sink: Mutex::new(None),
            });
            map.insert(id, Arc::clone(&shared));
            shared
        };
        Ok(MuxConn {
            h: Arc::new(ConnHandle {
                owner: Arc::clone(&self.owner),
                shared,
            }),
        })
    }

    /// Closes the trunk: the socket is shut down, every connection's reads
    /// return end of file once its buffered data is read, writes fail with
    /// [`Error::Closed`]. Bytes still waiting in the write backlog are
    /// discarded; flush connections first if they matter.
    pub fn close(&self) {
        self.inner().finish(End::Failed(Error::Closed));
    }

    /// Waits until the trunk has ended and tells why: `Ok(())` if the peer
    /// closed it cleanly (end of file at a frame boundary), otherwise the
    /// error ([`Error::Closed`] after [`close`](Self::close)).
    pub async fn closed(&self) -> Result<(), Error> {
        closed(self.inner()).await
    }

    /// Whether the trunk has ended.
    pub fn is_closed(&self) -> bool {
        self.inner().end.get().is_some()
    }

    /// A snapshot of the trunk's counters.
    pub fn stats(&self) -> MuxStats {
        self.inner().counters.snapshot()
    }
}

pub(crate) async fn closed(inner: &Inner) -> Result<(), Error> {
    inner.ended.cancelled().await;
    match inner.end.get() {
        Some(End::PeerEof) => Ok(()),
        Some(End::Failed(e)) => Err(e.clone()),
        None => Err(Error::Closed),
    }
}
