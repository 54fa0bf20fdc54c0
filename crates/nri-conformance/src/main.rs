//! `nri-conformance`: check a runtime against the NRI lifecycle contract
//! (to become `nri conformance`).
//!
//! ```text
//! nri-conformance --socket PATH (--cri-endpoint unix://... --image IMAGE | --passive SECS)
//!                 [--crictl PATH] [--namespace NS] [--cgroup-parent P] [--no-timeout]
//!                 [--stop-runtime 'CMD ARGS...'] [--json]
//! ```
//!
//! Exit status: 0 all clauses pass or are known discrepancies, 1 a clause
//! failed, 2 usage error or the run could not be done.

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use nri_conformance::{CriOptions, Mode, Options};

const USAGE: &str = "usage: nri-conformance --socket PATH (--cri-endpoint unix://... --image IMAGE | --passive SECS) \
[--crictl PATH] [--namespace NS] [--cgroup-parent P] [--no-timeout] [--stop-runtime 'CMD ARGS...'] [--json]";

fn parse() -> Result<(Options, bool), String> {
    let mut socket = None;
    let mut endpoint = None;
    let mut image = None;
    let mut passive = None;
    let mut crictl = None;
    let mut namespace = None;
    let mut cgroup_parent = None;
    let mut timeout = true;
    let mut stop = None;
    let mut json = false;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--socket" => socket = Some(value()?),
            "--cri-endpoint" => endpoint = Some(value()?),
            "--image" => image = Some(value()?),
            "--passive" => {
                let v = value()?;
                passive = Some(
                    v.parse::<f64>()
                        .map_err(|e| format!("--passive {v}: {e}"))?,
                )
            }
            "--crictl" => crictl = Some(value()?),
            "--namespace" => namespace = Some(value()?),
            "--cgroup-parent" => cgroup_parent = Some(value()?),
            "--no-timeout" => timeout = false,
            "--stop-runtime" => stop = Some(value()?),
            "--json" => json = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let socket = socket.unwrap_or_else(|| "/var/run/nri/nri.sock".into());
    let mode = match (endpoint, passive) {
        (Some(ep), None) => {
            let mut cri = CriOptions::new(ep, image.ok_or("--cri-endpoint needs --image")?);
            if let Some(c) = crictl {
                cri.crictl = c.into();
            }
            if let Some(n) = namespace {
                cri.namespace = n;
            }
            cri.cgroup_parent = cgroup_parent;
            Mode::Cri(cri)
        }
        (None, Some(s)) if s.is_finite() && s >= 0.0 => Mode::Passive {
            duration: Duration::from_secs_f64(s),
        },
        _ => return Err("give either --cri-endpoint or --passive SECS".into()),
    };
    let mut opts = Options::new(socket, mode);
    opts.check_timeout = timeout;
    opts.stop_runtime = stop.map(|s| s.split_whitespace().map(str::to_owned).collect());
    Ok((opts, json))
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,nri_plugin=error,nri_mux=error".into()),
        )
        .init();
    let (opts, json) = match parse() {
        Ok(v) => v,
        Err(msg) => {
            eprintln!("{msg}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let report = match nri_conformance::run_blocking(opts) {
        Ok(r) => r,
        Err(e) => {
            let mut msg = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                msg.push_str(": ");
                msg.push_str(&s.to_string());
                src = s.source();
            }
            eprintln!("nri-conformance: {msg}");
            return ExitCode::from(2);
        }
    };
    let mut out = std::io::stdout().lock();
    let written = if json {
        serde_json::to_writer_pretty(&mut out, &report)
            .map_err(std::io::Error::other)
            .and_then(|()| writeln!(out))
    } else {
        nri_conformance::print_table(&report, &mut out)
    };
    if let Err(e) = written {
        eprintln!("nri-conformance: writing the report: {e}");
        return ExitCode::from(2);
    }
    if report.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
