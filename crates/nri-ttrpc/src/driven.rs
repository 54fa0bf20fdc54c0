//! Caller-driven reading: a client fed by its transport whose calls, while
//! they wait for their answer, run the transport's input themselves (an
//! [`InputDriver`]), so the answer is read and handed over in the calling
//! task instead of in a reader task that the scheduler may run on another
//! thread.
//!
//! The plain client ([`Client::new`]) reads in a task of its own and a
//! plainly fed one ([`Client::with_feed`]) is given its bytes; this module
//! is the one place that knows about the third way
//! ([`Client::with_feed_driven`]). `nri-runtime` calls its plugins this
//! way, driving `nri-mux`'s trunk reader (`nri_mux::ReaderDriver`, with
//! the feature `mux`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;
use tokio::sync::oneshot;

use crate::client::{Client, ClientFeed};

/// The input side of a fed client's transport, run by a call while it waits
/// for its answer (see [`Client::with_feed_driven`]).
pub trait InputDriver: Send + Sync + 'static {
    /// Reads and delivers whatever input is there (feeding the
    /// [`ClientFeed`]), registering `cx` for more. Must not block.
    fn poll_input(&self, cx: &mut Context<'_>);

    /// Called once a call that polled the input stops waiting (answered,
    /// timed out or cancelled), so that whoever runs the input otherwise
    /// takes over again.
    fn done(&self);

    /// Called by each call once its request is written, before it waits
    /// for the answer (whether or not it then polls the input: the answer
    /// may be there already). The default does nothing.
    fn request_written(&self) {}
}

impl Client {
    /// Like [`with_feed`](Self::with_feed), and while a call waits for its
    /// answer it polls `driver` itself, so the answer is read and fed in
    /// the calling task rather than handed over from another one.
    pub fn with_feed_driven<W>(wr: W, driver: Arc<dyn InputDriver>) -> (Client, ClientFeed)
    where
        W: AsyncWrite + Send + 'static,
    {
        Client::fed(Box::pin(wr), Some(driver))
    }
}

/// A call's wait for its answer `rx` once its request is written: tells
/// `driver` so, then waits, polling `driver` for the input meanwhile, and
/// tells the driver when it stops (also when dropped).
pub(crate) async fn wait_for_answer<T>(
    mut rx: oneshot::Receiver<T>,
    driver: &dyn InputDriver,
) -> Result<T, oneshot::error::RecvError> {
    struct HandBack<'a> {
        driver: &'a dyn InputDriver,
        polled: bool,
    }
    impl Drop for HandBack<'_> {
        fn drop(&mut self) {
            if self.polled {
                self.driver.done();
            }
        }
    }
    driver.request_written();
    let mut hand_back = HandBack {
        driver,
        polled: false,
    };
    std::future::poll_fn(|cx| {
        if let Poll::Ready(r) = Pin::new(&mut rx).poll(cx) {
            return Poll::Ready(r);
        }
        hand_back.polled = true;
        driver.poll_input(cx);
        Pin::new(&mut rx).poll(cx)
    })
    .await
}

/// `nri-mux`'s trunk reader, run by the waiting call.
#[cfg(feature = "mux")]
impl InputDriver for nri_mux::ReaderDriver {
    fn poll_input(&self, cx: &mut Context<'_>) {
        self.poll(cx);
    }

    fn done(&self) {
        nri_mux::ReaderDriver::done(self);
    }
}
