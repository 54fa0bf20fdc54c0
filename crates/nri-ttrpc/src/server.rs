//! The unary ttRPC server.

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use nri_mux::sync::lock;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, ReusableBoxFuture};

use crate::client::write_message;
use crate::codec::{self, Frame, MESSAGE_TYPE_REQUEST, MessageType};
use crate::error::Error;
use crate::io::{Frames, ReadEvent, Reader};
use crate::limits::{Refusal, RefusalObserver, ServerLimits, count_entries};
use crate::proto::{Code, KeyValue, Request, Response, Status};

/// A boxed, sendable future (this crate's own alias; no `futures` crate).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a handler returns: the encoded response message, or a status.
pub type HandlerResult = Result<Bytes, Status>;

/// A ttRPC service: dispatches the calls of one fully qualified service name.
///
/// An implementation must answer methods it does not know with
/// [`Status::unknown_method`] (code `UNIMPLEMENTED`), as peers rely on that
/// code to detect missing methods. [`Methods`] does this for you.
pub trait Service: Send + Sync + 'static {
    /// Handles one call of `method` with the encoded request `payload`.
    fn call(
        &self,
        ctx: RequestContext,
        method: &str,
        payload: Bytes,
    ) -> BoxFuture<'static, HandlerResult>;

    /// Starts a call as [`call`](Service::call) does, but puts the handler's
    /// future in `slot`. The server keeps a few slots per connection and
    /// reuses them, so a service that overrides this with
    /// [`HandlerSlot::set`] does not allocate a new box for every request
    /// (each large allocation costs more than its size: glibc's malloc
    /// consolidates its small-chunk caches on every request of 1 KiB or
    /// more). The default puts `call`'s boxed future there.
    fn call_in(&self, ctx: RequestContext, method: &str, payload: Bytes, slot: &mut HandlerSlot) {
        slot.set(self.call(ctx, method, payload));
    }
}

impl<S: Service + ?Sized> Service for Arc<S> {
    fn call(
        &self,
        ctx: RequestContext,
        method: &str,
        payload: Bytes,
    ) -> BoxFuture<'static, HandlerResult> {
        (**self).call(ctx, method, payload)
    }

    fn call_in(&self, ctx: RequestContext, method: &str, payload: Bytes, slot: &mut HandlerSlot) {
        (**self).call_in(ctx, method, payload, slot);
    }
}

/// Holds the future of one call (see [`Service::call_in`]); its allocation
/// is reused by the next future of the same size and alignment.
#[derive(Default)]
pub struct HandlerSlot {
    fut: Option<ReusableBoxFuture<'static, HandlerResult>>,
}

impl std::fmt::Debug for HandlerSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerSlot")
            .field("filled", &self.fut.is_some())
            .finish()
    }
}

impl HandlerSlot {
    /// Puts `fut` in the slot, dropping the future it held. Reuses the
    /// slot's allocation when `fut` has the layout of that future.
    pub fn set<F>(&mut self, fut: F)
    where
        F: Future<Output = HandlerResult> + Send + 'static,
    {
        match &mut self.fut {
            Some(b) => b.set(fut),
            None => self.fut = Some(ReusableBoxFuture::new(fut)),
        }
    }
}

/// Polls the future in the slot; an empty slot answers `INTERNAL`.
impl Future for HandlerSlot {
    type Output = HandlerResult;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<HandlerResult> {
        match &mut self.fut {
            Some(fut) => fut.poll(cx),
            None => Poll::Ready(Err(Status::new(Code::Internal, "no handler was started"))),
        }
    }
}

/// The slots of one connection that are free for its next requests.
#[derive(Default)]
struct SlotPool(Mutex<Vec<HandlerSlot>>);

/// Slots kept per connection: enough for the requests of a connection
/// that are usually in flight at once.
const POOLED_SLOTS: usize = 4;

impl SlotPool {
    fn take(&self) -> HandlerSlot {
        lock(&self.0).pop().unwrap_or_default()
    }

    fn put(&self, slot: HandlerSlot) {
        let mut slots = lock(&self.0);
        if slots.len() < POOLED_SLOTS {
            slots.push(slot);
        }
    }
}

