//! Wire benchmark: round-trip latency of Rust ttRPC over Rust nri-mux
//! between two processes, against a raw unix-socket ping-pong (the floor)
//! and against the Go reference (ttrpc + NRI multiplexer, and Go's raw
//! ping-pong) via `nri-wire-peer`.
//!
//! All implementations run in one invocation, interleaved (every
//! implementation once per repetition), so they see the same machine load.
//!
//! ```text
//! cargo run --release -p nri-interop-tests --bin wire-bench -- \
//!     [--n 20000] [--warmup 2000] [--sizes 64,2048] [--reps 3] [--json]
//! ```
//!
//! The Rust server side is this binary re-executed with `--serve KIND`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use clap::{Parser, ValueEnum};
use nri_interop_tests::interop_bin_dir;
use nri_mux::ConnId;
use serde::Serialize;

/// Mux connection used by every ttRPC benchmark (Rust and Go).
const BENCH_CONN: ConnId = ConnId(1);
/// Per-call deadline, as the Go bench client uses by default.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Rt {
    /// tokio current_thread runtime.
    Current,
    /// tokio multi_thread runtime (default worker count).
    Multi,
}

impl Rt {
    fn short(self) -> &'static str {
        match self {
            Rt::Current => "ct",
            Rt::Multi => "mt",
        }
    }

    fn build(self) -> Result<tokio::runtime::Runtime> {
        Ok(match self {
            Rt::Current => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?,
            Rt::Multi => tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ServeKind {
    /// ttRPC + mux Echo server.
    Ttrpc,
    /// Blocking std echo.
    Raw,
    /// tokio echo.
    RawTokio,
}

#[derive(Debug, Parser)]
#[command(about = "Rust vs Go ttRPC+mux round-trip latency, with raw unix-socket floors")]
struct Args {
    /// Timed calls per size and implementation.
    #[arg(long, default_value_t = 20000)]
    n: usize,
    /// Untimed calls before the timed ones, per size.
    #[arg(long, default_value_t = 2000)]
    warmup: usize,
    /// Payload sizes in bytes (Echo BytesValue payload for ttRPC; buffer
    /// size for raw), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "64,2048")]
    sizes: Vec<usize>,
    /// Repetitions of the whole interleaved matrix.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Runtimes of the Rust ttRPC client to measure.
    #[arg(long, value_delimiter = ',', default_value = "current,multi")]
    client_rt: Vec<Rt>,
    /// Runtime of the Rust ttRPC server process.
    #[arg(long, value_enum, default_value = "multi")]
    server_rt: Rt,
    /// Skip the Go measurements.
    #[arg(long)]
    no_go: bool,
    /// Skip the tokio raw ping-pong (diagnostic: tokio's own cost).
    #[arg(long)]
    no_raw_tokio: bool,
    /// Only run implementations whose name starts with one of these
    /// (e.g. `rust-ttrpc,rust-raw`); default all.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Directory of nri-wire-peer (default: $NRI_INTEROP_BIN or interop/bin).
    #[arg(long)]
    go_bin: Option<PathBuf>,
    /// Run the Rust ttRPC client loop and server in `Runtime::block_on`
    /// (on the thread that builds the runtime, as `#[tokio::main]`'s body)
    /// instead of in a spawned task. Diagnostic: shows the cost of
    /// cross-thread wake-ups on a multi_thread runtime.
    #[arg(long)]
    block_on: bool,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Internal: run as the server process of KIND.
    #[arg(long, value_enum, hide = true)]
    serve: Option<ServeKind>,
    /// Internal: socket of the server process.
    #[arg(long, hide = true)]
    socket: Option<PathBuf>,
}

mod client;
mod server;
mod stats;

use client::*;
use server::*;
use stats::*;

// --- driver ---------------------------------------------------------------------

#[derive(Debug, Serialize)]
struct Cell {
    implementation: String,
    size: usize,
    /// Per repetition.
    reps: Vec<Stats>,
    /// Median over repetitions of the per-rep median / p99; min of mins.
    median_us: f64,
    median_range_us: (f64, f64),
    p99_us: f64,
    p99_range_us: (f64, f64),
    min_us: f64,
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn median_of(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len().saturating_sub(1) / 2).copied().unwrap_or(0)
}

fn summarize(name: &str, size: usize, reps: Vec<Stats>) -> Cell {
    let meds: Vec<u64> = reps.iter().map(|s| s.median_ns).collect();
    let p99s: Vec<u64> = reps.iter().map(|s| s.p99_ns).collect();
    let min = reps.iter().map(|s| s.min_ns).min().unwrap_or(0);
    let range = |v: &[u64]| {
        (
            us(v.iter().copied().min().unwrap_or(0)),
            us(v.iter().copied().max().unwrap_or(0)),
        )
    };
    Cell {
        implementation: name.to_owned(),
        size,
        median_us: us(median_of(meds.clone())),
        median_range_us: range(&meds),
        p99_us: us(median_of(p99s.clone())),
        p99_range_us: range(&p99s),
        min_us: us(min),
        reps,
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

#[allow(clippy::too_many_lines)]
fn main() -> Result<()> {
    let args = Args::parse();
    BLOCK_ON.store(args.block_on, std::sync::atomic::Ordering::Relaxed);
    if let Some(kind) = args.serve {
        let socket = args.socket.context("--serve needs --socket")?;
        return serve(kind, &socket, args.server_rt);
    }
    ensure!(
        args.n > 0 && args.reps > 0 && !args.sizes.is_empty(),
        "empty run"
    );
    let cfg = Cfg {
        n: args.n,
        warmup: args.warmup,
        sizes: args.sizes.clone(),
    };
    let go_bin = args
        .go_bin
        .clone()
        .unwrap_or_else(interop_bin_dir)
        .join("nri-wire-peer");
    let with_go = !args.no_go;
    if with_go && !go_bin.is_file() {
        bail!(
            "{} not found: run `bash scripts/build-go-peers.sh` or pass --no-go",
            go_bin.display()
        );
    }
    let dir = tempfile::tempdir()?;
    let load_start = loadavg();

    // implementation name -> per size -> per rep
    let mut order: Vec<String> = Vec::new();
    let mut results: std::collections::HashMap<String, Vec<Vec<Stats>>> = Default::default();
    let only = args.only.clone();
    let wanted = |name: &str| only.is_empty() || only.iter().any(|p| name.starts_with(p.as_str()));
    let mut record = |name: String, per_size: Vec<Stats>| {
        if !order.contains(&name) {
            order.push(name.clone());
        }
        let e = results
            .entry(name)
            .or_insert_with(|| vec![Vec::new(); cfg.sizes.len()]);
        for (i, st) in per_size.into_iter().enumerate() {
            e[i].push(st);
        }
    };
    for rep in 0..args.reps {
        if !args.json {
            eprintln!("rep {}/{} (load {})", rep + 1, args.reps, loadavg());
        }
        for &crt in &args.client_rt {
            let name = format!(
                "rust-ttrpc c={} s={}{}",
                crt.short(),
                args.server_rt.short(),
                if args.block_on { " block_on" } else { "" }
            );
            if wanted(&name) {
                record(name, rust_ttrpc(&cfg, crt, args.server_rt, dir.path())?);
            }
        }
        if with_go && wanted("go-ttrpc") {
            record(
                "go-ttrpc".into(),
                go_pair(&cfg, &go_bin, "bench", dir.path())?,
            );
        }
        if wanted("rust-raw") {
            record("rust-raw".into(), rust_raw(&cfg, dir.path())?);
        }
        if !args.no_raw_tokio && wanted("rust-raw-tokio") {
            record(
                "rust-raw-tokio ct".into(),
                rust_raw_tokio(&cfg, dir.path())?,
            );
        }
        if with_go && wanted("go-raw") {
            record("go-raw".into(), go_pair(&cfg, &go_bin, "raw", dir.path())?);
        }
    }
    let load_end = loadavg();

    let mut cells = Vec::new();
    for name in &order {
        let Some(per_size) = results.remove(name) else {
            continue;
        };
        for (i, reps) in per_size.into_iter().enumerate() {
            cells.push(summarize(name, cfg.sizes[i], reps));
        }
    }
    let find = |name: &str, size: usize| {
        cells
            .iter()
            .find(|c| c.implementation == name && c.size == size)
            .map(|c| c.median_us)
    };
    #[derive(Serialize)]
    struct Ratio {
        size: usize,
        rust: String,
        vs: String,
        ratio: f64,
        target: Option<f64>,
    }
    let mut ratios = Vec::new();
    for &size in &cfg.sizes {
        for name in order.iter().filter(|n| n.starts_with("rust-ttrpc")) {
            let Some(r) = find(name, size) else { continue };
            for (vs, target) in [
                ("rust-raw", Some(2.0)),
                ("go-raw", None),
                ("go-ttrpc", Some(0.5)),
            ] {
                if let Some(b) = find(vs, size) {
                    ratios.push(Ratio {
                        size,
                        rust: name.clone(),
                        vs: vs.into(),
                        ratio: r / b,
                        target,
                    });
                }
            }
        }
    }

    if args.json {
        let out = serde_json::json!({
            "n": cfg.n, "warmup": cfg.warmup, "reps": args.reps, "sizes": cfg.sizes,
            "server_rt": args.server_rt,
            "nproc": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "loadavg_start": load_start, "loadavg_end": load_end,
            "cells": cells, "ratios": ratios,
        });
        println!("{out}");
        return Ok(());
    }
    println!(
        "wire-bench: n={} warmup={} reps={} sizes={:?}; nproc={}; loadavg start [{}] end [{}]",
        cfg.n,
        cfg.warmup,
        args.reps,
        cfg.sizes,
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        load_start,
        load_end
    );
    println!(
        "{:>6}  {:<30} {:>24} {:>26} {:>8} {:>14}",
        "size",
        "implementation",
        "median µs [reps min-max]",
        "p99 µs [reps min-max]",
        "min µs",
        "cpu µs/call c/s"
    );
    for c in &cells {
        let cpu = {
            let cl: Vec<f64> = c
                .reps
                .iter()
                .filter_map(|s| s.client_cpu_us_per_call)
                .collect();
            let sv: Vec<f64> = c
                .reps
                .iter()
                .filter_map(|s| s.server_cpu_us_per_call)
                .collect();
            if cl.is_empty() {
                "-".to_owned()
            } else {
                let avg = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
                format!("{:.0}/{:.0}", avg(&cl), avg(&sv))
            }
        };
        println!(
            "{:>6}  {:<30} {:>8.1} [{:>6.1}-{:>6.1}] {:>9.1} [{:>6.1}-{:>7.1}] {:>8.1} {:>14}",
            c.size,
            c.implementation,
            c.median_us,
            c.median_range_us.0,
            c.median_range_us.1,
            c.p99_us,
            c.p99_range_us.0,
            c.p99_range_us.1,
            c.min_us,
            cpu
        );
    }
    println!("ratios of medians (median over reps):");
    for r in &ratios {
        let verdict = match r.target {
            Some(t) if r.ratio <= t => format!("  target <= {t}: met"),
            Some(t) => format!("  target <= {t}: MISSED"),
            None => String::new(),
        };
        println!(
            "{:>6}  {:<30} / {:<10} = {:>5.2}{verdict}",
            r.size, r.rust, r.vs, r.ratio
        );
    }
    Ok(())
}
