//! The runtime's handle on one WebAssembly plugin ([`WasmConn`]): its
//! instance behind a lock (calls are serialized), each call's first slice
//! on the caller's task and the rest on a blocking thread, and what a
//! failed call leaves: a guest that trapped, exited, ran past its
//! deadline or broke the ABI is in an unknown state, so its instance is
//! dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use super::host::{CallError, Guest, describe};
use super::image::Image;
use crate::failure::PluginFailure;

/// Why a plugin's instance was discarded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Discard {
    /// The guest ran past its deadline. `counted`: the call's caller got
    /// the timeout and accounted it (a strike: the guest ran out of the
    /// plugin's own timeout); otherwise the call was running on alone
    /// after its caller had stopped waiting, and nobody counted it.
    Timeout {
        /// Whether the caller accounted the timeout.
        counted: bool,
    },
    /// The guest trapped, exited or broke the ABI.
    Failed(String),
}

/// What a plugin's connection knows beyond the instance: why it was
/// discarded.
#[derive(Debug, Default)]
struct ConnState {
    discarded: std::sync::Mutex<Option<Discard>>,
}

/// Where a WebAssembly plugin comes from: what a re-instantiation needs.
#[derive(Debug)]
pub(crate) struct Origin {
    /// The plugin as found in the plugin directory.
    pub(crate) plugin: crate::launch::DiscoveredPlugin,
    /// The compiled module.
    pub(crate) image: Arc<Image>,
    /// Who the plugin is (its file) and the grant it was admitted under.
    pub(crate) admission: Arc<crate::grants::Admission>,
}

/// The runtime's handle on one instance of a WebAssembly plugin: the
/// guest behind a lock (calls are serialized), closed with the plugin's
/// token. A guest left in an unknown state by a call (a trap, an exit, a
/// timeout, an answer breaking the ABI) is dropped and the connection
/// counts as closed; the plugin's supervisor then makes a new instance
/// (see `restart.rs`).
pub(crate) struct WasmConn {
    guest: Arc<tokio::sync::Mutex<Option<Guest>>>,
    closed: CancellationToken,
    state: Arc<ConnState>,
    name: String,
    /// The plugin's own request timeout: a call given less (the event's
    /// deadline cut it short) goes on in the background up to this.
    own_timeout: Duration,
    origin: Arc<Origin>,
    born: Instant,
}

impl std::fmt::Debug for WasmConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmConn")
            .field("plugin", &self.name)
            .finish_non_exhaustive()
    }
}

/// What settling a finished call needs: who, and what to cancel.
#[derive(Clone)]
struct Ctx {
    name: String,
    closed: CancellationToken,
    state: Arc<ConnState>,
}

impl WasmConn {
    /// The connection to `guest`, an instance of `origin`, whose calls
    /// take `own_timeout` at most.
    pub(crate) fn new(
        name: String,
        mut guest: Guest,
        closed: CancellationToken,
        own_timeout: Duration,
        origin: Arc<Origin>,
    ) -> Self {
        guest.set_closed(closed.clone());
        Self {
            guest: Arc::new(tokio::sync::Mutex::new(Some(guest))),
            closed,
            state: Arc::default(),
            name,
            own_timeout,
            origin,
            born: Instant::now(),
        }
    }

    /// Where the plugin comes from.
    pub(crate) fn origin(&self) -> &Arc<Origin> {
        &self.origin
    }

    /// Why the instance was discarded, if it was.
    pub(crate) fn discarded(&self) -> Option<Discard> {
        self.state
            .discarded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// How long ago this instance was made.
    pub(crate) fn age(&self) -> Duration {
        self.born.elapsed()
    }

    /// Closed, or its instance discarded.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.is_cancelled() || self.discarded().is_some()
    }

    /// Closes the plugin; the instance is dropped now if no call runs, else
    /// when the running call ends (at its next fuel slice).
    pub(crate) fn close(&self) {
        self.closed.cancel();
        if let Ok(mut g) = self.guest.try_lock() {
            g.take();
        }
    }

