//! What a server dispatches to: services, their methods, the context of a
//! call and the slot a handler runs in.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use std::task::{Context, Poll};

use bytes::Bytes;
use nri_mux::sync::lock;
use tokio::time::Instant;
use tokio_util::sync::ReusableBoxFuture;

use crate::proto::{Code, KeyValue, Status};

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
pub(super) struct SlotPool(Mutex<Vec<HandlerSlot>>);

/// Slots kept per connection: enough for the requests of a connection
/// that are usually in flight at once.
const POOLED_SLOTS: usize = 4;

impl SlotPool {
    pub(super) fn take(&self) -> HandlerSlot {
        lock(&self.0).pop().unwrap_or_default()
    }

    pub(super) fn put(&self, slot: HandlerSlot) {
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
    pub(super) service: String,
    pub(super) method: String,
    pub(super) stream_id: u32,
    pub(super) deadline: Option<Instant>,
    pub(super) metadata: Vec<KeyValue>,
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
