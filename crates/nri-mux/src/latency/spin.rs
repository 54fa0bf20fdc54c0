//! Adaptive spin-before-park for the trunk reader.
//!
//! Waking a thread that sleeps in `epoll_wait` costs a context switch, and
//! on a virtual machine whose other vCPU has gone idle, tens of
//! microseconds more (measured here: about 40 µs per wake-up, two per round
//! trip). NRI traffic is request/answer: after this side writes a message,
//! the peer often answers soon. So after a write the reader polls the
//! socket for up to the budget (yielding to other tasks between polls)
//! before it parks.
//!
//! Whether that pays is learned: the reader spins after one write in
//! 2^`level`. A spin that sees the answer within half the budget (a quick
//! *hit*) lowers the level by one, one that runs out (a *miss*) raises it,
//! up to [`MAX_BACKOFF`] (one write in 64). Answers to writes the reader
//! did not spin after teach it too: one that came within half the budget
//! even though the reader first had to wake up counts as a quick hit, and
//! one that came more than [`FAR`] budgets after the write (events a
//! node's pace apart) turns spinning off until answers come quickly again,
//! so a plugin that gets an event every few milliseconds never spins. A
//! parked reader sees an answer only after its own wake-up, so an
//! observed answer is slower than the real one: that is why only quick
//! ones count as hits, and only very slow ones as misses.
//!
//! [`SpinState`] holds the decision (no I/O, no clock: times are passed in);
//! [`SpinToken`] keeps to one spinning reader per process, so several
//! connections never burn several CPUs at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Highest backoff: a reader whose spins keep missing still spins after
/// one write in 2^6 = 64, to notice when answers get quick again.
pub(crate) const MAX_BACKOFF: u32 = 6;

/// An answer observed (not spun for) more than this many budgets after the
/// write turns spinning after writes off ([`Backoff::off`]) until an
/// observed answer is quick again.
pub(crate) const FAR: u64 = 3;

/// How often a chance to spin is taken: one in 2^`level`. A hit lowers
/// the level by one, a miss raises it, up to [`MAX_BACKOFF`]; a backoff
/// turned [`off`](Self::off) takes no chance until a hit. Used for the
/// spin after a write ([`SpinState`]) and the poll after a wake hint.
#[derive(Debug, Clone, Default)]
pub(crate) struct Backoff {
    level: u32,
    /// Chances passed up since the last one taken.
    skipped: u64,
}

impl Backoff {
    /// Whether the next chance would be taken.
    fn due(&self) -> bool {
        self.level <= MAX_BACKOFF && self.skipped + 1 >= 1 << self.level
    }

    /// A chance: whether to take it (counted either way).
    pub(crate) fn take(&mut self) -> bool {
        let take = self.due();
        self.skipped = if take { 0 } else { self.skipped + 1 };
        take
    }

    /// A chance that went by without being offered to [`Self::take`].
    fn skip(&mut self) {
        self.skipped += 1;
    }

    /// A taken chance paid off: take more of them.
    pub(crate) fn hit(&mut self) {
        self.level = self.level.saturating_sub(1);
    }

    /// A taken chance ran out: take fewer of them.
    pub(crate) fn miss(&mut self) {
        // Never lower: a backoff that is off stays off.
        if self.level < MAX_BACKOFF {
            self.level += 1;
        }
    }

    /// Chances are not worth taking at all for now: none is taken until
    /// [`Self::hit`] (which brings the rate back to one in 64).
    fn off(&mut self) {
        self.level = MAX_BACKOFF + 1;
    }
}

/// Whether, and until when, the reader spins before parking. Times are
/// nanoseconds on one monotonic clock; a write time of 0 means "never".
#[derive(Debug, Clone)]
pub(crate) struct SpinState {
    budget_ns: u64,
    /// Spin after one write in 2^level.
    rate: Backoff,
    /// The write the last decision was about, and whether to spin for it.
    decided: (u64, bool),
    /// When the last message was read.
    last_read_ns: u64,
}

impl SpinState {
    pub(crate) fn new() -> Self {
        SpinState {
            budget_ns: 0,
            rate: Backoff::default(),
            decided: (0, false),
            last_read_ns: 0,
        }
    }

    /// Sets the budget (zero: never spin).
    pub(crate) fn set_budget(&mut self, budget: Duration) {
        self.budget_ns = u64::try_from(budget.as_nanos()).unwrap_or(u64::MAX);
    }

