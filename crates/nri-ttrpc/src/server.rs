//! The unary ttRPC server: the [`Server`] registry and its connection loop
//! ([`Server::serve`], [`Server::serve_fed`]). The services it dispatches to
//! are in `service`; one served connection (its feed, handlers and writer)
//! in `conn`.

mod conn;
mod service;

use conn::{
    ConnCx, ConnWriter, InFlight, Panicked, is_peer_gone, panicked, run_handler, spawn_polled,
    start_handler,
};

pub use conn::ServerFeed;
pub use service::{
    BoxFuture, HandlerResult, HandlerSlot, Methods, RequestContext, Service, service_fn,
};

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::codec::{self, Frame, MESSAGE_TYPE_REQUEST, MessageType};
use crate::error::Error;
use crate::io::{Frames, ReadEvent, Reader};
use crate::limits::{Refusal, RefusalObserver, ServerLimits, count_entries};
use crate::proto::{Code, Request, Status};

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
/// | handler runs past the request deadline | `DEADLINE_EXCEEDED`, [`DEADLINE_GRACE`](crate::DEADLINE_GRACE) after it | kept |
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
    #[allow(clippy::too_many_lines)]
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
