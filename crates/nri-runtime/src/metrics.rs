//! Metrics sink and the audit trail.
//!
//! [`Metrics`] receives one call per plugin invocation (with its latency and
//! error class), per merged result, per conflict, and whenever the number of
//! active plugins changes. Every method has a no-op default; [`NoopMetrics`]
//! is the default sink. With the cargo feature `prometheus`,
//! `PrometheusMetrics` exports them.
//!
//! The audit trail is a `tracing` event on target [`AUDIT_TARGET`] for every
//! field a plugin changed (see [`audit_owners`]).

use std::time::Duration;

use nri_api::api::OwningPlugins;
use nri_merge::PluginIdentity;

use crate::failure::ErrorClass;

/// Target of the audit-trail tracing events.
pub const AUDIT_TARGET: &str = "nri::audit";

/// A sink for runtime metrics. Implementations must be cheap and must not
/// block: they are called on the event path.
pub trait Metrics: Send + Sync + 'static {
    /// One call of `operation` (event pretty name, `Synchronize`,
    /// `Configure`, `Shutdown`) on `plugin` (`NN-name`): `Ok` or the class of
    /// its failure.
    fn plugin_invocation(&self, plugin: &str, operation: &str, result: Result<(), ErrorClass>) {
        let _ = (plugin, operation, result);
    }

    /// Latency of one call.
    fn plugin_latency(&self, plugin: &str, operation: &str, latency: Duration) {
        let _ = (plugin, operation, latency);
    }

    /// What one plugin's answer changed: fields of the adjustment (count of
    /// owners recorded), container updates and evictions.
    fn plugin_adjustments(
        &self,
        plugin: &str,
        operation: &str,
        adjustments: usize,
        updates: usize,
        evictions: usize,
    ) {
        let _ = (plugin, operation, adjustments, updates, evictions);
    }

    /// A timeout of `plugin` in `operation` counted as a strike, with
    /// `consecutive` its consecutive strikes now; or, with `consecutive`
    /// 0, a call answered in time after strikes reset the count.
    fn plugin_strikes(&self, plugin: &str, operation: &str, consecutive: u32) {
        let _ = (plugin, operation, consecutive);
    }

    /// A merge conflict caused by `plugin`.
    fn plugin_conflict(&self, plugin: &str, operation: &str) {
        let _ = (plugin, operation);
    }

    /// The number of active (registered and synchronized) plugins.
    fn active_plugins(&self, count: usize) {
        let _ = count;
    }

    /// Instance `instance` (the number of its connection, see
    /// [`PluginInfo::instance`](crate::PluginInfo::instance)) of `plugin`
    /// changed state: `active` (it gets the plugin's events), `superseded`
    /// (a newer instance took over, see `docs/runtime/upgrades.md`) or
    /// `gone` (disconnected after it had been active). The other metrics
    /// are per plugin, whichever instance served it.
    fn plugin_instance(&self, plugin: &str, instance: u64, state: &str) {
        let _ = (plugin, instance, state);
    }

    /// A message from a peer refused before it was decoded (over a limit,
    /// malformed, or sent before registration). `peer` is the plugin
    /// (`NN-name`) or `unregistered`; `reason` one of `unregistered`,
    /// `too_large`, `too_many_updates`, `decoded_size`, `malformed`,
    /// `in_flight`, `metadata`, `pending_connections`, `invalid_update`,
    /// `rejected_update`, `unknown_connection` (a frame for a multiplexer
    /// connection that is not open, dropped unread), `peer_not_allowed`,
    /// `registration`, `registration_timeout`, `sync_backlog`.
    fn peer_refused(&self, peer: &str, reason: &str) {
        let _ = (peer, reason);
    }

    /// `lines` of a launched plugin's output (`stream`: `stdout` or
    /// `stderr`) were dropped, over `OutputLimits::lines_per_second`.
    fn plugin_output_dropped(&self, plugin: &str, stream: &str, lines: u64) {
        let _ = (plugin, stream, lines);
    }

    /// `plugin` was admitted with `identity`, under `grant` (its
    /// description, `None` without grants): once per connection (a
    /// WebAssembly plugin: once per instance).
    fn plugin_identity(&self, plugin: &str, identity: &PluginIdentity, grant: Option<&str>) {
        let _ = (plugin, identity, grant);
    }

    /// `plugin`, admitted earlier ([`plugin_identity`](Self::plugin_identity)),
    /// is gone for good: it disconnected, failed before it became active,
    /// was closed for good (a WebAssembly plugin: not when it is only
    /// re-instantiated), or the runtime stopped. A sink drops what it
    /// keeps per plugin.
    fn plugin_gone(&self, plugin: &str) {
        let _ = plugin;
    }

    /// An answer (or an unsolicited `UpdateContainers`) of `plugin` in
    /// `operation` was refused for going beyond its grant; `field` is what
    /// it went beyond with (`linux.sysctl`, `update`, `evict`, `pod`,
    /// `UpdateContainers`).
    fn grant_refused(&self, plugin: &str, operation: &str, field: &str) {
        let _ = (plugin, operation, field);
    }
}

