//! The unary ttRPC client.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::codec::{self, Frame, MessageType};
use crate::driven::{self, InputDriver};
use crate::error::Error;
use crate::io::{Frames, ReadEvent, Reader};
use crate::limits::{DEFAULT_MAX_METADATA, count_entries};
use crate::proto::{KeyValue, Response};

/// Field number of `ttrpc.Response.status` (see [`Response`]).
const RESPONSE_STATUS_FIELD: u32 = 1;
/// Field number of `google.rpc.Status.details` (see [`Status`](crate::Status)).
const STATUS_DETAILS_FIELD: u32 = 3;

/// Options of one call: its timeout (every call has one) and metadata.
///
/// ```
/// use std::time::Duration;
/// use nri_ttrpc::CallOptions;
///
/// let opts = CallOptions::new(Duration::from_secs(2)).with_metadata("traceparent", "00-01");
/// assert_eq!(opts.timeout(), Duration::from_secs(2));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallOptions {
    timeout: Duration,
    metadata: Vec<KeyValue>,
}

impl CallOptions {
    /// Options with the given timeout and no metadata.
    ///
    /// The timeout is sent to the server (`timeout_nano`) and enforced by
    /// the client, so a stalled peer cannot hold the caller longer.
    pub fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            metadata: Vec::new(),
        }
    }

    /// Replaces the timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Adds one metadata entry (keys may repeat).
    pub fn with_metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.push(KeyValue::new(key, value));
        self
    }

    /// The call's timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The call's metadata.
    pub fn metadata(&self) -> &[KeyValue] {
        &self.metadata
    }
}

type Reply = Result<Bytes, Error>;

#[derive(Default)]
struct State {
    pending: HashMap<u32, oneshot::Sender<Reply>>,
    /// `Some(cause)` once closed; `cause` is `None` for a clean close.
    closed: Option<Option<Arc<Error>>>,
}

/// State shared by the callers and the reader task.
struct Shared {
    state: Mutex<State>,
    closed: CancellationToken,
}

impl Shared {
    fn new() -> Arc<Shared> {
        Arc::new(Shared {
            state: Mutex::new(State::default()),
            closed: CancellationToken::new(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // No code panics while holding this lock; recover anyway.
        nri_mux::sync::lock(&self.state)
    }

    fn closed_error(&self) -> Error {
        Error::ConnectionClosed {
            cause: self.state().closed.clone().flatten(),
        }
    }

    /// Marks the connection closed and fails every pending call.
    fn close(&self, cause: Option<Arc<Error>>) {
        let pending = {
            let mut st = self.state();
            if st.closed.is_some() {
                return;
            }
            st.closed = Some(cause.clone());
            std::mem::take(&mut st.pending)
        };
        if let Some(c) = &cause {
            tracing::debug!(error = %c, pending = pending.len(), "ttrpc client connection failed");
        } else {
            tracing::debug!(pending = pending.len(), "ttrpc client connection closed");
        }
        for (_, tx) in pending {
            let _ = tx.send(Err(Error::ConnectionClosed {
                cause: cause.clone(),
            }));
        }
        self.closed.cancel();
    }

    fn register(&self, id: u32, tx: oneshot::Sender<Reply>) -> Result<(), Error> {
        let mut st = self.state();
        if let Some(cause) = &st.closed {
            return Err(Error::ConnectionClosed {
                cause: cause.clone(),
            });
        }
        st.pending.insert(id, tx);
        Ok(())
    }

    fn complete(&self, id: u32, reply: Reply) {
        let tx = self.state().pending.remove(&id);
        match tx {
            Some(tx) => {
                // The caller may have given up in the meantime; that is fine.
                let _ = tx.send(reply);
            }
            None => {
                tracing::debug!(
                    stream_id = id,
                    "ttrpc: dropping response for unknown or abandoned stream"
                );
            }
        }
    }

    fn dispatch(&self, frame: Frame) {
        match frame.message_type {
            MessageType::Response => {
                if !self.state().pending.contains_key(&frame.stream_id) {
                    // Nobody waits for it: not even decoded.
                    tracing::debug!(
                        stream_id = frame.stream_id,
                        "ttrpc: dropping response for unknown or abandoned stream"
                    );
                    return;
                }
                let max = DEFAULT_MAX_METADATA;
                let details = count_entries(
                    &frame.payload,
                    Some(RESPONSE_STATUS_FIELD),
                    STATUS_DETAILS_FIELD,
                    max,
                );
                let reply = if details.is_some_and(|n| n > max) {
                    Err(Error::ResponseRefused {
                        reason: format!("more than {max} status details"),
                    })
                } else {
                    codec::decode_message::<Response>("response envelope", frame.payload).and_then(
                        |resp| match resp.status {
                            Some(st) if !st.is_ok() => Err(Error::from(st)),
                            _ => Ok(resp.payload),
                        },
                    )
                };
                self.complete(frame.stream_id, reply);
            }
            MessageType::Request => {
                tracing::warn!(
                    stream_id = frame.stream_id,
                    "ttrpc client: ignoring request from server (client does not serve)"
                );
            }
        }
    }

    /// Handles one read event; `Ok(true)` at a clean end of stream.
    fn on_event(&self, ev: ReadEvent) -> Result<bool, Error> {
        match ev {
            ReadEvent::Frame(frame) => self.dispatch(frame),
            ReadEvent::Rejected(err) => {
                let id = match &err {
                    Error::FrameTooLarge { stream_id, .. }
                    | Error::UnsupportedMessageType { stream_id, .. } => *stream_id,
                    _ => return Err(err),
                };
                tracing::debug!(stream_id = id, error = %err, "ttrpc client: rejected frame");
                self.complete(id, Err(err));
            }
            ReadEvent::Eof => return Ok(true),
        }
        Ok(false)
    }
}

/// Removes a pending entry when a call is abandoned (timeout, cancellation).
struct PendingGuard<'a> {
    shared: &'a Shared,
    id: u32,
    armed: bool,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.shared.state().pending.remove(&self.id);
        }
    }
}