    /// A message was read at `now`; `last_write` is when this side last
    /// wrote. For a write the reader did not spin after (it was parked and
    /// not woken for that write, or that write was not one to spin after),
    /// the chance counts as skipped, and how long the answer took is
    /// learnt from: within half the budget (the reader's wake-up
    /// included), spinning would have paid; more than [`FAR`] budgets, the
    /// peer's answers are a node's pace apart and spinning is turned off.
    pub(crate) fn on_message(&mut self, now: u64, last_write: u64) {
        if self.budget_ns > 0
            && last_write > self.last_read_ns
            && self.decided != (last_write, true)
        {
            if self.decided.0 != last_write {
                self.rate.skip();
                self.decided = (last_write, false);
            }
            let took = now.saturating_sub(last_write);
            if took <= self.budget_ns / 2 {
                self.rate.hit();
            } else if took > self.budget_ns.saturating_mul(FAR) {
                self.rate.off();
            }
        }
        self.last_read_ns = now;
    }

    /// A spin ended: it saw data (`hit`) or ran out. `waited` is how long
    /// after the write the data came (for a hit).
    ///
    /// Only a hit within half the budget makes spinning more likely: a spin
    /// costs the CPU time it lasts, and one that waits most of its budget
    /// for the answer (a peer whose turn-around is about the budget, as the
    /// Go runtime's is for a plugin) costs far more CPU than the wake-up it
    /// saves. Such a late hit leaves the rate as it is, so misses back it
    /// off.
    pub(crate) fn on_spin(&mut self, hit: bool, waited: u64) {
        if hit {
            if waited <= self.budget_ns / 2 {
                self.rate.hit();
            }
        } else {
            self.rate.miss();
        }
    }

    /// Whether the reader would spin after the next write (writers then
    /// wake a parked reader so that it can).
    pub(crate) fn wants_next_write(&self) -> bool {
        self.budget_ns > 0 && self.rate.due()
    }

    /// When the reader, about to park at `now`, should stop spinning:
    /// `Some(deadline)` if this side wrote since the last message read,
    /// that write is one to spin after, and the budget after it is not used
    /// up yet.
    pub(crate) fn deadline(&mut self, now: u64, last_write: u64) -> Option<u64> {
        if self.budget_ns == 0 || last_write <= self.last_read_ns {
            return None;
        }
        if self.decided.0 != last_write {
            self.decided = (last_write, self.rate.take());
        }
        if !self.decided.1 {
            return None;
        }
        let deadline = last_write.saturating_add(self.budget_ns);
        (now < deadline).then_some(deadline)
    }
}

/// Set while some reader of this process spins.
static SPINNING: AtomicBool = AtomicBool::new(false);

/// The right to spin, held by one reader of the process at a time.
#[derive(Debug)]
pub(crate) struct SpinToken(());

impl SpinToken {
    /// `None` if another reader is spinning.
    pub(crate) fn acquire() -> Option<SpinToken> {
        SPINNING
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| SpinToken(()))
    }
}

