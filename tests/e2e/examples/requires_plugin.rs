//! The plugin `tests/capabilities.rs` runs against a real containerd: it
//! sets one sysctl on every container and requires what it names.
//!
//! ```text
//! requires_plugin --socket PATH --name NAME --index NN
//!                 [--require NAME[,NAME...]] [--sysctl KEY=VALUE]
//! ```
//!
//! `--require` takes capability names (`ADJUST_LINUX_SYSCTL`) and event
//! names (`UpdatePodSandbox`). On a runtime that cannot serve them the
//! plugin ends at registration with the SDK's `Error::Unsupported`,
//! printed as `requires_plugin: error: <its text>`.
//!
//! Logs go to stderr (`RUST_LOG` filters). Exit status: 0 stopped by a
//! signal, 1 usage error, 2 the plugin failed (3 when the runtime cannot
//! serve it).

use std::process::ExitCode;

use nri_plugin::api::{Container, ContainerAdjustment, CreateContainerResponse, PodSandbox};
use nri_plugin::{Builder, Error, HandlerResult, Plugin, Requirement};

/// Sets `key=value` as a sysctl of every container.
struct Sysctl {
    key: String,
    value: String,
}

#[nri_plugin::plugin]
impl Plugin for Sysctl {
    async fn create_container(
        &self,
        _pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        tracing::info!(container = %ctr.name, key = %self.key, "adjusting");
        let mut adjust = ContainerAdjustment::default();
        adjust
            .linux_mut()
            .sysctl
            .insert(self.key.clone(), self.value.clone());
        Ok(CreateContainerResponse {
            adjust: Some(adjust),
            ..Default::default()
        })
    }
}

struct Args {
    socket: String,
    name: String,
    index: String,
    require: Vec<Requirement>,
    sysctl: (String, String),
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        socket: "/var/run/nri/nri.sock".into(),
        name: "requires".into(),
        index: "10".into(),
        require: Vec::new(),
        sysctl: ("kernel.shm_rmid_forced".into(), "1".into()),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--socket" => a.socket = value()?,
            "--name" => a.name = value()?,
            "--index" => a.index = value()?,
            "--require" => {
                for name in value()?.split(',') {
                    a.require.push(name.parse().map_err(|e| format!("{e}"))?);
                }
            }
            "--sysctl" => {
                let v = value()?;
                let (k, v) = v.split_once('=').ok_or("--sysctl takes KEY=VALUE")?;
                a.sysctl = (k.to_owned(), v.to_owned());
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
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
            eprintln!("requires_plugin: {msg}");
            return ExitCode::from(1);
        }
    };
    let plugin = Sysctl {
        key: args.sysctl.0,
        value: args.sysctl.1,
    };
    let stub = match Builder::new(plugin)
        .socket_path(&args.socket)
        .name(&args.name)
        .index(&args.index)
        .requires(args.require)
        .build()
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("requires_plugin: error: {e}");
            return ExitCode::from(2);
        }
    };
    let handle = stub.handle();
    let result = tokio::select! {
        r = stub.run() => r,
        _ = tokio::signal::ctrl_c() => { handle.stop(); Ok(()) }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ Error::Unsupported { .. }) => {
            eprintln!("requires_plugin: error: {e}");
            ExitCode::from(3)
        }
        Err(e) => {
            eprintln!("requires_plugin: error: {e}");
            ExitCode::from(2)
        }
    }
}
