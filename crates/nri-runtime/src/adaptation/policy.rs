//! The failure policy: which policy applies to a plugin and event, strike
//! limits, what a failure does to the request, and required plugins.

use nri_api::api::{Event, PodSandbox};

use super::{Adaptation, Shared};
use crate::error::Error;
use crate::failure::{ErrorClass, FailurePolicy, PluginError, PluginFailure};
use crate::lock;
use crate::plugin::{Budget, Plugin, PluginList};
use nri_merge::PluginId;
use std::sync::Arc;

impl Shared {
    /// The failure policy of a connected plugin for `event`: the
    /// operator's entry for the plugin (its override for the event, else
    /// its policy), else the policy the plugin declared (`fail_request`:
    /// `required` without the absence check, else `fail`), else the
    /// default policy.
    pub(crate) fn policy_of(&self, p: &Plugin, event: Event) -> FailurePolicy {
        let cfg = &self.config;
        if let Some(f) = cfg
            .plugin_entry(&p.id)
            .and_then(|e| e.configured_for(event))
        {
            return f;
        }
        match &p.declared {
            Some(d) if d.fail_request => FailurePolicy::Required,
            Some(_) => FailurePolicy::Fail,
            None => cfg.default_policy.for_event(event),
        }
    }

    /// The strike limit of a plugin: its entry's, else never (0) if it
    /// declared `keep_connected`, else the default policy's, else the
    /// runtime's.
    pub(crate) fn strike_limit_for(
        &self,
        id: &PluginId,
        declared: Option<&nri_api::api::FailurePolicy>,
    ) -> u32 {
        let cfg = &self.config;
        let keep_connected = declared.is_some_and(|d| d.keep_connected);
        cfg.plugin_entry(id)
            .and_then(|e| e.strike_limit)
            .or(keep_connected.then_some(0))
            .or(cfg.default_policy.strike_limit)
            .unwrap_or(cfg.strike_limit)
    }

    /// Applies the failure policy to one plugin's failure of one event
    /// about `pod`.
    pub(super) fn on_failure(
        &self,
        p: &Plugin,
        event: Event,
        failure: PluginFailure,
        pod: &PodSandbox,
        errors: &mut Vec<PluginError>,
    ) -> Result<(), Error> {
        let plugin = p.name.clone();
        let ev = event.pretty_name();
        let class = failure.class();
        let unavailable = class.is_unavailable();
        if event.is_teardown() {
            tracing::warn!(plugin = %plugin, event = ev, error = %failure, class = %class, "NRI plugin failed a teardown event (reported, not fatal)");
            errors.push(PluginError::new(plugin, event, failure));
            return Ok(());
        }
        let policy = self.policy_of(p, event);
        if unavailable && policy != FailurePolicy::Ignore && self.config.is_exempt(&pod.namespace) {
            tracing::warn!(plugin = %plugin, event = ev, error = %failure, class = %class, namespace = %pod.namespace, "NRI plugin unavailable; not failing a request of an exempt namespace");
            errors.push(PluginError::new(plugin, event, failure));
            return Ok(());
        }
        match policy {
            FailurePolicy::Ignore => {
                tracing::warn!(plugin = %plugin, event = ev, error = %failure, class = %class, "NRI plugin failed; ignored per failure policy");
                errors.push(PluginError::new(plugin, event, failure));
                Ok(())
            }
            FailurePolicy::Fail if unavailable => {
                // `fail` is about the plugin's answers; an unavailable plugin
                // (timed out or gone) only fails requests under `required`.
                tracing::warn!(plugin = %plugin, event = ev, error = %failure, class = %class, "NRI plugin unavailable; skipped (policy fail; use required to fail the request)");
                errors.push(PluginError::new(plugin, event, failure));
                Ok(())
            }
            FailurePolicy::Fail | FailurePolicy::Required => {
                tracing::warn!(plugin = %plugin, event = ev, error = %failure, class = %class, "NRI plugin failed; failing the request");
                Err(Error::PluginFailed {
                    plugin,
                    event: ev.to_owned(),
                    cause: failure,
                })
            }
        }
    }