/// Closes the connection if a write is abandoned half way: a partly written
/// message would desynchronise the byte stream for everyone.
struct WriteGuard<'a> {
    shared: &'a Shared,
    armed: bool,
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            tracing::warn!("ttrpc client: request write abandoned mid-message; closing connection");
            self.shared.close(Some(Arc::new(Error::Io {
                source: std::io::Error::new(
                    std::io::ErrorKind::Interrupted,
                    "request write abandoned mid-message",
                ),
            })));
        }
    }
}

struct Writer {
    io: Option<Pin<Box<dyn AsyncWrite + Send>>>,
    /// Next stream id to use; u64 so exhaustion of u32 ids is detectable.
    next_stream_id: u64,
    /// Encoding buffer of the requests, kept between calls: a fresh
    /// allocation of a request's size per call (several KiB for NRI's
    /// container events) sends glibc's malloc through its slow path.
    buf: BytesMut,
}

/// Largest encoding buffer a client keeps between calls; one that grew
/// beyond it for a large request is given back.
const KEEP_BUFFER: usize = 64 * 1024;

struct Inner {
    shared: Arc<Shared>,
    writer: tokio::sync::Mutex<Writer>,
    /// `None` when a [`ClientFeed`] brings the responses.
    reader: Option<JoinHandle<()>>,
    /// Runs the feed's input in the waiting call (see `driven.rs`).
    driver: Option<Arc<dyn InputDriver>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shared.close(None);
        if let Some(r) = &self.reader {
            r.abort();
        }
    }
}

