//! Validation of a merged CreateContainer: the in-process validators, then
//! the validator plugins (all at once); it fails closed.

use nri_api::api::{
    Container, Event, PodSandbox, ValidateContainerAdjustmentRequest,
    ValidateContainerAdjustmentResponse,
};
use nri_api::method;
use tokio::task::JoinSet;

use super::Shared;
use crate::error::Error;
use crate::failure::{ErrorClass, PluginError, PluginFailure, ValidationMode};
use crate::plugin::{Answer, Budget, Plugin, PluginList};
use std::sync::Arc;

use nri_merge::validate;
use nri_merge::{CreateResult, Participants};

impl Shared {
    /// Runs in-process validators and validator plugins on the merged result.
    pub(super) async fn validate(
        &self,
        plugins: &PluginList,
        pod: &PodSandbox,
        result: &CreateResult<&PodSandbox, &Container>,
        errors: &mut Vec<PluginError>,
        budget: Budget,
    ) -> Result<(), Error> {
        let ev = Event::ValidateContainerAdjustment;
        if self.validators.is_empty()
            && !(plugins.iter().chain(plugins.successors.iter()))
                .any(|p| p.subscribed(ev) && !p.is_closed())
        {
            return Ok(());
        }
        let req = validate::build_request(result);
        self.run_validators(plugins, pod, &req, errors, budget)
            .await
    }

    /// Runs in-process validators and validator plugins on `req`.
    pub(super) async fn run_validators(
        &self,
        plugins: &PluginList,
        pod: &PodSandbox,
        req: &ValidateContainerAdjustmentRequest,
        errors: &mut Vec<PluginError>,
        budget: Budget,
    ) -> Result<(), Error> {
        let ev = Event::ValidateContainerAdjustment;
        let op = ev.pretty_name();
        // A validator already gone is absent: not called, and whether the
        // creation may go on without it was decided by the required-plugin
        // check.
        // A newer instance of a validator taking over from it (see
        // `registry/handover.rs`) validates once its Synchronize and backlog
        // are through: it is called like an active one, and waits for its
        // gate.
        let vplugins: Vec<_> = (plugins.iter().chain(plugins.successors.iter()))
            .filter(|p| p.subscribed(ev) && !p.is_closed())
            .cloned()
            .collect();
        let participants = crate::vet::participants(plugins);
        for (id, v) in &self.validators {
            if let Err(rej) = v.validate_with(req, Participants::new(&participants)) {
                self.metrics
                    .plugin_invocation(&id.to_string(), op, Err(ErrorClass::Rejected));
                tracing::warn!(validator = %id, reason = %rej.reason, "container adjustment rejected");
                return Err(rej.into_error(id).into());
            }
            self.metrics.plugin_invocation(&id.to_string(), op, Ok(()));
        }
        let mut set = JoinSet::new();
        let payload = bytes::Bytes::from(prost::Message::encode_to_vec(req));
        for (i, p) in vplugins.into_iter().enumerate() {
            let payload = payload.clone();
            let metrics = self.metrics.clone();
            let registry = self.registry.clone();
            set.spawn(async move {
                // Like any direct call, once the validator's backlog (what
                // happened while it synchronized) has been delivered: it
                // never validates a container of a pod it has not seen.
                let call = |p: Arc<Plugin>| {
                    let (metrics, payload) = (metrics.clone(), payload.clone());
                    async move {
                        let within = crate::plugin::Within {
                            budget,
                            replay: crate::plugin::Replay::Nothing,
                        };
                        let r: Result<ValidateContainerAdjustmentResponse, _> = p
                            .call_encoded(
                                &*metrics,
                                op,
                                method::VALIDATE_CONTAINER_ADJUSTMENT,
                                payload,
                                within,
                                Answer::Counted,
                            )
                            .await;
                        (p, r)
                    }
                };
                let (p, r) = call(p).await;
                // A newer instance that failed before it was active: the
                // instance it was taking over from is active again and
                // validates instead.
                if matches!(r, Err(PluginFailure::Disconnected { .. })) {
                    if let Some(q) = registry.current_instance(&p) {
                        let (q, r) = call(q).await;
                        return (i, q, r);
                    }
                }
                (i, p, r)
            });
        }
        let mut answers = Vec::new();
        while let Some(j) = set.join_next().await {
            match j {
                Ok(a) => answers.push(a),
                Err(e) => tracing::error!(error = %e, "validator task failed"),
            }
        }
        answers.sort_by_key(|(i, _, _)| *i);
        for (_, p, r) in answers {
            match r {
                Ok(resp) => {
                    if let Err(e) = validate::check_response(&p.id, &resp) {
                        tracing::warn!(validator = %p.id, error = %e, "container adjustment rejected");
                        return Err(e.into());
                    }
                }
                Err(f) => self.validator_failed(&p, f, pod, errors)?,
            }
        }
        Ok(())
    }

    /// A validator failed instead of answering: the creation fails (fail
    /// closed), whatever its failure policy, unless the plugin's entry says
    /// `validation: fail-open` or the pod's namespace is exempt.
    fn validator_failed(
        &self,
        p: &Plugin,
        failure: PluginFailure,
        pod: &PodSandbox,
        errors: &mut Vec<PluginError>,
    ) -> Result<(), Error> {
        let ev = Event::ValidateContainerAdjustment;
        let mode = self
            .config
            .plugin_entry(&p.id)
            .and_then(|e| e.validation)
            .unwrap_or_default();
        let class = failure.class();
        if mode == ValidationMode::FailOpen {
            tracing::warn!(validator = %p.id, error = %failure, class = %class, "NRI validator failed; going on (validation: fail-open)");
        } else if self.config.is_exempt(&pod.namespace) {
            tracing::warn!(validator = %p.id, error = %failure, class = %class, namespace = %pod.namespace, "NRI validator failed; going on for a pod of an exempt namespace");
        } else {
            tracing::warn!(validator = %p.id, error = %failure, class = %class, "NRI validator failed; failing the container creation (fail closed)");
            return Err(Error::PluginFailed {
                plugin: p.name.clone(),
                event: ev.pretty_name().to_owned(),
                cause: failure,
            });
        }
        errors.push(PluginError::new(p.name.clone(), ev, failure));
        Ok(())
    }
}
