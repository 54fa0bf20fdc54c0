//! `logger`: an NRI plugin that logs every event it receives, optionally
//! to a file, and can add (or set) an annotation and an environment
//! variable on created containers. Flags and configuration keys are those
//! of containerd/nri's Go `logger` (see README.md).

use std::process::ExitCode;
use std::sync::{Mutex, PoisonError};

use nri_plugin::api::{
    Container, ContainerUpdate, CreateContainerResponse, LinuxResources, PodSandbox,
    StopContainerResponse, UpdateContainerResponse, ValidateContainerAdjustmentRequest,
};
use nri_plugin::{
    ConfigureInfo, EventMask, HandlerError, HandlerResult, Plugin, SyncChunk, SyncKind, SyncMode,
};
use nri_sample_common::{COMMON_USAGE, LogOutput, dump, init_logging, parse_args, usage_exit};

mod config;

use config::{Config, ConfigError, parse_event_mask};

struct Logger {
    /// The configuration: the flags', then each Configure's decoded over
    /// it (kept across connections, as Go's global).
    current: Mutex<Config>,
    /// The subscription of the `-events` flag (`None`: every event).
    flag_mask: Option<EventMask>,
    /// The `-config` file's text (used when the runtime passes none).
    own_config: String,
    strict: bool,
    output: LogOutput,
}

impl Logger {
    fn config(&self) -> Config {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn apply(&self, text: &str) -> Result<Option<EventMask>, ConfigError> {
        let old = self.config();
        let (cfg, mask) = old.with_config(text, self.flag_mask, self.strict)?;
        if cfg.log_file != old.log_file {
            // Go opens the new name, even an empty one (which fails).
            self.output
                .set_file(std::path::Path::new(&cfg.log_file))
                .map_err(|_| ConfigError::LogFile(cfg.log_file.clone()))?;
        }
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = cfg;
        Ok(mask)
    }
}

#[nri_plugin::plugin]
impl Plugin for Logger {
    async fn configure(&self, info: &ConfigureInfo) -> HandlerResult<Option<EventMask>> {
        let text = if info.config.is_empty() {
            self.own_config.as_str()
        } else {
            info.config.as_str()
        };
        tracing::info!(
            "got configuration data: {text:?} from runtime {} {}",
            info.runtime.name,
            info.runtime.version
        );
        self.apply(text).map_err(|e| {
            tracing::error!("{e}");
            HandlerError::from(e)
        })
    }

    // One message of the runtime's synchronization at a time (dumped as it
    // comes), so the plugin never holds the whole state.
    async fn synchronize_chunk(
        &self,
        chunk: SyncChunk,
        kind: SyncKind,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        tracing::debug!("Synchronize: {kind:?} (more to come: {})", chunk.more());
        let (pods, containers) = chunk.into_vecs()?;
        dump(
            "Synchronize",
            &[("pods", &pods), ("containers", &containers)],
        );
        Ok(Vec::new())
    }

    async fn shutdown(&self) {
        dump("Shutdown", &[]);
    }

    fn disconnected(&self, cause: &nri_plugin::Error) {
        tracing::info!("connection to the runtime lost: {cause}");
    }

    async fn run_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        dump("RunPodSandbox", &[("pod", &pod)]);
        Ok(())
    }

    async fn update_pod_sandbox(
        &self,
        pod: PodSandbox,
        overhead: Option<LinuxResources>,
        resources: Option<LinuxResources>,
    ) -> HandlerResult<()> {
        dump(
            "UpdatePodSandbox",
            &[
                ("pod", &pod),
                ("overHeadResources", &overhead),
                ("resources", &resources),
            ],
        );
        Ok(())
    }

