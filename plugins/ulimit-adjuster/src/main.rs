//! `ulimit-adjuster`: an NRI plugin that sets POSIX rlimits of containers
//! from pod annotations, with the annotation keys and format of
//! containerd/nri's Go `ulimit-adjuster` (see README.md).

use std::process::ExitCode;

use nri_plugin::api::{Container, CreateContainerResponse, PodSandbox};
use nri_plugin::{ConfigureInfo, EventMask, HandlerError, HandlerResult, Plugin};
use nri_sample_common::fence::Current;
use nri_sample_common::{COMMON_USAGE, CommonArgs, Strict, init_logging, parse_args, usage_exit};

mod fence;
mod ulimits;

struct UlimitAdjuster {
    strict: Strict,
    /// The operator's allow-list (`allow` in the configuration).
    fence: Current<fence::Fence>,
    /// The `-config` file's text (used when the runtime passes none).
    config: String,
}

#[nri_plugin::plugin]
impl Plugin for UlimitAdjuster {
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
        let adjust = ulimits::adjustment(
            &pod.annotations,
            &pod.namespace,
            &pod.name,
            &ctr.name,
            self.strict.get(),
            &self.fence.get(),
        )
        .map_err(|e| {
            tracing::warn!(pod = %pod.name, container = %ctr.name, "{e}");
            HandlerError::from(e)
        })?;
        if !adjust.rlimits.is_empty() {
            tracing::info!(pod = %pod.name, container = %ctr.name, rlimits = adjust.rlimits.len(), "adjusted rlimits");
        }
        Ok(CreateContainerResponse {
            adjust: Some(adjust),
            ..Default::default()
        })
    }
}

const USAGE: &str = "usage: ulimit-adjuster [flags]\n\
Sets container rlimits from the pod annotation ulimits.noderesource.dev/container.<name>.\n";

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
    let plugin = UlimitAdjuster {
        strict: Strict::new(args.strict),
        fence: Current::default(),
        config,
    };
    // Nothing of the runtime's state is kept: its Synchronize is handed
    // over undecoded and dropped (one message in memory at a time).
    let builder = args
        .builder(plugin, "ulimit-adjuster")
        .sync_mode(nri_plugin::SyncMode::Streaming);
    args.runner().run(builder)
}