/// A [`Metrics`] sink that drops everything (the default).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopMetrics;

impl Metrics for NoopMetrics {}

/// Emits one audit event (target [`AUDIT_TARGET`], level INFO) per field
/// owner in `owners`: fields `plugin`, `instance` (0: not known here; see
/// [`PluginInfo::instance`](crate::PluginInfo::instance)), `container`,
/// `field`, `key` (empty for simple fields), `removed` (the plugin removed
/// the field or key) and `operation`. Returns the number of owner entries
/// per plugin, for [`Metrics::plugin_adjustments`].
pub fn audit_owners(operation: &str, owners: &OwningPlugins) -> Vec<(String, usize)> {
    audit_owners_of(operation, owners, &|_| None)
}

/// [`audit_owners`] with the instance of each plugin (`NN-name`) that
/// answered: during an upgrade two instances of a plugin are connected,
/// and each event went to one of them.
pub(crate) fn audit_owners_of(
    operation: &str,
    owners: &OwningPlugins,
    instance_of: &dyn Fn(&str) -> Option<u64>,
) -> Vec<(String, usize)> {
    let mut per_plugin: Vec<(String, usize)> = Vec::new();
    let mut count = |plugin: &str| match per_plugin.iter_mut().find(|(p, _)| p == plugin) {
        Some((_, n)) => *n += 1,
        None => per_plugin.push((plugin.to_owned(), 1)),
    };
    for (container, fo) in &owners.owners {
        for (field, owner) in &fo.simple {
            let field_name = field_name(*field);
            for (plugin, removed) in split_owner(owner) {
                count(plugin);
                tracing::info!(
                    target: AUDIT_TARGET,
                    operation,
                    plugin,
                    instance = instance_of(plugin).unwrap_or(0),
                    container = container.as_str(),
                    field = field_name,
                    key = "",
                    removed,
                    "plugin changed field"
                );
            }
        }
        for (field, compound) in &fo.compound {
            let field_name = field_name(*field);
            for (key, owner) in &compound.owners {
                for (plugin, removed) in split_owner(owner) {
                    count(plugin);
                    tracing::info!(
                        target: AUDIT_TARGET,
                        operation,
                        plugin,
                        instance = instance_of(plugin).unwrap_or(0),
                        container = container.as_str(),
                        field = field_name,
                        key = key.as_str(),
                        removed,
                        "plugin changed field"
                    );
                }
            }
        }
    }
    per_plugin
}

/// The instance of plugin `name` in `plugins` (an event's snapshot), or
/// among its successors.
pub(crate) fn instance_in(plugins: &crate::plugin::ActiveList, name: &str) -> Option<u64> {
    plugins
        .iter()
        .chain(plugins.successors.iter())
        .find(|p| p.name == name)
        .map(|p| p.instance)
}

/// Splits an owner string into plugins: `-NN-name` is a removal; the OCI
/// hooks owner is a comma-joined list.
fn split_owner(owner: &str) -> impl Iterator<Item = (&str, bool)> {
    owner
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| match s.strip_prefix('-') {
            Some(p) => (p, true),
            None => (s, false),
        })
}

fn field_name(field: i32) -> &'static str {
    nri_api::api::Field::try_from(field)
        .map(|f| f.as_str_name())
        .unwrap_or("Unknown")
}

#[cfg(feature = "prometheus")]
mod prom {
    use std::time::Duration;

    use prometheus_client::encoding::EncodeLabelSet;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::gauge::Gauge;
    use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
    use prometheus_client::registry::Registry;

    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    use nri_merge::PluginIdentity;

    use super::Metrics;
    use crate::failure::ErrorClass;

    #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
    struct InvocationLabels {
        plugin: String,
        operation: String,
        status: String,
        error: String,
    }

    #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
    struct OpLabels {
        plugin: String,
        operation: String,
    }

    #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
    struct PluginLabels {
        plugin: String,
    }

    #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
    struct InstanceLabels {
        plugin: String,
        instance: String,
        state: String,
    }

    #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
    struct RefusalLabels {
        peer: String,
        reason: String,
    }

    #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
    struct OutputLabels {
        plugin: String,
        stream: String,
    }

    #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
    struct GrantLabels {
        plugin: String,
        operation: String,
        field: String,
    }

