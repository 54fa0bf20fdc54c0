//! `nri conformance`: check a real runtime (containerd, CRI-O) against the
//! NRI lifecycle contract, clause by clause (engine: `nri-conformance`).

use std::io::Write as _;
use std::os::unix::fs::FileTypeExt as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use nri_conformance::{CriOptions, Mode, Options};

use crate::{EXIT_FAILED, EXIT_OK, EXIT_USAGE};

const AFTER_HELP: &str = "\
Examples:
  sudo nri conformance --cri-endpoint unix:///run/containerd/containerd.sock --image busybox:latest
      Drive pods and containers through crictl and check every clause
      (NRI socket: /var/run/nri/nri.sock).
  sudo nri conformance --cri-endpoint unix:///var/run/crio/crio.sock --image busybox:latest \\
      --stop-runtime 'systemctl stop crio'
      Also check that the runtime sends Shutdown when it stops.
  sudo nri conformance --passive 300 --json > seen.json
      Only watch what happens on the node for five minutes (order, scope and
      teardown of what was seen; the other clauses are skipped).
  sudo nri conformance --socket /run/nri/nri.sock --cri-endpoint unix:///run/containerd/containerd.sock \\
      --image busybox:latest --crictl /usr/local/bin/crictl --no-timeout
      Another socket and crictl; skip the two phases that wait past the
      runtime's request timeout.

Results per clause: PASS, FAIL, DISCREPANCY (a known breach of that runtime
version, explained), SKIPPED, INFO.

Exit status: 0 every clause passed or is a known discrepancy, 1 a clause
failed, 2 usage error or the run could not be done (no socket, runtime did
not accept the plugin, crictl failed).";

/// Arguments of `nri conformance`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = AFTER_HELP,
    group(clap::ArgGroup::new("mode").required(true).args(["cri_endpoint", "passive"]))
)]
pub struct Args {
    /// The runtime's NRI socket.
    #[arg(long, value_name = "PATH", default_value = "/var/run/nri/nri.sock")]
    socket: PathBuf,
    /// CRI endpoint of the runtime (e.g. unix:///run/containerd/containerd.sock):
    /// drive pods and containers through crictl and check all clauses.
    #[arg(long, value_name = "URL", requires = "image")]
    cri_endpoint: Option<String>,
    /// Image of the test containers, already on the node (with
    /// --cri-endpoint; nothing is pulled); it needs `sh` and `sleep`.
    #[arg(long, value_name = "IMAGE", requires = "cri_endpoint")]
    image: Option<String>,
    /// Do not drive anything: only watch the node for SECS seconds.
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    passive: Option<Duration>,
    /// The crictl executable (with --cri-endpoint; default: `crictl` on PATH).
    #[arg(long, value_name = "PATH", requires = "cri_endpoint")]
    crictl: Option<PathBuf>,
    /// Kubernetes namespace of the test pods (with --cri-endpoint).
    #[arg(long, value_name = "NS", requires = "cri_endpoint")]
    namespace: Option<String>,
    /// Cgroup parent of the test pods (with --cri-endpoint).
    #[arg(long, value_name = "P", requires = "cri_endpoint")]
    cgroup_parent: Option<String>,
    /// Skip the two phases that wait past the runtime's request timeout (a
    /// plugin answering CreateContainer late, one answering Synchronize
    /// late); each costs the request timeout plus a second.
    #[arg(long)]
    no_timeout: bool,
    /// A command that stops the runtime, run at the end to check that the
    /// runtime sends Shutdown first (split on whitespace).
    #[arg(long, value_name = "'CMD ARGS...'")]
    stop_runtime: Option<String>,
    /// Print the whole report (clauses and raw records) as JSON.
    #[arg(long)]
    json: bool,
}

fn parse_secs(s: &str) -> Result<Duration, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    Duration::try_from_secs_f64(v).map_err(|_| "expected a non-negative number of seconds".into())
}

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("nri conformance: error: {msg}");
    ExitCode::from(EXIT_USAGE)
}

/// Checks the socket before waiting for a registration that cannot happen.
fn check_socket(args: &Args) -> Result<(), String> {
    let p = args.socket.display();
    match std::fs::metadata(&args.socket) {
        Ok(m) if m.file_type().is_socket() => Ok(()),
        Ok(_) => Err(format!("NRI socket {p} is not a socket")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
            "NRI socket {p} does not exist: is NRI enabled in the runtime \
             (containerd: [plugins.\"io.containerd.nri.v1.nri\"] disable = false; \
             CRI-O: [crio.nri] enable_nri = true)? Otherwise give --socket PATH"
        )),
        Err(e) => Err(format!("NRI socket {p}: {e}")),
    }
}

fn options(args: &Args) -> Options {
    let mode = match (&args.cri_endpoint, args.passive) {
        (Some(ep), _) => {
            let mut cri = CriOptions::new(ep.clone(), args.image.clone().unwrap_or_default());
            if let Some(c) = &args.crictl {
                cri.crictl = c.clone();
            }
            cri.cgroup_parent = args.cgroup_parent.clone();
            Mode::Cri(cri)
        }
        (None, duration) => Mode::Passive {
            duration: duration.unwrap_or_default(),
        },
    };
    let mut opts = Options::new(args.socket.clone(), mode);
    if let Some(n) = &args.namespace {
        opts.namespace = n.clone();
    }
    opts.check_timeout = !args.no_timeout;
    opts.stop_runtime = args
        .stop_runtime
        .as_deref()
        .map(|s| s.split_whitespace().map(str::to_owned).collect());
    opts
}

/// Runs `nri conformance`.
pub fn run(args: Args) -> ExitCode {
    if let Some(s) = &args.stop_runtime
        && s.split_whitespace().next().is_none()
    {
        return fail("--stop-runtime needs a command");
    }
    if let Err(msg) = check_socket(&args) {
        return fail(msg);
    }
    let report = match nri_conformance::run_blocking(options(&args)) {
        Ok(r) => r,
        Err(e) => {
            let mut msg = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                msg.push_str(": ");
                msg.push_str(&s.to_string());
                src = s.source();
            }
            return fail(format!("{msg} (NRI socket {})", args.socket.display()));
        }
    };
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        serde_json::to_writer_pretty(&mut out, &report)
            .map_err(std::io::Error::other)
            .and_then(|()| writeln!(out))
    } else {
        nri_conformance::print_table(&report, &mut out)
    };
    if let Err(e) = written {
        return fail(format!("writing the report: {e}"));
    }
    ExitCode::from(if report.ok() { EXIT_OK } else { EXIT_FAILED })
}
