//! `template`: the starting point for writing an NRI plugin in Rust.
//!
//! It handles every NRI event, logs it and changes nothing. Copy this crate,
//! rename it, delete the events you do not need and fill in the ones you do.
//! Each part is explained where it appears; README.md says how to run it.

// `ExitCode` lets `main` return the exit status instead of calling
// `std::process::exit`, so destructors (log flushing) still run.
use std::process::ExitCode;
// The configuration is replaced on every (re)connection while handlers may
// read it concurrently, so it lives behind a lock.
use std::sync::{Mutex, PoisonError};

// The protocol types: what the runtime sends (pods, containers, resources)
// and what handlers return (responses carrying adjustments and updates).
use nri_plugin::api::{
    Container, ContainerAdjustment, ContainerUpdate, CreateContainerResponse, LinuxResources,
    PodSandbox, StopContainerResponse, UpdateContainerResponse, ValidateContainerAdjustmentRequest,
};
// The SDK: the `Plugin` trait to implement, the event mask type, the
// error/result types of handlers, and what `configure` receives.
use nri_plugin::{ConfigureInfo, EventMask, HandlerError, HandlerResult, Plugin, SyncKind};
// Shared helpers of the sample plugins: flags in Go's syntax (`-idx 10`),
// logging setup, YAML decoding like the Go samples, and the run loop
// (reconnect, signals, exit status).
use nri_sample_common::goyaml::{Field, Shape};
use nri_sample_common::{
    AnnotationError, COMMON_USAGE, CommonArgs, Source, decode_annotation, init_logging, parse_args,
    run_plugin, usage_exit,
};
// `serde` derives the YAML decoding of the configuration struct.
use serde::{Deserialize, Serialize};

/// The plugin's configuration, as YAML in the runtime's configuration file
/// for this plugin (`/etc/nri/conf.d/NN-template.conf`, pre-launched
/// plugins only; external plugins get none). Add your own fields here.
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq, Eq)]
// Missing keys keep their default, as Go's decoder does; Go's key names
// are camelCase.
#[serde(default, rename_all = "camelCase")]
struct Config {
    /// An example parameter (upstream's template has the same one).
    cfg_param1: String,
}

/// The shape of [`Config`] as Go sees it (its JSON names and types), so
/// the YAML is read as the Go template reads it with `sigs.k8s.io/yaml`:
/// keys match case-insensitively (`CfgParam1` works too), a number or
/// boolean for a string becomes its text, unknown keys are ignored (with a
/// warning; refused with `-strict`).
const CONFIG_SHAPE: Shape = Shape::Struct(&[
    Field::new("cfgParam1", Shape::Str),
    // Ours: the `-strict` flag as a key (see `strict_key`).
    Field::new("strict", Shape::Bool),
]);

/// Parses the configuration text; empty text gives the defaults.
fn parse_config(text: &str, strict: bool) -> Result<Config, AnnotationError> {
    if text.trim().is_empty() {
        return Ok(Config::default());
    }
    let strict = nri_sample_common::strict_key(text, false).unwrap_or(strict);
    let src = Source {
        pod: "",
        container: "",
        annotation: "configuration",
        value: text,
    };
    decode_annotation(&src, &CONFIG_SHAPE, &Config::default(), strict)
}

/// The plugin's state. The SDK calls handlers concurrently (one task per
/// request), so state that changes needs interior mutability.
#[derive(Default)]
struct Template {
    /// The configuration of the current connection.
    config: Mutex<Config>,
    /// `-strict`: refuse configuration keys Go would ignore.
    strict: bool,
    /// The `-config` file's text, used when the runtime passes none.
    own_config: String,
}

/// `namespace/name` of a pod, for log lines.
fn pod_name(pod: &PodSandbox) -> String {
    format!("{}/{}", pod.namespace, pod.name)
}

/// `namespace/pod/container`, for log lines.
fn ctr_name(pod: &PodSandbox, ctr: &Container) -> String {
    format!("{}/{}/{}", pod.namespace, pod.name, ctr.name)
}

// `#[nri_plugin::plugin]` derives the events this plugin handles from the
// methods below: delete a method and the plugin no longer subscribes to
// its event. That is the default subscription, which `main` narrows (see
// there) and `configure` may narrow again per connection. To subscribe to
// other events, set `const EVENTS: EventMask = ...;` in the impl: events
// without a method are then answered with an empty success.
#[nri_plugin::plugin]
impl Plugin for Template {
    // Called once per connection, before anything else: the runtime's
    // identity and this plugin's configuration. An error here makes the
    // runtime drop the plugin, so refuse bad configuration here rather than
    // failing later events. Return `Some(mask)` to change the subscription.
    async fn configure(&self, info: &ConfigureInfo) -> HandlerResult<Option<EventMask>> {
        tracing::info!(
            "Connected to {}/{} (NRI {})...",
            info.runtime.name,
            info.runtime.version,
            info.runtime.nri_version.version
        );
        let text = CommonArgs::effective_config(&info.config, &self.own_config);
        let config = parse_config(text, self.strict)
            .map_err(|e| HandlerError::msg(format!("failed to parse configuration: {e}")))?;
        tracing::info!("Got configuration data {config:?}...");
        *self.config.lock().unwrap_or_else(PoisonError::into_inner) = config;
        // `info.unsupported` lists subscribed events this runtime cannot
        // deliver (older runtimes); the SDK drops them with a warning.
        Ok(None)
    }

