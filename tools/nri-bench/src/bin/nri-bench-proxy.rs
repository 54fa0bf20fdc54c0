//! `nri-proxy` for the side-by-side benchmark: started by a runtime
//! harness in place of a plugin (the `nri-go-plugin` bench flags), it runs
//! the proxy registered on the harness's socket and `NRI_BENCH_PROXY_K`
//! plugin processes (`NRI_BENCH_PROXY_PLUGIN`, the Rust bench plugin)
//! behind it on a socket of its own.
//!
//! The proxy runs on the `nri-proxy` binary's async runtime
//! (`NRI_BENCH_PROXY_TOKIO=multi`: tokio's multi-thread scheduler with 2
//! workers instead); `NRI_BENCH_PROXY_SPIN_US` sets its plugin side's
//! spin budget.
//!
//! ```text
//! NRI_BENCH_PROXY_K=4 NRI_BENCH_PROXY_PLUGIN=nri-bench-plugin \
//! nri-bench-proxy --bench --socket PATH --name NAME --idx NN --adjust noop|adjusting
//! ```
//!
//! Exits 0 on SIGTERM/SIGINT or when the runtime ends the connection
//! (terminating its plugins), 1 on a failure, 2 on a usage error. The
//! plugins are started once the proxy serves its socket; stderr says when
//! all of them were active (the harness waits `--idle-wait` before it
//! measures, which leaves them time to register).

use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use nri_bench::{ENV_PROXY_K, ENV_PROXY_PLUGIN};
use nri_proxy::{Proxy, ProxyConfig};
use nri_runtime::ConfigFormat;
use tokio_util::sync::CancellationToken;

/// Environment: `multi` runs the proxy on tokio's multi-thread scheduler
/// (2 workers) instead of the `nri-proxy` binary's own runtime
/// (`nri_proxy::cli::async_runtime`), to compare the two.
const ENV_PROXY_TOKIO: &str = "NRI_BENCH_PROXY_TOKIO";

/// Environment: the spin budget of the proxy's plugin side in µs (the
/// configuration's `spin-budget`; default: the library's).
const ENV_PROXY_SPIN_US: &str = "NRI_BENCH_PROXY_SPIN_US";

struct Opts {
    socket: PathBuf,
    name: String,
    idx: String,
    adjust: String,
    k: usize,
    plugin: PathBuf,
}

fn opts() -> Result<Opts, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let get = |flag: &str| args.windows(2).find(|w| w[0] == flag).map(|w| w[1].clone());
    Ok(Opts {
        socket: get("--socket").ok_or("--socket is required")?.into(),
        name: get("--name").unwrap_or_else(|| "bench-proxy".into()),
        idx: get("--idx").unwrap_or_else(|| "10".into()),
        adjust: get("--adjust").unwrap_or_else(|| "noop".into()),
        k: std::env::var(ENV_PROXY_K)
            .ok()
            .map(|v| v.parse::<usize>())
            .transpose()
            .map_err(|e| format!("{ENV_PROXY_K}: {e}"))?
            .unwrap_or(1),
        plugin: std::env::var_os(ENV_PROXY_PLUGIN)
            .ok_or_else(|| format!("{ENV_PROXY_PLUGIN} is required"))?
            .into(),
    })
}

fn main() -> ExitCode {
    let o = match opts() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("nri-bench-proxy: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&o) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nri-bench-proxy: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(o: &Opts) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("nri-bench-proxy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).context("creating the proxy's socket dir")?;
    let sock = dir.join("nri.sock");
    let text = format!(
        "socket-path: {}\ndisable-launch: true\nproxy:\n  name: {}\n  index: \"{}\"\n  upstream-socket: {}\n",
        sock.display(),
        o.name,
        o.idx,
        o.socket.display()
    );
    let text = match std::env::var(ENV_PROXY_SPIN_US) {
        Ok(us) => format!("spin-budget: {us}us\n{text}"),
        Err(_) => text,
    };
    let config = ProxyConfig::parse("nri-bench-proxy", ConfigFormat::Yaml, &text)?;
    // The proxy binary's own runtime, unless the bench asks for tokio's
    // multi-thread scheduler (for comparing the two).
    let rt = match std::env::var(ENV_PROXY_TOKIO).as_deref() {
        Ok("multi") => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?,
        _ => nri_proxy::cli::async_runtime()?,
    };
    let mut plugins: Vec<Child> = Vec::new();
    let r = rt.block_on(serve(o, config, &sock, &mut plugins));
    for p in &mut plugins {
        let _ = Command::new("kill")
            .args(["-TERM", &p.id().to_string()])
            .status();
    }
    for p in &mut plugins {
        let _ = p.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
    r
}

async fn serve(
    o: &Opts,
    config: ProxyConfig,
    sock: &std::path::Path,
    plugins: &mut Vec<Child>,
) -> anyhow::Result<()> {
    let proxy = std::sync::Arc::new(Proxy::new(config)?);
    let shutdown = CancellationToken::new();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let run = {
        let (p, s) = (proxy.clone(), shutdown.clone());
        tokio::spawn(async move { p.run(s).await })
    };
    let t0 = Instant::now();
    while !sock.exists() {
        anyhow::ensure!(
            !run.is_finished(),
            "the proxy ended before serving its socket"
        );
        anyhow::ensure!(
            t0.elapsed() < Duration::from_secs(60),
            "the proxy does not serve its socket"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    for i in 0..o.k {
        let child = Command::new(&o.plugin)
            .args(["--bench", "--socket"])
            .arg(sock)
            .args(["--name", "bench", "--idx", &(10 + i).to_string()])
            .args(["--adjust", &o.adjust, "--log-level", "warn"])
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", o.plugin.display()))?;
        plugins.push(child);
    }
    let watch = async {
        while proxy.adaptation().plugins().len() < o.k {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        eprintln!(
            "nri-bench-proxy: {} plugins active behind the proxy {:?} after it served its socket",
            o.k,
            t0.elapsed()
        );
        std::future::pending::<()>().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
        () = watch => {}
        r = async { (&mut { run }).await } => {
            return r.map_err(anyhow::Error::from)?.map_err(anyhow::Error::from);
        }
    }
    shutdown.cancel();
    Ok(())
}
