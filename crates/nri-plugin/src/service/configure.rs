//! `Configure`: who the runtime is, whether it can serve the plugin, the
//! subscription sent back.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use nri_api::api::{ConfigureRequest, ConfigureResponse};
use nri_api::{EventMask, RuntimeCapabilities, RuntimeNriVersion, runtime_nri_version};
use nri_ttrpc::Status;

use super::{PluginService, encode};
use crate::handle::lock;
use crate::{ConfigureInfo, Error, Phase, Plugin, PluginHandle, RuntimeInfo, UnknownCapabilities};

impl<P: Plugin> PluginService<P> {
    pub(super) async fn run_configure(self, req: ConfigureRequest) -> nri_ttrpc::HandlerResult {
        self.shared.latency.runtime_configured(&req.nri_version);
        self.conn.set_phase(Phase::Configuring);
        let nri_version =
            runtime_nri_version(&req.nri_version, &req.runtime_name, &req.runtime_version);
        let ms = |v: i64| Duration::from_millis(u64::try_from(v).unwrap_or(0));
        let nri_rs = nri_api::is_nri_rs_runtime(&req.nri_version);
        let capabilities = RuntimeCapabilities::of_runtime(
            &req.nri_version,
            &req.runtime_name,
            &req.runtime_version,
        );
        let runtime = RuntimeInfo {
            name: req.runtime_name,
            version: req.runtime_version,
            nri_version,
            registration_timeout: ms(req.registration_timeout),
            request_timeout: ms(req.request_timeout),
            nri_rs,
            capabilities,
        };
        let valid = runtime.valid_events();
        let default_events = self.config.events;
        let info = ConfigureInfo {
            config: req.config,
            runtime: runtime.clone(),
            subscription: default_events,
            unsupported: default_events.difference(valid),
            handle: PluginHandle {
                shared: Arc::clone(&self.shared),
            },
        };
        tracing::info!(
            plugin = %self.config.plugin_name(),
            runtime = %runtime.name,
            runtime_version = %runtime.version,
            nri_version = %nri_version.version,
            nri_version_origin = ?nri_version.origin,
            capabilities = %runtime.capabilities.supported,
            capabilities_basis = ?runtime.capabilities.basis,
            "nri-plugin: configuring"
        );
        let checked = self.check_requirements(&runtime);
        *lock(&self.shared.runtime) = Some(runtime);
        checked?;

        let requested = match self.plugin.configure(&info).await {
            Ok(Some(m)) => m,
            Ok(None) => default_events,
            Err(e) => {
                return Err(self.conn.fail(Error::ConfigureFailed {
                    reason: e.to_string(),
                }));
            }
        };
        let sent = self.subscription(requested, valid, nri_version)?;
        self.conn.set_phase(Phase::Synchronizing);
        self.conn.configured.notify_one();
        self.note_failure_policy(nri_version);
        Ok(encode(&ConfigureResponse {
            events: sent.as_i32(),
            failure_policy: self.config.failure_policy,
        }))
    }

    /// Checks the plugin's requirements against the runtime: an error
    /// (answered to `Configure`, ending the connection) when something is
    /// missing, or cannot be told and the plugin wants that to fail.
    fn check_requirements(&self, runtime: &RuntimeInfo) -> Result<(), Status> {
        let required = &self.config.requires;
        if required.is_empty() {
            return Ok(());
        }
        let caps = &runtime.capabilities;
        let mut check = caps.check(required.iter().copied());
        let fail_unknown = self.config.unknown_capabilities == UnknownCapabilities::Fail;
        if check.missing.is_empty() && (check.unknown.is_empty() || !fail_unknown) {
            if check.unknown.is_empty() {
                tracing::info!(basis = ?caps.basis, "nri-plugin: the runtime has what the plugin requires");
            } else {
                tracing::warn!(
                    runtime = %runtime.name,
                    runtime_version = %runtime.version,
                    unknown = %check,
                    basis = ?caps.basis,
                    "nri-plugin: cannot tell whether the runtime supports what the plugin requires; running anyway"
                );
            }
            return Ok(());
        }
        if !fail_unknown {
            check.unknown.clear();
        }
        Err(self.conn.fail(Error::Unsupported {
            runtime: runtime.name.clone(),
            version: runtime.version.clone(),
            missing: check.missing.into(),
            unknown: check.unknown.into(),
            basis: caps.basis,
        }))
    }

    /// The events sent to the runtime: what `configure` chose, checked
    /// against the plugin's events, less what the runtime cannot deliver
    /// (or an error ending the connection).
    fn subscription(
        &self,
        requested: EventMask,
        valid: EventMask,
        nri_version: RuntimeNriVersion,
    ) -> Result<EventMask, Status> {
        let handled = self.config.handled;
        if requested.is_empty() || !handled.contains_all(requested) {
            return Err(self.conn.fail(Error::ConfigureFailed {
                reason: format!(
                    "configure chose events {requested}, not a non-empty subset of the plugin's \
                     events {handled} (the default subscription and the implemented methods)"
                ),
            }));
        }
        let dropped = requested.difference(valid);
        let sent = requested.intersection(valid);
        self.shared
            .dropped
            .store(dropped.as_i32(), Ordering::Relaxed);
        if !dropped.is_empty() {
            if self.config.strict_events || sent.is_empty() {
                return Err(self.conn.fail(Error::UnsupportedEvents {
                    requested,
                    dropped,
                    runtime_version: nri_version.version,
                }));
            }
            tracing::warn!(
                requested = %requested,
                dropped = %dropped,
                dropped_mask = format_args!("{:#x}", dropped.as_i32()),
                runtime_nri_version = %nri_version.version,
                nri_version_origin = ?nri_version.origin,
                "nri-plugin: the runtime cannot deliver some events; they are left out of the subscription"
            );
        }
        self.shared
            .subscribed
            .store(sent.as_i32(), Ordering::Relaxed);
        let acknowledged = sent.difference(P::IMPLEMENTED.events());
        if !acknowledged.is_empty() {
            tracing::info!(
                events = %acknowledged,
                "nri-plugin: subscribed to events without a method; they are answered with an empty success"
            );
        }
        Ok(sent)
    }

    /// Says whether the runtime honours the failure policy the plugin
    /// declares.
    fn note_failure_policy(&self, nri_version: RuntimeNriVersion) {
        if let Some(policy) = self.config.failure_policy {
            if !nri_version.version.honours_plugin_failure_policy() {
                tracing::info!(
                    runtime_nri_version = %nri_version.version,
                    "nri-plugin: the runtime's NRI version predates plugin-declared failure \
                     policies (v0.12.4); it ignores the plugin's policy"
                );
            } else {
                tracing::debug!(
                    fail_request = policy.fail_request,
                    keep_connected = policy.keep_connected,
                    "nri-plugin: declaring a failure policy"
                );
            }
        }
    }
}
