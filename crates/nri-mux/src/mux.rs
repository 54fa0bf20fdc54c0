//! Tokio driver around the [codec](crate::codec): one trunk socket, many
//! logical connections.

use std::collections::{HashMap, VecDeque};
use std::io::{self, IoSlice, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, TryLockError};
use std::task::{Context, Poll, Waker};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::UnixStream;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::codec::{Decoder, EXTENSION_CONN, Extension, MessageFrames, Piece, RESERVED_CONN};
use crate::spin::{Backoff, SpinState, SpinToken};
use crate::{ConnId, Error, MAX_PAYLOAD};

/// Per-connection read buffer limit. While a connection holds more than this
/// many received bytes that its owner has not read yet, the trunk reader
/// stops reading the socket (for all connections) until the owner catches up.
/// Data for an open connection is never dropped. One full-size message always
/// fits.
pub const READ_BUFFER_LIMIT: usize = MAX_PAYLOAD;

/// Write backlog limit. A write is accepted as long as fewer than this many
/// bytes wait for the trunk socket to become writable; beyond that writers
/// wait. The backlog can therefore reach this limit plus one message.
pub const WRITE_BACKLOG_LIMIT: usize = 256 * 1024;

/// Pause before retrying a blocked write when no writability watch could be
/// set up (see `Inner::wait_writable`).
const WRITE_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(1);

/// Read chunk size of the trunk reader.
const READ_CHUNK: usize = 64 * 1024;

/// How long the trunk reader polls for the rest of a message it got part
/// of before it parks (`Inner::read_rest`).
const REST_WAIT_NS: u64 = 20_000;

use crate::sync::lock;

fn push_waker(list: &mut Vec<Waker>, w: &Waker) {
    if !list.iter().any(|x| x.will_wake(w)) {
        list.push(w.clone());
    }
}

/// Why the trunk ended.
#[derive(Debug)]
enum End {
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

    /// What a [`ConnSink`] is told: `None` for a clean end (by the peer or
    /// locally), else the failure.
    fn sink_error(&self) -> Option<&Error> {
        match self {
            End::PeerEof | End::Failed(Error::Closed) => None,
            End::Failed(e) => Some(e),
        }
    }
}

/// Counters of a trunk, from [`Mux::stats`].
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct MuxStats {
    /// Frames read from the trunk (including dropped ones).
    pub frames_received: u64,
    /// Payload bytes read from the trunk (including dropped ones).
    pub bytes_received: u64,
    /// Messages written (each is one or two frames).
    pub messages_sent: u64,
    /// Frames written.
    pub frames_sent: u64,
    /// Frames dropped because their connection id was not open.
    pub dropped_frames: u64,
    /// Payload bytes of the dropped frames.
    pub dropped_bytes: u64,
    /// The last drop, as an [`Error::UnknownConn`].
    pub last_dropped: Option<Error>,
    /// Reads that found data while the reader spun instead of parking
    /// (see [`Mux::set_spin_budget`]).
    pub spin_hits: u64,
    /// Spins that used up their budget; the reader parked after them.
    pub spin_misses: u64,
    /// Reads that ended inside a message and found its rest while the
    /// reader polled briefly instead of parking.
    pub rest_hits: u64,
    /// Such polls that found nothing; the reader parked after them.
    pub rest_misses: u64,
    /// Times the trunk reader registered the socket with the reactor to
    /// park. Once for the trunk's life, except on a multi-thread runtime
    /// with spinning on: there the reader leaves the reactor while it polls
    /// (so that a worker parked in the reactor is not woken by data it
    /// reads itself) and registers again each time it parks after polling.
    pub reactor_registrations: u64,
    /// Wake hints written ([`Mux::send_wake_hint`]).
    pub wake_hints_sent: u64,
    /// Wake hints read (acted on or not).
    pub wake_hints_received: u64,
    /// Polls after a wake hint that read the announced message
    /// ([`Mux::accept_wake_hints`]).
    pub hint_hits: u64,
    /// Polls after a wake hint that used up the budget; the reader parked.
    pub hint_misses: u64,
}

#[derive(Default)]
struct Counters {
    frames_received: AtomicU64,
    bytes_received: AtomicU64,
    messages_sent: AtomicU64,
    frames_sent: AtomicU64,
    dropped_frames: AtomicU64,
    dropped_bytes: AtomicU64,
    last_dropped: Mutex<Option<Error>>,
    spin_hits: AtomicU64,
    spin_misses: AtomicU64,
    rest_hits: AtomicU64,
    rest_misses: AtomicU64,
    reactor_registrations: AtomicU64,
    wake_hints_sent: AtomicU64,
    wake_hints_received: AtomicU64,
    hint_hits: AtomicU64,
    hint_misses: AtomicU64,
}

#[derive(Default)]
struct WriteState {
    /// Bytes accepted but not yet written to the socket. Always ends at a
    /// message boundary, so new messages can be appended without
    /// interleaving.
    pending: BytesMut,
    /// Tasks waiting for the backlog to drain (writers over the limit,
    /// flushers).
    waiters: Vec<Waker>,
}

