//! A minimal NRI plugin that logs every pod and container event.
//!
//! ```text
//! logger [--socket PATH] [--name NAME] [--index NN] [--events LIST] [--reconnect]
//! ```
//!
//! `--events` takes the upstream event-list syntax (`runpodsandbox,createcontainer`,
//! `pod`, `container`, `all`); default: every event. The same settings can
//! come from the environment: `NRI_LOGGER_SOCKET`, `NRI_LOGGER_EVENTS`,
//! `NRI_LOGGER_RECONNECT=1`. Logs go to stderr (`RUST_LOG` filters).
//!
//! Installed in the runtime's plugin directory as `NN-logger` it runs
//! pre-launched; started by hand it dials the socket. Exit status: 0 when
//! stopped by a signal, 1 on a usage error, 2 when the plugin failed (the
//! error and its OS cause are printed, e.g. `kind=NotFound` when the
//! runtime's socket does not exist).

use std::process::ExitCode;

use nri_plugin::api::{Container, PodSandbox, ValidateContainerAdjustmentRequest};
use nri_plugin::{
    Builder, ConfigureInfo, EventMask, HandlerResult, Plugin, ReconnectPolicy, SyncKind,
};

struct Logger {
    events: Option<EventMask>,
}

fn ids(pod: &PodSandbox, ctr: Option<&Container>) -> String {
    match ctr {
        Some(c) => format!("{}/{} ({})", pod.namespace, pod.name, c.name),
        None => format!("{}/{}", pod.namespace, pod.name),
    }
}

#[nri_plugin::plugin]
impl Plugin for Logger {
    async fn configure(&self, info: &ConfigureInfo) -> HandlerResult<Option<EventMask>> {
        tracing::info!(
            runtime = %info.runtime.name,
            version = %info.runtime.version,
            nri = %info.runtime.nri_version.version,
            config = %info.config,
            unsupported = %info.unsupported,
            "configured"
        );
        Ok(self.events)
    }

    async fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
        kind: SyncKind,
    ) -> HandlerResult<Vec<nri_plugin::api::ContainerUpdate>> {
        tracing::info!(
            pods = pods.len(),
            containers = containers.len(),
            ?kind,
            "synchronize"
        );
        Ok(Vec::new())
    }

    async fn shutdown(&self) {
        tracing::info!("runtime shutting down");
    }

    async fn run_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        tracing::info!(pod = %ids(&pod, None), "RunPodSandbox");
        Ok(())
    }
    async fn update_pod_sandbox(
        &self,
        pod: PodSandbox,
        _overhead: Option<nri_plugin::api::LinuxResources>,
        _resources: Option<nri_plugin::api::LinuxResources>,
    ) -> HandlerResult<()> {
        tracing::info!(pod = %ids(&pod, None), "UpdatePodSandbox");
        Ok(())
    }
    async fn post_update_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        tracing::info!(pod = %ids(&pod, None), "PostUpdatePodSandbox");
        Ok(())
    }
    async fn stop_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        tracing::info!(pod = %ids(&pod, None), "StopPodSandbox");
        Ok(())
    }
    async fn remove_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        tracing::info!(pod = %ids(&pod, None), "RemovePodSandbox");
        Ok(())
    }
    async fn create_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<nri_plugin::api::CreateContainerResponse> {
        tracing::info!(container = %ids(&pod, Some(&ctr)), "CreateContainer");
        Ok(Default::default())
    }
    async fn post_create_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        tracing::info!(container = %ids(&pod, Some(&ctr)), "PostCreateContainer");
        Ok(())
    }
    async fn start_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        tracing::info!(container = %ids(&pod, Some(&ctr)), "StartContainer");
        Ok(())
    }
    async fn post_start_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        tracing::info!(container = %ids(&pod, Some(&ctr)), "PostStartContainer");
        Ok(())
    }
    async fn update_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
        _resources: Option<nri_plugin::api::LinuxResources>,
    ) -> HandlerResult<nri_plugin::api::UpdateContainerResponse> {
        tracing::info!(container = %ids(&pod, Some(&ctr)), "UpdateContainer");
        Ok(Default::default())
    }
    async fn post_update_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        tracing::info!(container = %ids(&pod, Some(&ctr)), "PostUpdateContainer");
        Ok(())
    }
    async fn stop_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<nri_plugin::api::StopContainerResponse> {
        tracing::info!(container = %ids(&pod, Some(&ctr)), "StopContainer");
        Ok(Default::default())
    }
    async fn remove_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        tracing::info!(container = %ids(&pod, Some(&ctr)), "RemoveContainer");
        Ok(())
    }
    async fn validate_container_adjustment(
        &self,
        req: ValidateContainerAdjustmentRequest,
    ) -> HandlerResult<()> {
        let pod = req.pod.unwrap_or_default();
        let ctr = req.container.unwrap_or_default();
        tracing::info!(container = %ids(&pod, Some(&ctr)), "ValidateContainerAdjustment");
        Ok(())
    }
}

struct Args {
    socket: Option<String>,
    name: Option<String>,
    index: Option<String>,
    events: Option<EventMask>,
    reconnect: bool,
}

fn parse_args() -> Result<Args, String> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let mut a = Args {
        socket: env("NRI_LOGGER_SOCKET"),
        name: None,
        index: None,
        events: None,
        reconnect: env("NRI_LOGGER_RECONNECT").is_some_and(|v| v == "1" || v == "true"),
    };
    let mut events = env("NRI_LOGGER_EVENTS");
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--socket" => a.socket = Some(value()?),
            "--name" => a.name = Some(value()?),
            "--index" => a.index = Some(value()?),
            "--events" => events = Some(value()?),
            "--reconnect" => a.reconnect = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if let Some(list) = events {
        a.events = Some(list.parse().map_err(|e| format!("--events: {e}"))?);
    }
    Ok(a)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = match parse_args() {
        Ok(a) => a,
        Err(msg) => {
            eprintln!(
                "{msg}\nusage: logger [--socket PATH] [--name NAME] [--index NN] [--events LIST] [--reconnect]"
            );
            return ExitCode::from(1);
        }
    };
    let mut b = Builder::new(Logger {
        events: args.events,
    });
    if let Some(s) = args.socket {
        b = b.socket_path(s);
    }
    if let Some(n) = args.name {
        b = b.name(n);
    }
    if let Some(i) = args.index {
        b = b.index(i);
    }
    if let Some(e) = args.events {
        b = b.events(e);
    }
    if args.reconnect {
        b = b.reconnect(ReconnectPolicy::default());
    }
    let result = match b.build() {
        Ok(stub) => {
            let handle = stub.handle();
            tokio::select! {
                r = stub.run() => r,
                _ = tokio::signal::ctrl_c() => { handle.stop(); Ok(()) }
            }
        }
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let mut msg = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                msg.push_str(": ");
                msg.push_str(&s.to_string());
                src = s.source();
            }
            match e.io_kind() {
                Some(kind) => eprintln!("logger: error: {msg} [kind={kind:?}]"),
                None => eprintln!("logger: error: {msg}"),
            }
            ExitCode::from(2)
        }
    }
}
