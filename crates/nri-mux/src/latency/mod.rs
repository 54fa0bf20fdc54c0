//! The latency machinery of the trunk, behind one boundary: everything
//! that makes a round trip quicker than a plain reader task would, chosen
//! with one [`ReadStrategy`] when the [`Mux`] is made.
//!
//! With [`ReadStrategy::Plain`] the trunk reader is an ordinary reader
//! task on the reactor: it reads what comes, hands it to the connections
//! and parks. [`ReadStrategy::Spin`] adds, each bounded by its budget:
//!
//! * **spin after a write**: after this side writes a message,
//!   the reader polls the socket for the answer before it parks, adapting
//!   how often it does so to how often it pays;
//! * **the rest of a message**: a read that ends inside a message polls
//!   briefly for the rest (the peer is writing it now);
//! * **wake hints**: a peer that announced it takes them
//!   ([`Mux::accept_wake_hints`]) polls for a message another side told it
//!   is coming ([`Mux::send_wake_hint`]);
//! * **leaving the reactor while polling** on a multi-thread runtime.
//!
//! Independent of the strategy, a writer that waits for its answer may
//! run the reader in its own task ([`MuxWriteHalf::reader_driver`]). What each costs and when it pays: docs/runtime/spinning.md.
//! The counters are in [`LatencyStats`], apart from the trunk's
//! [`MuxStats`](crate::MuxStats).

mod driven;
mod spin;
mod watch;

use std::io::{self, Read};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::Poll;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

pub use driven::ReaderDriver;
pub(crate) use driven::ReaderSlot;

use crate::codec::Extension;
use crate::{Mux, MuxWriteHalf};
use spin::{Backoff, SpinState, SpinToken};
use watch::{ReadWatch, retry_read};

/// How long the trunk reader polls for the rest of a message it got part
/// of before it parks ([`ReadSide::read_rest`]).
const REST_WAIT_NS: u64 = 20_000;

/// How the trunk reader waits for data, chosen when the [`Mux`] is made
/// ([`Mux::with_strategy`]) and changeable later
/// ([`Mux::set_read_strategy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ReadStrategy {
    /// Park in the reactor whenever there is nothing to read.
    #[default]
    Plain,
    /// Poll the socket instead of parking where an answer or the rest of
    /// a message is likely to come soon, for up to `budget` (see the
    /// [module docs](self)). A zero budget is [`Plain`](Self::Plain).
    ///
    /// After this side writes a message the reader polls for the answer
    /// for up to `budget`; each poll that runs out halves how often it
    /// does so (down to after one write in 64), each that sees data early
    /// (within half the budget) doubles it (up to every write). Answers it
    /// did not poll for count too: one that came early even though the
    /// reader had to wake up for it doubles the rate, one that came more
    /// than three budgets after the write (events far apart) stops the
    /// polling until answers come early again. A read
    /// that ends inside a message polls for the rest for up to 20 µs. At
    /// most one reader of the process polls at a time; between polls it
    /// gives the CPU to other threads (`sched_yield`) but keeps its tokio
    /// worker, so a task queued behind it on that worker waits up to the
    /// budget.
    Spin {
        /// The longest poll after a write (or a wake hint).
        budget: Duration,
    },
}

impl ReadStrategy {
    fn budget_ns(self) -> u64 {
        match self {
            ReadStrategy::Plain => 0,
            ReadStrategy::Spin { budget } => u64::try_from(budget.as_nanos()).unwrap_or(u64::MAX),
        }
    }
}

/// Counters of the latency machinery of a trunk, from
/// [`Mux::latency_stats`]: for benchmarks and tests.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct LatencyStats {
    /// Reads that found data while the reader polled after a write
    /// instead of parking.
    pub spin_hits: u64,
    /// Such polls that used up their budget; the reader parked after them.
    pub spin_misses: u64,
    /// Reads that ended inside a message and found its rest while the
    /// reader polled briefly instead of parking.
    pub rest_hits: u64,
    /// Such polls that found nothing; the reader parked after them.
    pub rest_misses: u64,
    /// Times the trunk reader registered the socket with the reactor to
    /// park. Once for the trunk's life, except on a multi-thread runtime
    /// with spinning on: there the reader leaves the reactor while it polls
    /// and registers again each time it parks after polling.
    pub reactor_registrations: u64,
    /// Wake hints written ([`Mux::send_wake_hint`]).
    pub wake_hints_sent: u64,
    /// Wake hints read (acted on or not).
    pub wake_hints_received: u64,
    /// Polls after a wake hint that read the announced message.
    pub hint_hits: u64,
    /// Polls after a wake hint that used up the budget; the reader parked.
    pub hint_misses: u64,
}

