//! `hook-injector`: an NRI plugin that injects OCI hooks into containers
//! from hook configuration files (`hooks.d/*.json`, the format CRI-O and
//! podman use), as containerd/nri's Go `hook-injector` does (see README.md).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};

use nri_plugin::api::{Container, ContainerAdjustment, CreateContainerResponse, PodSandbox};
use nri_plugin::{ConfigureInfo, EventMask, HandlerError, HandlerResult, Plugin};
use nri_sample_common::fence::Current;
use nri_sample_common::{COMMON_USAGE, CommonArgs, init_logging, parse_args, usage_exit};

mod fence;
mod hooks;
mod startup;

use fence::{Fence, Pod};
use hooks::{Fingerprint, HookConfig, Target};

type Loaded = Arc<Vec<(String, HookConfig)>>;

struct HookInjector {
    dirs: Vec<PathBuf>,
    /// Rescan the directories for changes before each container creation.
    watch: bool,
    cache: Mutex<(Fingerprint, Loaded)>,
    /// The operator's allow-list (`allow` in the configuration).
    fence: Current<Fence>,
    /// The `-config` file's text (used when the runtime passes none).
    config: String,
}

impl HookInjector {
    fn new(dirs: Vec<PathBuf>, watch: bool, config: String) -> Self {
        let me = HookInjector {
            dirs,
            watch,
            cache: Mutex::new((Vec::new(), Arc::new(Vec::new()))),
            fence: Current::default(),
            config,
        };
        me.reload(hooks::fingerprint(&me.dirs));
        me
    }

    fn reload(&self, fp: Fingerprint) -> Loaded {
        let (list, errors) = hooks::load(&self.dirs);
        for e in &errors {
            let mut text = e.to_string();
            if let Some(s) = std::error::Error::source(e) {
                text.push_str(&format!(": {s}"));
            }
            tracing::error!("skipping hook: {text}");
        }
        tracing::info!(
            hooks = list.len(),
            invalid = errors.len(),
            "loaded hooks from {:?}",
            self.dirs
        );
        let list = Arc::new(list);
        *self.cache.lock().unwrap_or_else(PoisonError::into_inner) = (fp, list.clone());
        list
    }

    /// The current hooks; with watching on, reloaded when a file changed.
    fn hooks(&self) -> Loaded {
        if self.watch {
            let fp = hooks::fingerprint(&self.dirs);
            let cached = {
                let c = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
                (c.0 == fp).then(|| c.1.clone())
            };
            return cached.unwrap_or_else(|| self.reload(fp));
        }
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .1
            .clone()
    }
}

#[nri_plugin::plugin]
impl Plugin for HookInjector {
    async fn configure(&self, info: &ConfigureInfo) -> HandlerResult<Option<EventMask>> {
        tracing::info!(runtime = %info.runtime.name, version = %info.runtime.version, "connected");
        let text = CommonArgs::effective_config(&info.config, &self.config);
        let fence = Fence::configure(text).map_err(|e| {
            tracing::error!(error = %e, "configuration refused");
            HandlerError::from(e)
        })?;
        self.fence.set(fence);
        Ok(None)
    }

    async fn create_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        let name = format!("{}/{}", pod.name, ctr.name);
        // Container annotations, overridden by the pod's (as upstream).
        let mut annotations: BTreeMap<String, String> = ctr.annotations.clone();
        annotations.extend(pod.annotations.clone());
        let target = Target {
            args: &ctr.args,
            annotations: &annotations,
            has_bind_mounts: !ctr.mounts.is_empty(),
        };
        tracing::debug!("{name}: {}", target_summary(&ctr.args, &annotations));
        let pod_ref = Pod {
            namespace: &pod.namespace,
            name: &pod.name,
        };
        let admitted = self.fence.get().admit(&self.hooks(), target, pod_ref)?;
        let selected = hooks::select(&admitted, target).map_err(|e| {
            tracing::error!("{name}: failed to generate hooks: {e}");
            HandlerError::msg(format!("hook generation failed: {e}"))
        })?;
        let Some(h) = selected else {
            tracing::info!("{name}: no hooks to inject, ignoring");
            return Ok(CreateContainerResponse::default());
        };
        let mut adjust = ContainerAdjustment::default();
        adjust.add_hooks(h);
        tracing::info!("{name}: OCI hooks injected");
        tracing::debug!("{name}: adjustment {adjust:?}");
        Ok(CreateContainerResponse {
            adjust: Some(adjust),
            ..Default::default()
        })
    }
}

