//! Locking shared by the nri-* crates (internal: hidden from the docs and
//! not part of this crate's API; it lives here because every crate of the
//! stack links this one).

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, going on with the data when a thread panicked while holding
/// it. Every critical section of the nri-* crates leaves its data whole at
/// each step, so a poisoned lock says nothing about the data, and one
/// failed task must not take a runtime or a plugin down.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
