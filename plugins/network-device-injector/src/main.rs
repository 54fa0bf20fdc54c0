//! `network-device-injector`: see the crate docs and README.md.

use std::process::ExitCode;

use nri_network_device_injector::NetDeviceInjector;
use nri_sample_common::{COMMON_USAGE, init_logging, parse_args, usage_exit};

fn usage() -> String {
    format!("usage: network-device-injector [flags]\n{COMMON_USAGE}")
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1), |_, _| Ok(false)) {
        Ok(a) => a,
        Err(e) => return usage_exit(&e, &usage()),
    };
    if let Err(e) = init_logging(args.log_level, args.log_file.as_deref()) {
        eprintln!("network-device-injector: {e}");
        return ExitCode::FAILURE;
    }
    let config = match args.config_text() {
        Ok(c) => c,
        Err(e) => return usage_exit(&e, &usage()),
    };
    let plugin = NetDeviceInjector::with_config(args.strict, config);
    // The synchronization goes to `synchronize_chunk` one message at a
    // time (only pod ids are kept).
    let builder = args
        .builder(plugin, "network-device-injector")
        .sync_mode(nri_plugin::SyncMode::Streaming);
    args.runner().run(builder)
}
