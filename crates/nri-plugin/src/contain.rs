//! Panics in teardown methods: answered like the errors of those methods
//! (see [Teardown errors](crate#teardown-errors)).
//!
//! A panic in any other method reaches the ttRPC server, which answers the
//! request with `INTERNAL` and keeps serving. A teardown event must be
//! answered with success whatever its method does (the runtime stops
//! delivering some teardown events at the first plugin error), so a panic
//! there is caught here and turned into a [`HandlerError`] (code
//! `INTERNAL`, the panic's message), which is then logged, counted and
//! handed to [`Plugin::teardown_failed`](crate::Plugin::teardown_failed)
//! as any teardown error is. Both need a build that unwinds: with
//! `panic = "abort"` a panic ends the process.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

use nri_api::api::Event;
use nri_ttrpc::Code;

use crate::{HandlerError, HandlerResult};

/// The text of a panic's payload (`panic!("...")` gives a `&str` or a
/// `String`).
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(a panic without a message)")
}

/// A future whose panic is caught (the future is not polled again).
struct CatchUnwind<F> {
    fut: Pin<Box<F>>,
}

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let fut = self.fut.as_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(Poll::Ready(r)) => Poll::Ready(Ok(r)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => Poll::Ready(Err(payload)),
        }
    }
}

/// Runs the method future `fut` of `event`, a teardown event answered
/// with success: a panic in it becomes an error with code `INTERNAL`
/// naming the event and the panic's message.
pub(crate) async fn teardown<T>(
    event: Event,
    fut: impl Future<Output = HandlerResult<T>>,
) -> HandlerResult<T> {
    match (CatchUnwind { fut: Box::pin(fut) }).await {
        Ok(r) => r,
        Err(payload) => Err(HandlerError::msg(format!(
            "{event} handler panicked: {}",
            panic_message(&*payload)
        ))
        .with_code(Code::Internal)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_of_panics() {
        let p = std::panic::catch_unwind(|| panic!("boom")).unwrap_err();
        assert_eq!(panic_message(&*p), "boom");
        let n = 3;
        let p = std::panic::catch_unwind(|| panic!("boom {n}")).unwrap_err();
        assert_eq!(panic_message(&*p), "boom 3");
        let p = std::panic::catch_unwind(|| std::panic::panic_any(7_u8)).unwrap_err();
        assert_eq!(panic_message(&*p), "(a panic without a message)");
    }
}