#[derive(Default)]
struct Counters {
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

/// The latency state a trunk shares between its writers and its reader.
pub(crate) struct Latency {
    /// Origin of the nanosecond times below.
    epoch: std::time::Instant,
    /// When this side last wrote a message; 0: never.
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
    counters: Counters,
}

impl Latency {
    pub(crate) fn new(strategy: ReadStrategy) -> Latency {
        Latency {
            epoch: std::time::Instant::now(),
            last_write_ns: AtomicU64::new(0),
            spin_budget_ns: AtomicU64::new(strategy.budget_ns()),
            spin_wanted: AtomicBool::new(false),
            wrote: Notify::new(),
            spin_requested: AtomicBool::new(false),
            accepts_hints: AtomicBool::new(false),
            peer_accepts_hints: AtomicBool::new(false),
            counters: Counters::default(),
        }
    }

    /// Nanoseconds since `epoch`, never 0.
    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos())
            .unwrap_or(u64::MAX)
            .saturating_add(1)
    }

    /// A message is about to be written. Returns whether the reader wants
    /// to hear of it ([`Self::written`]).
    pub(crate) fn writing(&self) -> bool {
        let wanted = self.spin_wanted.load(Ordering::Relaxed);
        if self.spin_budget_ns.load(Ordering::Relaxed) > 0 {
            self.last_write_ns
                .fetch_max(self.now_ns(), Ordering::Relaxed);
        }
        wanted
    }

    /// A message was written; `wanted` from [`Self::writing`]. A writer
    /// that drives the reader (`driving`) needs not wake it.
    pub(crate) fn written(&self, wanted: bool, driving: bool) {
        if wanted {
            self.spin_requested.store(true, Ordering::Release);
            if !driving {
                self.wrote.notify_one();
            }
        }
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

    fn stats(&self) -> LatencyStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LatencyStats {
            spin_hits: get(&c.spin_hits),
            spin_misses: get(&c.spin_misses),
            rest_hits: get(&c.rest_hits),
            rest_misses: get(&c.rest_misses),
            reactor_registrations: get(&c.reactor_registrations),
            wake_hints_sent: get(&c.wake_hints_sent),
            wake_hints_received: get(&c.wake_hints_received),
            hint_hits: get(&c.hint_hits),
            hint_misses: get(&c.hint_misses),
        }
    }
}

/// Whether the writer of a connection drives the trunk reader while it
/// waits for its answer ([`MuxWriteHalf::reader_driver`]): its writes then
/// need not wake the reader task to spin.
#[derive(Default)]
pub(crate) struct WriterDrives(AtomicBool);

impl WriterDrives {
    pub(crate) fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// How the reader's wait before parking ended.
pub(crate) enum Parked {
    /// Data (or end of file, or an error) was read.
    Read(io::Result<usize>),
    /// This side wrote a message the reader wants to poll for: go back
    /// and poll.
    Wrote,
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

/// The trunk reader's side of the machinery: its socket and what it has
/// learnt about when polling pays.
pub(crate) struct ReadSide {
    lat: Arc<Latency>,
    watch: ReadWatch,
    spin: SpinState,
    /// The budget `spin` was last given.
    spin_budget: u64,
    /// When the last wake hint came, if no message came after it.
    hinted: Option<u64>,
    /// How often a hint is polled after. Unlike a spin after a write, a
    /// late hit counts as a hit: this side wrote nothing, the message it
    /// polls for comes when the sender gets to it.
    hints: Backoff,
    /// Whether the reader wants to hear of the next write.
    wanted: bool,
}

impl ReadSide {
    /// The reader side of `sock`; call it on the reader's runtime.
    pub(crate) fn new(lat: Arc<Latency>, sock: StdUnixStream) -> ReadSide {
        let multi_thread = matches!(
            tokio::runtime::Handle::current().runtime_flavor(),
            tokio::runtime::RuntimeFlavor::MultiThread
        );
        ReadSide {
            lat,
            watch: ReadWatch::new(sock, multi_thread),
            spin: SpinState::new(),
            spin_budget: 0,
            hinted: None,
            hints: Backoff::default(),
            wanted: false,
        }
    }