    /// Waits until the plugin is closed (not merely its instance
    /// discarded: the plugin is closed once the failed call has been
    /// accounted, so that its supervisor sees the strike).
    pub(crate) async fn closed(&self) {
        self.closed.cancelled().await;
    }

    fn ctx(&self) -> Ctx {
        Ctx {
            name: self.name.clone(),
            closed: self.closed.clone(),
            state: self.state.clone(),
        }
    }

    /// Calls `method` with `payload` within `timeout` (waiting for an
    /// earlier call of this plugin counts toward it). A `timeout` shorter
    /// than the plugin's own (the event's deadline cut it short) is the
    /// caller's: the guest's call goes on up to the plugin's own timeout
    /// after the caller stopped waiting, so that a guest within its own
    /// time is not cut in the middle of its work (its answer is then
    /// dropped). A guest that runs out of time has run out of its own
    /// (the plugin's timeout): that timeout is the call's failure, a
    /// strike, whether or not the caller was still waiting.
    ///
    /// The guest's deadline is on the wall clock (it bounds real work);
    /// the caller's wait is on tokio's clock, as every other wait of the
    /// runtime (the two part when tokio's clock is paused, in tests: the
    /// caller may then wait until the guest's end).
    pub(crate) async fn call(
        &self,
        method: &str,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, PluginFailure> {
        let start = Instant::now();
        let waited_from = tokio::time::Instant::now();
        let lock = tokio::time::timeout(timeout, self.guest.clone().lock_owned()).await;
        let Ok(guard) = lock else {
            return Err(PluginFailure::Timeout { timeout });
        };
        let caller = (timeout < self.own_timeout).then(|| waited_from + timeout);
        let guest_time = timeout.max(self.own_timeout);
        self.run(guard, method, payload, start + guest_time, caller)
            .await
            .map(Bytes::from)
            .map_err(|e| failure(e, method, (timeout, guest_time)))
    }

    /// Sends `Shutdown` within `timeout`. It does not wait for another call
    /// of this plugin: the runtime is stopping, so a guest busy in a call
    /// is closed instead, which ends that call within a fuel slice or a
    /// sleep's closing check.
    pub(crate) async fn shutdown(&self, timeout: Duration) -> Result<Bytes, PluginFailure> {
        let deadline = Instant::now() + timeout;
        let Ok(guard) = self.guest.clone().try_lock_owned() else {
            tracing::debug!(plugin = %self.name, "WebAssembly plugin busy at Shutdown; closing it");
            self.close();
            return Err(closed_failure());
        };
        let method = nri_api::method::SHUTDOWN;
        self.run(guard, method, Bytes::new(), deadline, None)
            .await
            .map(Bytes::from)
            .map_err(|e| failure(e, method, (timeout, timeout)))
    }

    /// Runs one call on the guest `guard` holds, until `deadline` (wall
    /// clock); the caller waits until `caller` (tokio's clock) when that
    /// is sooner.
    ///
    /// The call starts on this task and, if the guest answers within its
    /// inline fuel, ends there; otherwise the rest runs on a blocking
    /// thread whose handle this future awaits. If the future is dropped
    /// then, or stops waiting at `caller`, the call still ends by itself
    /// at its deadline.
    async fn run(
        &self,
        mut guard: tokio::sync::OwnedMutexGuard<Option<Guest>>,
        method: &str,
        payload: Bytes,
        deadline: Instant,
        caller: Option<tokio::time::Instant>,
    ) -> Result<Vec<u8>, CallError> {
        if self.closed.is_cancelled() {
            guard.take();
            return Err(CallError::Closed);
        }
        let mut rest = None;
        let first = match guard.as_mut() {
            Some(g) => g.begin(method, payload, deadline).and_then(|mut call| {
                let done = g.advance(&mut call, true, &self.closed)?;
                if done.is_none() {
                    rest = Some(call);
                }
                Ok(done)
            }),
            None => Err(CallError::Closed),
        };
        let ctx = self.ctx();
        let res = match (first, rest) {
            (Ok(Some(answer)), _) => Ok(answer),
            (Ok(None), Some(mut call)) => {
                let handoff = Arc::new(AtomicBool::new(false));
                let m = method.to_owned();
                let task = tokio::task::spawn_blocking({
                    let (ctx, handoff) = (ctx.clone(), handoff.clone());
                    move || {
                        let res = match guard.as_mut() {
                            Some(g) => g.advance(&mut call, false, &ctx.closed).and_then(|done| {
                                // Off the executor a call runs to its end.
                                done.ok_or_else(|| CallError::Fatal("guest call paused".into()))
                            }),
                            None => Err(CallError::Closed),
                        };
                        let res = settle(&mut guard, res, &ctx, &m);
                        if handoff.swap(true, Ordering::SeqCst) {
                            // The caller has left: nobody will account
                            // this call or close the plugin but us.
                            orphaned(&ctx, &res);
                        }
                        res
                    }
                });
                let waiter = Waiter { ctx, handoff };
                let joined = match caller {
                    Some(at) => match tokio::time::timeout_at(at, task).await {
                        Ok(j) => j,
                        Err(_) => return Err(CallError::CallerLeft),
                    },
                    None => task.await,
                };
                waiter.disarm();
                return joined.unwrap_or_else(|e| {
                    Err(CallError::Fatal(format!(
                        "WebAssembly call did not complete: {e}"
                    )))
                });
            }
            (Ok(None), None) => Err(CallError::Fatal("guest call paused".into())),
            (Err(e), _) => Err(e),
        };
        settle(&mut guard, res, &ctx, method)
    }
}

/// A connection dropped before its plugin took it (a set-up dropped in
/// the middle of a call, when the runtime stops) closes its instance: a
/// call it was running ends within a fuel slice or a sleep's closing
/// check instead of going on up to its deadline.
impl Drop for WasmConn {
    fn drop(&mut self) {
        self.close();
    }
}

/// The caller's side of a call moved to a blocking thread: dropped
/// without [`Waiter::disarm`] (the caller stopped waiting, or its future
/// was dropped), it leaves the call to its thread, or closes the plugin
/// if the thread has already finished and discarded the instance (nobody
/// will account that call).
struct Waiter {
    ctx: Ctx,
    handoff: Arc<AtomicBool>,
}

impl Waiter {
    /// The caller got the call's outcome: it accounts it.
    fn disarm(self) {
        std::mem::forget(self);
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if self.handoff.swap(true, Ordering::SeqCst) && self.ctx.discard_is_set() {
            self.ctx.closed.cancel();
        }
    }
}

impl Ctx {
    fn discard_is_set(&self) -> bool {
        self.state
            .discarded
            .lock()
            .map(|d| d.is_some())
            .unwrap_or(true)
    }