/// A unary ttRPC client over one connection.
///
/// Cheap to clone; all clones share the connection. Calls may run
/// concurrently. Responses are received by one reader task (spawned by
/// [`Client::new`]; it stops when [`Client::close`] is called or the last
/// clone is dropped) or handed over by the transport through a
/// [`ClientFeed`] ([`Client::with_feed`]).
///
/// Each request is written with a single `write_all` of one contiguous
/// buffer followed by a flush, with writers serialised by a lock, so a
/// transport (such as a multiplexer) sees each message in one write.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Starts a client on a connected transport.
    ///
    /// # Panics
    ///
    /// Panics if called outside a tokio runtime (it spawns the reader task).
    pub fn new<T>(io: T) -> Client
    where
        T: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (rd, wr) = tokio::io::split(io);
        let shared = Shared::new();
        let reader = tokio::spawn(reader_task(Reader::new(rd), shared.clone()));
        Client::from_parts(shared, Box::pin(wr), Some(reader), None)
    }

    /// Starts a client that writes requests to `wr` and is given the bytes
    /// of its connection through the returned [`ClientFeed`], instead of
    /// reading them in a task of its own. Needs no runtime.
    pub fn with_feed<W>(wr: W) -> (Client, ClientFeed)
    where
        W: AsyncWrite + Send + 'static,
    {
        Client::fed(Box::pin(wr), None)
    }

    pub(crate) fn fed(
        wr: Pin<Box<dyn AsyncWrite + Send>>,
        driver: Option<Arc<dyn InputDriver>>,
    ) -> (Client, ClientFeed) {
        let shared = Shared::new();
        let feed = ClientFeed {
            shared: Arc::clone(&shared),
            frames: Frames::with_capacity(0),
        };
        (Client::from_parts(shared, wr, None, driver), feed)
    }

    fn from_parts(
        shared: Arc<Shared>,
        wr: Pin<Box<dyn AsyncWrite + Send>>,
        reader: Option<JoinHandle<()>>,
        driver: Option<Arc<dyn InputDriver>>,
    ) -> Client {
        Client {
            inner: Arc::new(Inner {
                shared,
                writer: tokio::sync::Mutex::new(Writer {
                    io: Some(wr),
                    next_stream_id: 1,
                    buf: BytesMut::new(),
                }),
                reader,
                driver,
            }),
        }
    }

    /// Calls `service`/`method` with an encoded request message and returns
    /// the encoded response message.
    ///
    /// Fails with [`Error::DeadlineExceeded`] when no answer arrives within
    /// the timeout, [`Error::Status`] when the server answers with a non-OK
    /// status, [`Error::ConnectionClosed`] when the connection is or becomes
    /// closed, and [`Error::MessageTooLarge`] when the request exceeds 4 MiB.
    pub async fn call(
        &self,
        service: &str,
        method: &str,
        payload: Bytes,
        opts: CallOptions,
    ) -> Result<Bytes, Error> {
        let timeout = opts.timeout;
        let fut = self.call_inner(service, method, payload, opts);
        let res = match Instant::now().checked_add(timeout) {
            Some(deadline) => tokio::time::timeout_at(deadline, fut).await,
            // A timeout too large to represent: effectively none.
            None => Ok(fut.await),
        };
        res.unwrap_or_else(|_elapsed| {
            tracing::debug!(service, method, ?timeout, "ttrpc call timed out");
            Err(Error::DeadlineExceeded {
                service: service.to_owned(),
                method: method.to_owned(),
                timeout,
            })
        })
    }

    /// Like [`call`](Client::call), encoding `req` and decoding the answer.
    pub async fn call_message<Req, Resp>(
        &self,
        service: &str,
        method: &str,
        req: &Req,
        opts: CallOptions,
    ) -> Result<Resp, Error>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        let payload = Bytes::from(req.encode_to_vec());
        let resp = self.call(service, method, payload, opts).await?;
        codec::decode_message("response message", resp)
    }

    async fn call_inner(
        &self,
        service: &str,
        method: &str,
        payload: Bytes,
        opts: CallOptions,
    ) -> Result<Bytes, Error> {
        let shared = &*self.inner.shared;
        if shared.closed.is_cancelled() {
            return Err(shared.closed_error());
        }
        let timeout_nano = i64::try_from(opts.timeout.as_nanos())
            .unwrap_or(i64::MAX)
            .max(1);
        let (tx, rx) = oneshot::channel();
        let mut pending = {
            let mut guard = self.inner.writer.lock().await;
            let w = &mut *guard;
            if shared.closed.is_cancelled() {
                w.io = None;
                return Err(shared.closed_error());
            }
            let Ok(id) = u32::try_from(w.next_stream_id) else {
                return Err(Error::StreamIdsExhausted);
            };
            // Encoded under the lock, into the client's buffer, straight
            // from the borrowed parts.
            w.buf.clear();
            codec::encode_request(
                id,
                service,
                method,
                &payload,
                timeout_nano,
                &opts.metadata,
                &mut w.buf,
            )?;
            drop(payload);
            w.next_stream_id += 2;
            shared.register(id, tx)?;
            let pending = PendingGuard {
                shared,
                id,
                armed: true,
            };
            let Some(io) = w.io.as_mut() else {
                return Err(shared.closed_error());
            };
            tracing::trace!(
                stream_id = id,
                service,
                method,
                len = w.buf.len(),
                "ttrpc call"
            );
            let mut write_guard = WriteGuard {
                shared,
                armed: true,
            };
            let res = write_message(io.as_mut(), &w.buf).await;
            write_guard.armed = false;
            if w.buf.capacity() > KEEP_BUFFER {
                w.buf = BytesMut::new();
            }
            if let Err(source) = res {
                let cause = Arc::new(Error::Io { source });
                shared.close(Some(cause.clone()));
                w.io = None;
                return Err(Error::ConnectionClosed { cause: Some(cause) });
            }
            if shared.closed.is_cancelled() {
                w.io = None;
            }
            pending
        };
        let reply = match &self.inner.driver {
            None => rx.await,
            Some(driver) => driven::wait_for_answer(rx, &**driver).await,
        };
        pending.armed = false;
        match reply {
            Ok(r) => r,
            // The sender is only dropped without a reply when the entry was
            // removed by close(), which replies first; be safe anyway.
            Err(_) => Err(shared.closed_error()),
        }
    }

    /// Closes the connection: pending and later calls fail with
    /// [`Error::ConnectionClosed`], and the reader task stops.
    pub fn close(&self) {
        self.inner.shared.close(None);
        if let Some(r) = &self.inner.reader {
            r.abort();
        }
        if let Ok(mut w) = self.inner.writer.try_lock() {
            w.io = None;
        }
    }

    /// Whether the connection is closed.
    pub fn is_closed(&self) -> bool {
        self.inner.shared.closed.is_cancelled()
    }

    /// Waits until the connection is closed (by the peer, an error, or
    /// [`close`](Client::close)).
    pub async fn closed(&self) {
        self.inner.shared.closed.cancelled().await;
    }
}

