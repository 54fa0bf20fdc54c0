//! The simulated runtime's state, shared by the engine, the runtime's
//! callbacks (Synchronize's snapshot, unsolicited updates and evictions)
//! and the metrics sink (calls, latencies, conflicts).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nri_api::api::{Container, ContainerEviction, ContainerUpdate, PodSandbox};
use nri_runtime::{BoxFuture, CallbackError, ErrorClass, Metrics, RuntimeCallbacks, Snapshot};
use oci_spec::runtime::Spec;

use super::lifecycle::compact;
use super::{lock, ms};
use crate::report::{Call, Change, Eviction, Record, Update};
use crate::spec;

/// State shared by the engine, the runtime callbacks and the metrics sink.
#[derive(Default)]
pub(super) struct World {
    pub(super) pods: Mutex<BTreeMap<String, PodSandbox>>,
    pub(super) containers: Mutex<BTreeMap<String, Container>>,
    /// Container id -> (pod/ctr, base spec, current spec), in creation order.
    pub(super) specs: Mutex<Vec<(String, String, Spec, Spec)>>,
    /// Records produced in the background.
    pub(super) queue: Mutex<Vec<Record>>,
    pub(super) calls: Mutex<Vec<Call>>,
    pub(super) counts: Mutex<BTreeMap<(String, String), u64>>,
    pub(super) conflicts: Mutex<Vec<String>>,
    /// Container id -> pod/ctr.
    pub(super) names: Mutex<BTreeMap<String, String>>,
    /// pod/ctr -> field changes at creation.
    pub(super) owners: Mutex<BTreeMap<String, Vec<Change>>>,
}

impl World {
    pub(super) fn name_of(&self, id: &str) -> String {
        lock(&self.names)
            .get(id)
            .cloned()
            .unwrap_or_else(|| id.to_owned())
    }

    pub(super) fn drain_calls(&self) -> Vec<Call> {
        std::mem::take(&mut *lock(&self.calls))
    }

    pub(super) fn push(&self, r: Record) {
        lock(&self.queue).push(r);
    }

    /// Applies updates to the specs; returns them for the report.
    pub(super) fn apply_updates(&self, updates: &[ContainerUpdate]) -> (Vec<Update>, Vec<String>) {
        let applier = spec::applier();
        let mut out = Vec::new();
        let mut errors = Vec::new();
        for u in updates {
            let Some(res) = u.linux.as_ref().and_then(|l| l.resources.as_ref()) else {
                continue;
            };
            let name = self.name_of(&u.container_id);
            let mut specs = lock(&self.specs);
            if let Some(entry) = specs.iter_mut().find(|e| e.0 == u.container_id)
                && let Err(e) = applier.apply_update(&mut entry.3, res)
            {
                errors.push(format!("applying update to {name}: {e}"));
            }
            out.push(Update {
                container: name,
                resources: compact(serde_json::to_value(res).unwrap_or_default()),
            });
        }
        (out, errors)
    }

    pub(super) fn evictions(&self, ev: &[ContainerEviction]) -> Vec<Eviction> {
        ev.iter()
            .map(|e| Eviction {
                container: self.name_of(&e.container_id),
                reason: e.reason.clone(),
            })
            .collect()
    }
}

impl RuntimeCallbacks for World {
    fn list_pods_and_containers(&self) -> BoxFuture<'_, Result<Snapshot, CallbackError>> {
        Box::pin(async move {
            let pods: Vec<_> = lock(&self.pods).values().cloned().collect();
            let ctrs: Vec<_> = lock(&self.containers).values().cloned().collect();
            self.push(Record::Sync {
                pods: pods.len(),
                containers: ctrs.len(),
            });
            Ok(Snapshot::new(pods, ctrs))
        })
    }

    fn update_containers(
        &self,
        updates: Vec<ContainerUpdate>,
    ) -> BoxFuture<'_, Result<Vec<ContainerUpdate>, CallbackError>> {
        Box::pin(async move {
            let (u, _) = self.apply_updates(&updates);
            if !u.is_empty() {
                self.push(Record::Unsolicited {
                    updates: u,
                    evictions: Vec::new(),
                });
            }
            Ok(Vec::new())
        })
    }

    fn evict_containers(
        &self,
        evictions: Vec<ContainerEviction>,
    ) -> BoxFuture<'_, Result<(), CallbackError>> {
        Box::pin(async move {
            let e = self.evictions(&evictions);
            self.push(Record::Unsolicited {
                updates: Vec::new(),
                evictions: e,
            });
            Ok(())
        })
    }
}

pub(super) struct WorldMetrics(pub(super) Arc<World>);

impl Metrics for WorldMetrics {
    fn plugin_latency(&self, plugin: &str, operation: &str, latency: Duration) {
        *lock(&self.0.counts)
            .entry((plugin.to_owned(), operation.to_owned()))
            .or_default() += 1;
        lock(&self.0.calls).push(Call {
            plugin: plugin.to_owned(),
            operation: operation.to_owned(),
            ms: Some(ms(latency)),
            result: String::new(),
        });
    }

    fn plugin_invocation(&self, plugin: &str, operation: &str, result: Result<(), ErrorClass>) {
        let res = match result {
            Ok(()) => "ok".to_owned(),
            Err(c) => c.as_str().to_owned(),
        };
        let mut calls = lock(&self.0.calls);
        if let Some(c) = calls
            .iter_mut()
            .rev()
            .find(|c| c.plugin == plugin && c.operation == operation && c.result.is_empty())
        {
            c.result = res;
        } else {
            calls.push(Call {
                plugin: plugin.to_owned(),
                operation: operation.to_owned(),
                ms: None,
                result: res,
            });
        }
    }

    fn plugin_conflict(&self, plugin: &str, _operation: &str) {
        lock(&self.0.conflicts).push(plugin.to_owned());
    }
}

pub(super) fn world_view<'a>(
    world: &'a World,
    registered: &'a [String],
    outcomes: &'a BTreeMap<String, bool>,
) -> crate::expect::View<'a> {
    crate::expect::View {
        specs: lock(&world.specs)
            .iter()
            .map(|(_, n, _, cur)| (n.clone(), cur.clone()))
            .collect(),
        owners: lock(&world.owners).clone(),
        counts: lock(&world.counts).clone(),
        conflicts: lock(&world.conflicts).clone(),
        registered,
        outcomes,
    }
}
