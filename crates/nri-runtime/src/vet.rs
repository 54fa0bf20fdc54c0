//! The checks every container update from a plugin goes through, whatever
//! way it came: structural checks, the in-process validators' rules, the
//! audit trail and the metrics.
//!
//! Updates merged from the answers to an event (`CreateContainer`,
//! `UpdateContainer`, `StopContainer`) are checked as they are merged
//! (`merge::check_update`), audited through their owners, and then shown
//! to the validators here ([`Shared::validate_merged_updates`]; those of a
//! `CreateContainer` are in the validation request instead). Updates one
//! plugin sends by itself (its `Synchronize` answer, an unsolicited
//! `UpdateContainers`) go through [`Shared::vet_updates`]: the same
//! structural checks, the validators, a merge into one update per
//! container, and an audit event per field.

use nri_api::api::{ContainerUpdate, Field, OwningPlugins};

use crate::adaptation::Shared;
use crate::error::{Error, RefusalKind};
use crate::failure::ErrorClass;
use crate::metrics::AUDIT_TARGET;
use crate::peer::{Peer, Refused};
use crate::plugin::PluginList;
use nri_merge::validate::{UpdateValidation, is_updated};
use nri_merge::{Participant, Participants, PluginId, check_unsolicited, merge_unsolicited};

/// The name under which in-process validators' update checks are counted
/// in [`Metrics::plugin_invocation`](crate::Metrics::plugin_invocation).
const VALIDATE_UPDATES: &str = "ValidateUpdates";

impl Shared {
    /// Vets the updates one plugin sent by itself (`operation` is
    /// `Synchronize` or `UpdateContainers`): refuses them all if one is
    /// malformed or a validator rejects them; otherwise returns them
    /// merged (one per container), audited and counted. A refusal is
    /// logged with the plugin's pid and uid and counted.
    pub(crate) fn vet_updates(
        &self,
        plugin: &PluginId,
        peer: &Peer,
        who: &Participant,
        operation: &str,
        updates: Vec<ContainerUpdate>,
    ) -> Result<Vec<ContainerUpdate>, Error> {
        if let Err(e) = check_unsolicited(plugin, &updates) {
            let refused = Refused {
                kind: RefusalKind::InvalidUpdate,
                reason: e.to_string(),
            };
            self.peers.report(peer, operation, &refused);
            return Err(e.into());
        }
        let name = plugin.to_string();
        let participants = [(name.as_str(), who)];
        let v = UpdateValidation::new(operation, &updates)
            .with_plugin(&name)
            .with_participants(Participants::new(&participants));
        if let Err(e) = self.run_update_validators(&v) {
            let refused = Refused {
                kind: RefusalKind::RejectedUpdate,
                reason: e.to_string(),
            };
            self.peers.report(peer, operation, &refused);
            return Err(e);
        }
        let merged = merge_unsolicited(updates);
        audit_updates(operation, &name, &merged);
        self.metrics
            .plugin_adjustments(&name, operation, 0, merged.len(), 0);
        Ok(merged)
    }

    /// Shows the updates merged from the answers to an `UpdateContainer`
    /// or `StopContainer` to the in-process validators.
    pub(crate) fn validate_merged_updates(
        &self,
        operation: &str,
        updates: &[ContainerUpdate],
        owners: &OwningPlugins,
        plugins: &PluginList,
    ) -> Result<(), Error> {
        if self.validators().is_empty() {
            return Ok(());
        }
        let list = participants(plugins);
        let v = UpdateValidation::new(operation, updates)
            .with_owners(owners)
            .with_participants(Participants::new(&list));
        self.run_update_validators(&v)
    }

    fn run_update_validators(&self, v: &UpdateValidation<'_>) -> Result<(), Error> {
        for (id, validator) in self.validators() {
            let name = id.to_string();
            if let Err(rej) = validator.validate_updates(v) {
                self.metrics
                    .plugin_invocation(&name, VALIDATE_UPDATES, Err(ErrorClass::Rejected));
                tracing::warn!(validator = %id, operation = v.operation, reason = %rej.reason, "container updates rejected");
                return Err(rej.into_error(id).into());
            }
            self.metrics
                .plugin_invocation(&name, VALIDATE_UPDATES, Ok(()));
        }
        Ok(())
    }
}

/// The `(NN-name, participant)` pairs of `plugins`, for validators.
pub(crate) fn participants(plugins: &PluginList) -> Vec<(&str, &Participant)> {
    plugins
        .iter()
        .map(|p| (p.name.as_str(), &p.admission.participant))
        .collect()
}

/// One audit event (target [`AUDIT_TARGET`]) per field of each update, as
/// [`audit_owners`](crate::metrics::audit_owners) gives for merged
/// answers: `operation`, `plugin`, `container`, `field`, `key` (the page
/// size of a hugepage limit, the name of a unified setting), `removed`.
pub(crate) fn audit_updates(operation: &str, plugin: &str, updates: &[ContainerUpdate]) {
    for u in updates {
        let Some(res) = u.linux.as_ref().and_then(|l| l.resources.as_ref()) else {
            continue;
        };
        let container = u.container_id.as_str();
        let fields = (1..).map_while(|n| Field::try_from(n).ok());
        for field in fields.filter(|f| is_updated(res, *f)) {
            let keys: Vec<&str> = match field {
                Field::HugepageLimits => res
                    .hugepage_limits
                    .iter()
                    .map(|h| h.page_size.as_str())
                    .collect(),
                Field::CgroupsUnified => res.unified.keys().map(String::as_str).collect(),
                _ => vec![""],
            };
            for key in keys {
                tracing::info!(
                    target: AUDIT_TARGET,
                    operation,
                    plugin,
                    container,
                    field = field.as_str_name(),
                    key,
                    removed = false,
                    "plugin updated container"
                );
            }
        }
    }
}
