//! The clients: Rust ttRPC over nri-mux, raw unix-socket ping-pong
//! (std and tokio), and the Go pair run through `nri-wire-peer`.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream as StdStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, ensure};
use nri_interop_tests::{BytesValue, ECHO_SERVICE, pattern};
use nri_mux::Mux;
use nri_ttrpc::{CallOptions, Client};

use crate::server::{ServerProc, rust_server};
use crate::stats::{CpuWindow, Stats, nanos, stats};
use crate::{BENCH_CONN, CALL_TIMEOUT, Rt, ServeKind};

/// Set by `--block-on`.
pub(crate) static BLOCK_ON: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

pub(crate) fn block_on_mode() -> bool {
    BLOCK_ON.load(std::sync::atomic::Ordering::Relaxed)
}

/// Runs `fut` as a spawned task of `rt` and waits for it; with
/// `--block-on`, runs it directly in `block_on` (on the calling thread).
pub(crate) fn in_task<T: Send + 'static>(
    rt: &tokio::runtime::Runtime,
    fut: impl std::future::Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    if block_on_mode() {
        rt.block_on(fut)
    } else {
        rt.block_on(rt.spawn(fut))?
    }
}

#[derive(Clone)]
pub(crate) struct Cfg {
    pub(crate) n: usize,
    pub(crate) warmup: usize,
    pub(crate) sizes: Vec<usize>,
}

pub(crate) fn rust_ttrpc(
    cfg: &Cfg,
    client_rt: Rt,
    server_rt: Rt,
    dir: &Path,
) -> Result<Vec<Stats>> {
    let sock = dir.join(format!("ttrpc-{}.sock", client_rt.short()));
    let server = rust_server(ServeKind::Ttrpc, &sock, server_rt)?;
    let pid = server.pid();
    let rt = client_rt.build()?;
    let cfg = cfg.clone();
    let res = in_task(&rt, async move {
        let stream = tokio::net::UnixStream::connect(&sock).await?;
        let mux = Mux::new(stream);
        let client = Client::new(mux.open(BENCH_CONN)?);
        let opts = CallOptions::new(CALL_TIMEOUT);
        let mut out = Vec::new();
        for &size in &cfg.sizes {
            let req = BytesValue {
                value: pattern(size, 0),
            };
            for _ in 0..cfg.warmup.max(1) {
                let r: BytesValue = client
                    .call_message(ECHO_SERVICE, "Echo", &req, opts.clone())
                    .await?;
                ensure!(r == req, "wrong echo at size {size}");
            }
            let mut samples = Vec::with_capacity(cfg.n);
            let cpu = CpuWindow::start(Some(pid));
            let t0 = Instant::now();
            for _ in 0..cfg.n {
                let t = Instant::now();
                let r: BytesValue = client
                    .call_message(ECHO_SERVICE, "Echo", &req, opts.clone())
                    .await?;
                samples.push(nanos(t.elapsed()));
                std::hint::black_box(r);
            }
            let mut st = stats(samples, t0.elapsed());
            cpu.finish(&mut st);
            out.push(st);
        }
        client.close();
        mux.close();
        Ok::<_, anyhow::Error>(out)
    });
    drop(rt);
    server.wait()?;
    res
}

pub(crate) fn rust_raw(cfg: &Cfg, dir: &Path) -> Result<Vec<Stats>> {
    let sock = dir.join("raw.sock");
    let server = rust_server(ServeKind::Raw, &sock, Rt::Current)?;
    let pid = server.pid();
    let mut s = StdStream::connect(&sock)?;
    let mut out = Vec::new();
    for &size in &cfg.sizes {
        ensure!(size > 0, "raw ping-pong needs size > 0");
        let buf = pattern(size, 0).to_vec();
        let mut back = vec![0u8; size];
        for _ in 0..cfg.warmup.max(1) {
            s.write_all(&buf)?;
            s.read_exact(&mut back)?;
        }
        ensure!(back == buf, "wrong echo at size {size}");
        let mut samples = Vec::with_capacity(cfg.n);
        let cpu = CpuWindow::start(Some(pid));
        let t0 = Instant::now();
        for _ in 0..cfg.n {
            let t = Instant::now();
            s.write_all(&buf)?;
            s.read_exact(&mut back)?;
            samples.push(nanos(t.elapsed()));
        }
        let mut st = stats(samples, t0.elapsed());
        cpu.finish(&mut st);
        out.push(st);
    }
    drop(s);
    server.wait()?;
    Ok(out)
}