/// Writes one whole message: one `write_all` of one buffer, then a flush.
pub(crate) async fn write_message(
    mut io: Pin<&mut (dyn AsyncWrite + Send)>,
    buf: &[u8],
) -> std::io::Result<()> {
    io.write_all(buf).await?;
    io.flush().await
}

async fn reader_task<R: AsyncRead + Unpin>(mut rd: Reader<R>, shared: Arc<Shared>) {
    let cause = tokio::select! {
        res = read_loop(&mut rd, &shared) => res.err().map(Arc::new),
        () = shared.closed.cancelled() => return,
    };
    shared.close(cause);
}

async fn read_loop<R: AsyncRead + Unpin>(rd: &mut Reader<R>, shared: &Shared) -> Result<(), Error> {
    loop {
        if shared.on_event(rd.next().await?)? {
            return Ok(());
        }
    }
}

/// Feeds a [`Client`] made by [`Client::with_feed`] the bytes its
/// connection receives, for transports that push data to their user (such
/// as `nri-mux`'s connection sinks) rather than being read.
///
/// Sans-io and synchronous: [`data`](Self::data) decodes the frames the
/// bytes complete and hands each response to its waiting call on the spot,
/// so the answer reaches the caller with no reader task in between.
/// Dropping the feed closes the client, as the end of its connection.
pub struct ClientFeed {
    shared: Arc<Shared>,
    frames: Frames,
}

impl std::fmt::Debug for ClientFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientFeed")
            .field("buffered", &self.frames.buffered())
            .field("closed", &self.shared.closed.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl ClientFeed {
    /// Whether the feed holds the start of a frame whose rest has not come
    /// yet (`false` between frames).
    pub fn is_mid_frame(&self) -> bool {
        self.frames.is_mid_frame()
    }

    /// The connection's next bytes. A malformed stream (corrupt header)
    /// closes the client with that error; later data is ignored.
    pub fn data(&mut self, bytes: &[u8]) {
        if self.shared.closed.is_cancelled() {
            return;
        }
        self.frames.push(bytes);
        loop {
            match self.frames.next_event() {
                Ok(None) => return,
                Ok(Some(ev)) => match self.shared.on_event(ev) {
                    Ok(_) => {}
                    Err(e) => return self.fail(e),
                },
                Err(e) => return self.fail(e),
            }
        }
    }

    /// The connection ended: `None` for a clean end (a message cut short is
    /// still reported as truncated), else the transport's error. Pending
    /// and later calls fail with [`Error::ConnectionClosed`].
    pub fn end(&mut self, error: Option<std::io::Error>) {
        let cause = match error {
            Some(source) => Some(Arc::new(Error::Io { source })),
            None => self.frames.end_of_stream().err().map(Arc::new),
        };
        self.shared.close(cause);
    }

    fn fail(&mut self, e: Error) {
        self.frames.clear();
        self.shared.close(Some(Arc::new(e)));
    }
}

impl Drop for ClientFeed {
    fn drop(&mut self) {
        self.shared.close(None);
    }
}
