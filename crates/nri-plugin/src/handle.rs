//! [`PluginHandle`]: what a plugin can do from any task while it runs.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nri_api::api::{
    ContainerEviction, ContainerUpdate, UpdateContainersRequest, UpdateContainersResponse,
};
use nri_api::{EventMask, RUNTIME_SERVICE, method};
use nri_ttrpc::{CallOptions, Client};
use tokio_util::sync::CancellationToken;

use crate::{Error, RuntimeInfo};

pub(crate) use nri_mux::sync::lock;

/// State shared by the stub, the service and every handle.
#[derive(Debug)]
pub(crate) struct Shared {
    /// Client of the runtime service of the current connection.
    pub(crate) client: Mutex<Option<Client>>,
    pub(crate) runtime: Mutex<Option<RuntimeInfo>>,
    pub(crate) subscribed: AtomicI32,
    pub(crate) dropped: AtomicI32,
    /// Teardown handler errors answered with success.
    pub(crate) teardown_errors: AtomicU64,
    pub(crate) running: AtomicBool,
    pub(crate) stop: CancellationToken,
    pub(crate) request_timeout: Duration,
    /// How the current connection's reader waits (see `latency.rs`).
    pub(crate) latency: crate::latency::Choice,
}

impl Shared {
    pub(crate) fn new(request_timeout: Duration) -> Self {
        Shared {
            client: Mutex::new(None),
            runtime: Mutex::new(None),
            subscribed: AtomicI32::new(0),
            dropped: AtomicI32::new(0),
            teardown_errors: AtomicU64::new(0),
            running: AtomicBool::new(false),
            stop: CancellationToken::new(),
            request_timeout,
            latency: crate::latency::Choice::default(),
        }
    }

    pub(crate) fn disconnected(&self) {
        if let Some(c) = lock(&self.client).take() {
            c.close();
        }
    }
}

/// A cheap, cloneable handle to a running plugin, usable from any task:
/// unsolicited container updates, the runtime's identity, the negotiated
/// subscription, and stopping the plugin.
///
/// Get it from [`Stub::handle`](crate::Stub::handle) (before or while
/// running) or from [`ConfigureInfo::handle`](crate::ConfigureInfo::handle).
#[derive(Debug, Clone)]
pub struct PluginHandle {
    pub(crate) shared: Arc<Shared>,
}

impl PluginHandle {
    /// Asks the runtime to update containers and evict others, outside of
    /// any event (the runtime's `UpdateContainers`). Returns the updates the
    /// runtime could not apply. The call has the builder's request timeout
    /// as deadline.
    ///
    /// Note: Go runtimes up to v0.12.5 ignore evictions.
    ///
    /// # Errors
    ///
    /// [`Error::NotConnected`] when not registered; [`Error::Superseded`]
    /// when the runtime refuses because a newer instance of this plugin
    /// took over its events; [`Error::Rpc`] when the call fails otherwise
    /// (deadline, error status, connection closed).
    pub async fn update_containers(
        &self,
        updates: Vec<ContainerUpdate>,
        evictions: Vec<ContainerEviction>,
    ) -> Result<Vec<ContainerUpdate>, Error> {
        let client = lock(&self.shared.client)
            .clone()
            .ok_or(Error::NotConnected)?;
        let req = UpdateContainersRequest {
            update: updates,
            evict: evictions,
        };
        let resp: UpdateContainersResponse = client
            .call_message(
                RUNTIME_SERVICE,
                method::UPDATE_CONTAINERS,
                &req,
                CallOptions::new(self.shared.request_timeout),
            )
            .await
            .map_err(|source| match source {
                nri_ttrpc::Error::Status { code, message }
                    if code == nri_ttrpc::Code::FailedPrecondition
                        && message.contains(nri_api::SUPERSEDED_REFUSAL) =>
                {
                    Error::Superseded
                }
                source => Error::Rpc {
                    method: method::UPDATE_CONTAINERS,
                    source,
                },
            })?;
        Ok(resp.failed)
    }

    /// Stops the plugin: [`Stub::run`](crate::Stub::run) closes the
    /// connection and returns `Ok(())`. A stopped stub stays stopped.
    pub fn stop(&self) {
        self.shared.stop.cancel();
    }

    /// Whether [`stop`](Self::stop) was called.
    pub fn is_stopped(&self) -> bool {
        self.shared.stop.is_cancelled()
    }

    /// Whether the plugin is registered with a runtime right now.
    pub fn is_connected(&self) -> bool {
        lock(&self.shared.client)
            .as_ref()
            .is_some_and(|c| !c.is_closed())
    }

    /// The runtime of the current (or last) connection, once configured.
    pub fn runtime(&self) -> Option<RuntimeInfo> {
        lock(&self.shared.runtime).clone()
    }

    /// Whether the current connection's reader spins for the runtime's
    /// requests (the runtime is ours and the spin budget is not zero);
    /// `None` until the connection is configured. For tests and
    /// benchmarks.
    #[doc(hidden)]
    pub fn spins(&self) -> Option<bool> {
        self.shared.latency.spinning()
    }

    /// The subscription sent to the runtime of the current (or last)
    /// connection (empty before the first `Configure`).
    pub fn subscribed_events(&self) -> EventMask {
        EventMask::from_i32(self.shared.subscribed.load(Ordering::Relaxed))
    }

    /// How many errors of teardown event methods the SDK answered with
    /// success since the stub was built (all connections): see
    /// [Teardown errors](crate#teardown-errors). Always 0 under
    /// [`Builder::send_teardown_errors`](crate::Builder::send_teardown_errors).
    pub fn teardown_errors(&self) -> u64 {
        self.shared.teardown_errors.load(Ordering::Relaxed)
    }

    /// Events the plugin wanted but the runtime of the current (or last)
    /// connection cannot deliver, so they were left out of the subscription.
    pub fn dropped_events(&self) -> EventMask {
        EventMask::from_i32(self.shared.dropped.load(Ordering::Relaxed))
    }
}
