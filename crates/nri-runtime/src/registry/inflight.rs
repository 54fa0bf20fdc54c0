//! Creation events in flight ([`Inflight`]) and the late delivery of a
//! CreateContainer to a plugin that registered during it.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use nri_api::api::{Container, CreateContainerRequest, CreateContainerResponse, Event, PodSandbox};
use prost::Message as _;
use tokio::sync::{oneshot, watch};

use crate::failure::PluginFailure;
use crate::lock;
use crate::plugin::Plugin;

/// One creation event between its start and the release of its guard.
#[derive(Debug)]
pub(crate) struct Inflight {
    pub(crate) event: Event,
    /// Id of the object created: the pod, or the container.
    pub(super) id: String,
    pub(super) is_container: bool,
    /// The event's request as the first plugin got it (`{pod = 1,
    /// container = 2}`): shared with the fan-out, no copy of the pod and
    /// container per event; decoded only for a deferred delivery.
    pub(super) request: Bytes,
    /// `None` while the fan-out runs, then whether it succeeded.
    pub(super) outcome: watch::Sender<Option<bool>>,
    /// `true` once the guard is released (the runtime stored the object or
    /// gave up on it).
    pub(super) released: watch::Sender<bool>,
    /// CreateContainer: the plugins that started synchronizing while the
    /// fan-out ran (`Some` until the fan-out closes the list, see
    /// [`CreationGuard::close_late`]).
    pub(super) late: Mutex<Option<Vec<LateSlot>>>,
}

/// What a creation sends a plugin that started synchronizing during its
/// fan-out: the CreateContainer request (the container as adjusted by the
/// other plugins), and where the answer goes.
pub(crate) struct LateOffer {
    pub(crate) request: Bytes,
    pub(crate) reply: oneshot::Sender<LateAnswer>,
    /// Told when the request is sent to the plugin: the plugin's time
    /// starts then.
    pub(crate) sent: oneshot::Sender<()>,
}

/// A late plugin's answer, and the instance that gave it: the plugin the
/// creation waits for, or, if that was a newer instance that failed before
/// it was active, the instance it was taking over from (see
/// `registry/handover.rs`).
pub(crate) struct LateAnswer {
    pub(crate) plugin: Arc<Plugin>,
    pub(crate) answer: Result<CreateContainerResponse, PluginFailure>,
}

/// A creation's end of a late plugin's delivery.
pub(crate) struct LateSlot {
    pub(crate) plugin: Arc<Plugin>,
    pub(crate) offer: oneshot::Sender<LateOffer>,
}

impl std::fmt::Debug for LateSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LateSlot")
            .field("plugin", &self.plugin.name)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for LateOffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LateOffer").finish_non_exhaustive()
    }
}

impl Inflight {
    /// Waits for the fan-out's outcome; `false` if it failed or was dropped.
    pub(crate) async fn succeeded(&self) -> bool {
        let mut rx = self.outcome.subscribe();
        match rx.wait_for(Option::is_some).await {
            Ok(v) => v.unwrap_or(false),
            Err(_) => false,
        }
    }

    /// Whether the fan-out has finished and succeeded (without waiting).
    pub(crate) fn has_succeeded(&self) -> bool {
        *self.outcome.borrow() == Some(true)
    }

    /// Whether the creation event is one `plugin` takes.
    pub(crate) fn is_for(&self, plugin: &Plugin) -> bool {
        plugin.subscribed(self.event)
    }

    /// Waits until the creation's guard is released.
    pub(crate) async fn released(&self) {
        let mut rx = self.released.subscribe();
        let _ = rx.wait_for(|r| *r).await;
    }

    /// Adds a late plugin if the fan-out has not closed its list; returns
    /// the plugin's end, or `None` when the fan-out is past that point.
    pub(super) fn add_late(&self, plugin: &Arc<Plugin>) -> Option<oneshot::Receiver<LateOffer>> {
        let mut late = lock(&self.late);
        let list = late.as_mut()?;
        let (tx, rx) = oneshot::channel();
        list.push(LateSlot {
            plugin: plugin.clone(),
            offer: tx,
        });
        Some(rx)
    }

    pub(super) fn object_id(&self) -> (&str, bool) {
        (self.id.as_str(), self.is_container)
    }

    /// Id of the object created: the pod, or the container.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// The request as the first plugin got it, encoded.
    pub(crate) fn request(&self) -> &Bytes {
        &self.request
    }

    /// The pod and, for a container event, the container of the request.
    pub(crate) fn decode(&self) -> Result<(PodSandbox, Option<Container>), prost::DecodeError> {
        let r = CreateContainerRequest::decode(self.request.clone())?;
        Ok((r.pod.unwrap_or_default(), r.container))
    }
}

impl super::EventGuard {
    /// What the event leaves for a plugin whose ready gate it waits at
    /// past its timeout (see `plugin/gate.rs`).
    pub(crate) fn replay(&self) -> crate::plugin::Replay<'_> {
        (self.event.as_ref()).map_or(crate::plugin::Replay::Nothing, crate::plugin::Replay::Event)
    }
}

impl super::CreationGuard {
    /// What the creation leaves for a plugin whose ready gate it waits at
    /// past its timeout: delivered after the fact if it succeeds.
    pub(crate) fn replay(&self) -> crate::plugin::Replay<'_> {
        (self.inflight.as_ref()).map_or(
            crate::plugin::Replay::Nothing,
            crate::plugin::Replay::Creation,
        )
    }
}