    fn record(&self, d: Discard) {
        let mut slot = self
            .state
            .discarded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(d);
        }
    }
}

/// A call that ended after its caller had left: a discarded instance is
/// recorded as such (a timeout nobody counted) and the plugin closed.
fn orphaned(ctx: &Ctx, res: &Result<Vec<u8>, CallError>) {
    if let Err(CallError::Timeout) = res {
        let mut slot = ctx
            .state
            .discarded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *slot = Some(Discard::Timeout { counted: false });
    }
    if ctx.discard_is_set() {
        ctx.closed.cancel();
    }
}

/// The outcome `res` of a finished call, after dropping the guest if it
/// is no longer usable (and recording why). The plugin itself is closed
/// by whoever accounts the call (`Plugin::account`), so that a timeout
/// is counted as a strike before the plugin's supervisor looks.
fn settle(
    guest: &mut Option<Guest>,
    res: Result<Vec<u8>, CallError>,
    ctx: &Ctx,
    method: &str,
) -> Result<Vec<u8>, CallError> {
    if let Err(e) = &res
        && !e.leaves_guest_usable()
    {
        guest.take();
        match e {
            CallError::Closed => {}
            CallError::Timeout => {
                tracing::warn!(plugin = %ctx.name, event = %method, "WebAssembly NRI plugin ran past its deadline; discarding its instance");
                ctx.record(Discard::Timeout { counted: true });
            }
            e => {
                tracing::warn!(plugin = %ctx.name, event = %method, error = %describe(e), "WebAssembly NRI plugin failed; discarding its instance");
                ctx.record(Discard::Failed(describe(e)));
            }
        }
    }
    res
}

