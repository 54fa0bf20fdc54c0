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

/// Why evictions are not forwarded upstream: the runtime would drop them.
#[derive(Debug, thiserror::Error)]
#[error(
    "nri-proxy did not forward {count} eviction(s) to the runtime: {runtime} {version} (NRI {nri}) ignores evictions in UpdateContainers (containerd/nri's runtime has never carried out a plugin's evictions, unsolicited or in an event's answer, through v0.12.5)"
)]
struct EvictionsIgnored {
    count: usize,
    runtime: String,
    version: String,
    nri: nri_api::NriVersion,
}

/// Whether `rt` drops the evictions of an unsolicited `UpdateContainers`:
/// every runtime on containerd/nri's Go runtime does (no release through
/// v0.12.5, the newest this crate knows, acts on the field: containerd
/// 1.7 and 2.x, CRI-O), which is every runtime not on ours whose NRI
/// version, reported or inferred from its name and version, is one of
/// those releases. A runtime on a later NRI may carry them out.
fn drops_evictions(rt: &nri_plugin::RuntimeInfo) -> bool {
    !rt.nri_rs && rt.nri_version.version <= nri_api::NriVersion::CURRENT
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
            let rt = self.upstream.get().and_then(PluginHandle::runtime);
            if let Some(rt) = rt.filter(drops_evictions) {
                tracing::warn!(runtime = %rt.name, version = %rt.version, evictions = evictions.len(), "nri-proxy: not forwarding evictions the runtime would ignore");
                return Err(Box::new(EvictionsIgnored {
                    count: evictions.len(),
                    runtime: rt.name,
                    version: rt.version,
                    nri: rt.nri_version.version,
                }) as CallbackError);
            }
            self.forward("evictions", Vec::new(), evictions)
                .await
                .map(drop)
        })
    }
}
