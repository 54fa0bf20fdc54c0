//! The trunk reader's socket and its registration with the reactor.

use std::io::{self, Read};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use crate::mux::RETRY_PAUSE;

/// A descriptor owned elsewhere, registered with the reactor without
/// being closed by it (see [`ReadWatch`]).
#[derive(Debug)]
struct FdRef(RawFd);

impl AsRawFd for FdRef {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// The trunk reader's socket and its registration with the reactor, made
/// when the reader parks.
///
/// On a multi-thread runtime with spinning on, the registration is dropped
/// while the reader polls the socket itself (spin, rest of a message): the
/// socket stays in the reactor's epoll set otherwise, and every message
/// arriving then wakes whichever worker is parked in the reactor, which
/// finds nothing to do (the poller reads the data) after costing a
/// cross-CPU wake-up, paid in the peer's write (measured: CreateContainer
/// through 4 no-op plugins, plugin CPU per event 135 -> 85 us, median 210
/// -> 174 us; see docs/runtime/spinning.md). On a current-thread runtime
/// the one thread that could be parked in the reactor is the one polling,
/// so the registration stays; without spinning it is made once.
#[derive(Debug)]
pub(crate) struct ReadWatch {
    /// Declared before `sock` so it is dropped (deregistered) first.
    reg: Option<AsyncFd<FdRef>>,
    sock: StdUnixStream,
    /// Whether polling leaves the reactor (multi-thread runtimes).
    leave_to_poll: bool,
}

impl ReadWatch {
    pub(crate) fn new(sock: StdUnixStream, leave_to_poll: bool) -> ReadWatch {
        ReadWatch {
            reg: None,
            sock,
            leave_to_poll,
        }
    }

    pub(crate) fn stream(&self) -> &StdUnixStream {
        &self.sock
    }

    /// Called before polling the socket without parking.
    pub(crate) fn leave_reactor(&mut self) {
        if self.leave_to_poll {
            self.reg = None;
        }
    }

    /// Registers `sock` for readability unless `reg` holds its
    /// registration.
    #[allow(unsafe_code)]
    fn ensure_registered<'r>(
        reg: &'r mut Option<AsyncFd<FdRef>>,
        sock: &StdUnixStream,
        counter: &AtomicU64,
    ) -> io::Result<&'r AsyncFd<FdRef>> {
        if let Some(r) = reg {
            return Ok(r);
        }
        let fd = FdRef(sock.as_raw_fd());
        // SAFETY: `fd` is `sock`'s descriptor, open for as long as `sock`
        // lives; the registration is dropped before `sock` (field order,
        // and `leave_reactor` only drops it) and `sock` is never replaced,
        // so the registered descriptor stays the same open socket for the
        // registration's whole life.
        let r = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
            .map_err(io::Error::from)?;
        counter.fetch_add(1, Ordering::Relaxed);
        Ok(reg.insert(r))
    }

    /// One read from the trunk, waiting for readability as needed. When the
    /// socket cannot be registered (the reactor is out of memory or epoll
    /// watches) it tries again every `RETRY_PAUSE`, reading the socket in
    /// between, rather than end the trunk. `registrations` counts the
    /// registrations made.
    pub(crate) async fn read(
        &mut self,
        chunk: &mut [u8],
        registrations: &AtomicU64,
    ) -> io::Result<usize> {
        loop {
            let reg = match Self::ensure_registered(&mut self.reg, &self.sock, registrations) {
                Ok(reg) => reg,
                Err(e) => {
                    tracing::debug!(error = %e, "mux: cannot watch the trunk, polling it");
                    tokio::time::sleep(RETRY_PAUSE).await;
                    match (&self.sock).read(chunk) {
                        Err(e) if retry_read(&e) => continue,
                        r => return r,
                    }
                }
            };
            let mut guard = reg.readable().await?;
            match (&self.sock).read(chunk) {
                Ok(n) => {
                    // A stream socket gives all it has: a short read means it
                    // is drained, so wait for the next readiness event rather
                    // than read again just to get `EAGAIN` (one `recvfrom`
                    // per burst). The reactor's tick keeps this safe against
                    // data that arrived meanwhile.
                    if n > 0 && n < chunk.len() {
                        guard.clear_ready();
                    }
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => guard.clear_ready(),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// Whether a failed non-blocking read is worth trying again.
pub(crate) fn retry_read(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}
