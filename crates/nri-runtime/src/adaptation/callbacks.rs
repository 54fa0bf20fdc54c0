//! The runtime's callbacks ([`RuntimeCallbacks`](crate::RuntimeCallbacks)),
//! each within a deadline: the request timeout of the plugin on whose
//! behalf it is called. A callback that does not return in time costs
//! that plugin's registration (the listing) or its request (updates,
//! evictions), never a task or a queue that waits for ever.

use std::time::Duration;

use nri_api::api::{ContainerEviction, ContainerUpdate};

use super::Shared;
use crate::config::Snapshot;
use crate::error::{Error, RegistrationFailure};
use crate::plugin::Plugin;

impl Shared {
    /// The listing for `plugin`'s Synchronize, within its request
    /// timeout; given up at once if the plugin closes meanwhile.
    pub(crate) async fn list_for(&self, plugin: &Plugin) -> Result<Snapshot, RegistrationFailure> {
        let timeout = plugin.timeout;
        let listing = tokio::time::timeout(timeout, self.callbacks.list_pods_and_containers());
        tokio::select! {
            r = listing => match r {
                Ok(Ok(snapshot)) => Ok(snapshot),
                Ok(Err(e)) => Err(RegistrationFailure::ListFailed {
                    message: e.to_string(),
                }),
                Err(_) => {
                    tracing::warn!(plugin = %plugin.id, ?timeout, "the runtime's listing of pods and containers gave no answer in time; the plugin's registration fails");
                    Err(RegistrationFailure::ListTimeout { timeout })
                }
            },
            () = plugin.wait_closed() => Err(RegistrationFailure::LostDuringSync),
        }
    }

    /// `update_containers` within `timeout`.
    pub(crate) async fn update_within(
        &self,
        timeout: Duration,
        updates: Vec<ContainerUpdate>,
    ) -> Result<Vec<ContainerUpdate>, Error> {
        const CALLBACK: &str = "update_containers";
        match tokio::time::timeout(timeout, self.callbacks.update_containers(updates)).await {
            Ok(Ok(failed)) => Ok(failed),
            Ok(Err(e)) => Err(Error::Callback {
                callback: CALLBACK,
                message: e.to_string(),
            }),
            Err(_) => Err(Error::CallbackTimeout {
                callback: CALLBACK,
                timeout,
            }),
        }
    }

    /// `evict_containers` within `timeout`.
    pub(crate) async fn evict_within(
        &self,
        timeout: Duration,
        evictions: Vec<ContainerEviction>,
    ) -> Result<(), Error> {
        const CALLBACK: &str = "evict_containers";
        match tokio::time::timeout(timeout, self.callbacks.evict_containers(evictions)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Error::Callback {
                callback: CALLBACK,
                message: e.to_string(),
            }),
            Err(_) => Err(Error::CallbackTimeout {
                callback: CALLBACK,
                timeout,
            }),
        }
    }
}
