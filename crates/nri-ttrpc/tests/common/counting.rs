//! A global allocator that counts, per thread, the allocations of
//! [`BIG`] bytes or more (install it with `#[global_allocator]` in the
//! test binary that needs it).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Allocations of at least this many bytes are counted.
pub const BIG: usize = 4096;

thread_local! {
    static BIG_ALLOCS: Cell<usize> = const { Cell::new(0) };
}

/// Counts large allocations and forwards everything to `System`.
pub struct Counting;

#[allow(unsafe_code)]
// SAFETY: forwards every call to `System` unchanged; the counter is a
// const-initialised thread-local `Cell`, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() >= BIG {
            let _ = BIG_ALLOCS.try_with(|c| c.set(c.get() + 1));
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Large allocations made by this thread so far.
pub fn big_allocs() -> usize {
    BIG_ALLOCS.with(Cell::get)
}