/// Information about the call being handled.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestContext {
    service: String,
    method: String,
    stream_id: u32,
    deadline: Option<Instant>,
    metadata: Vec<KeyValue>,
}

impl RequestContext {
    /// A context for `service`/`method` without deadline or metadata (for
    /// calling a [`Service`] directly, e.g. in tests).
    pub fn new(service: impl Into<String>, method: impl Into<String>) -> Self {
        RequestContext {
            service: service.into(),
            method: method.into(),
            stream_id: 0,
            deadline: None,
            metadata: Vec::new(),
        }
    }

    /// Sets the deadline.
    pub fn with_deadline(mut self, deadline: Option<Instant>) -> Self {
        self.deadline = deadline;
        self
    }

    /// Adds a metadata entry.
    pub fn with_metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.push(KeyValue::new(key, value));
        self
    }

    /// Fully qualified service name.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// Bare method name.
    pub fn method(&self) -> &str {
        &self.method
    }

    /// Stream id of the request (0 when built with [`RequestContext::new`]).
    pub fn stream_id(&self) -> u32 {
        self.stream_id
    }

    /// When the caller stops waiting (from the request's `timeout_nano`);
    /// `None` if the caller sent no timeout. The server answers
    /// `DEADLINE_EXCEEDED` itself when a handler runs past it.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// All metadata entries, in the order received.
    pub fn metadata(&self) -> &[KeyValue] {
        &self.metadata
    }

    /// The values of metadata entries with `key`.
    pub fn metadata_values<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.metadata
            .iter()
            .filter(move |kv| kv.key == key)
            .map(|kv| kv.value.as_str())
    }
}

type MethodFn = dyn Fn(RequestContext, Bytes) -> BoxFuture<'static, HandlerResult> + Send + Sync;

/// A [`Service`] built from a table of per-method closures; unknown methods
/// are answered with `UNIMPLEMENTED`.
///
/// ```
/// use bytes::Bytes;
/// use nri_ttrpc::Methods;
///
/// let svc = Methods::new().add("Echo", |_ctx, payload: Bytes| async move { Ok(payload) });
/// # let _ = svc;
/// ```
#[derive(Default, Clone)]
pub struct Methods {
    map: HashMap<String, Arc<MethodFn>>,
}

impl std::fmt::Debug for Methods {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.map.keys()).finish()
    }
}

impl Methods {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a handler taking and returning encoded messages.
    pub fn add<F, Fut>(mut self, method: impl Into<String>, f: F) -> Self
    where
        F: Fn(RequestContext, Bytes) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.map.insert(
            method.into(),
            Arc::new(move |ctx, payload| Box::pin(f(ctx, payload))),
        );
        self
    }

    /// Adds (or replaces) a typed handler. A request that does not decode is
    /// answered with `INVALID_ARGUMENT`.
    pub fn add_message<Req, Resp, F, Fut>(self, method: impl Into<String>, f: F) -> Self
    where
        Req: prost::Message + Default + 'static,
        Resp: prost::Message + 'static,
        F: Fn(RequestContext, Req) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Resp, Status>> + Send + 'static,
    {
        let f = Arc::new(f);
        self.add(method, move |ctx, payload: Bytes| {
            let f = f.clone();
            async move {
                let req = Req::decode(payload).map_err(|e| {
                    Status::new(
                        Code::InvalidArgument,
                        format!("cannot decode request message: {e}"),
                    )
                })?;
                let resp = f(ctx, req).await?;
                Ok(Bytes::from(resp.encode_to_vec()))
            }
        })
    }

    /// Whether `method` has a handler.
    pub fn contains(&self, method: &str) -> bool {
        self.map.contains_key(method)
    }
}

impl Service for Methods {
    fn call(
        &self,
        ctx: RequestContext,
        method: &str,
        payload: Bytes,
    ) -> BoxFuture<'static, HandlerResult> {
        match self.map.get(method) {
            Some(f) => f(ctx, payload),
            None => {
                let st = Status::unknown_method(method);
                Box::pin(async move { Err(st) })
            }
        }
    }
}