fn closed_failure() -> PluginFailure {
    PluginFailure::Disconnected {
        reason: "WebAssembly plugin closed".into(),
    }
}

/// The failure of a call that ended with `e`: the caller waited `waited`
/// at most, the guest ran for `guest_time` at most.
fn failure(
    e: CallError,
    method: &str,
    (waited, guest_time): (Duration, Duration),
) -> PluginFailure {
    match e {
        CallError::Status(message) => PluginFailure::Status {
            code: i32::from(nri_ttrpc::Code::Unknown),
            message,
        },
        CallError::CallerLeft => PluginFailure::Timeout { timeout: waited },
        CallError::Timeout => PluginFailure::Timeout {
            timeout: guest_time,
        },
        CallError::Fatal(reason) => PluginFailure::Disconnected { reason },
        CallError::Abi(e) => PluginFailure::InvalidResponse {
            message: format!("{method} answer refused: {e}"),
        },
        CallError::Closed => closed_failure(),
        CallError::NoMethod => PluginFailure::Unimplemented {
            method: method.to_owned(),
            message: "the WebAssembly plugin does not export it".into(),
        },
    }
}

/// The WAT guests of the integration tests.
#[cfg(all(
    test,
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
#[path = "../../tests/wasm_util/mod.rs"]
mod test_guests;

#[cfg(all(
    test,
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::wasm::WasmLimits;
    use test_guests::{Wat, Work, a_thread_sleeps};

    /// A guest whose CreateContainer sleeps one minute in WASI
    /// `poll_oneoff`.
    fn sleeper() -> Vec<u8> {
        Wat::new(nri_api::EventMask::EMPTY)
            .work(
                "plugin_create_container",
                Work::Sleep(Duration::from_secs(60)),
            )
            .wasm()
    }

    /// Closing a plugin whose guest sleeps in `poll_oneoff` (its call has
    /// a minute left) ends the call within the sleep's closing check, not
    /// at the call's deadline, and frees the thread it ran on.
    #[tokio::test(flavor = "multi_thread")]
    async fn closing_ends_a_call_sleeping_in_the_guest() {
        let deadline = Instant::now() + Duration::from_secs(10);
        let image = Image::compile(&sleeper(), &WasmLimits::default()).unwrap();
        let guest = image
            .instantiate("10-sleeper", deadline, &CancellationToken::new())
            .unwrap();
        let origin = Arc::new(Origin {
            plugin: crate::launch::DiscoveredPlugin {
                id: nri_merge::PluginId::new("10", "sleeper").unwrap(),
                path: "10-sleeper".into(),
                config: String::new(),
                wasm: true,
            },
            image: Arc::new(image),
            admission: Arc::new(crate::grants::Admission::new(
                nri_merge::Participant::default(),
                None,
            )),
        });
        let conn = Arc::new(WasmConn::new(
            "10-sleeper".into(),
            guest,
            CancellationToken::new(),
            Duration::from_secs(60),
            origin,
        ));
        let call = tokio::spawn({
            let conn = conn.clone();
            async move {
                conn.call(
                    nri_api::method::CREATE_CONTAINER,
                    Bytes::new(),
                    Duration::from_secs(60),
                )
                .await
            }
        });
        // Close once the guest sleeps in poll_oneoff.
        let end = Instant::now() + Duration::from_secs(20);
        while !a_thread_sleeps() {
            assert!(Instant::now() < end, "the guest never slept");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let closing = Instant::now();
        conn.close();
        let res = tokio::time::timeout(Duration::from_secs(5), call)
            .await
            .expect("the call ended soon after the close")
            .unwrap();
        assert!(
            matches!(res, Err(PluginFailure::Disconnected { .. })),
            "{res:?}"
        );
        assert!(closing.elapsed() < Duration::from_secs(5));
        assert!(!a_thread_sleeps(), "the guest's thread still sleeps");
    }
}
