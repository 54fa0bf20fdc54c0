//! `default-validator`: see the crate docs and README.md.

use std::process::ExitCode;

use nri_default_validator::{DefaultValidatorPlugin, Error};
use nri_sample_common::{COMMON_USAGE, init_logging, parse_args, usage_exit};

fn usage() -> String {
    format!(
        "usage: default-validator [flags]\n  \
         (-config FILE: YAML with the default validator's keys)\n{COMMON_USAGE}"
    )
}

fn main() -> ExitCode {
    let mut args = match parse_args(std::env::args().skip(1), |_, _| Ok(false)) {
        Ok(a) => a,
        Err(e) => return usage_exit(&e, &usage()),
    };
    // Upstream's built-in runs as `00-default-validator`: the default index
    // when neither the flags, the runtime nor the file name give one.
    let exe_has_index = std::env::args()
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
        })
        .is_some_and(|f| nri_api_index(&f));
    if args.idx.is_none() && std::env::var_os("NRI_PLUGIN_IDX").is_none() && !exe_has_index {
        args.idx = Some("00".into());
    }
    if let Err(e) = init_logging(args.log_level, args.log_file.as_deref()) {
        eprintln!("default-validator: {e}");
        return ExitCode::FAILURE;
    }
    let base = match args
        .config_file
        .clone()
        .map(|path| {
            std::fs::read_to_string(&path).map_err(|source| Error::Read {
                path: path.display().to_string(),
                source,
            })
        })
        .transpose()
    {
        Ok(b) => b,
        Err(e) => {
            tracing::error!(
                "{e}: {}",
                std::error::Error::source(&e)
                    .map(ToString::to_string)
                    .unwrap_or_default()
            );
            return ExitCode::from(2);
        }
    };
    let plugin = match DefaultValidatorPlugin::new(base, args.strict) {
        Ok(p) => p,
        Err(e) => {
            let mut msg = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                msg.push_str(": ");
                msg.push_str(&s.to_string());
                src = s.source();
            }
            tracing::error!("{msg}");
            return ExitCode::from(2);
        }
    };
    // Nothing of the runtime's state is kept: its Synchronize is handed
    // over undecoded and dropped (one message in memory at a time).
    let builder = args
        .builder(plugin, "default-validator")
        .sync_mode(nri_plugin::SyncMode::Streaming);
    args.runner().run(builder)
}

/// Whether an executable name has the `NN-name` form.
fn nri_api_index(file: &str) -> bool {
    file.len() > 3
        && file.as_bytes()[..2].iter().all(u8::is_ascii_digit)
        && file.as_bytes()[2] == b'-'
}
