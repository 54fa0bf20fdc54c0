//! The plugins `tests/sdk_contract.rs` runs against a real containerd, to
//! show two promises of the plugin SDK on it.
//!
//! ```text
//! contract_plugin --role create-only --socket PATH --name NAME --index NN
//! contract_plugin --role teardown --socket PATH --name NAME --index NN
//!                 [--fail-pod SUBSTRING] [--send-teardown-errors]
//! ```
//!
//! - `create-only` implements only CreateContainer (it adds the
//!   environment variable `NRI_E2E_CONTRACT=create-only`) and overrides its
//!   subscription to every event the SDK knows: the SDK answers all the
//!   others with an empty success.
//! - `teardown` implements RunPodSandbox, StopPodSandbox and
//!   RemovePodSandbox, logging each as `<Event> pod=<namespace>/<name>`; it
//!   fails StopPodSandbox for pods whose name contains `--fail-pod`. By
//!   default the SDK answers that error with success (and logs
//!   `teardown error answered with success`); `--send-teardown-errors`
//!   sends it to the runtime instead.
//!
//! Logs go to stderr (`RUST_LOG` filters). Exit status: 0 stopped by a
//! signal, 1 usage error, 2 the plugin failed.

use std::process::ExitCode;

use nri_plugin::api::{
    Container, ContainerAdjustment, CreateContainerResponse, Event, KeyValue, PodSandbox,
};
use nri_plugin::{Builder, EventMask, HandlerError, HandlerResult, Plugin, Stub};

/// The environment variable the `create-only` plugin adds.
const ENV_KEY: &str = "NRI_E2E_CONTRACT";

fn pod_id(pod: &PodSandbox) -> String {
    format!("{}/{}", pod.namespace, pod.name)
}

/// Implements only CreateContainer.
struct CreateOnly;

#[nri_plugin::plugin]
impl Plugin for CreateOnly {
    async fn create_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        tracing::info!(pod = %pod_id(&pod), container = %ctr.name, "CreateContainer");
        let adjust = ContainerAdjustment {
            env: vec![KeyValue {
                key: ENV_KEY.into(),
                value: "create-only".into(),
            }],
            ..Default::default()
        };
        Ok(CreateContainerResponse {
            adjust: Some(adjust),
            ..Default::default()
        })
    }
}

/// Logs the pod events; fails StopPodSandbox for some pods.
struct Teardown {
    fail_pod: Option<String>,
}

#[nri_plugin::plugin]
impl Plugin for Teardown {
    fn teardown_failed(&self, event: Event, error: &HandlerError) {
        tracing::info!(%event, %error, "teardown error answered with success");
    }

    async fn run_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        tracing::info!(pod = %pod_id(&pod), "RunPodSandbox");
        Ok(())
    }

    async fn stop_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        tracing::info!(pod = %pod_id(&pod), "StopPodSandbox");
        match &self.fail_pod {
            Some(s) if pod.name.contains(s.as_str()) => Err(HandlerError::msg(format!(
                "refusing to stop pod {} (asked to fail pods named *{s}*)",
                pod_id(&pod)
            ))),
            _ => Ok(()),
        }
    }

    async fn remove_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        tracing::info!(pod = %pod_id(&pod), "RemovePodSandbox");
        Ok(())
    }
}

#[derive(Default)]
struct Args {
    role: String,
    socket: Option<String>,
    name: Option<String>,
    index: Option<String>,
    fail_pod: Option<String>,
    send_teardown_errors: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args::default();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--role" => a.role = value()?,
            "--socket" => a.socket = Some(value()?),
            "--name" => a.name = Some(value()?),
            "--index" => a.index = Some(value()?),
            "--fail-pod" => a.fail_pod = Some(value()?),
            "--send-teardown-errors" => a.send_teardown_errors = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    match a.role.as_str() {
        "create-only" | "teardown" => Ok(a),
        other => Err(format!(
            "--role must be create-only or teardown, not {other:?}"
        )),
    }
}

fn configure<P: Plugin>(mut b: Builder<P>, a: &Args) -> Builder<P> {
    if let Some(s) = &a.socket {
        b = b.socket_path(s);
    }
    if let Some(n) = &a.name {
        b = b.name(n);
    }
    if let Some(i) = &a.index {
        b = b.index(i);
    }
    b
}

async fn serve<P: Plugin>(stub: Stub<P>) -> Result<(), nri_plugin::Error> {
    let handle = stub.handle();
    tokio::select! {
        r = stub.run() => r,
        _ = tokio::signal::ctrl_c() => { handle.stop(); Ok(()) }
    }
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
            eprintln!("contract_plugin: {msg}");
            return ExitCode::from(1);
        }
    };
    let result = if args.role == "create-only" {
        let b = configure(Builder::new(CreateOnly), &args).events(EventMask::ALL);
        match b.build() {
            Ok(stub) => serve(stub).await,
            Err(e) => Err(e),
        }
    } else {
        let plugin = Teardown {
            fail_pod: args.fail_pod.clone(),
        };
        let b =
            configure(Builder::new(plugin), &args).send_teardown_errors(args.send_teardown_errors);
        match b.build() {
            Ok(stub) => serve(stub).await,
            Err(e) => Err(e),
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("contract_plugin: error: {e}");
            ExitCode::from(2)
        }
    }
}
