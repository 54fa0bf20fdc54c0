//! Caller-driven reading: the trunk reader future lives in a slot that its
//! task polls, or a writer waiting for its answer polls in its own task
//! ([`ReaderDriver`]).
//!
//! With a reader task alone, each answer is read by that task and handed
//! to the waiting call, which tokio may run on another worker of a
//! multi-thread runtime (a cross-CPU wake-up per answer). A call that
//! drives the reader reads its answer itself, in one poll.

use std::pin::Pin;
use std::sync::{Arc, Mutex, TryLockError};
use std::task::{Context, Poll, Waker};

use crate::sync::lock;

/// The trunk reader future.
pub(crate) type ReaderFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Who is woken when the reader can make progress.
#[derive(Default)]
struct Wakers {
    /// The reader task's waker.
    task: Mutex<Option<Waker>>,
    /// The writer driving the reader, if one is. One lock for its waker
    /// and its flag: a wake-up and a writer that stops driving at the same
    /// moment then agree on who got the wake-up.
    driver: Mutex<Driver>,
}

/// The writer driving the reader.
#[derive(Default)]
struct Driver {
    waker: Option<Waker>,
    /// Set when a wake-up went to this writer, cleared when the reader is
    /// polled: a writer that stops driving with it set passes the wake-up
    /// on to the task.
    woken: bool,
}

impl Wakers {
    fn wake_task(&self) {
        if let Some(w) = lock(&self.task).as_ref() {
            w.wake_by_ref();
        }
    }
}

/// The one waker the reader is polled with: wakes the driving writer, if
/// any, else the reader task.
struct ReaderWake(Arc<Wakers>);

impl std::task::Wake for ReaderWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let driver = {
            let mut driver = lock(&self.0.driver);
            driver.woken = driver.waker.is_some();
            driver.waker.clone()
        };
        match driver {
            Some(w) => w.wake(),
            None => self.0.wake_task(),
        }
    }
}

/// The trunk reader, polled by its task or by a driving writer.
pub(crate) struct ReaderSlot {
    future: Mutex<Option<ReaderFuture>>,
    wakers: Arc<Wakers>,
    wake: Waker,
}

impl ReaderSlot {
    pub(crate) fn new() -> ReaderSlot {
        let wakers = Arc::new(Wakers::default());
        ReaderSlot {
            future: Mutex::new(None),
            wake: Waker::from(Arc::new(ReaderWake(Arc::clone(&wakers)))),
            wakers,
        }
    }

    /// Puts the reader future in the slot.
    pub(crate) fn set(&self, reader: ReaderFuture) {
        *lock(&self.future) = Some(reader);
    }

    /// Drops the reader future unless it is being polled (that poll then
    /// sees the trunk's end and lets go of it), and wakes the reader task,
    /// which ends once the future is gone.
    pub(crate) fn release(&self) {
        if let Ok(mut slot) = self.future.try_lock() {
            drop(slot.take());
        }
        self.wakers.wake_task();
    }