pub(crate) fn rust_raw_tokio(cfg: &Cfg, dir: &Path) -> Result<Vec<Stats>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let sock = dir.join("raw-tokio.sock");
    let server = rust_server(ServeKind::RawTokio, &sock, Rt::Current)?;
    let pid = server.pid();
    let rt = Rt::Current.build()?;
    let res = rt.block_on(async {
        let mut s = tokio::net::UnixStream::connect(&sock).await?;
        let mut out = Vec::new();
        for &size in &cfg.sizes {
            ensure!(size > 0, "raw ping-pong needs size > 0");
            let buf = pattern(size, 0).to_vec();
            let mut back = vec![0u8; size];
            for _ in 0..cfg.warmup.max(1) {
                s.write_all(&buf).await?;
                s.read_exact(&mut back).await?;
            }
            ensure!(back == buf, "wrong echo at size {size}");
            let mut samples = Vec::with_capacity(cfg.n);
            let cpu = CpuWindow::start(Some(pid));
            let t0 = Instant::now();
            for _ in 0..cfg.n {
                let t = Instant::now();
                s.write_all(&buf).await?;
                s.read_exact(&mut back).await?;
                samples.push(nanos(t.elapsed()));
            }
            let mut st = stats(samples, t0.elapsed());
            cpu.finish(&mut st);
            out.push(st);
        }
        Ok::<_, anyhow::Error>(out)
    });
    drop(rt);
    server.wait()?;
    res
}

#[derive(serde::Deserialize)]
pub(crate) struct GoStats {
    pub(crate) event: String,
    pub(crate) size: usize,
    pub(crate) n: usize,
    pub(crate) median_ns: u64,
    pub(crate) p90_ns: u64,
    pub(crate) p99_ns: u64,
    pub(crate) min_ns: u64,
    pub(crate) max_ns: u64,
    pub(crate) mean_ns: u64,
    pub(crate) total_ns: u64,
}

/// Runs a Go server mode and the matching client mode of nri-wire-peer.
pub(crate) fn go_pair(cfg: &Cfg, bin: &Path, mode: &str, dir: &Path) -> Result<Vec<Stats>> {
    let sock = dir.join(format!("go-{mode}.sock"));
    let mut cmd = Command::new(bin);
    cmd.args([&format!("{mode}-server"), "--listen"]).arg(&sock);
    let (server, _out) = ServerProc::spawn(cmd)?;
    let sizes = cfg
        .sizes
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let out = Command::new(bin)
        .arg(format!("{mode}-client"))
        .arg("--connect")
        .arg(&sock)
        .args(["--sizes", &sizes])
        .args(["--n", &cfg.n.to_string()])
        .args(["--warmup", &cfg.warmup.to_string()])
        .stderr(Stdio::inherit())
        .output()?;
    ensure!(
        out.status.success(),
        "go {mode}-client failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    server.wait()?;
    let mut res = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(g) = serde_json::from_str::<GoStats>(line) else {
            continue;
        };
        if g.event != "stats" {
            continue;
        }
        res.push((
            g.size,
            Stats {
                n: g.n,
                median_ns: g.median_ns,
                p90_ns: g.p90_ns,
                p99_ns: g.p99_ns,
                min_ns: g.min_ns,
                max_ns: g.max_ns,
                mean_ns: g.mean_ns,
                total_ns: g.total_ns,
                client_cpu_us_per_call: None,
                server_cpu_us_per_call: None,
            },
        ));
    }
    let mut ordered = Vec::new();
    for &size in &cfg.sizes {
        let st = res
            .iter()
            .find(|(s, _)| *s == size)
            .with_context(|| format!("go {mode}: no stats for size {size}"))?;
        ordered.push(st.1.clone());
    }
    Ok(ordered)
}