/// A [`Service`] from one closure that receives every call (the method name
/// is in [`RequestContext::method`]). The closure must answer unknown
/// methods with [`Status::unknown_method`].
pub fn service_fn<F, Fut>(f: F) -> impl Service
where
    F: Fn(RequestContext, Bytes) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    ServiceFn(f)
}

struct ServiceFn<F>(F);

impl<F, Fut> Service for ServiceFn<F>
where
    F: Fn(RequestContext, Bytes) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    fn call(
        &self,
        ctx: RequestContext,
        _method: &str,
        payload: Bytes,
    ) -> BoxFuture<'static, HandlerResult> {
        Box::pin((self.0)(ctx, payload))
    }
}

/// A registry of services that serves connections.
///
/// Cheap to clone; clones share the registry as it was when cloned.
///
/// Behaviour on a connection (see [`Server::serve`]):
///
/// | input | answer on that stream | connection |
/// |---|---|---|
/// | unknown service or method | `UNIMPLEMENTED` (12), `service X` / `method Y` | kept |
/// | request over 4 MiB (or [`ServerLimits::max_request_len`]) | `RESOURCE_EXHAUSTED`, payload discarded unread | kept |
/// | more than [`ServerLimits::max_in_flight`] requests unanswered | `RESOURCE_EXHAUSTED` | kept (twice as many: `serve` returns [`Error::TooManyInFlight`]) |
/// | more than [`ServerLimits::max_metadata`] metadata entries | `RESOURCE_EXHAUSTED`, envelope not decoded | kept |
/// | undecodable request envelope | `INVALID_ARGUMENT` | kept |
/// | even or non-increasing stream id | `INVALID_ARGUMENT` | kept |
/// | data message (type 3, streaming) | `UNIMPLEMENTED` | kept |
/// | handler runs past the request deadline | `DEADLINE_EXCEEDED` | kept |
/// | handler panics | `INTERNAL` | kept |
/// | response over 4 MiB | `RESOURCE_EXHAUSTED` instead | kept |
/// | response-type message from the client | none (ignored, as Go does) | kept |
/// | message type 0 or > 3 (corrupt stream) | none | `serve` returns [`Error::InvalidMessageType`] |
/// | end of stream inside a message | none | `serve` returns [`Error::Truncated`] |
/// | end of stream between messages | none | `serve` returns `Ok` |
#[derive(Clone, Default)]
pub struct Server {
    services: Arc<HashMap<String, Arc<dyn Service>>>,
    limits: ServerLimits,
    observer: Option<Arc<dyn RefusalObserver>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("services", &self.services.keys().collect::<Vec<_>>())
            .field("limits", &self.limits)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

impl Server {
    /// A server without services.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `service` under its fully qualified name.
    pub fn register(
        &mut self,
        name: impl Into<String>,
        service: impl Service,
    ) -> Result<(), Error> {
        let name = name.into();
        let services = Arc::make_mut(&mut self.services);
        if services.contains_key(&name) {
            return Err(Error::DuplicateService { name });
        }
        services.insert(name, Arc::new(service));
        Ok(())
    }

    /// Whether a service with this name is registered.
    pub fn has_service(&self, name: &str) -> bool {
        self.services.contains_key(name)
    }

    /// Sets the limits applied to each connection served from now on (see
    /// [`ServerLimits`]; the default is [`ServerLimits::default`]).
    pub fn set_limits(&mut self, limits: ServerLimits) {
        self.limits = limits;
    }

    /// The limits applied to each connection.
    pub fn limits(&self) -> &ServerLimits {
        &self.limits
    }

    /// Has `observer` told about every request the server refuses by
    /// itself (over a limit, or malformed), on every connection served
    /// from now on.
    pub fn set_refusal_observer(&mut self, observer: impl RefusalObserver) {
        self.observer = Some(Arc::new(observer));
    }

