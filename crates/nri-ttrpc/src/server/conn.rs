//! One served connection: the feed of its bytes, its handlers and the
//! writer of its answers.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use nri_mux::sync::lock;
use tokio::io::AsyncWrite;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Server;
use super::service::{BoxFuture, HandlerResult, HandlerSlot, RequestContext, Service, SlotPool};
use crate::client::write_message;
use crate::codec::{self, MessageType};
use crate::error::Error;
use crate::io::{Frames, ReadEvent};
use crate::proto::{Code, Response, Status};

/// What a connection's frames are handled with.
pub(super) struct ConnCx {
    pub(super) conn: Arc<ConnWriter>,
    pub(super) spawn: Spawn,
    pub(super) slots: Arc<SlotPool>,
    /// Requests whose answer has not been written yet.
    pub(super) in_flight: Arc<AtomicUsize>,
}

/// One request counted in flight until dropped (with its answer written,
/// or its task aborted).
pub(super) struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    pub(super) fn enter(counter: &Arc<AtomicUsize>) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        InFlight(Arc::clone(counter))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Where a connection's handlers that do not finish in their first poll
/// go: the connection's task (see [`Server::serve_fed`]). Once that task
/// has ended the connection is closing, and such a handler is dropped.
pub(super) type Spawn = mpsc::UnboundedSender<BoxFuture<'static, ()>>;

/// Polls `fut` once right here and spawns it (see [`Spawn`]) only if it is
/// not finished: most handlers answer at once, and then the request costs
/// no task and no hand-off.
///
/// The first poll uses a no-op waker. A future that is pending has
/// registered that waker somewhere; the spawned task polls it again at once
/// with its own waker, which replaces it (every future re-registers its
/// waker on each poll), so no wake-up is lost.
pub(super) fn spawn_polled<F>(tasks: &Spawn, fut: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let mut fut = Box::pin(fut);
    let mut cx = Context::from_waker(Waker::noop());
    if fut.as_mut().poll(&mut cx).is_pending() {
        let _ = tasks.send(fut);
    }
}

/// Feeds a connection served by [`Server::serve_fed`] the bytes it
/// receives.
///
/// Sans-io and synchronous: [`data`](Self::data) decodes the requests the
/// bytes complete and starts each handler on the spot (a handler that
/// answers at once is done before `data` returns). Dropping the feed ends
/// the connection as a clean end of stream would.
pub struct ServerFeed {
    pub(super) server: Server,
    pub(super) frames: Frames,
    pub(super) last_stream_id: u32,
    pub(super) cx: ConnCx,
    /// `None` once the end was reported.
    pub(super) end: Option<oneshot::Sender<Result<(), Error>>>,
}

impl std::fmt::Debug for ServerFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerFeed")
            .field("buffered", &self.frames.buffered())
            .field("ended", &self.end.is_none())
            .finish_non_exhaustive()
    }
}

impl ServerFeed {
    /// Whether the feed holds the start of a frame whose rest has not come
    /// yet (`false` between frames).
    pub fn is_mid_frame(&self) -> bool {
        self.frames.is_mid_frame()
    }

    /// The connection's next bytes. A corrupt stream ends the connection
    /// with that error ([`Server`] lists what is answered and what is
    /// fatal); later data is ignored.
    pub fn data(&mut self, bytes: &[u8]) {
        if self.end.is_none() {
            return;
        }
        self.frames.push(bytes);
        loop {
            match self.frames.next_event() {
                Ok(None) => return,
                Ok(Some(ev)) => self.handle(ev),
                Err(e) => return self.finish(Err(e)),
            }
        }
    }

    /// One decoded event of the connection.
    pub(super) fn handle(&mut self, ev: ReadEvent) {
        if self.end.is_none() {
            return;
        }
        match ev {
            ReadEvent::Frame(frame) => {
                if let Err(e) = self
                    .server
                    .on_frame(frame, &mut self.last_stream_id, &self.cx)
                {
                    tracing::debug!(error = %e, "ttrpc server: closing the connection");
                    self.finish(Err(e));
                }
            }
            ReadEvent::Rejected(err) => self.server.on_rejected(err, &self.cx),
            ReadEvent::Eof => self.finish(Ok(())),
        }
    }

    /// The connection ended: `None` for a clean end (a request cut short
    /// is reported as truncated), else the transport's error (a peer that
    /// went away is a clean end, as for [`Server::serve`]).
    pub fn end(&mut self, error: Option<std::io::Error>) {
        let result = match error {
            None => self.frames.end_of_stream().map(|_| ()),
            Some(source) if is_peer_gone(&source) => Ok(()),
            Some(source) => Err(Error::Io { source }),
        };
        self.finish(result);
    }