    #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
    struct IdentityLabels {
        plugin: String,
        uid: String,
        executable: String,
        pod_namespace: String,
        grant: String,
    }

    #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
    struct AdjLabels {
        plugin: String,
        operation: String,
        r#type: String,
    }

    /// A [`Metrics`] sink exporting Prometheus metrics through
    /// `prometheus-client` (cargo feature `prometheus`):
    /// `nri_plugin_invocations_total{plugin,operation,status,error}`,
    /// `nri_plugin_latency_seconds{plugin,operation}` (histogram),
    /// `nri_plugin_adjustments_total{plugin,operation,type}` (`type` =
    /// `adjust`, `update`, `evict`), `nri_plugin_conflicts_total{plugin,operation}`,
    /// `nri_plugin_strikes_total{plugin,operation}` (timeouts counted as
    /// strikes), `nri_plugin_consecutive_strikes{plugin}` (the current
    /// count the strike limit is compared with),
    /// `nri_peer_refusals_total{peer,reason}`,
    /// `nri_grant_refusals_total{plugin,operation,field}`,
    /// `nri_plugin_identity{plugin,uid,executable,pod_namespace,grant}`
    /// (1 for each connected plugin's latest identity, removed when no
    /// instance of the plugin is left; no pid or pod name, which change
    /// with every restart), `nri_active_plugins` and
    /// `nri_plugin_instance{plugin,instance,state}` (1 for each connected
    /// instance of a plugin that has been active, in its state `active` or
    /// `superseded`; gone when it disconnects).
    #[derive(Debug, Clone)]
    pub struct PrometheusMetrics {
        invocations: Family<InvocationLabels, Counter>,
        latency: Family<OpLabels, Histogram>,
        adjustments: Family<AdjLabels, Counter>,
        conflicts: Family<OpLabels, Counter>,
        strikes: Family<OpLabels, Counter>,
        consecutive: Family<PluginLabels, Gauge>,
        refusals: Family<RefusalLabels, Counter>,
        output_dropped: Family<OutputLabels, Counter>,
        grant_refusals: Family<GrantLabels, Counter>,
        identity: Family<IdentityLabels, Gauge>,
        /// Each plugin's identity series, to drop it for the next.
        identities: Arc<Mutex<HashMap<String, IdentityLabels>>>,
        active: Gauge,
        instances: Family<InstanceLabels, Gauge>,
    }

    impl PrometheusMetrics {
        /// Creates the metrics and registers them (prefix `nri`) in `registry`.
        pub fn new(registry: &mut Registry) -> Self {
            let m = Self {
                invocations: Family::default(),
                latency: Family::new_with_constructor(|| {
                    Histogram::new(exponential_buckets(0.0005, 2.0, 14))
                }),
                adjustments: Family::default(),
                conflicts: Family::default(),
                strikes: Family::default(),
                consecutive: Family::default(),
                refusals: Family::default(),
                output_dropped: Family::default(),
                grant_refusals: Family::default(),
                identity: Family::default(),
                identities: Arc::default(),
                active: Gauge::default(),
                instances: Family::default(),
            };
            let r = registry.sub_registry_with_prefix("nri");
            r.register(
                "plugin_invocations",
                "Calls of plugins by operation and outcome",
                m.invocations.clone(),
            );
            r.register(
                "plugin_latency_seconds",
                "Latency of plugin calls",
                m.latency.clone(),
            );
            r.register(
                "plugin_adjustments",
                "Changes made by plugins (adjusted fields, updates, evictions)",
                m.adjustments.clone(),
            );
            r.register(
                "plugin_conflicts",
                "Merge conflicts caused by plugins",
                m.conflicts.clone(),
            );
            r.register(
                "plugin_strikes",
                "Plugin timeouts counted as strikes",
                m.strikes.clone(),
            );
            r.register(
                "plugin_consecutive_strikes",
                "Consecutive strikes of plugins (compared with their strike limit)",
                m.consecutive.clone(),
            );
            r.register(
                "peer_refusals",
                "Messages from peers refused before decoding, by reason",
                m.refusals.clone(),
            );
            r.register(
                "plugin_output_dropped_lines",
                "Lines of launched plugins' output dropped over the rate limit",
                m.output_dropped.clone(),
            );
            r.register(
                "grant_refusals",
                "Plugin answers refused for going beyond the plugin's grant",
                m.grant_refusals.clone(),
            );
            r.register(
                "plugin_identity",
                "Who each plugin is (1 for its latest identity)",
                m.identity.clone(),
            );
            r.register("active_plugins", "Active NRI plugins", m.active.clone());
            r.register(
                "plugin_instance",
                "Connected instances of plugins (connection number) by state",
                m.instances.clone(),
            );
            m
        }
    }

