//! The test binary's log, captured: a global `tracing` subscriber (the
//! binary's own, installed at the first [`log`]) writing into a buffer
//! that tests wait on ([`logged`]), for guests that say through `env.log`
//! where they are.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::Notify;

/// The log so far, and a wake-up on each write.
#[derive(Default)]
pub struct Log {
    pub text: Mutex<Vec<u8>>,
    written: Notify,
}

impl Log {
    /// The log so far, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.text.lock().unwrap()).into_owned()
    }
}

#[derive(Clone)]
struct Writer(Arc<Log>);

impl Write for Writer {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.text.lock().unwrap().extend_from_slice(b);
        self.0.written.notify_waiters();
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// This binary's log (installed once as the global subscriber, at info).
pub fn log() -> Arc<Log> {
    static LOG: OnceLock<Arc<Log>> = OnceLock::new();
    LOG.get_or_init(|| {
        let log = Arc::new(Log::default());
        let writer = Writer(log.clone());
        tracing::subscriber::set_global_default(
            tracing_subscriber::fmt()
                .with_max_level(tracing::Level::INFO)
                .with_ansi(false)
                .with_writer(move || writer.clone())
                .finish(),
        )
        .unwrap();
        log
    })
    .clone()
}

/// Waits until the log has `needle` at least `times` times.
pub async fn logged_times(needle: &str, times: usize) {
    let log = log();
    loop {
        let written = log.written.notified();
        tokio::pin!(written);
        written.as_mut().enable();
        if log.text().matches(needle).count() >= times {
            return;
        }
        written.await;
    }
}

/// Waits until the log has `needle`.
pub async fn logged(needle: &str) {
    logged_times(needle, 1).await;
}
