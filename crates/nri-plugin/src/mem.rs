//! Giving memory back to the OS after a synchronization.

/// Returns the heap memory freed by a synchronization to the OS.
///
/// glibc keeps freed memory in its arenas (the decoded state of a large
/// synchronization is tens of MB in many small blocks), so without this the
/// plugin's RSS stays at its synchronization peak. `malloc_trim(0)` releases
/// the free pages; it is called once per completed synchronization. A no-op
/// on other C libraries (musl returns freed memory itself) and when a plugin
/// installs its own global allocator (glibc's heap is then nearly empty).
pub(crate) fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    malloc_trim();
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
mod glibc {
    // Declared here rather than through the `libc` crate to keep the SDK's
    // dependency list as it is.
    unsafe extern "C" {
        /// glibc's `int malloc_trim(size_t pad)`.
        // SAFETY: the declaration matches glibc's prototype (`size_t` is
        // `usize` and `int` is `c_int` on every Linux target). The call takes
        // a plain integer, only walks the allocator's own free lists under
        // its own locks, and may be made from any thread at any time, so it
        // is safe to call.
        pub(super) safe fn malloc_trim(pad: usize) -> std::ffi::c_int;
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn malloc_trim() {
    // The result (whether memory was released) is not needed.
    let _released = glibc::malloc_trim(0);
}
