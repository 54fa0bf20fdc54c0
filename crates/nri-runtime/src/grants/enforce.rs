//! The runtime's side of grants: admission at registration, and the
//! check of every answer at the merge boundary, with the listing of pods
//! a grant's pod selector needs, the audit event and the metrics.

use std::time::Duration;

use nri_merge::{Participant, PluginId, PluginIdentity};

use super::{Changes, GrantRef, Violation};
use crate::adaptation::Shared;
use crate::failure::{ErrorClass, PluginFailure};
use crate::metrics::AUDIT_TARGET;
use crate::plugin::Plugin;

/// How a plugin was admitted: who it is (its identity, and the role of
/// its grant) and the grant it was admitted under (`None`: no grants are
/// configured).
#[derive(Debug, Clone)]
pub(crate) struct Admission {
    pub(crate) participant: Participant,
    pub(crate) grant: Option<GrantRef>,
}

impl Admission {
    pub(crate) fn new(participant: Participant, grant: Option<GrantRef>) -> Self {
        Self { participant, grant }
    }

    /// Who the plugin is.
    pub(crate) fn identity(&self) -> &PluginIdentity {
        &self.participant.identity
    }

    /// The grant, as configured.
    pub(crate) fn grant(&self) -> Option<&crate::Grant> {
        self.grant.as_ref().map(|g| &*g.grant)
    }
}

impl Shared {
    /// Admits plugin `id` with `identity` under the grants: logs and
    /// audits the admission, reports it to the metrics; or returns why
    /// no grant admits it.
    pub(crate) fn admit_grant(
        &self,
        id: &PluginId,
        identity: PluginIdentity,
    ) -> Result<Admission, String> {
        let admission = self.grants.admit(id, identity)?;
        self.record_admission(id, &admission);
        Ok(admission)
    }

    /// Logs and audits the admission of plugin `id` and reports its
    /// identity to the metrics (until [`Metrics::plugin_gone`](crate::Metrics::plugin_gone)).
    pub(crate) fn record_admission(&self, id: &PluginId, admission: &Admission) {
        let grant = admission.grant.as_ref().map(ToString::to_string);
        let identity = admission.identity();
        tracing::info!(
            target: AUDIT_TARGET,
            plugin = %id,
            identity = %identity,
            grant = grant.as_deref().unwrap_or("none (no grants configured)"),
            "NRI plugin admitted"
        );
        self.metrics
            .plugin_identity(id.as_str(), identity, grant.as_deref());
    }

    /// Reports plugin `name` gone to the metrics
    /// ([`Metrics::plugin_gone`](crate::Metrics::plugin_gone)) unless an
    /// instance of it is still reserved or connected (one being replaced
    /// by a newer one, or taking over from an older one).
    pub(crate) fn gone_if_last(&self, name: &str) {
        if !self.registry.name_held(name) {
            self.metrics.plugin_gone(name);
        }
    }

    /// Checks what plugin `plugin` (`NN-name`) sent against its grant:
    /// `Ok` without a grant or within it; otherwise the violation, logged
    /// and audited (target `nri::audit`) and counted
    /// ([`Metrics::grant_refused`](crate::Metrics::grant_refused)).
    /// `timeout` bounds the runtime's listing the pod check may need (the
    /// plugin's request timeout: the check runs on its behalf).
    pub(crate) async fn granted(
        &self,
        plugin: &str,
        admission: &Admission,
        ch: &Changes<'_>,
        timeout: Duration,
    ) -> Result<(), Violation> {
        let Some(g) = &admission.grant else {
            return Ok(());
        };
        if ch.is_empty() && !ch.unsolicited {
            return Ok(());
        }
        let result = match g.check(plugin, ch) {
            Ok(lookup) if lookup.is_empty() => Ok(()),
            Ok(lookup) => {
                self.check_pods(plugin, g, ch.operation, &lookup, timeout)
                    .await
            }
            Err(v) => Err(v),
        };
        if let Err(v) = &result {
            tracing::warn!(
                target: AUDIT_TARGET,
                operation = ch.operation,
                plugin,
                identity = %admission.identity(),
                grant = %g,
                field = v.field,
                container = %v.container,
                reason = %v.reason,
                "NRI plugin answer refused: outside its grant"
            );
            self.metrics.grant_refused(plugin, ch.operation, v.field);
        }
        result
    }

    /// The pod check of changes to containers other than the event's: the
    /// runtime's listing, within `timeout`, gives their pods (a listing
    /// that fails or takes longer, or a container it does not have, is
    /// refused: the grant cannot be shown to allow it).
    async fn check_pods(
        &self,
        plugin: &str,
        g: &GrantRef,
        op: &str,
        containers: &[&str],
        timeout: Duration,
    ) -> Result<(), Violation> {
        let listing = tokio::time::timeout(timeout, self.callbacks.list_pods_and_containers());
        let failed = match listing.await {
            Ok(Ok(s)) => Ok(s),
            Ok(Err(e)) => Err(format!("failed: {e}")),
            Err(_) => Err(format!("took longer than {timeout:?}")),
        };
        let snapshot = match failed {
            Ok(s) => s,
            Err(why) => {
                return Err(Violation {
                    field: "pod",
                    container: containers.first().copied().unwrap_or("").to_owned(),
                    reason: format!(
                        "{op} answer of plugin {plugin} changes other containers, and listing them to check the pods of {g} {why}"
                    ),
                });
            }
        };
        for c in containers {
            let pod = snapshot
                .containers
                .iter()
                .find(|x| x.id == *c)
                .and_then(|x| snapshot.pods.iter().find(|p| p.id == x.pod_sandbox_id));
            g.check_pod(plugin, op, c, pod)?;
        }
        Ok(())
    }

    /// An answer of plugin `p` to an event, checked against its grant:
    /// the failure (already counted as an invocation of class
    /// `not_granted`) its policy decides about when it goes beyond.
    pub(crate) async fn answer_granted(
        &self,
        p: &Plugin,
        ch: &Changes<'_>,
    ) -> Result<(), PluginFailure> {
        if p.admission.grant.is_none() {
            return Ok(());
        }
        self.granted(&p.name, &p.admission, ch, p.timeout)
            .await
            .map_err(|v| self.refuse_ungranted(&p.name, ch.operation, v))
    }

    /// A refused answer of a plugin call whose invocation is counted when
    /// its answer is merged: counted now (class `not_granted`), as the
    /// failure its policy decides about.
    pub(crate) fn refuse_ungranted(&self, plugin: &str, op: &str, v: Violation) -> PluginFailure {
        self.metrics
            .plugin_invocation(plugin, op, Err(ErrorClass::NotGranted));
        PluginFailure::from(v)
    }
}

impl From<Violation> for PluginFailure {
    fn from(v: Violation) -> Self {
        PluginFailure::NotGranted {
            field: v.field.to_owned(),
            reason: v.reason,
        }
    }
}