    impl Metrics for PrometheusMetrics {
        fn plugin_invocation(&self, plugin: &str, operation: &str, result: Result<(), ErrorClass>) {
            let (status, error) = match result {
                Ok(()) => ("ok", ""),
                Err(c) => ("error", c.as_str()),
            };
            self.invocations
                .get_or_create(&InvocationLabels {
                    plugin: plugin.to_owned(),
                    operation: operation.to_owned(),
                    status: status.to_owned(),
                    error: error.to_owned(),
                })
                .inc();
        }

        fn plugin_latency(&self, plugin: &str, operation: &str, latency: Duration) {
            self.latency
                .get_or_create(&OpLabels {
                    plugin: plugin.to_owned(),
                    operation: operation.to_owned(),
                })
                .observe(latency.as_secs_f64());
        }

        fn plugin_adjustments(
            &self,
            plugin: &str,
            operation: &str,
            adjustments: usize,
            updates: usize,
            evictions: usize,
        ) {
            for (t, n) in [
                ("adjust", adjustments),
                ("update", updates),
                ("evict", evictions),
            ] {
                if n > 0 {
                    self.adjustments
                        .get_or_create(&AdjLabels {
                            plugin: plugin.to_owned(),
                            operation: operation.to_owned(),
                            r#type: t.to_owned(),
                        })
                        .inc_by(n as u64);
                }
            }
        }

        fn plugin_conflict(&self, plugin: &str, operation: &str) {
            self.conflicts
                .get_or_create(&OpLabels {
                    plugin: plugin.to_owned(),
                    operation: operation.to_owned(),
                })
                .inc();
        }

        fn plugin_strikes(&self, plugin: &str, operation: &str, consecutive: u32) {
            if consecutive > 0 {
                self.strikes
                    .get_or_create(&OpLabels {
                        plugin: plugin.to_owned(),
                        operation: operation.to_owned(),
                    })
                    .inc();
            }
            self.consecutive
                .get_or_create(&PluginLabels {
                    plugin: plugin.to_owned(),
                })
                .set(i64::from(consecutive));
        }

        fn active_plugins(&self, count: usize) {
            self.active.set(i64::try_from(count).unwrap_or(i64::MAX));
        }

        fn plugin_instance(&self, plugin: &str, instance: u64, state: &str) {
            let labels = |state: &str| InstanceLabels {
                plugin: plugin.to_owned(),
                instance: instance.to_string(),
                state: state.to_owned(),
            };
            for other in ["active", "superseded"] {
                if other != state {
                    self.instances.remove(&labels(other));
                }
            }
            if state != "gone" {
                self.instances.get_or_create(&labels(state)).set(1);
            }
        }

        fn peer_refused(&self, peer: &str, reason: &str) {
            self.refusals
                .get_or_create(&RefusalLabels {
                    peer: peer.to_owned(),
                    reason: reason.to_owned(),
                })
                .inc();
        }

        fn grant_refused(&self, plugin: &str, operation: &str, field: &str) {
            self.grant_refusals
                .get_or_create(&GrantLabels {
                    plugin: plugin.to_owned(),
                    operation: operation.to_owned(),
                    field: field.to_owned(),
                })
                .inc();
        }

        fn plugin_identity(&self, plugin: &str, identity: &PluginIdentity, grant: Option<&str>) {
            let labels = IdentityLabels {
                plugin: plugin.to_owned(),
                uid: identity.uid.map(|u| u.to_string()).unwrap_or_default(),
                executable: identity
                    .executable
                    .as_ref()
                    .map(|e| e.display().to_string())
                    .unwrap_or_default(),
                pod_namespace: identity
                    .pod
                    .as_ref()
                    .map(|p| p.namespace.clone())
                    .unwrap_or_default(),
                grant: grant.unwrap_or_default().to_owned(),
            };
            let mut last = crate::lock(&self.identities);
            if let Some(old) = last.insert(plugin.to_owned(), labels.clone()) {
                if old != labels {
                    self.identity.remove(&old);
                }
            }
            self.identity.get_or_create(&labels).set(1);
        }

        fn plugin_gone(&self, plugin: &str) {
            if let Some(old) = crate::lock(&self.identities).remove(plugin) {
                self.identity.remove(&old);
            }
        }

        fn plugin_output_dropped(&self, plugin: &str, stream: &str, lines: u64) {
            self.output_dropped
                .get_or_create(&OutputLabels {
                    plugin: plugin.to_owned(),
                    stream: stream.to_owned(),
                })
                .inc_by(lines);
        }
    }
}

#[cfg(feature = "prometheus")]
pub use prom::PrometheusMetrics;