    /// Serves one connection until the peer closes it (`Ok`), `shutdown` is
    /// cancelled (`Ok`), or the connection fails (`Err`).
    ///
    /// Requests are handled concurrently, each in a task owned by this call;
    /// all of them are aborted when it returns. See [`Server`] for how each
    /// kind of bad input is answered.
    pub async fn serve<T>(&self, io: T, shutdown: CancellationToken) -> Result<(), Error>
    where
        T: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (rd, wr) = tokio::io::split(io);
        let (mut feed, mut serving) = self.serve_fed(wr, shutdown);
        let mut reader = Reader::new(rd);
        reader.follow_limit(self.limits.max_request_len.clone());
        // This task reads the connection and feeds the frames as they are
        // (no copy into the feed's buffer); the feed's future does the rest.
        let reading = async move {
            loop {
                match reader.next().await {
                    Ok(ev) => {
                        let eof = matches!(ev, ReadEvent::Eof);
                        feed.handle(ev);
                        if eof {
                            return;
                        }
                    }
                    Err(Error::Io { source }) if is_peer_gone(&source) => {
                        return feed.finish(Ok(()));
                    }
                    Err(e) => return feed.finish(Err(e)),
                }
            }
        };
        tokio::select! {
            biased;
            r = &mut serving => r,
            () = reading => serving.await,
        }
    }

