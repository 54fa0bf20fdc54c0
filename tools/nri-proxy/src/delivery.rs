//! One upstream event's delivery to the plugins behind the proxy, in a task
//! the proxy owns.
//!
//! The request handler only takes the event's place in the delivery order
//! ([`crate::order`]), spawns its delivery and waits for the answer the
//! delivery decides. When the runtime goes away the ttRPC server aborts the
//! handler, not the delivery: a delivery, once its event has arrived,
//! reaches every plugin and the view (which holds what the plugins have
//! been told), and the next resynchronization compares the runtime's lists
//! with that.
//!
//! In its turn and within the runtime's budget, the event is handed to the
//! plugins with the budget's deadline and their merged answer goes to the
//! runtime. When its turn has not come by the deadline (earlier events of
//! its pod, or a resynchronization, still hold the plugins), the runtime is
//! answered without the plugins (a creation that needs a `required` plugin
//! is refused) and the event reaches them in its turn, its answer only
//! logged.

use std::sync::Arc;

use nri_plugin::{HandlerError, HandlerResult};
use nri_runtime::Adaptation;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::ProxyConfig;
use crate::event::{Answer, Upcall};
use crate::metrics::ProxyMetrics;
use crate::order::Place;
use crate::view::State;

/// Why a creation is refused when it cannot wait for its turn.
pub(crate) const BEHIND: &str = "the proxy's plugins were still getting earlier events (of the same pod, or of a resynchronization with the runtime)";

/// What a delivery needs of the proxy (cheap clones).
#[derive(Clone)]
pub(crate) struct Context {
    pub(crate) adaptation: Adaptation,
    pub(crate) state: Arc<State>,
    pub(crate) config: Arc<ProxyConfig>,
    pub(crate) metrics: ProxyMetrics,
}

/// The answer for the runtime, sent by the delivery to the handler.
pub(crate) type Reply = oneshot::Sender<HandlerResult<Answer>>;

pub(crate) fn failed(e: nri_runtime::Error) -> HandlerError {
    HandlerError::msg(format!("nri-proxy: {e}"))
}

/// Counts one upstream event in `nri_proxy_events_held` while it lives.
pub(crate) struct Held(Gauge);

impl Held {
    pub(crate) fn new(g: &Gauge) -> Self {
        g.inc();
        Held(g.clone())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Context {
    /// A creation refused without calling the plugins when one of them is
    /// required for it.
    pub(crate) fn refuse_if_required(&self, up: &Upcall, cause: &str) -> HandlerResult<()> {
        let rt = &self.config.runtime;
        if !up.is_creation() || rt.is_exempt(&up.pod().namespace) {
            return Ok(());
        }
        match rt.required_plugins(up.event()).next() {
            Some(name) => Err(HandlerError::msg(format!(
                "nri-proxy: required plugin {name:?} is not available for {}: {cause}",
                up.event().pretty_name()
            ))),
            None => Ok(()),
        }
    }

    /// Delivers `up` in the turn of `place`: within the budget ending at
    /// `deadline` if the turn comes by then, the answer sent on `reply`;
    /// else `reply` gets the answer without the plugins and the event
    /// follows in its turn. `committed`: the runtime has the object already
    /// (`nri_plugin::event_committed`), so a creation is not refused.
    pub(crate) async fn deliver(
        self,
        up: Upcall,
        place: Place,
        deadline: Instant,
        committed: bool,
        reply: Reply,
    ) {
        if !place.is_turn() {
            let held = Held::new(&self.metrics.held);
            tokio::select! {
                () = place.turn() => {}
                () = tokio::time::sleep_until(deadline) => {
                    return self.deliver_late(up, place, held, committed, reply).await;
                }
            }
        }
        if !up.is_news(&self.state.lock().view) {
            self.skip(&up);
            let _ = reply.send(Ok(Answer::Done));
            return;
        }
        let a = self.adaptation.with_deadline(deadline);
        let r = up.deliver(&a, &self.state, committed).await.map_err(failed);
        // The handler is gone when the runtime went away meanwhile: the
        // plugins and the view have the event all the same.
        let _ = reply.send(r);
        drop(place);
    }

    /// The event's turn did not come within the budget: the runtime is
    /// answered without the plugins (a creation that needs a required
    /// plugin is refused, and then never delivered), and the event reaches
    /// them in its turn, its answer only logged.
    async fn deliver_late(
        self,
        up: Upcall,
        place: Place,
        held: Held,
        committed: bool,
        reply: Reply,
    ) {
        let answer = if committed {
            Ok(())
        } else {
            self.refuse_if_required(&up, BEHIND)
        };
        let refused = answer.is_err();
        tracing::warn!(
            event = up.event().pretty_name(),
            id = up.id(),
            refused,
            "nri-proxy: answering the runtime without the plugins: they are still getting earlier events; the event follows those"
        );
        self.metrics.late.inc();
        let _ = reply.send(answer.map(|()| Answer::Done));
        place.turn().await;
        drop(held);
        if refused || !up.is_news(&self.state.lock().view) {
            self.skip(&up);
            return;
        }
        let (event, id) = (up.event(), up.id().to_owned());
        // The runtime was answered with success: it has the object
        // whatever the plugins say now.
        if let Err(e) = up.deliver(&self.adaptation, &self.state, true).await {
            tracing::warn!(event = event.pretty_name(), %id, error = %e, "nri-proxy: a late event failed");
        }
        drop(place);
    }

    fn skip(&self, up: &Upcall) {
        tracing::debug!(
            event = up.event().pretty_name(),
            id = up.id(),
            "nri-proxy: not delivered: the plugins were never told of the object (a creation refused before any plugin saw it), or already told what the event says (by a resynchronization)"
        );
    }
}