    /// A whole frame on [`EXTENSION_CONN`](crate::EXTENSION_CONN) was read.
    pub(crate) fn on_extension(&mut self, payload: &[u8]) {
        let lat = &self.lat;
        match Extension::from_payload(payload) {
            Some(Extension::WakeHintsAccepted) => {
                lat.peer_accepts_hints.store(true, Ordering::Relaxed);
            }
            Some(Extension::WakeHint) => {
                lat.counters
                    .wake_hints_received
                    .fetch_add(1, Ordering::Relaxed);
                if lat.accepts_hints.load(Ordering::Relaxed) {
                    self.hinted = Some(lat.now_ns());
                }
            }
            // A later extension we do not know: ignored, as Go peers
            // ignore all of them.
            _ => tracing::debug!(
                len = payload.len(),
                "mux: ignoring an unknown extension frame"
            ),
        }
    }

    /// A piece of a frame for a connection was read (`first`: its first).
    pub(crate) fn on_message(&mut self, first: bool) {
        self.hinted = None;
        if self.spin_budget > 0 && first {
            let last_write = self.lat.last_write_ns.load(Ordering::Relaxed);
            self.spin.on_message(self.lat.now_ns(), last_write);
        }
    }

    /// Before the reader parks: polls the socket where data is likely to
    /// come soon (the rest of a message when `mid_message`, the message a
    /// wake hint announced, the answer to a write) and returns what it
    /// read, or `None` to park.
    pub(crate) fn poll_before_park(
        &mut self,
        chunk: &mut [u8],
        mid_message: bool,
        ended: &CancellationToken,
    ) -> Option<io::Result<usize>> {
        let budget = self.lat.spin_budget_ns.load(Ordering::Relaxed);
        if budget != self.spin_budget {
            self.spin_budget = budget;
            self.spin.set_budget(Duration::from_nanos(budget));
        }
        let mid_message = self.spin_budget > 0 && mid_message;
        let mut spun = if mid_message {
            self.read_rest(chunk, ended)
        } else {
            None
        };
        if let Some(at) = self.hinted.take()
            && self.spin_budget > 0
            && !mid_message
            && self.hints.take()
        {
            spun = self.poll_after_hint(at, chunk, ended);
        }
        if spun.is_none() {
            spun = self.spin_after_write(chunk, ended);
        }
        let wanted = self.spin.wants_next_write();
        self.lat.spin_wanted.store(wanted, Ordering::Relaxed);
        if !wanted {
            self.lat.spin_requested.store(false, Ordering::Relaxed);
        }
        self.wanted = wanted;
        spun
    }

    /// Parks until the socket has data, or this side writes a message the
    /// reader wants to poll for.
    pub(crate) async fn park(&mut self, chunk: &mut [u8]) -> Parked {
        let lat = &self.lat;
        tokio::select! {
            biased;
            () = lat.write_to_spin_for(), if self.wanted => Parked::Wrote,
            r = self.watch.read(chunk, &lat.counters.reactor_registrations) => Parked::Read(r),
        }
    }

    fn poll_after_hint(
        &mut self,
        at: u64,
        chunk: &mut [u8],
        ended: &CancellationToken,
    ) -> Option<io::Result<usize>> {
        let deadline = at.saturating_add(self.spin_budget);
        let lat = Arc::clone(&self.lat);
        let c = &lat.counters;
        match self.spin_read(chunk, deadline, ended, (&c.hint_hits, &c.hint_misses)) {
            SpinOutcome::Read(r) => {
                self.hints.hit();
                Some(r)
            }
            SpinOutcome::Missed => {
                self.hints.miss();
                None
            }
            SpinOutcome::Busy => None,
        }
    }

    fn spin_after_write(
        &mut self,
        chunk: &mut [u8],
        ended: &CancellationToken,
    ) -> Option<io::Result<usize>> {
        // No clock read on this path while spinning is off.
        if self.spin_budget == 0 {
            return None;
        }
        let lat = Arc::clone(&self.lat);
        let last_write = lat.last_write_ns.load(Ordering::Relaxed);
        let deadline = self.spin.deadline(lat.now_ns(), last_write)?;
        let c = &lat.counters;
        match self.spin_read(chunk, deadline, ended, (&c.spin_hits, &c.spin_misses)) {
            SpinOutcome::Read(r) => {
                let waited = lat.now_ns().saturating_sub(last_write);
                self.spin.on_spin(true, waited);
                Some(r)
            }
            SpinOutcome::Missed => {
                self.spin.on_spin(false, 0);
                None
            }
            SpinOutcome::Busy => None,
        }
    }