    async fn post_update_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        dump("PostUpdatePodSandbox", &[("pod", &pod)]);
        Ok(())
    }

    async fn stop_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        dump("StopPodSandbox", &[("pod", &pod)]);
        Ok(())
    }

    async fn remove_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        dump("RemovePodSandbox", &[("pod", &pod)]);
        Ok(())
    }

    async fn create_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        dump("CreateContainer", &[("pod", &pod), ("container", &ctr)]);
        Ok(CreateContainerResponse {
            adjust: Some(self.config().adjustment(std::process::id())),
            ..Default::default()
        })
    }

    async fn post_create_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        dump("PostCreateContainer", &[("pod", &pod), ("container", &ctr)]);
        Ok(())
    }

    async fn start_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        dump("StartContainer", &[("pod", &pod), ("container", &ctr)]);
        Ok(())
    }

    async fn post_start_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        dump("PostStartContainer", &[("pod", &pod), ("container", &ctr)]);
        Ok(())
    }

    async fn update_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
        resources: Option<LinuxResources>,
    ) -> HandlerResult<UpdateContainerResponse> {
        dump(
            "UpdateContainer",
            &[
                ("pod", &pod),
                ("container", &ctr),
                ("resources", &resources),
            ],
        );
        Ok(UpdateContainerResponse::default())
    }

    async fn post_update_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        dump("PostUpdateContainer", &[("pod", &pod), ("container", &ctr)]);
        Ok(())
    }

    async fn stop_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<StopContainerResponse> {
        dump("StopContainer", &[("pod", &pod), ("container", &ctr)]);
        Ok(StopContainerResponse::default())
    }

    async fn remove_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        dump("RemoveContainer", &[("pod", &pod), ("container", &ctr)]);
        Ok(())
    }

    async fn validate_container_adjustment(
        &self,
        request: ValidateContainerAdjustmentRequest,
    ) -> HandlerResult<()> {
        dump("ValidateContainerAdjustment", &[("request", &request)]);
        Ok(())
    }
}

const USAGE: &str = "usage: logger [flags]
Logs the NRI events it receives.
  -events LIST           comma-separated list of events to subscribe for (names, pod, container, all; default all)
  -add-annotation KEY    add this annotation to containers
  -set-annotation KEY    set this annotation on containers
  -add-env KEY           add this environment variable for containers
  -set-env KEY           set this environment variable for containers
";

fn main() -> ExitCode {
    let mut events = String::new();
    let mut cfg = Config::default();
    let parsed = parse_args(std::env::args().skip(1), |name, value| {
        match name {
            "events" => events = value.string()?,
            "add-annotation" => cfg.add_annotation = value.string()?,
            "set-annotation" => cfg.set_annotation = value.string()?,
            "add-env" => cfg.add_env = value.string()?,
            "set-env" => cfg.set_env = value.string()?,
            _ => return Ok(false),
        }
        Ok(true)
    });
    let usage = format!("{USAGE}{COMMON_USAGE}");
    let args = match parsed {
        Ok(a) => a,
        Err(e) => return usage_exit(&e, &usage),
    };
    let cfg = Config {
        log_file: args
            .log_file
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        ..Config {
            events: Config::from_flags(&events).events,
            ..cfg
        }
    };
    let output = match init_logging(args.log_level, cfg.log_file().as_deref()) {
        Ok(o) => o,
        Err(e) => {
            // Go: fatal, status 1.
            eprintln!("logger: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Go parses -events only when given; a bad list is fatal (status 1).
    let flag_mask = if events.is_empty() {
        None
    } else {
        match parse_event_mask(&[events]) {
            Ok(m) => (!m.is_empty()).then_some(m),
            Err(e) => {
                tracing::error!("failed to parse events: {e}");
                return ExitCode::FAILURE;
            }
        }
    };
    let own_config = match args.config_text() {
        Ok(c) => c,
        Err(e) => return usage_exit(&e, &usage),
    };
    let plugin = Logger {
        current: Mutex::new(cfg),
        flag_mask,
        own_config,
        strict: args.strict,
        output,
    };
    let builder = args
        .builder(plugin, "logger")
        .sync_mode(SyncMode::Streaming);
    args.runner().run(match flag_mask {
        Some(m) => builder.events(m),
        None => builder,
    })
}
