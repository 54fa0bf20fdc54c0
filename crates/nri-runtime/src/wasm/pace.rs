//! The size of a guest's fuel slices, kept to a time ([`Pace`]). Fuel
//! counts instructions, not time: what one unit of fuel costs depends on
//! the instructions (and the host functions) a guest runs, on the build
//! and on the machine. The host checks a call's deadline and its plugin's
//! closing between two slices, so the time a slice takes is the time a
//! runaway call can go on past its deadline. Each slice run off the
//! executor is timed, and the next one is made smaller when it took
//! longer than [`SLICE_TIME`] (down to the fuel that fitted in that time
//! at the rate just measured), and larger again, up to the configured
//! slice, when it took much less. A new instance starts at [`MIN_SLICE`]
//! and doubles from there, so even its first slices are timed before
//! they grow, whatever slice is configured.

use std::time::Duration;

/// The time a fuel slice should take: the next slice is cut to what fits
/// in it at the rate the last one ran. Half the bound `docs/runtime/wasm.md`
/// states (10 ms between two checks of a call's deadline), leaving room
/// for one slice that runs slower than the one before it.
pub(crate) const SLICE_TIME: Duration = Duration::from_millis(5);
/// The smallest slice the pace goes down to (or the configured slice, if
/// smaller): a few tens of microseconds of the slowest instructions, so
/// that the cost of a check (about a microsecond) stays small beside it.
pub(crate) const MIN_SLICE: u64 = 10_000;

/// Locals of a module's largest function up to which its slices may be
/// as large as configured.
const LOCALS_AT_FULL_SLICE: u64 = 64;

/// The largest slice for a module whose largest function has
/// `most_locals` locals: the configured `slice`, cut in proportion to
/// the locals past [`LOCALS_AT_FULL_SLICE`]. The engine zeroes a
/// function's locals at each call without charging fuel for them, so a
/// unit of fuel of such calls costs more time (measured: about 15 times
/// an ordinary instruction's at 1,000 locals), and a slice that grew on
/// cheap instructions must stay short enough for them too.
pub(crate) fn max_slice(slice: u64, most_locals: u64) -> u64 {
    if most_locals <= LOCALS_AT_FULL_SLICE {
        return slice;
    }
    let cut = u128::from(slice) * u128::from(LOCALS_AT_FULL_SLICE) / u128::from(most_locals);
    u64::try_from(cut)
        .unwrap_or(u64::MAX)
        .max(MIN_SLICE.min(slice))
}

/// The fuel of a guest's next slice.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pace {
    max: u64,
    now: u64,
}

impl Pace {
    /// Slices of at most `max` fuel (the configured slice), the first of
    /// [`MIN_SLICE`] (or `max`, if smaller).
    pub(crate) fn new(max: u64) -> Self {
        let max = max.max(1);
        Pace {
            max,
            now: MIN_SLICE.min(max),
        }
    }

    /// The fuel of the next slice.
    pub(crate) fn slice(&self) -> u64 {
        self.now
    }

    /// Takes the time of a slice that used `fuel` in `took` into account.
    pub(crate) fn after(&mut self, fuel: u64, took: Duration) {
        if fuel == 0 {
            return;
        }
        if took > SLICE_TIME {
            let fit = u128::from(fuel) * SLICE_TIME.as_nanos() / took.as_nanos().max(1);
            let fit = u64::try_from(fit).unwrap_or(u64::MAX);
            self.now = fit.clamp(MIN_SLICE.min(self.max), self.max);
        } else if took < SLICE_TIME / 4 && fuel >= self.now {
            self.now = self.now.saturating_mul(2).min(self.max);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// A pace grown to `max` by fast slices.
    fn grown(max: u64) -> Pace {
        let mut p = Pace::new(max);
        while p.slice() < max {
            p.after(p.slice(), Duration::ZERO);
        }
        p
    }

    #[test]
    fn many_locals_cut_the_largest_slice() {
        assert_eq!(max_slice(2_000_000, 20), 2_000_000);
        assert_eq!(max_slice(2_000_000, 64), 2_000_000);
        assert_eq!(max_slice(2_000_000, 1_000), 128_000);
        assert_eq!(max_slice(2_000_000, 1_000_000), MIN_SLICE);
        assert_eq!(max_slice(500, 1_000), 500);
    }

    #[test]
    fn a_new_pace_starts_small_and_doubles() {
        let mut p = Pace::new(2_000_000);
        assert_eq!(p.slice(), MIN_SLICE);
        p.after(MIN_SLICE, MS);
        assert_eq!(p.slice(), 2 * MIN_SLICE);
        // Within the time: stays.
        p.after(2 * MIN_SLICE, 3 * MS);
        assert_eq!(p.slice(), 2 * MIN_SLICE);
        // A configured slice of u64::MAX is reached by doubling only.
        let mut huge = Pace::new(u64::MAX);
        huge.after(MIN_SLICE, MS);
        assert_eq!(huge.slice(), 2 * MIN_SLICE);
    }

    #[test]
    fn a_slow_slice_makes_the_next_one_fit_the_slice_time() {
        let mut p = grown(2_000_000);
        assert_eq!(p.slice(), 2_000_000);
        // 2,000,000 units in 40 ms: 250,000 fit in 5 ms.
        p.after(2_000_000, 40 * MS);
        assert_eq!(p.slice(), 250_000);
        // Never below the floor, whatever a slice took.
        p.after(250_000, Duration::from_secs(10));
        assert_eq!(p.slice(), MIN_SLICE);
        // Nor below a configured slice under the floor, nor above it.
        let mut small = Pace::new(1_000);
        assert_eq!(small.slice(), 1_000);
        small.after(1_000, Duration::from_secs(1));
        assert_eq!(small.slice(), 1_000);
        small.after(1_000, Duration::ZERO);
        assert_eq!(small.slice(), 1_000);
    }

    #[test]
    fn fast_slices_grow_back_to_the_configured_slice() {
        let mut p = grown(2_000_000);
        p.after(2_000_000, 400 * MS);
        assert_eq!(p.slice(), 25_000);
        let mut n = 0;
        while p.slice() < 2_000_000 {
            let s = p.slice();
            p.after(s, MS / 10);
            n += 1;
        }
        assert_eq!(n, 7);
        assert_eq!(p.slice(), 2_000_000);
        // A slice within the time, or a call that ended before its slice
        // was used, changes nothing.
        p.after(2_000_000, 3 * MS);
        p.after(10, Duration::ZERO);
        p.after(0, Duration::from_secs(1));
        assert_eq!(p.slice(), 2_000_000);
        let mut q = grown(2_000_000);
        q.after(2_000_000, 10 * MS);
        assert_eq!(q.slice(), 1_000_000);
        q.after(500_000, Duration::ZERO);
        assert_eq!(q.slice(), 1_000_000);
    }
}
