//! `v010-adapter`: see the crate docs and README.md.

use std::process::ExitCode;
use std::time::Duration;

use nri_sample_common::{COMMON_USAGE, init_logging, parse_args, usage_exit};
use nri_v010_adapter::{Invoker, V010Adapter};

fn usage() -> String {
    format!(
        "usage: v010-adapter [flags]\n  \
         -bin-dir DIR           v0.1.0 plugin executables (default /opt/nri/bin)\n  \
         -conf FILE             v0.1.0 configuration list (default /etc/nri/conf.json)\n  \
         -plugin-timeout DUR    time limit of one plugin run, e.g. 1500ms, 2s (default: none, as upstream)\n{COMMON_USAGE}"
    )
}

fn duration(s: &str) -> Option<Duration> {
    if let Some(ms) = s.strip_suffix("ms") {
        return ms.parse().ok().map(Duration::from_millis);
    }
    s.strip_suffix('s')
        .unwrap_or(s)
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0 && *v < 86_400.0)
        .map(Duration::from_secs_f64)
}

fn main() -> ExitCode {
    let mut invoker = Invoker::default();
    let args = match parse_args(std::env::args().skip(1), |name, value| {
        match name {
            "bin-dir" => invoker.bin_dir = value.string()?.into(),
            "conf" => invoker.conf_path = value.string()?.into(),
            "plugin-timeout" => {
                let v = value.string()?;
                let limit = duration(&v).ok_or_else(|| {
                    nri_plugin::Error::usage(format!("invalid duration {v:?} for -plugin-timeout"))
                })?;
                // 0 (or a zero duration): no limit, the default.
                invoker.timeout = (!limit.is_zero()).then_some(limit);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }) {
        Ok(a) => a,
        Err(e) => return usage_exit(&e, &usage()),
    };
    if let Err(e) = init_logging(args.log_level, args.log_file.as_deref()) {
        eprintln!("v010-adapter: {e}");
        return ExitCode::FAILURE;
    }
    // Nothing of the runtime's state is kept: its Synchronize is handed
    // over undecoded and dropped (one message in memory at a time).
    let builder = args
        .builder(V010Adapter::new(invoker), "v010-adapter")
        .sync_mode(nri_plugin::SyncMode::Streaming);
    args.runner().run(builder)
}