    /// A plugin's answer was merged: the call's one invocation, a success
    /// (the answer of a call made with `Answer::Merged` is counted here),
    /// and what it changed beyond the adjustment (updates, evictions).
    pub(super) fn merge_succeeded(&self, p: &Plugin, op: &str, updates: usize, evictions: usize) {
        self.metrics.plugin_invocation(&p.name, op, Ok(()));
        self.metrics
            .plugin_adjustments(&p.name, op, 0, updates, evictions);
    }

    /// A plugin's answer was refused by the merge: the call's one
    /// invocation, of class `conflict` or `invalid_response`.
    pub(super) fn merge_failure(&self, p: &Plugin, op: &str, e: nri_merge::Error) -> PluginFailure {
        let name = p.name.as_str();
        match e {
            nri_merge::Error::Conflict { .. } => {
                self.metrics.plugin_conflict(name, op);
                self.metrics
                    .plugin_invocation(name, op, Err(ErrorClass::Conflict));
                PluginFailure::Conflict {
                    message: e.to_string(),
                }
            }
            other => {
                self.metrics
                    .plugin_invocation(name, op, Err(ErrorClass::InvalidResponse));
                PluginFailure::InvalidResponse {
                    message: other.to_string(),
                }
            }
        }
    }

    /// Fails when a plugin with policy `required` for `event` is not active
    /// (never for a pod of an exempt namespace).
    pub(super) fn check_required(
        &self,
        event: Event,
        plugins: &PluginList,
        pod: &PodSandbox,
    ) -> Result<(), Error> {
        let Some(name) = self.missing_required(event, plugins) else {
            return Ok(());
        };
        if self.config.is_exempt(&pod.namespace) {
            tracing::info!(plugin = name, event = event.pretty_name(), namespace = %pod.namespace, "required NRI plugin is not connected; going on for a pod of an exempt namespace");
            return Ok(());
        }
        self.metrics
            .plugin_invocation(name, event.pretty_name(), Err(ErrorClass::RequiredMissing));
        tracing::warn!(
            plugin = name,
            event = event.pretty_name(),
            "required NRI plugin is not connected; failing the request"
        );
        Err(Error::RequiredPluginMissing {
            plugin: name.to_owned(),
            event: event.pretty_name().to_owned(),
        })
    }

