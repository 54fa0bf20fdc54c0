//! The deadline of one event, shared by its plugin calls.

use std::time::Duration;

use tokio::time::Instant;

use super::Plugin;
use crate::failure::{ErrorClass, PluginFailure};
use crate::metrics::Metrics;

/// The deadline of one event (see `Adaptation::with_deadline`): every
/// plugin call of the event gets the smaller of the plugin's own timeout
/// and what remains until the deadline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Budget(pub(crate) Option<Instant>);

impl Budget {
    /// The time plugin `p` gets for a call of `operation` now, or
    /// [`PluginFailure::NotCalled`] (counted in the metrics, not a strike)
    /// when the deadline has passed.
    pub(crate) fn time_for(
        self,
        p: &Plugin,
        metrics: &dyn Metrics,
        operation: &str,
    ) -> Result<Duration, PluginFailure> {
        let Some(deadline) = self.0 else {
            return Ok(p.timeout);
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            tracing::warn!(plugin = %p.id, operation, "NRI plugin not called: the event's deadline has passed");
            metrics.plugin_invocation(&p.name, operation, Err(ErrorClass::NotCalled));
            return Err(PluginFailure::NotCalled);
        }
        Ok(p.timeout.min(left))
    }
}