    /// Polls the trunk without parking until `deadline`
    /// ([`Self::poll_until`]), if no other reader of the process does.
    fn spin_read(
        &mut self,
        chunk: &mut [u8],
        deadline: u64,
        ended: &CancellationToken,
        (hits, misses): (&AtomicU64, &AtomicU64),
    ) -> SpinOutcome {
        let Some(_token) = SpinToken::acquire() else {
            return SpinOutcome::Busy;
        };
        match self.poll_until(chunk, deadline, ended, hits, misses) {
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
    fn read_rest(
        &mut self,
        chunk: &mut [u8],
        ended: &CancellationToken,
    ) -> Option<io::Result<usize>> {
        let _token = SpinToken::acquire()?;
        let lat = Arc::clone(&self.lat);
        let deadline = lat.now_ns().saturating_add(REST_WAIT_NS);
        let c = &lat.counters;
        self.poll_until(chunk, deadline, ended, &c.rest_hits, &c.rest_misses)
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
        &mut self,
        chunk: &mut [u8],
        deadline: u64,
        ended: &CancellationToken,
        hits: &AtomicU64,
        misses: &AtomicU64,
    ) -> Option<io::Result<usize>> {
        // Out of the reactor while polling (see `ReadWatch`).
        self.watch.leave_reactor();
        let mut rd = self.watch.stream();
        loop {
            match rd.read(chunk) {
                Ok(n) => {
                    hits.fetch_add(1, Ordering::Relaxed);
                    return Some(Ok(n));
                }
                Err(e) if retry_read(&e) => {}
                Err(e) => return Some(Err(e)),
            }
            if self.lat.now_ns() >= deadline || ended.is_cancelled() {
                misses.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            std::thread::yield_now();
        }
    }
}

impl Mux {
    /// Changes how the trunk reader waits for data (see [`ReadStrategy`]),
    /// for instance once the peer is known. Takes effect the next time
    /// the reader would park.
    pub fn set_read_strategy(&self, strategy: ReadStrategy) {
        self.latency()
            .spin_budget_ns
            .store(strategy.budget_ns(), Ordering::Relaxed);
    }

    /// Tells the peer that this side acts on wake hints, and from now on
    /// acts on them: after a [`Extension::WakeHint`] with nothing after it,
    /// the trunk reader polls for the announced message for up to the
    /// budget of its [`ReadStrategy::Spin`] (nothing happens without one)
    /// before it parks, giving the CPU to other threads between polls.
    /// Polls that run out make polling after later hints rarer (down to
    /// one hint in 64), polls that see the message more frequent again.
    /// Counted in [`LatencyStats`].
    ///
    /// Wake hints are our extension of the wire (frames on
    /// [`EXTENSION_CONN`](crate::EXTENSION_CONN)); a Go peer reads the
    /// announcement and drops it, and never sends hints. Call it before
    /// the first message, so that the announcement comes first. Returns
    /// `false` if the trunk has ended.
    pub fn accept_wake_hints(&self) -> bool {
        self.latency().accepts_hints.store(true, Ordering::Relaxed);
        self.inner()
            .write_extension(Extension::WakeHintsAccepted, true)
    }

    /// Whether the peer said it acts on wake hints
    /// ([`Self::accept_wake_hints`]), as far as the trunk reader has read.
    pub fn peer_accepts_wake_hints(&self) -> bool {
        self.latency().peer_accepts_hints.load(Ordering::Relaxed)
    }

    /// Tells the peer that a message for it is on its way soon (for the
    /// runtime: the plugin after the one it is calling now), so that it
    /// can poll instead of going to sleep and be running when the message
    /// comes, instead of paying a wake-up then. Sends nothing, and returns
    /// `false`, unless the peer [accepts hints](Self::peer_accepts_wake_hints);
    /// a hint that the socket does not take at once, whole, is not sent
    /// either (it never waits).
    pub fn send_wake_hint(&self) -> bool {
        let lat = self.latency();
        if !lat.peer_accepts_hints.load(Ordering::Relaxed) {
            return false;
        }
        let sent = self.inner().write_extension(Extension::WakeHint, false);
        if sent {
            lat.counters.wake_hints_sent.fetch_add(1, Ordering::Relaxed);
        }
        sent
    }

    /// The counters of the latency machinery.
    pub fn latency_stats(&self) -> LatencyStats {
        self.latency().stats()
    }

    fn latency(&self) -> &Latency {
        &self.inner().latency
    }
}

impl MuxWriteHalf {
    /// A handle for the writer to drive the trunk reader while it waits for
    /// the answer to what it wrote (see [`ReaderDriver`]). From then on
    /// writes on this connection no longer wake the reader task to spin:
    /// the writer is expected to poll the reader itself.
    pub fn reader_driver(&self) -> ReaderDriver {
        let h = self.handle();
        h.shared.writer_drives.0.store(true, Ordering::Relaxed);
        ReaderDriver {
            conn: h.shared.id,
            slot: Arc::clone(&h.inner().reader),
            _keep: Arc::clone(h) as Arc<dyn Send + Sync>,
        }
    }
}