/// What the debug log says of a container's arguments and annotations:
/// each quoted (a line break shows as `\n`, never as a line of the log)
/// and cut, each list at most `MAX_LISTING_BYTES`, so a pod's 256 KiB of
/// annotations and its arguments log a few KiB at most.
fn target_summary(args: &[String], annotations: &BTreeMap<String, String>) -> String {
    use nri_sample_common::goyaml::{MAX_EXCERPT_BYTES, excerpt};
    use nri_sample_common::listing;
    let q = |s: &str| format!("{:?}", excerpt(s, MAX_EXCERPT_BYTES));
    format!(
        "args [{}], annotations {{{}}}",
        listing(args.iter().map(|a| q(a))),
        listing(
            annotations
                .iter()
                .map(|(k, v)| format!("{}: {}", q(k), q(v)))
        )
    )
}

const USAGE: &str = "usage: hook-injector [flags]
Injects OCI hooks from hooks.d JSON files (CRI-O/podman format).
  -disableWatch          load the hook directories once at start instead of picking up changes
  -hooks-dir DIR         read hooks from DIR instead of the defaults (repeatable, later overrides earlier);
                         default /usr/share/containers/oci/hooks.d then /etc/containers/oci/hooks.d
";

fn main() -> ExitCode {
    let mut disable_watch = false;
    let mut dirs: Vec<PathBuf> = Vec::new();
    let args = match parse_args(std::env::args().skip(1), |name, value| {
        match name {
            "disableWatch" | "disable-watch" => disable_watch = value.bool()?,
            "hooks-dir" => dirs.push(value.string()?.into()),
            _ => return Ok(false),
        }
        Ok(true)
    }) {
        Ok(a) => a,
        Err(e) => return usage_exit(&e, &format!("{USAGE}{COMMON_USAGE}")),
    };
    if let Err(e) = init_logging(args.log_level, args.log_file.as_deref()) {
        eprintln!("hook-injector: {e}");
        return ExitCode::FAILURE;
    }
    if dirs.is_empty() {
        dirs = vec![hooks::DEFAULT_DIR.into(), hooks::OVERRIDE_DIR.into()];
    }
    let problems = startup::check(&dirs);
    if !problems.is_empty() {
        for e in &problems {
            tracing::error!("{}", nri_plugin::error_chain(e));
        }
        tracing::error!(
            invalid = problems.len(),
            "failed to set up the hook manager: fix or remove the files named above"
        );
        return ExitCode::FAILURE;
    }
    let config = match args.config_text() {
        Ok(c) => c,
        Err(e) => return usage_exit(&e, &format!("{USAGE}{COMMON_USAGE}")),
    };
    if !disable_watch {
        tracing::info!("watching directories {dirs:?} for new changes");
    }
    let plugin = HookInjector::new(dirs, !disable_watch, config);
    // Nothing of the runtime's state is kept: its Synchronize is handed
    // over undecoded and dropped (one message in memory at a time).
    let builder = args
        .builder(plugin, "hook-injector")
        .sync_mode(nri_plugin::SyncMode::Streaming);
    args.runner().run(builder)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The debug line of a container's arguments and annotations is a few
    /// KiB whatever the pod, and a value cannot start a line of the log.
    /// Before, it wrote both whole (a pod's 256 KiB of annotations and
    /// arguments of any size, on every creation).
    #[test]
    fn the_debug_line_of_a_container_is_bounded_and_quoted() {
        let args = vec!["a".repeat(100_000), "x\nFORGED level=error".into()];
        let annotations: BTreeMap<String, String> = (0..1_000)
            .map(|i| (format!("example.com/k{i}"), "v\nFORGED".repeat(100)))
            .collect();
        let s = target_summary(&args, &annotations);
        assert!(s.len() <= 3 * 1024, "{} bytes: {s}", s.len());
        assert!(!s.contains('\n'), "{s}");
        assert!(s.contains("FORGED"), "{s}");
        assert!(s.contains("example.com/k0"), "{s}");
    }
}
