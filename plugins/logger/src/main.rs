//! `logger`: an NRI plugin that logs every event it receives, optionally
//! to a file, and can add (or set) an annotation and an environment
//! variable on created containers. Flags and configuration keys are those
//! of containerd/nri's Go `logger` (see README.md).

use std::fmt::Debug;
use std::process::ExitCode;
use std::sync::{Mutex, PoisonError};

use nri_plugin::api::{
    Container, ContainerUpdate, CreateContainerResponse, LinuxResources, PodSandbox,
    StopContainerResponse, UpdateContainerResponse, ValidateContainerAdjustmentRequest,
};
use nri_plugin::{ConfigureInfo, EventMask, HandlerError, HandlerResult, Plugin, SyncKind};
use nri_sample_common::{
    COMMON_USAGE, Error, LogOutput, init_logging, parse_args, run_plugin, usage_exit,
};

mod config;

use config::Settings;

/// Logs `event` and each tagged object, one line per line of its
/// pretty-printed form, as upstream's `dump` does with YAML.
fn dump(event: &str, objects: &[(&str, &dyn Debug)]) {
    if objects.is_empty() {
        tracing::info!("{event}");
    }
    for (tag, obj) in objects {
        tracing::info!("{event}: {tag}:");
        for line in format!("{obj:#?}").lines() {
            tracing::info!("{event}:    {line}");
        }
    }
}

struct Logger {
    /// Settings from the flags.
    base: Settings,
    /// Effective settings (flags plus the runtime's configuration).
    current: Mutex<Settings>,
    output: LogOutput,
}

impl Logger {
    fn settings(&self) -> Settings {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[nri_plugin::plugin]
impl Plugin for Logger {
    async fn configure(&self, info: &ConfigureInfo) -> HandlerResult<Option<EventMask>> {
        tracing::info!(
            "got configuration data: {:?} from runtime {} {}",
            info.config,
            info.runtime.name,
            info.runtime.version
        );
        let settings = self.base.with_config(&info.config).map_err(|e| {
            let e = HandlerError::from(e);
            tracing::error!("{e}");
            e
        })?;
        match &settings.log_file {
            Some(f) => self.output.set_file(f).map_err(|e| {
                let e = HandlerError::from(e);
                tracing::error!("{e}");
                e
            })?,
            None if self.output.file().is_some() => {
                tracing::warn!("logFile cleared by the configuration; keeping the current log file")
            }
            None => {}
        }
        let mask = if info.config.trim().is_empty() {
            None
        } else {
            settings.event_mask().map_err(HandlerError::from)?
        };
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = settings;
        Ok(mask)
    }

    async fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
        kind: SyncKind,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        tracing::info!("Synchronize: {kind:?}");
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
            adjust: Some(self.settings().adjustment(std::process::id())),
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
    let mut s = Settings::default();
    let parsed = parse_args(std::env::args().skip(1), |name, value| {
        let non_empty = |v: String| (!v.is_empty()).then_some(v);
        match name {
            "events" => s.events = vec![value.string()?],
            "add-annotation" => s.add_annotation = non_empty(value.string()?),
            "set-annotation" => s.set_annotation = non_empty(value.string()?),
            "add-env" => s.add_env = non_empty(value.string()?),
            "set-env" => s.set_env = non_empty(value.string()?),
            _ => return Ok(false),
        }
        Ok(true)
    });
    let usage = format!("{USAGE}{COMMON_USAGE}");
    let args = match parsed {
        Ok(a) => a,
        Err(e) => return usage_exit(&e, &usage),
    };
    s.log_file = args.log_file.clone();
    let events = match s.event_mask() {
        Ok(m) => m,
        Err(e) => {
            return usage_exit(
                &Error::Usage {
                    message: HandlerError::from(e).to_string(),
                },
                &usage,
            );
        }
    };
    let output = match init_logging(args.log_level, s.log_file.as_deref()) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("logger: {e}");
            return ExitCode::FAILURE;
        }
    };
    let plugin = Logger {
        base: s.clone(),
        current: Mutex::new(s),
        output,
    };
    run_plugin(plugin, &args, "logger", |b| match events {
        Some(m) => b.events(m),
        None => b,
    })
}