#[derive(Default)]
struct ConnState {
    queue: VecDeque<Bytes>,
    buffered: usize,
    waker: Option<Waker>,
    /// Set by the trunk reader when `buffered` went over the limit.
    over_limit: bool,
    read_closed: bool,
    write_closed: bool,
}

struct ConnShared {
    id: ConnId,
    /// Whoever writes on this connection drives the trunk reader while it
    /// waits for the answer ([`MuxWriteHalf::reader_driver`]): its writes
    /// need not wake the reader task to spin.
    writer_drives: AtomicBool,
    state: Mutex<ConnState>,
    /// Takes the connection's data in place of `state.queue` once set (see
    /// [`MuxReadHalf::into_sink`]).
    sink: Mutex<Option<Box<dyn ConnSink>>>,
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
    /// before it sleeps (see [`Mux::set_spin_budget`]). The default says no.
    fn holds_partial(&self) -> bool {
        false
    }
}

/// State shared by the handles and the two tasks.
struct Inner {
    /// Write half of the trunk; the read half is owned by the reader task.
    /// The trunk socket (non-blocking), written to directly. The reader
    /// task watches a duplicate of it registered with the reactor for
    /// readability only: were the socket registered for writability too (as
    /// a `tokio::net::UnixStream` is), every read by the peer would wake
    /// this side's reactor for nothing (the kernel reports write space on
    /// each read), doubling the wake-ups per round trip. Only a write that
    /// would block registers a short-lived writability watch
    /// (`wait_writable`). `None` only if the socket was lost while taking it
    /// over from tokio (the trunk then ends at once).
    stream: Option<StdUnixStream>,
    conns: Mutex<HashMap<ConnId, Arc<ConnShared>>>,
    write: Mutex<WriteState>,
    /// Wakes the flusher task when the backlog became non-empty.
    flush_needed: Notify,
    /// Wakes the trunk reader when a connection went below its read limit.
    read_space: Notify,
    /// Cancelled when the trunk has ended (`end` is set before).
    ended: CancellationToken,
    /// Cancelled when the reader may start.
    started: CancellationToken,
    end: OnceLock<End>,
    counters: Counters,
    /// Origin of the nanosecond times below.
    epoch: std::time::Instant,
    /// When this side last wrote a message (see `spin`); 0: never.
    last_write_ns: AtomicU64,
    /// The reader's spin budget in nanoseconds; 0: never spin.
    spin_budget_ns: AtomicU64,
    /// Set by the reader while it would spin for an answer: writers then
    /// tell it of each write (`wrote`), since a parked reader would not
    /// notice one.
    spin_wanted: AtomicBool,
    /// Wakes a parked reader after a write (see `spin_wanted`).
    wrote: Notify,
    /// Set with every write the reader should spin for (see `spin_wanted`):
    /// a reader polled by a driving writer sees it without being woken.
    spin_requested: AtomicBool,
    /// This side polls after a wake hint ([`Mux::accept_wake_hints`]).
    accepts_hints: AtomicBool,
    /// The peer said it polls after a wake hint.
    peer_accepts_hints: AtomicBool,
    /// The trunk reader, polled by its task or by a writer waiting for its
    /// answer (see [`ReaderDriver`]).
    reader: Mutex<Option<Pin<Box<dyn Future<Output = ()> + Send>>>>,
    /// The reader task's waker.
    reader_task: Mutex<Option<Waker>>,
    /// The waker of the writer driving the reader, if one is.
    drive_waker: Mutex<Option<Waker>>,
    /// Set when `reader_wake` woke the driving writer, cleared when the
    /// reader is polled.
    woke_driver: AtomicBool,
    /// The one waker the reader is polled with (see `poll_reader`).
    reader_wake: Waker,
    /// Told of every dropped frame ([`Mux::on_dropped_frame`]).
    drop_observer: OnceLock<DropObserver>,
}

/// What [`Mux::on_dropped_frame`] calls: the connection id and announced
/// payload length of a frame for a connection that is not open.
type DropObserver = Box<dyn Fn(ConnId, usize) + Send + Sync>;

/// Wakes whoever runs the trunk reader: the driving writer, else the
/// reader task. Holds the `Inner` weakly (the `Inner` holds it).
struct ReaderWake(std::sync::Weak<Inner>);

impl std::task::Wake for ReaderWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let Some(inner) = self.0.upgrade() else {
            return;
        };
        let driver = lock(&inner.drive_waker).clone();
        match driver {
            Some(w) => {
                inner.woke_driver.store(true, Ordering::SeqCst);
                w.wake();
            }
            None => inner.wake_reader_task(),
        }
    }
}

