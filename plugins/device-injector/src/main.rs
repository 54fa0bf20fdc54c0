//! `device-injector`: an NRI plugin that injects device nodes, CDI devices,
//! mounts, network devices and sets I/O priority, scheduling attributes,
//! sysctls and memory policy of containers from pod annotations, with the
//! annotation keys, formats and decoding of containerd/nri's Go
//! `device-injector` (see README.md).

use std::process::ExitCode;

use nri_plugin::api::{Container, CreateContainerResponse, PodSandbox};
use nri_plugin::{ConfigureInfo, EventMask, HandlerError, HandlerResult, Plugin};
use nri_sample_common::fence::Current;
use nri_sample_common::{COMMON_USAGE, CommonArgs, Strict, init_logging, parse_args, usage_exit};

mod fence;
mod inject;
mod mount_fence;
mod rules;

struct DeviceInjector {
    strict: Strict,
    /// The operator's allow-list (`allow` in the configuration).
    fence: Current<fence::Fence>,
    /// The `-config` file's text (used when the runtime passes none).
    config: String,
}

#[nri_plugin::plugin]
impl Plugin for DeviceInjector {
    async fn configure(&self, info: &ConfigureInfo) -> HandlerResult<Option<EventMask>> {
        tracing::info!(runtime = %info.runtime.name, version = %info.runtime.version, "connected");
        let text = CommonArgs::effective_config(&info.config, &self.config);
        let (strict, fence) = fence::configure(text).map_err(|e| {
            tracing::error!(error = %e, "configuration refused");
            HandlerError::from(e)
        })?;
        self.strict.set(strict);
        self.fence.set(fence);
        Ok(None)
    }

    async fn create_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        let name = format!("{}/{}", pod.name, ctr.name);
        tracing::debug!("CreateContainer {name}: pod {pod:?}, container {ctr:?}");
        let request = inject::Request {
            annotations: &pod.annotations,
            pod: &pod.name,
            namespace: &pod.namespace,
            linux_namespaces: pod.linux.as_ref().map_or(&[], |l| l.namespaces.as_slice()),
            container: &ctr.name,
            strict: self.strict.get(),
            fence: &self.fence.get(),
        };
        let adjust = inject::adjustment(&request).map_err(|e| {
            tracing::error!("{name}: {e}");
            HandlerError::from(e)
        })?;
        tracing::debug!("{name}: adjustment {adjust:?}");
        Ok(CreateContainerResponse {
            adjust: Some(adjust),
            ..Default::default()
        })
    }
}

const USAGE: &str = "usage: device-injector [flags]\n\
Injects devices, CDI devices, mounts, ... annotated on pods (devices.noderesource.dev/container.<name>, ...).\n";

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1), |_, _| Ok(false)) {
        Ok(a) => a,
        Err(e) => return usage_exit(&e, &format!("{USAGE}{COMMON_USAGE}")),
    };
    if let Err(e) = init_logging(args.log_level, args.log_file.as_deref()) {
        eprintln!("{e}");
        return ExitCode::FAILURE;
    }
    let config = match args.config_text() {
        Ok(c) => c,
        Err(e) => return usage_exit(&e, &format!("{USAGE}{COMMON_USAGE}")),
    };
    let plugin = DeviceInjector {
        strict: Strict::new(args.strict),
        fence: Current::default(),
        config,
    };
    // Nothing of the runtime's state is kept: its Synchronize is handed
    // over undecoded and dropped (one message in memory at a time).
    let builder = args
        .builder(plugin, "device-injector")
        .sync_mode(nri_plugin::SyncMode::Streaming);
    args.runner().run(builder)
}