    // After `configure`: every existing pod and container. Build your view
    // of the node from them. After a reconnect (`SyncKind::Resync`) they
    // replace whatever you kept. You may return updates for existing
    // containers.
    async fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
        kind: SyncKind,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        tracing::info!(
            "Synchronized state with the runtime ({} pods, {} containers, {kind:?})...",
            pods.len(),
            containers.len()
        );
        Ok(Vec::new())
    }

    // The runtime is going away (it may come back: external plugins
    // reconnect, pre-launched ones are started again).
    async fn shutdown(&self) {
        tracing::info!("Runtime shutting down...");
    }

    // Not an event: the connection ended. Drop per-connection state here.
    fn disconnected(&self, cause: &nri_plugin::Error) {
        tracing::info!("Connection to the runtime lost: {cause}");
    }

    // Pod events. An error returned from RunPodSandbox fails the pod's
    // start; errors from the stop/remove events are only logged by the
    // runtime.
    async fn run_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        tracing::info!("Started pod {}...", pod_name(&pod));
        Ok(())
    }

    // A pod's resources are being changed (NRI v0.10+ runtimes). Not in
    // the default subscription (the Go template has no such handlers):
    // `-pod-updates` adds these two events.
    async fn update_pod_sandbox(
        &self,
        pod: PodSandbox,
        _overhead: Option<LinuxResources>,
        _resources: Option<LinuxResources>,
    ) -> HandlerResult<()> {
        tracing::info!("Updating pod {}...", pod_name(&pod));
        Ok(())
    }

    async fn post_update_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        tracing::info!("Updated pod {}...", pod_name(&pod));
        Ok(())
    }

    async fn stop_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        tracing::info!("Stopped pod {}...", pod_name(&pod));
        Ok(())
    }

    async fn remove_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        tracing::info!("Removed pod {}...", pod_name(&pod));
        Ok(())
    }

    // The container is about to be created: the one event where (almost)
    // everything about it can still change. Fill `adjust` with the
    // `ContainerAdjustment` builders (`add_env`, `add_mount`, `add_device`,
    // `add_rlimit`, `linux_resources_mut()...`); put changes to other,
    // existing containers in `update` (`ContainerUpdate::new(id)`). A
    // returned error fails the creation, with your message.
    async fn create_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        tracing::info!("Creating container {}...", ctr_name(&pod, &ctr));
        let adjust = ContainerAdjustment::default();
        let update: Vec<ContainerUpdate> = Vec::new();
        Ok(CreateContainerResponse {
            adjust: Some(adjust),
            update,
            ..Default::default()
        })
    }

    async fn post_create_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        tracing::info!("Created container {}...", ctr_name(&pod, &ctr));
        Ok(())
    }

    async fn start_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        tracing::info!("Starting container {}...", ctr_name(&pod, &ctr));
        Ok(())
    }

    async fn post_start_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        tracing::info!("Started container {}...", ctr_name(&pod, &ctr));
        Ok(())
    }

    // The container's resources are being updated to `resources`. Return
    // updates to apply instead (the target container's own update last) or
    // to other containers.
    async fn update_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
        _resources: Option<LinuxResources>,
    ) -> HandlerResult<UpdateContainerResponse> {
        tracing::info!("Updating container {}...", ctr_name(&pod, &ctr));
        Ok(UpdateContainerResponse::default())
    }

    async fn post_update_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        tracing::info!("Updated container {}...", ctr_name(&pod, &ctr));
        Ok(())
    }

    // The container has stopped (or is being stopped): you may update the
    // remaining containers, e.g. hand its resources to them.
    async fn stop_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<StopContainerResponse> {
        tracing::info!("Stopped container {}...", ctr_name(&pod, &ctr));
        Ok(StopContainerResponse::default())
    }

    async fn remove_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        tracing::info!("Removed container {}...", ctr_name(&pod, &ctr));
        Ok(())
    }

    // Only for validator plugins (subscribed with `-validate`): the merged
    // adjustment of all plugins for a container, with which plugin owns
    // which field. Return an error to reject it (the creation fails with
    // your message).
    async fn validate_container_adjustment(
        &self,
        req: ValidateContainerAdjustmentRequest,
    ) -> HandlerResult<()> {
        let name = match (&req.pod, &req.container) {
            (Some(p), Some(c)) => ctr_name(p, c),
            _ => String::from("<unknown>"),
        };
        tracing::info!("Validating adjustment of container {name}...");
        Ok(())
    }
}