    /// The first configured name with policy `required` for `event` that no
    /// active plugin of `plugins` answers to, nor a newer instance of one
    /// taking over from it (it gets the event after its Synchronize; see
    /// `registry/handover.rs`).
    pub(super) fn missing_required<'a>(
        &'a self,
        event: Event,
        plugins: &PluginList,
    ) -> Option<&'a str> {
        let is = |p: &Plugin, name: &str| p.id.to_string() == name || p.id.name() == name;
        self.config.required_plugins(event).find(|name| {
            !plugins.iter().any(|p| !p.is_closed() && is(p, name))
                && !plugins.successors.iter().any(|p| is(p, name))
        })
    }

    /// Waits for the `required` plugins of `event` that are not active but
    /// about to be: one that is synchronizing (registered and getting its
    /// Synchronize, as after a reconnect) until it is active, at most its
    /// request timeout; during the start-up grace
    /// ([`crate::Config::startup_grace`]), one that has never registered since
    /// start until it is active, at most until the grace is over. Never
    /// past the event's deadline
    /// ([`Adaptation::with_deadline`](crate::Adaptation::with_deadline)).
    /// Pods of exempt namespaces do not wait. A plugin still not active
    /// then is absent ([`Self::check_required`]).
    pub(super) async fn await_required(&self, event: Event, pod: &PodSandbox, budget: Budget) {
        if self.config.is_exempt(&pod.namespace)
            || self.config.required_plugins(event).next().is_none()
        {
            return;
        }
        let grace_end = match (self.config.startup_grace, *lock(&self.started_at)) {
            (grace, Some(started)) if !grace.is_zero() => Some(started + grace),
            _ => None,
        };
        let since = tokio::time::Instant::now();
        let mut changes = self.registry.watch_activations();
        loop {
            let Some(until) = self.required_wait(event, since, grace_end) else {
                return;
            };
            let deadline = budget.0.map_or(until, |d| d.min(until));
            if tokio::time::Instant::now() >= deadline {
                return;
            }
            tracing::debug!(
                event = event.pretty_name(),
                "waiting for required NRI plugins to synchronize or register"
            );
            tokio::select! {
                r = changes.changed() => if r.is_err() { return },
                () = tokio::time::sleep_until(deadline) => return,
                () = self.stopping.cancelled() => return,
            }
        }
    }

    /// Until when [`Self::await_required`] waits for the `required`
    /// plugins of `event` that are not active now (`None`: no wait).
    fn required_wait(
        &self,
        event: Event,
        since: tokio::time::Instant,
        grace_end: Option<tokio::time::Instant>,
    ) -> Option<tokio::time::Instant> {
        let plugins = self.registry.snapshot();
        let active = |name: &str| {
            plugins
                .iter()
                .any(|p| !p.is_closed() && (p.id.to_string() == name || p.id.name() == name))
        };
        let mut until = None;
        for name in self.config.required_plugins(event) {
            if active(name) {
                continue;
            }
            let end = match self.registry.syncing_timeout(name) {
                Some(timeout) => Some(since + timeout),
                None => grace_end.filter(|_| !self.registry.has_seen(name)),
            };
            until = until.max(end);
        }
        until
    }
}

impl Adaptation {
    /// The failure policy for this handle: through a
    /// [`committed`](Adaptation::committed) handle a failure is reported
    /// and never fails the event (the runtime has the object already);
    /// else [`Shared::on_failure`].
    ///
    /// A plugin not called in time gets the event after the fact (see
    /// `plugin/gate.rs`); when that closed its gate, the delivery starts
    /// here.
    pub(super) fn on_failure(
        &self,
        p: &Arc<Plugin>,
        event: Event,
        failure: PluginFailure,
        pod: &PodSandbox,
        errors: &mut Vec<PluginError>,
    ) -> Result<(), Error> {
        if p.take_drain() {
            let (shared, plugin) = (self.shared.clone(), p.clone());
            self.shared
                .spawn(async move { shared.deliver_gated(&plugin).await });
        }
        if !self.committed {
            return self.shared.on_failure(p, event, failure, pod, errors);
        }
        tracing::warn!(plugin = %p.name, event = event.pretty_name(), error = %failure, class = %failure.class(), "NRI plugin failed an event about an object the runtime already has (reported, not fatal)");
        errors.push(PluginError::new(p.name.clone(), event, failure));
        Ok(())
    }

    /// [`Shared::check_required`], but for an object the runtime already
    /// has ([`committed`](Adaptation::committed)) a missing `required`
    /// plugin fails nothing: it is only logged.
    pub(super) fn check_required(
        &self,
        event: Event,
        plugins: &PluginList,
        pod: &PodSandbox,
    ) -> Result<(), Error> {
        if !self.committed {
            return self.shared.check_required(event, plugins, pod);
        }
        if let Some(name) = self.shared.missing_required(event, plugins) {
            tracing::info!(
                plugin = name,
                event = event.pretty_name(),
                "required NRI plugin is not connected; going on: the runtime already has the object"
            );
        }
        Ok(())
    }

    /// [`Shared::await_required`], except for an object the runtime
    /// already has ([`committed`](Adaptation::committed)): nothing to wait
    /// for.
    pub(super) async fn await_required(&self, event: Event, pod: &PodSandbox) {
        if !self.committed {
            self.shared.await_required(event, pod, self.budget).await;
        }
    }
}