impl Inner {
    /// Nanoseconds since `epoch`, never 0.
    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos())
            .unwrap_or(u64::MAX)
            .saturating_add(1)
    }

    /// Completes at the next write the reader should spin for: at once if
    /// one came since the reader last looked (a driving writer sets the
    /// flag without waking anyone), else when a writer wakes it.
    async fn write_to_spin_for(&self) {
        let notified = self.wrote.notified();
        tokio::pin!(notified);
        std::future::poll_fn(|cx| {
            if self.spin_requested.swap(false, Ordering::AcqRel) {
                return Poll::Ready(());
            }
            match notified.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    self.spin_requested.store(false, Ordering::Relaxed);
                    Poll::Ready(())
                }
                Poll::Pending => Poll::Pending,
            }
        })
        .await
    }

    /// Polls the trunk reader for the reader task (`task`) or for a driving
    /// writer. `Ready` once the reader has ended.
    ///
    /// One poller at a time; the other returns `Pending`. The reader is
    /// always polled with the same waker (`ReaderWake`), which wakes the
    /// writer that is driving it, if any, and the reader task otherwise; a
    /// writer that stops driving ([`Self::stop_driving`]) passes on to the
    /// task a wake-up it took without polling the reader for it.
    fn poll_reader(&self, cx: &mut Context<'_>, task: bool) -> Poll<()> {
        {
            let slot = if task {
                &self.reader_task
            } else {
                &self.drive_waker
            };
            let mut w = lock(slot);
            if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *w = Some(cx.waker().clone());
            }
        }
        let mut slot = match self.reader.try_lock() {
            Ok(slot) => slot,
            Err(TryLockError::WouldBlock) => return Poll::Pending,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
        };
        let Some(reader) = slot.as_mut() else {
            return Poll::Ready(());
        };
        self.woke_driver.store(false, Ordering::SeqCst);
        match reader
            .as_mut()
            .poll(&mut Context::from_waker(&self.reader_wake))
        {
            Poll::Ready(()) => {
                *slot = None;
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    }

    /// A writer stops driving the reader: wake-ups go to the reader task
    /// again, and one that reached the writer since it last polled the
    /// reader is passed on.
    fn stop_driving(&self) {
        lock(&self.drive_waker).take();
        if self.woke_driver.swap(false, Ordering::SeqCst) {
            self.wake_reader_task();
        }
    }

    fn wake_reader_task(&self) {
        if let Some(w) = lock(&self.reader_task).as_ref() {
            w.wake_by_ref();
        }
    }

    /// Polls the trunk without parking until `deadline` (see `spin`),
    /// giving the CPU to other threads between polls ([`Self::poll_until`]).
    fn spin_read(
        &self,
        watch: &mut ReadWatch,
        chunk: &mut [u8],
        deadline: u64,
        (hits, misses): (&AtomicU64, &AtomicU64),
    ) -> SpinOutcome {
        let Some(_token) = SpinToken::acquire() else {
            return SpinOutcome::Busy;
        };
        match self.poll_until(watch, chunk, deadline, hits, misses) {
            Some(r) => SpinOutcome::Read(r),
            None => SpinOutcome::Missed,
        }
    }

    /// Polls for the rest of a message the peer is in the middle of
    /// writing, for up to [`REST_WAIT_NS`] ([`Self::poll_until`]).
    ///
    /// Peers write a message in pieces (Go's mux writes each frame's header
    /// and payload separately, and its ttRPC splits a message into frames
    /// of 4 KiB), and a reader woken by the first piece can preempt the
    /// writer on its own CPU. Parking then costs a second wake-up for the
    /// rest; yielding lets the writer finish instead.
    fn read_rest(&self, watch: &mut ReadWatch, chunk: &mut [u8]) -> Option<io::Result<usize>> {
        let _token = SpinToken::acquire()?;
        let deadline = self.now_ns().saturating_add(REST_WAIT_NS);
        let c = &self.counters;
        self.poll_until(watch, chunk, deadline, &c.rest_hits, &c.rest_misses)
    }

    /// Reads the trunk without parking until data (or end of file, or an
    /// error) comes or `deadline` passes (`None`; also when the trunk has
    /// ended), calling `sched_yield` between reads. Counts a read that got
    /// data in `hits`, a deadline that passed in `misses`.
    ///
    /// It does not return to the tokio scheduler between polls: on a
    /// multi-thread runtime every `yield_now` re-queues the task and wakes
    /// a parked worker to steal it, and that worker then competes with the
    /// plugins for the CPUs (measured: CreateContainer through 4 plugins
    /// 333 -> 252 us, see docs/runtime/spinning.md), and a writer this
    /// reader preempted gets its CPU back only through the OS. The price:
    /// the poll holds its worker thread until the deadline at most, so a
    /// task queued behind it waits that long.
    fn poll_until(
        &self,
        watch: &mut ReadWatch,
        chunk: &mut [u8],
        deadline: u64,
        hits: &AtomicU64,
        misses: &AtomicU64,
    ) -> Option<io::Result<usize>> {
        // Out of the reactor while polling (see `ReadWatch`).
        watch.leave_reactor();
        let mut rd = watch.stream();
        loop {
            match rd.read(chunk) {
                Ok(n) => {
                    hits.fetch_add(1, Ordering::Relaxed);
                    return Some(Ok(n));
                }
                Err(e) if retry_read(&e) => {}
                Err(e) => return Some(Err(e)),
            }
            if self.now_ns() >= deadline || self.ended.is_cancelled() {
                misses.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            std::thread::yield_now();
        }
    }

    fn finish(&self, end: End) {
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

    fn socket(&self) -> io::Result<&StdUnixStream> {
        self.stream
            .as_ref()
            .ok_or_else(|| io::ErrorKind::NotConnected.into())
    }

    fn end_error(&self) -> Option<Error> {
        self.end.get().map(End::error)
    }

    /// Reports a dropped frame (once per frame, with its announced length;
    /// the rest of a frame handed out in pieces goes without a word).
    fn drop_frame(&self, conn: ConnId, len: usize, first: bool) {
        if !first {
            return;
        }
        match self.drop_observer.get() {
            // The observer reports it, knowing who the peer is.
            Some(observe) => {
                tracing::debug!(
                    conn = conn.0,
                    len,
                    "mux: dropping frame for a connection that is not open"
                );
                observe(conn, len);
            }
            None => tracing::warn!(
                conn = conn.0,
                len,
                "mux: dropping frame for a connection that is not open"
            ),
        }
        let c = &self.counters;
        c.dropped_frames.fetch_add(1, Ordering::Relaxed);
        c.dropped_bytes.fetch_add(len as u64, Ordering::Relaxed);
        *lock(&c.last_dropped) = Some(Error::UnknownConn { conn, len });
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
            tracing::debug!(
                conn = id.0,
                "mux: connection read buffer full, pausing the trunk reader"
            );
            loop {
                let notified = self.read_space.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                {
                    let st = lock(&conn.state);
                    if !st.over_limit || st.read_closed {
                        break;
                    }
                }
                if Arc::strong_count(&conn) == 1 {
                    // The connection was closed and removed from the map.
                    break;
                }
                tokio::select! {
                    biased;
                    _ = self.ended.cancelled() => return false,
                    _ = notified => {}
                }
            }
        }
        true
    }

    #[allow(clippy::too_many_lines)]
    async fn read_loop(self: Arc<Self>, rd: io::Result<StdUnixStream>) {
        // One cancellation future for the whole loop, not one per turn.
        let ended = self.ended.cancelled();
        tokio::pin!(ended);
        tokio::select! {
            biased;
            _ = &mut ended => return,
            _ = self.started.cancelled() => {}
        }
        let multi_thread = matches!(
            tokio::runtime::Handle::current().runtime_flavor(),
            tokio::runtime::RuntimeFlavor::MultiThread
        );
        let mut watch = match rd {
            Ok(sock) => ReadWatch::new(sock, multi_thread),
            Err(e) => return self.finish(End::Failed(Error::io("duplicate trunk socket", e))),
        };
        let mut buf = BytesMut::with_capacity(READ_CHUNK);
        // Reads land here first (initialized once), then are appended to
        // `buf`: safe code cannot read into `buf`'s uninitialized capacity.
        let mut chunk = vec![0u8; READ_CHUNK];
        let mut dec = Decoder::new();
        let mut spin = SpinState::new();
        let mut spin_budget = 0;
        // Whether the last message delivered to a sink is unfinished.
        let mut partial = false;
        // Whether the rest of the frame being read is dropped.
        let mut dropping = false;
        // When the last wake hint came, if no message came after it.
        let mut hinted: Option<u64> = None;
        // How often a hint is polled after. Unlike a spin after a write, a
        // late hit counts as a hit: this side wrote nothing, the message it
        // polls for comes when the sender gets to it.
        let mut hints = Backoff::default();
        loop {
            loop {
                // Frames longer than a read come in pieces as they arrive:
                // no frame is held whole, and one nobody takes is dropped
                // piece by piece.
                match dec.decode_piece(&mut buf, READ_CHUNK) {
                    Ok(Some(piece)) => {
                        let c = &self.counters;
                        if piece.first {
                            c.frames_received.fetch_add(1, Ordering::Relaxed);
                        }
                        c.bytes_received
                            .fetch_add(piece.data.len() as u64, Ordering::Relaxed);
                        if piece.conn == EXTENSION_CONN {
                            if piece.first && piece.last && self.on_extension(&piece.data) {
                                hinted = Some(self.now_ns());
                            }
                            continue;
                        }
                        hinted = None;
                        if spin_budget > 0 && piece.first {
                            let last_write = self.last_write_ns.load(Ordering::Relaxed);
                            spin.on_message(self.now_ns(), last_write);
                        }
                        if piece.data.len() > READ_CHUNK {
                            buf = release_large_buffer(buf);
                        }
                        if !self.deliver(piece, &mut partial, &mut dropping).await {
                            return;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => return self.finish(End::Failed(e)),
                }
            }
            let budget = self.spin_budget_ns.load(Ordering::Relaxed);
            if budget != spin_budget {
                spin_budget = budget;
                spin.set_budget(std::time::Duration::from_nanos(budget));
            }
            // Mid-message (a frame, or a connection's message, came in
            // part): the peer is writing the rest right now.
            let mid_message = spin_budget > 0 && (partial || !buf.is_empty() || dec.is_mid_frame());
            let mut spun = if mid_message {
                self.read_rest(&mut watch, &mut chunk)
            } else {
                None
            };
            // A wake hint and nothing after it: the message it announced is
            // on its way.
            if let Some(at) = hinted.take()
                && spin_budget > 0
                && !mid_message
                && hints.take()
            {
                let deadline = at.saturating_add(spin_budget);
                let c = &self.counters;
                match self.spin_read(
                    &mut watch,
                    &mut chunk,
                    deadline,
                    (&c.hint_hits, &c.hint_misses),
                ) {
                    SpinOutcome::Read(r) => {
                        hints.hit();
                        spun = Some(r);
                    }
                    SpinOutcome::Missed => hints.miss(),
                    SpinOutcome::Busy => {}
                }
            }
            if spun.is_none() {
                let last_write = self.last_write_ns.load(Ordering::Relaxed);
                // No clock read on this path while spinning is off.
                let deadline = if spin_budget > 0 {
                    spin.deadline(self.now_ns(), last_write)
                } else {
                    None
                };
                spun = match deadline {
                    Some(deadline) => match self.spin_read(
                        &mut watch,
                        &mut chunk,
                        deadline,
                        (&self.counters.spin_hits, &self.counters.spin_misses),
                    ) {
                        SpinOutcome::Read(r) => {
                            let waited = self.now_ns().saturating_sub(last_write);
                            spin.on_spin(true, waited);
                            Some(r)
                        }
                        SpinOutcome::Missed => {
                            spin.on_spin(false, 0);
                            None
                        }
                        SpinOutcome::Busy => None,
                    },
                    None => None,
                };
            }
            let wanted = spin.wants_next_write();
            self.spin_wanted.store(wanted, Ordering::Relaxed);
            if !wanted {
                self.spin_requested.store(false, Ordering::Relaxed);
            }
            let res = match spun {
                Some(r) => r,
                None => tokio::select! {
                    biased;
                    _ = &mut ended => return,
                    // A write while parked: go back and spin for the answer.
                    () = self.write_to_spin_for(), if wanted => continue,
                    r = watch.read(&mut chunk, &self.counters.reactor_registrations) => r,
                },
            };
            match res {
                Ok(0) => {
                    let end = match dec.check_eof(&buf) {
                        Ok(()) => End::PeerEof,
                        Err(e) => End::Failed(e),
                    };
                    return self.finish(end);
                }
                Ok(n) => buf.extend_from_slice(chunk.get(..n).unwrap_or_default()),
                Err(e) => return self.finish(End::Failed(Error::io("read from trunk", e))),
            }
        }
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
                tokio::time::sleep(WRITE_RETRY_PAUSE).await;
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

    async fn flush_loop(self: Arc<Self>) {
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

    fn write_message(
        &self,
        id: ConnId,
        writer_drives: bool,
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

        let spin_wanted = self.spin_wanted.load(Ordering::Relaxed);
        if self.spin_budget_ns.load(Ordering::Relaxed) > 0 {
            self.last_write_ns
                .fetch_max(self.now_ns(), Ordering::Relaxed);
        }
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
        if spin_wanted {
            self.spin_requested.store(true, Ordering::Release);
            if !writer_drives {
                self.wrote.notify_one();
            }
        }
        let c = &self.counters;
        c.messages_sent.fetch_add(1, Ordering::Relaxed);
        c.frames_sent.fetch_add(frames, Ordering::Relaxed);
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

    /// Takes an extension frame read from the trunk. Returns whether it is
    /// a wake hint to act on.
    fn on_extension(&self, payload: &[u8]) -> bool {
        let c = &self.counters;
        match Extension::from_payload(payload) {
            Some(Extension::WakeHintsAccepted) => {
                self.peer_accepts_hints.store(true, Ordering::Relaxed);
                false
            }
            Some(Extension::WakeHint) => {
                c.wake_hints_received.fetch_add(1, Ordering::Relaxed);
                self.accepts_hints.load(Ordering::Relaxed)
            }
            // A later extension we do not know: ignored, as Go peers
            // ignore all of them.
            _ => {
                tracing::debug!(
                    len = payload.len(),
                    "mux: ignoring an unknown extension frame"
                );
                false
            }
        }
    }

    /// Writes an extension frame. With `or_queue`, a frame the socket does
    /// not take at once is queued behind the backlog like a message;
    /// without, it is written only if it goes out at once and whole (a wake
    /// hint is worth nothing late). Returns whether it was written or
    /// queued.
    fn write_extension(&self, ext: Extension, or_queue: bool) -> bool {
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

    fn poll_flush(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
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

/// How a spin of the trunk reader ended.
enum SpinOutcome {
    /// Data (or end of file, or an error) arrived while spinning.
    Read(io::Result<usize>),
    /// The budget ran out.
    Missed,
    /// Another reader of the process is spinning; this one did not.
    Busy,
}

/// A descriptor owned elsewhere, registered with the reactor without
/// being closed by it (see [`ReadWatch`]).
#[derive(Debug)]
struct FdRef(RawFd);

impl AsRawFd for FdRef {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// The trunk reader's socket and its registration with the reactor, made
/// when the reader parks.
///
/// On a multi-thread runtime the registration is dropped while the reader
/// polls the socket itself (spin, rest of a message): the socket stays in
/// the reactor's epoll set otherwise, and every message arriving then wakes
/// whichever worker is parked in the reactor, which finds nothing to do
/// (the poller reads the data) after costing a cross-CPU wake-up, paid in
/// the peer's write (measured: CreateContainer through 4 no-op plugins,
/// plugin CPU per event 135 -> 85 us, median 210 -> 174 us; see
/// docs/runtime/spinning.md). On a current-thread runtime the one thread
/// that could be parked in the reactor is the one polling, so the
/// registration stays.
#[derive(Debug)]
struct ReadWatch {
    /// Declared before `sock` so it is dropped (deregistered) first.
    reg: Option<AsyncFd<FdRef>>,
    sock: StdUnixStream,
    /// Whether polling leaves the reactor (multi-thread runtimes).
    leave_to_poll: bool,
}

impl ReadWatch {
    fn new(sock: StdUnixStream, leave_to_poll: bool) -> ReadWatch {
        ReadWatch {
            reg: None,
            sock,
            leave_to_poll,
        }
    }

    fn stream(&self) -> &StdUnixStream {
        &self.sock
    }

    /// Called before polling the socket without parking.
    fn leave_reactor(&mut self) {
        if self.leave_to_poll {
            self.reg = None;
        }
    }

    /// Registers `sock` for readability unless `reg` holds its
    /// registration.
    #[allow(unsafe_code)]
    fn ensure_registered<'r>(
        reg: &'r mut Option<AsyncFd<FdRef>>,
        sock: &StdUnixStream,
        counter: &AtomicU64,
    ) -> io::Result<&'r AsyncFd<FdRef>> {
        if let Some(r) = reg {
            return Ok(r);
        }
        let fd = FdRef(sock.as_raw_fd());
        // SAFETY: `fd` is `sock`'s descriptor, open for as long as `sock`
        // lives; the registration is dropped before `sock` (field order,
        // and `leave_reactor` only drops it) and `sock` is never replaced,
        // so the registered descriptor stays the same open socket for the
        // registration's whole life.
        let r = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
            .map_err(io::Error::from)?;
        counter.fetch_add(1, Ordering::Relaxed);
        Ok(reg.insert(r))
    }

    /// One read from the trunk, waiting for readability as needed. When the
    /// socket cannot be registered (the reactor is out of memory or epoll
    /// watches) it tries again every `WRITE_RETRY_PAUSE`, reading the
    /// socket in between, rather than end the trunk.
    async fn read(&mut self, chunk: &mut [u8], registrations: &AtomicU64) -> io::Result<usize> {
        loop {
            let reg = match Self::ensure_registered(&mut self.reg, &self.sock, registrations) {
                Ok(reg) => reg,
                Err(e) => {
                    tracing::debug!(error = %e, "mux: cannot watch the trunk, polling it");
                    tokio::time::sleep(WRITE_RETRY_PAUSE).await;
                    match (&self.sock).read(chunk) {
                        Err(e) if retry_read(&e) => continue,
                        r => return r,
                    }
                }
            };
            let mut guard = reg.readable().await?;
            match (&self.sock).read(chunk) {
                Ok(n) => {
                    // A stream socket gives all it has: a short read means it
                    // is drained, so wait for the next readiness event rather
                    // than read again just to get `EAGAIN` (one `recvfrom`
                    // per burst). The reactor's tick keeps this safe against
                    // data that arrived meanwhile.
                    if n > 0 && n < chunk.len() {
                        guard.clear_ready();
                    }
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => guard.clear_ready(),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// Whether a failed non-blocking read is worth trying again.
fn retry_read(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
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

/// Owns the tasks; dropping the last one (held by the [`Mux`] and every
/// [`MuxConn`]) closes the trunk.
struct Owner {
    inner: Arc<Inner>,
    tasks: [JoinHandle<()>; 2],
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.inner.finish(End::Failed(Error::Closed));
        // The reader future holds the `Inner` that holds it: drop it now
        // unless it is being polled (then that poll sees the end and lets
        // go of it), and wake the reader task, which ends once the future
        // is gone or has returned. The task is not aborted: a task aborted
        // while another thread polls the reader would leave the cycle.
        if let Ok(mut slot) = self.inner.reader.try_lock() {
            drop(slot.take());
        }
        self.inner.wake_reader_task();
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
    owner: Arc<Owner>,
}

impl std::fmt::Debug for Mux {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mux")
            .field("ended", &self.owner.inner.end.get())
            .finish_non_exhaustive()
    }
}

impl Mux {
    /// Starts multiplexing over `stream`.
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
        let m = Mux::new_paused(stream);
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
        let inner = Arc::new_cyclic(|weak| Inner {
            stream,
            conns: Mutex::new(HashMap::new()),
            write: Mutex::new(WriteState::default()),
            flush_needed: Notify::new(),
            read_space: Notify::new(),
            ended: CancellationToken::new(),
            started: CancellationToken::new(),
            end: OnceLock::new(),
            counters: Counters::default(),
            epoch: std::time::Instant::now(),
            last_write_ns: AtomicU64::new(0),
            spin_budget_ns: AtomicU64::new(0),
            spin_wanted: AtomicBool::new(false),
            wrote: Notify::new(),
            spin_requested: AtomicBool::new(false),
            accepts_hints: AtomicBool::new(false),
            peer_accepts_hints: AtomicBool::new(false),
            reader: Mutex::new(None),
            reader_task: Mutex::new(None),
            drive_waker: Mutex::new(None),
            woke_driver: AtomicBool::new(false),
            reader_wake: Waker::from(Arc::new(ReaderWake(weak.clone()))),
            drop_observer: OnceLock::new(),
        });
        // The reader future holds the `Inner` that holds it: the cycle ends
        // when the loop returns (the slot is emptied) or in `Owner::drop`.
        *lock(&inner.reader) = Some(Box::pin(Arc::clone(&inner).read_loop(rd)));
        let reader = {
            let inner = Arc::clone(&inner);
            tokio::spawn(std::future::poll_fn(move |cx| inner.poll_reader(cx, true)))
        };
        let flusher = tokio::spawn(Arc::clone(&inner).flush_loop());
        Mux {
            owner: Arc::new(Owner {
                inner,
                tasks: [reader, flusher],
            }),
        }
    }

    /// Tells the peer that this side acts on wake hints, and from now on
    /// acts on them: after a [`Extension::WakeHint`] with nothing after it,
    /// the trunk reader polls for the announced message for up to the spin
    /// budget ([`Self::set_spin_budget`]; nothing happens without one)
    /// before it parks, giving the CPU to other threads between polls.
    /// Polls that run out make polling after later hints rarer (down to
    /// one hint in 64), polls that see the message more frequent again.
    /// Counted as [`MuxStats::hint_hits`] and [`MuxStats::hint_misses`].
    ///
    /// Wake hints are our extension of the wire (frames on
    /// [`EXTENSION_CONN`]); a Go peer reads the announcement and drops it,
    /// and never sends hints. Call it before the first message, so that
    /// the announcement comes first. Returns `false` if the trunk has ended.
    pub fn accept_wake_hints(&self) -> bool {
        let inner = &self.owner.inner;
        inner.accepts_hints.store(true, Ordering::Relaxed);
        inner.write_extension(Extension::WakeHintsAccepted, true)
    }

    /// Whether the peer said it acts on wake hints
    /// ([`Self::accept_wake_hints`]), as far as the trunk reader has read.
    pub fn peer_accepts_wake_hints(&self) -> bool {
        self.owner.inner.peer_accepts_hints.load(Ordering::Relaxed)
    }

    /// Tells the peer that a message for it is on its way soon (for the
    /// runtime: the plugin after the one it is calling now), so that it
    /// can poll instead of going to sleep and be running when the message
    /// comes, instead of paying a wake-up then. Sends nothing, and returns
    /// `false`, unless the peer [accepts hints](Self::peer_accepts_wake_hints);
    /// a hint that the socket does not take at once, whole, is not sent
    /// either (it never waits).
    pub fn send_wake_hint(&self) -> bool {
        let inner = &self.owner.inner;
        if !inner.peer_accepts_hints.load(Ordering::Relaxed) {
            return false;
        }
        let sent = inner.write_extension(Extension::WakeHint, false);
        if sent {
            inner
                .counters
                .wake_hints_sent
                .fetch_add(1, Ordering::Relaxed);
        }
        sent
    }

    /// Starts reading the trunk (no-op if already started).
    pub fn start(&self) {
        self.owner.inner.started.cancel();
    }

    /// Lets the trunk reader poll for the peer's answer for up to `budget`
    /// after this side writes a message, instead of parking at once. Zero
    /// (the default) turns it off.
    ///
    /// Parking costs a wake-up per message (tens of microseconds when the
    /// CPU it runs on has gone idle, as on a quiet virtual machine); a
    /// spinning reader sees the answer as it arrives. The price is CPU
    /// while spinning, at most `budget` per message written. The reader
    /// adapts: each spin that runs out halves how often it spins (down to
    /// after one write in 64), each spin that sees data doubles it (up to
    /// every write), so a slow peer, or a side that gets messages only now
    /// and then, costs at most 1/64 of the budget per message. At most one
    /// reader of the process spins at a time. Between polls it gives the
    /// CPU to other threads but keeps its tokio worker thread (returning to
    /// the scheduler would wake another worker each time): a task queued
    /// behind the spinning reader on that worker waits up to the budget.
    /// [`MuxStats`] counts hits and misses.
    ///
    /// With a budget set, a read that ends inside a message (a frame came
    /// in part, or a [`ConnSink`] [holds part](ConnSink::holds_partial) of
    /// a message) also makes the reader poll for the rest for up to 20 µs,
    /// giving up the CPU between polls, before it parks: the peer is in the
    /// middle of writing it (Go's mux writes each header and payload
    /// separately), and the reader may have preempted it. Counted as
    /// [`MuxStats::rest_hits`] and [`MuxStats::rest_misses`].
    pub fn set_spin_budget(&self, budget: std::time::Duration) {
        let ns = u64::try_from(budget.as_nanos()).unwrap_or(u64::MAX);
        self.owner.inner.spin_budget_ns.store(ns, Ordering::Relaxed);
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
        self.owner
            .inner
            .drop_observer
            .set(Box::new(observe))
            .is_ok()
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
        let inner = &self.owner.inner;
        let shared = {
            let mut map = lock(&inner.conns);
            if let Some(e) = inner.end_error() {
                return Err(e);
            }
            if map.contains_key(&id) {
                return Err(Error::AlreadyOpen { conn: id });
            }
            let shared = Arc::new(ConnShared {
                writer_drives: AtomicBool::new(false),
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
        self.owner.inner.finish(End::Failed(Error::Closed));
    }

    /// Waits until the trunk has ended and tells why: `Ok(())` if the peer
    /// closed it cleanly (end of file at a frame boundary), otherwise the
    /// error ([`Error::Closed`] after [`close`](Self::close)).
    pub async fn closed(&self) -> Result<(), Error> {
        closed(&self.owner.inner).await
    }

    /// Whether the trunk has ended.
    pub fn is_closed(&self) -> bool {
        self.owner.inner.end.get().is_some()
    }

    /// A snapshot of the trunk's counters.
    pub fn stats(&self) -> MuxStats {
        let c = &self.owner.inner.counters;
        MuxStats {
            frames_received: c.frames_received.load(Ordering::Relaxed),
            bytes_received: c.bytes_received.load(Ordering::Relaxed),
            messages_sent: c.messages_sent.load(Ordering::Relaxed),
            frames_sent: c.frames_sent.load(Ordering::Relaxed),
            dropped_frames: c.dropped_frames.load(Ordering::Relaxed),
            dropped_bytes: c.dropped_bytes.load(Ordering::Relaxed),
            last_dropped: lock(&c.last_dropped).clone(),
            spin_hits: c.spin_hits.load(Ordering::Relaxed),
            spin_misses: c.spin_misses.load(Ordering::Relaxed),
            rest_hits: c.rest_hits.load(Ordering::Relaxed),
            rest_misses: c.rest_misses.load(Ordering::Relaxed),
            reactor_registrations: c.reactor_registrations.load(Ordering::Relaxed),
            wake_hints_sent: c.wake_hints_sent.load(Ordering::Relaxed),
            wake_hints_received: c.wake_hints_received.load(Ordering::Relaxed),
            hint_hits: c.hint_hits.load(Ordering::Relaxed),
            hint_misses: c.hint_misses.load(Ordering::Relaxed),
        }
    }
}

async fn closed(inner: &Inner) -> Result<(), Error> {
    inner.ended.cancelled().await;
    match inner.end.get() {
        Some(End::PeerEof) => Ok(()),
        Some(End::Failed(e)) => Err(e.clone()),
        None => Err(Error::Closed),
    }
}

/// Keeps a connection registered; removes it when the last half is dropped.
struct ConnHandle {
    owner: Arc<Owner>,
    shared: Arc<ConnShared>,
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
    fn inner(&self) -> &Inner {
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
        let drives = self.shared.writer_drives.load(Ordering::Relaxed);
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
    h: Arc<ConnHandle>,
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
    /// A handle for the writer to drive the trunk reader while it waits for
    /// the answer to what it wrote (see [`ReaderDriver`]). From then on
    /// writes on this connection no longer wake the reader task to spin:
    /// the writer is expected to poll the reader itself.
    pub fn reader_driver(&self) -> ReaderDriver {
        self.h.shared.writer_drives.store(true, Ordering::Relaxed);
        ReaderDriver {
            h: Arc::clone(&self.h),
        }
    }
}

/// Lets a writer waiting for an answer run the trunk reader in its own
/// task ([`poll`](Self::poll)) instead of being woken by the reader task:
/// the reader spins for the answer, reads it and hands it to the
/// connection's sink (which wakes nobody: the writer is running), all in
/// the writer's poll. On a multi-thread runtime this saves the hand-off of
/// every answer from the reader task to the waiting writer, which tokio
/// may run on another worker.
///
/// Contract: a writer that polled the reader must call
/// [`done`](Self::done) when it stops waiting (answer received, timeout,
/// cancellation): until then the reader's wake-ups go to that writer, not
/// to the reader task.
#[derive(Clone)]
pub struct ReaderDriver {
    h: Arc<ConnHandle>,
}

impl std::fmt::Debug for ReaderDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReaderDriver")
            .field("conn", &self.h.shared.id)
            .finish_non_exhaustive()
    }
}

impl ReaderDriver {
    /// Polls the trunk reader with the caller's context, unless the reader
    /// task (or another writer) is polling it right now. Whatever arrives
    /// is delivered as usual; the caller learns of its answer from its own
    /// channel.
    pub fn poll(&self, cx: &mut Context<'_>) {
        let _ = self.h.inner().poll_reader(cx, false);
    }

    /// Tells the reader that this writer no longer waits (call it after
    /// [`poll`](Self::poll), once per wait).
    pub fn done(&self) {
        self.h.inner().stop_driving();
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