/// The `-help` text.
const USAGE: &str = "usage: template [flags]
A do-nothing NRI plugin that logs every event.
  -validate              also subscribe to ValidateContainerAdjustment (act as a validator)
  -pod-updates           also subscribe to UpdatePodSandbox and PostUpdatePodSandbox
";

fn main() -> ExitCode {
    // Our one own flag; the common ones (-idx, -name, -socket-path, ...)
    // are parsed by `parse_args`.
    let mut validate = false;
    let mut pod_updates = false;
    let args = match parse_args(std::env::args().skip(1), |name, value| {
        match name {
            "validate" => validate = value.bool()?,
            "pod-updates" => pod_updates = value.bool()?,
            _ => return Ok(false),
        }
        Ok(true)
    }) {
        Ok(a) => a,
        Err(e) => return usage_exit(&e, &format!("{USAGE}{COMMON_USAGE}")),
    };

    // Logs go to stderr: a pre-launched plugin's stderr ends up in the
    // runtime's log.
    if let Err(e) = init_logging(args.log_level, args.log_file.as_deref()) {
        eprintln!("template: {e}");
        return ExitCode::FAILURE;
    }

    // The Go template's subscription unless asked for more: everything but
    // validation (a validator is consulted for every container, which a
    // no-op plugin should not be by default) and the pod updates.
    let events = subscription(validate, pod_updates);
    let own_config = match args.config_text() {
        Ok(c) => c,
        Err(e) => return usage_exit(&e, &format!("{USAGE}{COMMON_USAGE}")),
    };
    let plugin = Template {
        strict: args.strict,
        own_config,
        ..Template::default()
    };

    // Connects (external: the socket; pre-launched: the runtime's fd),
    // registers, runs until SIGINT/SIGTERM or the runtime's shutdown, and
    // reconnects when an external plugin loses the runtime.
    run_plugin(plugin, &args, "template", |b| b.events(events))
}

/// The events to subscribe to: the Go template's, plus validation and the
/// pod updates when asked.
fn subscription(validate: bool, pod_updates: bool) -> EventMask {
    use nri_plugin::api::Event;
    let mut off = Vec::new();
    if !validate {
        off.push(Event::ValidateContainerAdjustment);
    }
    if !pod_updates {
        off.extend([Event::UpdatePodSandbox, Event::PostUpdatePodSandbox]);
    }
    EventMask::ALL.difference(EventMask::from_events(&off))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn config() {
        assert_eq!(parse_config("", false).unwrap(), Config::default());
        assert_eq!(
            parse_config("CfgParam1: x\nother: 1\n", false)
                .unwrap()
                .cfg_param1,
            "x"
        );
        // As Go's sigs.k8s.io/yaml: a number for the string is its text.
        assert_eq!(parse_config("cfgParam1: 5", false).unwrap().cfg_param1, "5");
        assert_eq!(
            parse_config("cfgParam1: on", false).unwrap().cfg_param1,
            "true"
        );
        assert!(parse_config("cfgParam1: [1]", false).is_err());
        // Unknown keys: ignored, refused when strict.
        assert!(parse_config("other: 1", true).is_err());
        // `strict` as a key, over the flag.
        assert!(parse_config("strict: true\nother: 1", false).is_err());
        assert!(parse_config("strict: false\nother: 1", true).is_ok());
        assert_eq!(
            parse_config("strict: true\ncfgParam1: x", false)
                .unwrap()
                .cfg_param1,
            "x"
        );
    }

    #[test]
    fn subscription_as_go_unless_asked() {
        use nri_plugin::api::Event;
        let go = subscription(false, false);
        assert!(go.contains(Event::CreateContainer) && go.contains(Event::RemovePodSandbox));
        for e in [
            Event::ValidateContainerAdjustment,
            Event::UpdatePodSandbox,
            Event::PostUpdatePodSandbox,
        ] {
            assert!(!go.contains(e), "{e:?}");
        }
        assert_eq!(subscription(true, true), EventMask::ALL);
    }

    #[tokio::test]
    async fn create_container_changes_nothing() {
        let r = Template::default()
            .create_container(PodSandbox::default(), Container::default())
            .await
            .unwrap();
        assert_eq!(r.adjust, Some(ContainerAdjustment::default()));
        assert!(r.update.is_empty() && r.evict.is_empty());
    }
}
