//! The trunk's counters ([`MuxStats`]) and the report of dropped frames
//! ([`Mux::on_dropped_frame`](crate::Mux::on_dropped_frame)).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::sync::lock;
use crate::{ConnId, Error};

/// Counters of a trunk, from [`Mux::stats`](crate::Mux::stats).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct MuxStats {
    /// Frames read from the trunk (including dropped ones).
    pub frames_received: u64,
    /// Payload bytes read from the trunk (including dropped ones).
    pub bytes_received: u64,
    /// Messages written (each is one or two frames).
    pub messages_sent: u64,
    /// Frames written.
    pub frames_sent: u64,
    /// Frames dropped because their connection id was not open.
    pub dropped_frames: u64,
    /// Payload bytes of the dropped frames.
    pub dropped_bytes: u64,
    /// The last drop, as an [`Error::UnknownConn`].
    pub last_dropped: Option<Error>,
}

/// What [`Mux::on_dropped_frame`](crate::Mux::on_dropped_frame) calls: the
/// connection id and announced payload length of a frame for a connection
/// that is not open.
type DropObserver = Box<dyn Fn(ConnId, usize) + Send + Sync>;

/// The live counters behind [`MuxStats`], and who hears of dropped frames.
#[derive(Default)]
pub(crate) struct Counters {
    frames_received: AtomicU64,
    bytes_received: AtomicU64,
    messages_sent: AtomicU64,
    frames_sent: AtomicU64,
    dropped_frames: AtomicU64,
    dropped_bytes: AtomicU64,
    last_dropped: Mutex<Option<Error>>,
    /// Told of every dropped frame instead of a warning, if set.
    drop_observer: OnceLock<DropObserver>,
}

impl Counters {
    /// A piece of a frame was read (`first`: the frame's first piece).
    pub(crate) fn received(&self, first: bool, bytes: usize) {
        if first {
            self.frames_received.fetch_add(1, Ordering::Relaxed);
        }
        self.bytes_received
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// A message of `frames` frames was written or queued.
    pub(crate) fn sent(&self, frames: u64) {
        self.messages_sent.fetch_add(1, Ordering::Relaxed);
        self.frames_sent.fetch_add(frames, Ordering::Relaxed);
    }

    /// Sets the observer of dropped frames; `false` if one was set already.
    pub(crate) fn observe_drops(&self, observe: DropObserver) -> bool {
        self.drop_observer.set(observe).is_ok()
    }

    /// Reports and counts a frame dropped because connection `conn` is not
    /// open (once per frame, with its announced length).
    pub(crate) fn dropped(&self, conn: ConnId, len: usize) {
        match self.drop_observer.get() {
            // The observer reports it, knowing who the peer is.
            Some(observe) => {
                tracing::debug!(
                    conn = conn.0,
                    len,
                    "mux: dropping frame for a connection that is not open"
                );
                observe(conn, len);
            }
            None => tracing::warn!(
                conn = conn.0,
                len,
                "mux: dropping frame for a connection that is not open"
            ),
        }
        self.dropped_frames.fetch_add(1, Ordering::Relaxed);
        self.dropped_bytes.fetch_add(len as u64, Ordering::Relaxed);
        *lock(&self.last_dropped) = Some(Error::UnknownConn { conn, len });
    }

    /// A snapshot.
    pub(crate) fn snapshot(&self) -> MuxStats {
        MuxStats {
            frames_received: self.frames_received.load(Ordering::Relaxed),
            bytes_received: self.bytes_received.load(Ordering::Relaxed),
            messages_sent: self.messages_sent.load(Ordering::Relaxed),
            frames_sent: self.frames_sent.load(Ordering::Relaxed),
            dropped_frames: self.dropped_frames.load(Ordering::Relaxed),
            dropped_bytes: self.dropped_bytes.load(Ordering::Relaxed),
            last_dropped: lock(&self.last_dropped).clone(),
        }
    }
}