    pub(super) fn finish(&mut self, result: Result<(), Error>) {
        self.frames.clear();
        if let Some(end) = self.end.take() {
            let _ = end.send(result);
        }
    }
}

impl Drop for ServerFeed {
    fn drop(&mut self) {
        self.finish(Ok(()));
    }
}

/// Starts the handler of a call (`method` is `ctx`'s method), its future
/// in `slot`.
pub(super) fn start_handler(
    service: &dyn Service,
    ctx: RequestContext,
    method: &str,
    payload: Bytes,
    slot: &mut HandlerSlot,
) -> Result<(), Panicked> {
    std::panic::catch_unwind(AssertUnwindSafe(|| {
        service.call_in(ctx, method, payload, slot);
    }))
    .map_err(|_| Panicked)
}

/// Runs the handler started in `slot` to its end, or until
/// [`DEADLINE_GRACE`](crate::DEADLINE_GRACE) after its deadline.
pub(super) async fn run_handler(
    slot: &mut HandlerSlot,
    deadline: Option<Instant>,
    method: &str,
) -> HandlerResult {
    let fut = CatchUnwind { fut: slot };
    let res = match deadline {
        None => fut.await,
        Some(d) => {
            let mut fut = std::pin::pin!(fut);
            // Poll once before arming the deadline timer: a handler that
            // answers at once needs no timer. A deadline that has already
            // passed still lets a ready handler answer, as `timeout_at`
            // (which polls its future first) does.
            let first = std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await;
            match first {
                Poll::Ready(r) => r,
                Poll::Pending => {
                    match tokio::time::timeout_at(d + crate::DEADLINE_GRACE, fut).await {
                        Ok(r) => r,
                        Err(_elapsed) => {
                            tracing::debug!(method = %method, "ttrpc server: handler deadline exceeded");
                            return Err(Status::new(
                                Code::DeadlineExceeded,
                                format!("method {method}: deadline exceeded"),
                            ));
                        }
                    }
                }
            }
        }
    };
    res.map_err(|Panicked| panicked(method))?
}

pub(super) fn panicked(method: &str) -> Status {
    tracing::error!(method, "ttrpc server: handler panicked");
    Status::new(Code::Internal, format!("method {method}: handler panicked"))
}

/// A handler future panicked.
pub(super) struct Panicked;

/// Catches a panic inside a handler future (turned into an `INTERNAL`
/// status by [`run_handler`]).
pub(super) struct CatchUnwind<'a> {
    fut: &'a mut HandlerSlot,
}

impl Future for CatchUnwind<'_> {
    type Output = Result<HandlerResult, Panicked>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let fut = &mut *self.fut;
        match std::panic::catch_unwind(AssertUnwindSafe(|| Pin::new(fut).poll(cx))) {
            Ok(Poll::Ready(r)) => Poll::Ready(Ok(r)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(_) => Poll::Ready(Err(Panicked)),
        }
    }
}

pub(super) fn is_peer_gone(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
    )
}

/// The write side of a served connection, shared by the request tasks.
pub(super) struct ConnWriter {
    pub(super) io: tokio::sync::Mutex<Option<Pin<Box<dyn AsyncWrite + Send>>>>,
    pub(super) failed: CancellationToken,
    pub(super) error: Mutex<Option<std::io::Error>>,
}

impl ConnWriter {
    pub(super) fn take_error(&self) -> Result<(), Error> {
        let err = lock(&self.error).take();
        match err {
            Some(e) if !is_peer_gone(&e) => Err(Error::Io { source: e }),
            _ => Ok(()),
        }
    }

    /// Sends a response; a response too large to send becomes a
    /// `RESOURCE_EXHAUSTED` status.
    pub(super) async fn respond(&self, stream_id: u32, status: Status, payload: Bytes) {
        let mut buf = BytesMut::new();
        let resp = Response {
            status: Some(status),
            payload,
        };
        if let Err(err) =
            codec::encode_message(stream_id, MessageType::Response, 0, &resp, &mut buf)
        {
            tracing::warn!(stream_id, error = %err, "ttrpc server: response too large");
            let resp = Response {
                status: Some(Status::new(
                    Code::ResourceExhausted,
                    format!("response: {err}"),
                )),
                payload: Bytes::new(),
            };
            buf.clear();
            if let Err(err) =
                codec::encode_message(stream_id, MessageType::Response, 0, &resp, &mut buf)
            {
                tracing::error!(stream_id, error = %err, "ttrpc server: cannot encode status");
                return;
            }
        }
        let mut io = self.io.lock().await;
        let Some(w) = io.as_mut() else { return };
        if let Err(e) = write_message(w.as_mut(), &buf).await {
            tracing::debug!(stream_id, error = %e, "ttrpc server: write failed");
            *io = None;
            *lock(&self.error) = Some(e);
            self.failed.cancel();
        }
    }
}