impl Drop for SpinToken {
    fn drop(&mut self) {
        SPINNING.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1_000;

    fn state(budget_us: u64) -> SpinState {
        let mut s = SpinState::new();
        s.set_budget(Duration::from_micros(budget_us));
        s
    }

    #[test]
    fn never_spins_without_a_budget() {
        let mut s = state(0);
        assert!(!s.wants_next_write());
        assert_eq!(s.deadline(21 * US, 20 * US), None);
    }

    #[test]
    fn spins_after_a_write_until_the_budget_after_it_is_used_up() {
        let mut s = state(50);
        assert!(s.wants_next_write());
        // Wrote at 10: spin until 60.
        assert_eq!(s.deadline(11 * US, 10 * US), Some(60 * US));
        assert_eq!(s.deadline(59 * US, 10 * US), Some(60 * US));
        assert_eq!(s.deadline(60 * US, 10 * US), None);
        // The answer was read at 30: nothing written since, park.
        s.on_message(30 * US, 10 * US);
        assert_eq!(s.deadline(31 * US, 10 * US), None);
    }

    #[test]
    fn misses_back_off_to_one_write_in_64_and_hits_come_back() {
        let mut s = state(50);
        let mut t = 100 * US;
        let mut spins_after = |s: &mut SpinState, n: u64| {
            let mut spun = 0;
            for _ in 0..n {
                t += 1_000 * US;
                let write = t;
                let will = s.wants_next_write();
                // A reader is only woken for writes it wants to spin after;
                // the others it sees when the answer arrives.
                let spin = will && s.deadline(write + US, write).is_some();
                assert_eq!(will, spin, "wants_next_write must predict the decision");
                if spin {
                    // Asking again about the same write gives the same answer.
                    assert!(s.deadline(write + 2 * US, write).is_some());
                    spun += 1;
                    s.on_spin(false, 0);
                }
                // Slower than the budget, not far slower.
                s.on_message(write + 150 * US, write);
            }
            spun
        };
        // Every spin misses: after the first few, one write in 64.
        let first = spins_after(&mut s, 200);
        assert!((6..=12).contains(&first), "{first}");
        let later = spins_after(&mut s, 640);
        assert_eq!(later, 10);
        // Late hits (after more than half the 50 us budget) do not make
        // spinning more likely; quick ones lower the backoff one step
        // each, back to every write.
        for _ in 0..MAX_BACKOFF {
            s.on_spin(true, 26 * US);
        }
        assert_eq!(s.rate.level, MAX_BACKOFF);
        for _ in 0..MAX_BACKOFF {
            s.on_spin(true, 25 * US);
        }
        assert!(s.wants_next_write());
        assert_eq!(s.rate.level, 0);
    }

    /// Writes `n` messages 1 ms apart, each answered `answer` after it;
    /// spins end as a spinning reader would see them. Returns how many
    /// writes were spun after.
    fn answered_after(s: &mut SpinState, t: &mut u64, n: u64, answer: u64) -> u64 {
        let mut spun = 0;
        for _ in 0..n {
            *t += 1_000 * US;
            let write = *t;
            if s.deadline(write + US, write).is_some() {
                spun += 1;
                let hit = answer <= s.budget_ns;
                s.on_spin(hit, answer);
                if hit {
                    s.on_message(write + answer, write);
                    continue;
                }
            }
            s.on_message(write + answer, write);
        }
        spun
    }

    #[test]
    fn answers_a_nodes_pace_apart_turn_spinning_off_and_quick_ones_back_on() {
        let mut s = state(300);
        let mut t = 0;
        // Every answer 2 ms after the write: after the first spin misses,
        // the observed answers turn spinning off for good.
        let first = answered_after(&mut s, &mut t, 10, 2_000 * US);
        assert_eq!(first, 1);
        assert_eq!(answered_after(&mut s, &mut t, 1_000, 2_000 * US), 0);
        assert!(!s.wants_next_write());
        // A burst: answers 60 us after the write (the reader's wake-up
        // included). Each lowers the backoff; within a few events the
        // reader spins after every write.
        answered_after(&mut s, &mut t, u64::from(MAX_BACKOFF) + 1, 60 * US);
        assert!(s.wants_next_write());
        let burst = answered_after(&mut s, &mut t, 100, 60 * US);
        assert_eq!(burst, 100);
    }

    #[test]
    fn answers_a_little_slower_than_the_budget_keep_one_spin_in_64() {
        let mut s = state(300);
        let mut t = 0;
        answered_after(&mut s, &mut t, 100, 400 * US);
        assert_eq!(answered_after(&mut s, &mut t, 640, 400 * US), 10);
        // Late observed answers (after half the budget, within it) change
        // nothing either way.
        assert_eq!(answered_after(&mut s, &mut t, 640, 200 * US), 10);
    }

    #[test]
    fn a_backoff_that_is_off_stays_off_until_a_hit() {
        let mut h = Backoff::default();
        h.off();
        h.miss();
        assert!((0..1000).all(|_| !h.take()));
        h.hit();
        assert_eq!(h.level, MAX_BACKOFF);
    }

    #[test]
    fn a_backoff_takes_every_chance_while_they_hit_and_one_in_64_after_misses() {
        let mut h = Backoff::default();
        // Every chance is taken while they hit.
        for _ in 0..10 {
            assert!(h.take());
            h.hit();
        }
        // Misses: one chance in 2, 4, ... 64.
        let mut polled = 0;
        for _ in 0..1000 {
            if h.take() {
                polled += 1;
                h.miss();
            }
        }
        assert!((15..=25).contains(&polled), "{polled}");
        assert_eq!(h.level, MAX_BACKOFF);
        // Six hits bring it back to every chance.
        for _ in 0..MAX_BACKOFF {
            h.hit();
        }
        assert!(h.take() && h.take());
    }

    #[test]
    fn one_spinner_per_process() {
        let a = SpinToken::acquire();
        assert!(a.is_some());
        assert!(SpinToken::acquire().is_none());
        drop(a);
        assert!(SpinToken::acquire().is_some());
    }
}
