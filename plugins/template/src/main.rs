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
// error/result types of handlers, what `configure` receives, and the run
// loop (`Runner`) with the Go plugins' flags (`GoFlags`).
use nri_plugin::{
    Builder, ConfigureInfo, EventMask, GoFlags, HandlerError, HandlerResult, Plugin, SyncChunk,
    SyncKind, SyncMode,
};
// `serde` derives the YAML decoding of the configuration struct.
use serde::Deserialize;

/// The plugin's configuration, as YAML in the runtime's configuration file
/// for this plugin (`/etc/nri/conf.d/NN-template.conf`, pre-launched
/// plugins only; external plugins get none). Add your own fields here.
#[derive(Debug, Default, Clone, Deserialize, PartialEq, Eq)]
// Missing keys keep their default; the key names are camelCase, as the
// Go plugins' are. Unknown keys are ignored (add
// `#[serde(deny_unknown_fields)]` to refuse them).
#[serde(default, rename_all = "camelCase")]
struct Config {
    /// An example parameter (upstream's template has the same one).
    cfg_param1: String,
    /// Refuse unknown keys in this configuration (overrides `-strict`).
    strict: Option<bool>,
}

/// The keys [`Config`] knows (its field names as serde spells them).
const KEYS: &[&str] = &["cfgParam1", "strict"];

/// Why a configuration was refused.
#[derive(Debug)]
enum ConfigError {
    /// Not YAML, or a value of the wrong type for a key.
    Yaml(serde_saphyr::Error),
    /// Keys the plugin does not know, refused because `strict` is on.
    Unknown(Vec<String>),
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Yaml(e) => write!(f, "{e}"),
            Self::Unknown(keys) => write!(f, "unknown keys {keys:?} (strict)"),
        }
    }
}

/// Parses the configuration text; empty text gives the defaults. Unknown
/// keys are ignored with a warning, or refused when strict: `strict` in
/// the text if it is there, else the `-strict` flag.
fn parse_config(text: &str, strict_flag: bool) -> Result<Config, ConfigError> {
    if text.trim().is_empty() {
        return Ok(Config::default());
    }
    let config: Config = serde_saphyr::from_str(text).map_err(ConfigError::Yaml)?;
    // The same text as a map of key names, to find the keys serde skipped.
    let keys: std::collections::BTreeMap<String, serde::de::IgnoredAny> =
        serde_saphyr::from_str(text).map_err(ConfigError::Yaml)?;
    let unknown: Vec<String> = keys
        .into_keys()
        .filter(|k| !KEYS.contains(&k.as_str()))
        .collect();
    if !unknown.is_empty() {
        if config.strict.unwrap_or(strict_flag) {
            return Err(ConfigError::Unknown(unknown));
        }
        tracing::warn!(?unknown, "ignoring unknown configuration keys");
    }
    Ok(config)
}

/// The plugin's state. The SDK calls handlers concurrently (one task per
/// request), so state that changes needs interior mutability.
#[derive(Default)]
struct Template {
    /// The configuration of the current connection.
    config: Mutex<Config>,
    /// `-strict`: refuse unknown configuration keys.
    strict: bool,
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
        let config = parse_config(&info.config, self.strict)
            .map_err(|e| HandlerError::msg(format!("failed to parse configuration: {e}")))?;
        tracing::info!("Got configuration data {config:?}...");
        *self.config.lock().unwrap_or_else(PoisonError::into_inner) = config;
        // `info.unsupported` lists subscribed events this runtime cannot
        // deliver (older runtimes); the SDK drops them with a warning.
        Ok(None)
    }

    // After `configure`: every existing pod and container, one message of
    // the runtime at a time (the builder asks for `SyncMode::Streaming`):
    // `chunk.pods()` and `chunk.containers()` decode one item at a time,
    // so keep only what you need and the plugin never holds the whole
    // state (a runtime can send 64 MiB of it). After a reconnect
    // (`SyncKind::Resync`) the first message starts a new view. You may
    // return updates for existing containers. (`synchronize`, called once
    // with everything decoded, is the simpler alternative when the whole
    // state is needed at once.)
    async fn synchronize_chunk(
        &self,
        chunk: SyncChunk,
        kind: SyncKind,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        tracing::info!(
            "Synchronizing state with the runtime ({} pods, {} containers in this message{}, {kind:?})...",
            chunk.pod_count(),
            chunk.container_count(),
            if chunk.more() { ", more to come" } else { "" }
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

/// The `-help` text of the template's own flags (`GoFlags::USAGE` follows).
const USAGE: &str = "usage: template [flags]
A do-nothing NRI plugin that logs every event.
  -validate              also subscribe to ValidateContainerAdjustment (act as a validator)
  -pod-updates           also subscribe to UpdatePodSandbox and PostUpdatePodSandbox
  -strict                refuse unknown configuration keys (the `strict` key overrides it)";

fn main() -> ExitCode {
    // The Go plugins' flags (-idx, -name, -socket-path, -verbose,
    // -no-reconnect) in Go's syntax (`-idx 10`), and our own three.
    let mut validate = false;
    let mut pod_updates = false;
    let mut strict = false;
    let flags = match GoFlags::from_env(|name, value| {
        match name {
            "validate" => validate = value.bool()?,
            "pod-updates" => pod_updates = value.bool()?,
            "strict" => strict = value.bool()?,
            _ => return Ok(false),
        }
        Ok(true)
    }) {
        Ok(f) => f,
        // `-help` exits 0, a bad flag 2, as Go's `flag` package.
        Err(e) => return GoFlags::usage_exit(&e, &format!("{USAGE}\n{}", GoFlags::USAGE)),
    };

    // Logs go to stderr: a pre-launched plugin's stderr ends up in the
    // runtime's log. Colours only on a terminal.
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_max_level(if flags.verbose {
            tracing::Level::DEBUG
        } else {
            tracing::Level::INFO
        })
        .init();

    // The Go template's subscription unless asked for more: everything but
    // validation (a validator is consulted for every container, which a
    // no-op plugin should not be by default) and the pod updates.
    let builder = flags
        .apply(Builder::new(Template {
            strict,
            ..Template::default()
        }))
        .events(subscription(validate, pod_updates))
        .sync_mode(SyncMode::Streaming);

    // Connects (external: the socket; pre-launched: the runtime's fd),
    // registers, runs until SIGINT/SIGTERM or the runtime's shutdown, and
    // reconnects when an external plugin loses the runtime (unless
    // -no-reconnect). Exit status 0 after a signal, 1 otherwise.
    flags.runner().run(builder)
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
            parse_config("cfgParam1: x\nother: 1\n", false)
                .unwrap()
                .cfg_param1,
            "x"
        );
        // A plain scalar is text for a string field.
        assert_eq!(parse_config("cfgParam1: 5", false).unwrap().cfg_param1, "5");
        assert!(parse_config("cfgParam1: [1]", false).is_err());
        assert!(parse_config("cfgParam1: [", false).is_err());
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
