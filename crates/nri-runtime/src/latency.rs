//! The runtime's side of the latency machinery (docs/runtime/spinning.md),
//! in one place: how a call to a plugin reads its answer, and which plugin
//! a call wakes before it waits.
//!
//! - **Caller-driven reading.** A call waiting for a plugin's answer runs
//!   the plugin's trunk reader itself ([`PluginInput`], the
//!   [`nri_ttrpc::InputDriver`] of the plugin's client), so the answer is
//!   read in the calling task, with no hand-off from a reader task.
//! - **Wake hints.** The fan-out calls the plugins of an event one after the
//!   other through [`Turns`]: the call to one plugin, once its request is
//!   written, sends the next plugin in turn a wake hint
//!   ([`nri_mux::Mux::send_wake_hint`]), so that plugin is running, not
//!   asleep, when its own request comes.
//!
//! Nothing else in the crate knows about either: the fan-out walks its
//! plugins with [`Turns`] and makes plain calls.

use std::sync::{Arc, Mutex, Weak};
use std::task::Context;

use nri_api::api::Event;

use crate::lock;
use crate::plugin::{Conn, Plugin};

/// How a call to a plugin reads its answer (see `connect.rs`): it runs the
/// trunk reader ([`nri_mux::ReaderDriver`]); and once its request is
/// written, before it waits, it sends the wake hint queued by [`Turns`] for
/// the plugin after this one.
pub(crate) struct PluginInput {
    driver: nri_mux::ReaderDriver,
    hint_next: Mutex<Option<Weak<Plugin>>>,
}

impl PluginInput {
    pub(crate) fn new(driver: nri_mux::ReaderDriver) -> Self {
        Self {
            driver,
            hint_next: Mutex::new(None),
        }
    }

    /// Sends the queued hint: never waits, and sends nothing to a plugin
    /// that did not say it polls when hinted (see
    /// [`nri_mux::Mux::send_wake_hint`]).
    fn send_queued_hint(&self) {
        let next = lock(&self.hint_next).take();
        if let Some(next) = next.and_then(|w| w.upgrade())
            && let Conn::Ttrpc { mux, .. } = &next.conn
            && mux.send_wake_hint()
        {
            tracing::trace!(plugin = %next.id, "wake hint sent");
        }
    }
}

impl nri_ttrpc::InputDriver for PluginInput {
    fn poll_input(&self, cx: &mut Context<'_>) {
        self.driver.poll(cx);
    }

    fn done(&self) {
        self.driver.done();
    }

    fn request_written(&self) {
        self.send_queued_hint();
    }
}

/// The input of a plugin called over ttRPC.
fn input_of(p: &Plugin) -> Option<&PluginInput> {
    match &p.conn {
        Conn::Ttrpc { input, .. } => Some(input),
        #[cfg(feature = "wasm")]
        Conn::Wasm(_) => None,
    }
}

/// Has the next call to `p`, once its request is written, send `next` a
/// wake hint: `next` is called after `p`, and if it said it polls when
/// hinted it is then running, not asleep, when its request comes. Sent
/// after the write, so that `p`, which is needed first, is woken first
/// (and gets the idle CPU); the hint still leaves `next` all of `p`'s turn
/// to wake up in. Nothing is queued when the runtime sends no hints (spin
/// budget zero).
fn queue_hint(p: &Plugin, next: &Arc<Plugin>) {
    if next.wake_hints
        && let Some(input) = input_of(p)
    {
        *lock(&input.hint_next) = Some(Arc::downgrade(next));
    }
}

/// Drops a hint queued for a call to `p` that never wrote its request (it
/// failed first, or was not made): it is not sent later, with another call.
fn clear_hint(p: &Plugin) {
    if let Some(input) = input_of(p) {
        lock(&input.hint_next).take();
    }
}

/// One step of [`Turns::next_turn`].
pub(crate) enum Turn<'a> {
    /// Subscribed to the event: call it now.
    Call(&'a Arc<Plugin>),
    /// Not subscribed: passed over.
    Pass(&'a Arc<Plugin>),
}

/// The plugins of a list, for an event's calls made one after the other:
/// each plugin handed out to be called has its call wake the next one in
/// turn (a wake hint, sent once its request is written). A hint that was
/// not sent (the call failed before writing, or was not made) is dropped
/// when the fan-out moves on.
pub(crate) struct Turns<'a> {
    list: &'a [Arc<Plugin>],
    event: Event,
    /// Index of the next plugin of `list` to hand out.
    pos: usize,
    /// The plugin handed out last to be called.
    current: Option<&'a Arc<Plugin>>,
    /// Whether a subscribed plugin follows `current`.
    more: bool,
}

impl<'a> Turns<'a> {
    pub(crate) fn new(list: &'a [Arc<Plugin>], event: Event) -> Self {
        Self {
            list,
            event,
            pos: 0,
            current: None,
            more: false,
        }
    }

    /// The next plugin subscribed to the event, to be called now, or `None`
    /// when all have had their turn.
    pub(crate) fn next_call(&mut self) -> Option<&'a Arc<Plugin>> {
        loop {
            match self.next_turn()? {
                Turn::Call(p) => return Some(p),
                Turn::Pass(_) => {}
            }
        }
    }

    /// The next plugin of the list, subscribed to the event or not, or
    /// `None` at the end of the list.
    pub(crate) fn next_turn(&mut self) -> Option<Turn<'a>> {
        self.end_turn();
        let p = self.list.get(self.pos)?;
        self.pos += 1;
        if !p.subscribed(self.event) {
            return Some(Turn::Pass(p));
        }
        let rest = self.list.get(self.pos..).unwrap_or_default();
        let next = rest.iter().find(|q| q.subscribed(self.event));
        if let Some(next) = next {
            queue_hint(p, next);
        }
        self.current = Some(p);
        self.more = next.is_some();
        Some(Turn::Call(p))
    }

    /// Whether the plugin handed out last is the last one to be called.
    pub(crate) fn is_last_call(&self) -> bool {
        !self.more
    }

    fn end_turn(&mut self) {
        if let Some(p) = self.current.take() {
            clear_hint(p);
        }
    }
}

impl Drop for Turns<'_> {
    fn drop(&mut self) {
        self.end_turn();
    }
}