    /// Polls the reader for the reader task (`task`) or for a driving
    /// writer. `Ready` once the reader has ended.
    ///
    /// One poller at a time; the other returns `Pending`. The reader is
    /// always polled with the same waker (`ReaderWake`), which wakes the
    /// writer that is driving it, if any, and the reader task otherwise; a
    /// writer that stops driving ([`Self::stop_driving`]) passes on to the
    /// task a wake-up it took without polling the reader for it.
    pub(crate) fn poll(&self, cx: &mut Context<'_>, task: bool) -> Poll<()> {
        if task {
            set_waker(&mut lock(&self.wakers.task), cx);
        } else {
            set_waker(&mut lock(&self.wakers.driver).waker, cx);
        }
        let mut slot = match self.future.try_lock() {
            Ok(slot) => slot,
            Err(TryLockError::WouldBlock) => return Poll::Pending,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
        };
        let Some(reader) = slot.as_mut() else {
            return Poll::Ready(());
        };
        lock(&self.wakers.driver).woken = false;
        match reader.as_mut().poll(&mut Context::from_waker(&self.wake)) {
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
    pub(crate) fn stop_driving(&self) {
        let woke = {
            let mut driver = lock(&self.wakers.driver);
            driver.waker = None;
            std::mem::take(&mut driver.woken)
        };
        if woke {
            self.wakers.wake_task();
        }
    }
}

/// Keeps `cx`'s waker in `slot` (unless the one there wakes the same task).
fn set_waker(slot: &mut Option<Waker>, cx: &Context<'_>) {
    if !slot.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
        *slot = Some(cx.waker().clone());
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
/// From [`MuxWriteHalf::reader_driver`](crate::MuxWriteHalf::reader_driver).
/// Contract: a writer that polled the reader must call
/// [`done`](Self::done) when it stops waiting (answer received, timeout,
/// cancellation): until then the reader's wake-ups go to that writer, not
/// to the reader task.
#[derive(Clone)]
pub struct ReaderDriver {
    pub(crate) conn: crate::ConnId,
    pub(crate) slot: Arc<ReaderSlot>,
    /// Keeps the trunk (and so the slot's reader) alive.
    pub(crate) _keep: Arc<dyn Send + Sync>,
}

impl std::fmt::Debug for ReaderDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReaderDriver")
            .field("conn", &self.conn)
            .finish_non_exhaustive()
    }
}

impl ReaderDriver {
    /// Polls the trunk reader with the caller's context, unless the reader
    /// task (or another writer) is polling it right now. Whatever arrives
    /// is delivered as usual; the caller learns of its answer from its own
    /// channel.
    pub fn poll(&self, cx: &mut Context<'_>) {
        let _ = self.slot.poll(cx, false);
    }

    /// Tells the reader that this writer no longer waits (call it after
    /// [`poll`](Self::poll), once per wait).
    pub fn done(&self) {
        self.slot.stop_driving();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll, Wake, Waker};

    use super::{ReaderSlot, lock};

    /// Counts its wake-ups.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Count {
        fn get(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }
    }

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A slot whose reader never finishes, with a counted task and writer.
    fn slot() -> (ReaderSlot, Arc<Count>, Arc<Count>) {
        let slot = ReaderSlot::new();
        slot.set(Box::pin(std::future::pending()));
        let (task, writer) = (Arc::new(Count::default()), Arc::new(Count::default()));
        *lock(&slot.wakers.task) = Some(Waker::from(Arc::clone(&task)));
        (slot, task, writer)
    }

    fn drive(slot: &ReaderSlot, writer: &Arc<Count>) {
        let waker = Waker::from(Arc::clone(writer));
        assert_eq!(
            slot.poll(&mut Context::from_waker(&waker), false),
            Poll::Pending
        );
    }

    #[test]
    fn wake_ups_go_to_the_driving_writer_then_back_to_the_task() {
        let (slot, task, writer) = slot();
        slot.wake.wake_by_ref();
        assert_eq!(
            (task.get(), writer.get()),
            (1, 0),
            "nobody drives: the task"
        );
        drive(&slot, &writer);
        slot.wake.wake_by_ref();
        assert_eq!((task.get(), writer.get()), (1, 1), "the driving writer");
        // The writer polled the reader again for its wake-up, then stopped:
        // nothing to pass on.
        drive(&slot, &writer);
        slot.stop_driving();
        assert_eq!((task.get(), writer.get()), (1, 1));
        slot.wake.wake_by_ref();
        assert_eq!(
            (task.get(), writer.get()),
            (2, 1),
            "stopped: the task again"
        );
    }

    /// A writer that stops driving after a wake-up it did not poll the
    /// reader for passes it on to the task: otherwise input that arrived
    /// would stay unread, and a call still waiting for it would end only at
    /// its timeout.
    #[test]
    fn a_wake_up_the_writer_did_not_use_is_passed_on_when_it_stops() {
        let (slot, task, writer) = slot();
        drive(&slot, &writer);
        slot.wake.wake_by_ref();
        assert_eq!((task.get(), writer.get()), (0, 1));
        slot.stop_driving();
        assert_eq!(task.get(), 1, "passed on");
        slot.stop_driving();
        assert_eq!(task.get(), 1, "passed on once");
    }
}
