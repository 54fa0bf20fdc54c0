//! What the proxy tells its plugins the runtime does, and what it says
//! about answers the runtime will not apply.
//!
//! The proxy can promise its plugins no more than the runtime it
//! registered with applies: at the runtime's `Configure` it declares that
//! runtime's capabilities (as the plugin SDK reads them: declared, or
//! inferred from the runtime's name and version) and the events it
//! delivers to the plugins configured from then on, so a plugin behind the
//! proxy on containerd 2.1 that requires sysctls fails at start-up as it
//! would on containerd itself. A merged adjustment that still uses
//! something the runtime does not apply (a plugin that requires nothing)
//! is answered as it is, and reported: a warning naming the capabilities,
//! the container and the plugins that took part, and
//! `nri_proxy_unapplied_adjustments_total{capability}`.

use nri_api::api::ContainerAdjustment;
use nri_api::{CapabilitySet, RuntimeCapabilities, adjustment_capabilities};
use nri_plugin::RuntimeInfo;
use nri_runtime::{Adaptation, PluginId};

use crate::metrics::ProxyMetrics;

/// Declares the runtime's capabilities and events to the plugins behind
/// the proxy configured from now on.
pub(crate) fn declare_upstream(adaptation: &Adaptation, rt: &RuntimeInfo) {
    let mut caps: RuntimeCapabilities = rt.capabilities;
    // The events the SDK lets the proxy subscribe to upstream.
    caps.events = caps.events.intersection(rt.valid_events());
    adaptation.declare(caps);
    tracing::info!(
        runtime = %rt.name,
        runtime_version = %rt.version,
        basis = ?caps.basis,
        capabilities = %caps.supported,
        unknown = %CapabilitySet::all().difference(caps.known),
        events = %caps.events,
        "nri-proxy declares the runtime's capabilities to its plugins"
    );
}

/// The capabilities `adjust` uses that the runtime is known not to apply.
pub(crate) fn unapplied(
    declared: &RuntimeCapabilities,
    adjust: &ContainerAdjustment,
) -> CapabilitySet {
    adjustment_capabilities(adjust)
        .iter()
        .filter(|c| declared.supports((*c).into()) == Some(false))
        .collect()
}

/// Reports the parts of a creation's merged adjustment the runtime will
/// drop (nothing when it applies all of it, or cannot tell).
pub(crate) fn report_unapplied(
    declared: &RuntimeCapabilities,
    container: &str,
    adjust: Option<&ContainerAdjustment>,
    plugins: &[PluginId],
    metrics: &ProxyMetrics,
) {
    let Some(adjust) = adjust else { return };
    let dropped = unapplied(declared, adjust);
    if dropped.is_empty() {
        return;
    }
    let plugins: Vec<String> = plugins.iter().map(ToString::to_string).collect();
    tracing::warn!(
        container,
        unapplied = %dropped,
        plugins = ?plugins,
        "nri-proxy: the runtime will not apply these parts of the plugins' adjustment"
    );
    for c in dropped.iter() {
        metrics.unapplied(c.name()).inc();
    }
}
