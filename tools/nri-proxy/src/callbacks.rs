//! What the plugin side asks of its "runtime", answered by the proxy: the
//! view for Synchronize, and unsolicited updates and evictions forwarded
//! upstream.

use std::sync::{Arc, OnceLock};

use nri_api::api::{ContainerEviction, ContainerUpdate};
use nri_plugin::PluginHandle;
use nri_runtime::{BoxFuture, CallbackError, RuntimeCallbacks, Snapshot};

use crate::view::State;

pub(crate) struct Callbacks {
    pub(crate) state: Arc<State>,
    /// The proxy's handle upstream (set when the proxy is built).
    pub(crate) upstream: Arc<OnceLock<PluginHandle>>,
}

/// Why an update could not be forwarded upstream.
#[derive(Debug, thiserror::Error)]
#[error("nri-proxy could not forward {what} to the runtime: {source}")]
struct ForwardFailed {
    what: &'static str,
    #[source]
    source: nri_plugin::Error,
}

impl Callbacks {
    async fn forward(
        &self,
        what: &'static str,
        updates: Vec<ContainerUpdate>,
        evictions: Vec<ContainerEviction>,
    ) -> Result<Vec<ContainerUpdate>, CallbackError> {
        let (n_updates, n_evictions) = (updates.len(), evictions.len());
        let Some(upstream) = self.upstream.get() else {
            return Err(Box::new(ForwardFailed {
                what,
                source: nri_plugin::Error::NotConnected,
            }));
        };
        match upstream.update_containers(updates, evictions).await {
            Ok(failed) => {
                tracing::debug!(
                    updates = n_updates,
                    evictions = n_evictions,
                    failed = failed.len(),
                    "nri-proxy forwarded UpdateContainers upstream"
                );
                Ok(failed)
            }
            Err(source) => {
                tracing::warn!(updates = n_updates, evictions = n_evictions, error = %source, "nri-proxy could not forward UpdateContainers upstream");
                Err(Box::new(ForwardFailed { what, source }))
            }
        }
    }
}

impl RuntimeCallbacks for Callbacks {
    fn list_pods_and_containers(&self) -> BoxFuture<'_, Result<Snapshot, CallbackError>> {
        let g = self.state.lock();
        let snapshot = Snapshot::new(
            g.view.pods.values().cloned().collect(),
            g.view.containers.values().cloned().collect(),
        );
        drop(g);
        Box::pin(async move { Ok(snapshot) })
    }

    fn update_containers(
        &self,
        updates: Vec<ContainerUpdate>,
    ) -> BoxFuture<'_, Result<Vec<ContainerUpdate>, CallbackError>> {
        Box::pin(self.forward("container updates", updates, Vec::new()))
    }

    fn evict_containers(
        &self,
        evictions: Vec<ContainerEviction>,
    ) -> BoxFuture<'_, Result<(), CallbackError>> {
        Box::pin(async move {
            self.forward("evictions", Vec::new(), evictions)
                .await
                .map(drop)
        })
    }
}