    /// Serves one connection whose received bytes the transport hands to
    /// the returned [`ServerFeed`] (as `nri-mux`'s connection sinks do)
    /// rather than being read by the server: requests are then decoded and
    /// their handlers started by whoever feeds the bytes, with no reader
    /// task in between. Responses are written to `wr`.
    ///
    /// The returned future must be polled (spawned) for the connection's
    /// life: it runs the handlers that do not finish at once, and ends as
    /// [`serve`](Self::serve) does (the feed reports the end of the
    /// stream), aborting the handlers still running.
    pub fn serve_fed<W>(
        &self,
        wr: W,
        shutdown: CancellationToken,
    ) -> (ServerFeed, BoxFuture<'static, Result<(), Error>>)
    where
        W: AsyncWrite + Send + 'static,
    {
        let conn = Arc::new(ConnWriter {
            io: tokio::sync::Mutex::new(Some(Box::pin(wr))),
            failed: CancellationToken::new(),
            error: Mutex::new(None),
        });
        let (spawn_tx, mut spawn_rx) = mpsc::unbounded_channel::<BoxFuture<'static, ()>>();
        let (end_tx, mut end_rx) = oneshot::channel::<Result<(), Error>>();
        let mut frames = Frames::with_capacity(0);
        frames.follow_limit(self.limits.max_request_len.clone());
        let feed = ServerFeed {
            server: self.clone(),
            frames,
            last_stream_id: 0,
            cx: ConnCx {
                conn: Arc::clone(&conn),
                spawn: spawn_tx,
                slots: Arc::default(),
                in_flight: Arc::default(),
            },
            end: Some(end_tx),
        };
        let serving = async move {
            let mut tasks = JoinSet::new();
            let result = loop {
                tokio::select! {
                    biased;
                    () = shutdown.cancelled() => break Ok(()),
                    () = conn.failed.cancelled() => break conn.take_error(),
                    Some(joined) = tasks.join_next(), if !tasks.is_empty() => {
                        if let Err(e) = joined {
                            tracing::error!(error = %e, "ttrpc server: request task failed");
                        }
                    }
                    Some(fut) = spawn_rx.recv() => {
                        tasks.spawn(fut);
                    }
                    // A feed dropped without a word: the connection is gone.
                    end = &mut end_rx => break end.unwrap_or(Ok(())),
                }
            };
            tasks.abort_all();
            if let Err(e) = &result {
                tracing::debug!(error = %e, "ttrpc server: connection failed");
            }
            result
        };
        (feed, Box::pin(serving))
    }

    /// Tells the observer about a refusal.
    fn report(&self, refusal: &Refusal) {
        tracing::debug!(stream_id = refusal.stream_id(), refusal = %refusal, "ttrpc server: refused request");
        if let Some(o) = &self.observer {
            o.refused(refusal);
        }
    }

    /// Answers `st` on stream `id` (a request refused by the server).
    fn refuse(&self, cx: &ConnCx, refusal: Refusal, st: Status) {
        self.report(&refusal);
        let conn = cx.conn.clone();
        let guard = InFlight::enter(&cx.in_flight);
        let id = refusal.stream_id();
        spawn_polled(&cx.spawn, async move {
            conn.respond(id, st, Bytes::new()).await;
            drop(guard);
        });
    }

    /// One frame of the connection; `Err` ends the connection.
    fn on_frame(&self, frame: Frame, last_stream_id: &mut u32, cx: &ConnCx) -> Result<(), Error> {
        let id = frame.stream_id;
        if frame.message_type == MessageType::Response {
            tracing::debug!(stream_id = id, "ttrpc server: ignoring response message");
            return Ok(());
        }
        let max = self.limits.max_in_flight.max(1);
        let in_flight = cx.in_flight.load(Ordering::Relaxed);
        if in_flight >= max.saturating_mul(2) {
            // Not even refusals get read: the peer floods without reading.
            return Err(Error::TooManyInFlight { max });
        }
        if in_flight >= max {
            let st = Status::new(
                Code::ResourceExhausted,
                format!("too many requests in flight on this connection (limit {max})"),
            );
            self.refuse(cx, Refusal::TooManyInFlight { stream_id: id, max }, st);
            return Ok(());
        }
        let bad_id = if id % 2 != 1 {
            Some("stream id must be odd for client-initiated streams")
        } else if id <= *last_stream_id {
            Some("stream id must increase")
        } else {
            None
        };
        if let Some(reason) = bad_id {
            let err = Error::InvalidStreamId {
                stream_id: id,
                reason,
            };
            let refusal = Refusal::Malformed {
                stream_id: id,
                reason: err.to_string(),
            };
            self.refuse(cx, refusal, Status::from(err));
            return Ok(());
        }
        *last_stream_id = id;
        let max_metadata = self.limits.max_metadata;
        match count_entries(&frame.payload, None, REQUEST_METADATA_FIELD, max_metadata) {
            Some(count) if count > max_metadata => {
                let refusal = Refusal::TooMuchMetadata {
                    stream_id: id,
                    count,
                    max: max_metadata,
                };
                let st = Status::new(Code::ResourceExhausted, refusal.to_string());
                self.refuse(cx, refusal, st);
                return Ok(());
            }
            // A malformed envelope is reported by its decoding below.
            Some(_) | None => {}
        }
        let req: Request = match codec::decode_message("request envelope", frame.payload) {
            Ok(r) => r,
            Err(err) => {
                let refusal = Refusal::Malformed {
                    stream_id: id,
                    reason: err.to_string(),
                };
                self.refuse(cx, refusal, Status::from(err));
                return Ok(());
            }
        };
        let Some(service) = self.services.get(&req.service).cloned() else {
            tracing::debug!(stream_id = id, service = %req.service, "ttrpc server: unknown service");
            let conn = cx.conn.clone();
            let guard = InFlight::enter(&cx.in_flight);
            let st = Status::unknown_service(&req.service);
            spawn_polled(&cx.spawn, async move {
                conn.respond(id, st, Bytes::new()).await;
                drop(guard);
            });
            return Ok(());
        };
        let deadline = match req.timeout_nano {
            0 => None,
            t if t < 0 => Some(Instant::now()),
            t => Instant::now().checked_add(Duration::from_nanos(t.unsigned_abs())),
        };
        let ctx = RequestContext {
            service: req.service,
            method: req.method,
            stream_id: id,
            deadline,
            metadata: req.metadata,
        };
        let payload = req.payload;
        let conn = cx.conn.clone();
        let slots = Arc::clone(&cx.slots);
        let guard = InFlight::enter(&cx.in_flight);
        let mut slot = slots.take();
        let method = ctx.method.clone();
        let started = start_handler(&*service, ctx, &method, payload, &mut slot);
        spawn_polled(&cx.spawn, async move {
            let result = match started {
                Ok(()) => run_handler(&mut slot, deadline, &method).await,
                Err(Panicked) => Err(panicked(&method)),
            };
            slots.put(slot);
            let (status, payload) = match result {
                Ok(p) => (Status::ok(), p),
                Err(st) if st.is_ok() => (
                    Status::new(Code::Unknown, "handler failed with an OK status"),
                    Bytes::new(),
                ),
                Err(st) => (st, Bytes::new()),
            };
            conn.respond(id, status, payload).await;
            drop(guard);
        });
        Ok(())
    }
}

/// Field number of `ttrpc.Request.metadata` (see [`Request`]).
const REQUEST_METADATA_FIELD: u32 = 5;

/// What a connection's frames are handled with.
struct ConnCx {
    conn: Arc<ConnWriter>,
    spawn: Spawn,
    slots: Arc<SlotPool>,
    /// Requests whose answer has not been written yet.
    in_flight: Arc<AtomicUsize>,
}

/// One request counted in flight until dropped (with its answer written,
/// or its task aborted).
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn enter(counter: &Arc<AtomicUsize>) -> Self {
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
type Spawn = mpsc::UnboundedSender<BoxFuture<'static, ()>>;

/// Polls `fut` once right here and spawns it (see [`Spawn`]) only if it is
/// not finished: most handlers answer at once, and then the request costs
/// no task and no hand-off.
///
/// The first poll uses a no-op waker. A future that is pending has
/// registered that waker somewhere; the spawned task polls it again at once
/// with its own waker, which replaces it (every future re-registers its
/// waker on each poll), so no wake-up is lost.
fn spawn_polled<F>(tasks: &Spawn, fut: F)
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
    server: Server,
    frames: Frames,
    last_stream_id: u32,
    cx: ConnCx,
    /// `None` once the end was reported.
    end: Option<oneshot::Sender<Result<(), Error>>>,
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
    fn handle(&mut self, ev: ReadEvent) {
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

    fn finish(&mut self, result: Result<(), Error>) {
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
fn start_handler(
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

/// Runs the handler started in `slot` to its end or its deadline.
async fn run_handler(
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
                Poll::Pending => match tokio::time::timeout_at(d, fut).await {
                    Ok(r) => r,
                    Err(_elapsed) => {
                        tracing::debug!(method = %method, "ttrpc server: handler deadline exceeded");
                        return Err(Status::new(
                            Code::DeadlineExceeded,
                            format!("method {method}: deadline exceeded"),
                        ));
                    }
                },
            }
        }
    };
    res.map_err(|Panicked| panicked(method))?
}

fn panicked(method: &str) -> Status {
    tracing::error!(method, "ttrpc server: handler panicked");
    Status::new(Code::Internal, format!("method {method}: handler panicked"))
}

/// A handler future panicked.
struct Panicked;

/// Catches a panic inside a handler future (turned into an `INTERNAL`
/// status by [`run_handler`]).
struct CatchUnwind<'a> {
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

impl Server {
    /// A frame the decoder skipped: answered when it was a request.
    fn on_rejected(&self, err: Error, cx: &ConnCx) {
        let (id, answer) = match &err {
            Error::FrameTooLarge {
                stream_id,
                message_type,
                ..
            } => (*stream_id, *message_type == MESSAGE_TYPE_REQUEST),
            Error::UnsupportedMessageType { stream_id, .. } => (*stream_id, true),
            _ => (0, false),
        };
        tracing::debug!(stream_id = id, error = %err, "ttrpc server: rejected message");
        if !answer {
            return;
        }
        let refusal = match &err {
            Error::FrameTooLarge {
                stream_id,
                len,
                max,
                ..
            } => Refusal::TooLarge {
                stream_id: *stream_id,
                len: *len,
                max: *max,
            },
            other => Refusal::Malformed {
                stream_id: id,
                reason: other.to_string(),
            },
        };
        self.refuse(cx, refusal, Status::from(err));
    }
}

fn is_peer_gone(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
    )
}

/// The write side of a served connection, shared by the request tasks.
struct ConnWriter {
    io: tokio::sync::Mutex<Option<Pin<Box<dyn AsyncWrite + Send>>>>,
    failed: CancellationToken,
    error: Mutex<Option<std::io::Error>>,
}

impl ConnWriter {
    fn take_error(&self) -> Result<(), Error> {
        let err = lock(&self.error).take();
        match err {
            Some(e) if !is_peer_gone(&e) => Err(Error::Io { source: e }),
            _ => Ok(()),
        }
    }

    /// Sends a response; a response too large to send becomes a
    /// `RESOURCE_EXHAUSTED` status.
    async fn respond(&self, stream_id: u32, status: Status, payload: Bytes) {
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
