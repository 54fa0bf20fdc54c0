//! The Rust bench plugin: the counterpart of `nri-go-plugin --bench`, on
//! `nri-plugin`, for the side-by-side benchmark.
//!
//! ```text
//! nri-bench-plugin [--bench] [--socket PATH] [--name NAME] [--idx NN]
//!                  [--adjust noop|none|adjusting] [--log-level debug|info|warn|error]
//!                  [--events LIST] [--exit-on-close[=BOOL]] [--dump[=BOOL]]
//! ```
//!
//! Same flags and behaviour as `nri-go-plugin` in bench mode (`--events`
//! and `--dump` are accepted and ignored there too): subscribes to
//! CreateContainer and StartContainer; Synchronize returns no updates
//! (streamed: `SyncMode::Streaming`, one message at a time, every pod and
//! container decoded one by one and dropped);
//! CreateContainer returns nothing (`noop`) or, for `adjusting`, env
//! `BENCH_PLUGIN_<idx>=<idx>-<name>` and annotation
//! `bench.example.com/plugin-<idx>=<idx>-<name>`; StartContainer does
//! nothing. Its answer to CreateContainer does not depend on the request,
//! so it takes it undecoded (`create_container_encoded`) and decodes none
//! of it, where the Go stub has to decode all of it;
//! `NRI_BENCH_PLUGIN_DECODE=all` decodes the whole request (and `container`
//! the container only), to measure what a plugin that reads the request
//! pays. A launching runtime's `NRI_PLUGIN_NAME` / `NRI_PLUGIN_IDX` take
//! precedence (the name only when `--name` is not given);
//! `NRI_BENCH_PLUGIN_SPIN_US` overrides the SDK's spin budget. One
//! `current_thread` tokio runtime, logs at `--log-level` (default `warn`)
//! on stderr. Exits 0 when the runtime closes the connection or shuts the
//! plugin down, or on SIGINT/SIGTERM; 1 if it cannot connect or register;
//! 2 on a usage error.

use std::process::ExitCode;

use nri_plugin::api::{
    Container, ContainerAdjustment, ContainerUpdate, CreateContainerRequest,
    CreateContainerResponse, KeyValue, PodSandbox,
};
use nri_plugin::{Builder, Encoded, Error, HandlerResult, Plugin, SyncChunk, SyncKind, SyncMode};

struct BenchPlugin {
    /// `Some((env key, annotation key, value))` for the adjusting flavour.
    adjust: Option<(String, String, String)>,
    /// What of a CreateContainer request it decodes.
    decode: Decode,
}

/// What the bench plugin decodes of each CreateContainer request
/// ([`nri_bench::ENV_PLUGIN_DECODE`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decode {
    /// Nothing: its answer does not depend on the request (`none`).
    Nothing,
    /// The container only (`container`).
    Container,
    /// The whole request, as the Go stub does (`all`).
    All,
}

impl Decode {
    fn from_env(v: Option<&str>) -> Result<Decode, String> {
        match v {
            None | Some("none") => Ok(Decode::Nothing),
            Some("container") => Ok(Decode::Container),
            Some("all") => Ok(Decode::All),
            Some(other) => Err(format!(
                "invalid NRI_BENCH_PLUGIN_DECODE {other:?} (none | container | all)"
            )),
        }
    }
}

#[nri_plugin::plugin]
impl Plugin for BenchPlugin {
    // Streaming sync (see `run`): each message arrives undecoded and is
    // dropped when this returns, so the plugin never holds the whole state.
    // Every pod and container is still decoded (one at a time), counted and
    // dropped: at least the work of the Go stub, which decodes everything.
    async fn synchronize_chunk(
        &self,
        chunk: SyncChunk,
        _kind: SyncKind,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        let mut pods = 0usize;
        for pod in chunk.pods() {
            std::hint::black_box(pod?);
            pods += 1;
        }
        let mut containers = 0usize;
        for container in chunk.containers() {
            std::hint::black_box(container?);
            containers += 1;
        }
        tracing::debug!(
            pods,
            containers,
            more = chunk.more(),
            "synchronized a chunk"
        );
        Ok(Vec::new())
    }

    async fn create_container_encoded(
        &self,
        request: Encoded<CreateContainerRequest>,
    ) -> HandlerResult<CreateContainerResponse> {
        match self.decode {
            Decode::Nothing => {}
            Decode::Container => {
                std::hint::black_box(request.container()?);
            }
            Decode::All => {
                std::hint::black_box(request.decode()?);
            }
        }
        let adjust = self.adjust.as_ref().map(|(env, ann, value)| {
            let mut a = ContainerAdjustment::default();
            a.env.push(KeyValue {
                key: env.clone(),
                value: value.clone(),
            });
            a.annotations.insert(ann.clone(), value.clone());
            a
        });
        Ok(CreateContainerResponse {
            adjust,
            ..Default::default()
        })
    }

    async fn start_container(&self, _pod: PodSandbox, _container: Container) -> HandlerResult<()> {
        Ok(())
    }
}

struct Args {
    socket: Option<String>,
    name: Option<String>,
    idx: String,
    adjusting: bool,
    level: tracing::Level,
}

fn parse_bool(v: &str) -> Result<bool, String> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(format!("invalid boolean {v:?}")),
    }
}

/// Go `flag` syntax: `-x`, `--x`, `--x=v`, `--x v`; booleans only take
/// `--x` or `--x=v`.
fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        socket: None,
        name: None,
        idx: "50".into(),
        adjusting: false,
        level: tracing::Level::WARN,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            return Err(format!("unexpected argument {arg:?}"));
        };
        let (key, inline) = match flag.split_once('=') {
            Some((k, v)) => (k, Some(v.to_owned())),
            None => (flag, None),
        };
        match key {
            "bench" | "exit-on-close" | "dump" => {
                if let Some(v) = inline {
                    parse_bool(&v)?;
                }
                continue;
            }
            "h" | "help" => return Err(String::new()),
            _ => {}
        }
        let value = match inline {
            Some(v) => v,
            None => it
                .next()
                .ok_or_else(|| format!("flag needs an argument: -{key}"))?,
        };
        match key {
            "socket" => a.socket = Some(value),
            "name" => a.name = Some(value),
            "idx" => a.idx = value,
            "events" => {} // bench mode subscribes to its own events, as Go
            "adjust" => {
                for f in value.split(',').map(str::trim) {
                    match f.to_ascii_lowercase().as_str() {
                        "" | "none" | "noop" | "no-op" => {}
                        "adjusting" | "env+annotation" => a.adjusting = true,
                        other => {
                            return Err(format!(
                                "unsupported --adjust flavour {other:?} (bench mode: noop | adjusting)"
                            ));
                        }
                    }
                }
            }
            "log-level" => {
                a.level = match value.as_str() {
                    "debug" => tracing::Level::DEBUG,
                    "info" => tracing::Level::INFO,
                    "warn" | "warning" => tracing::Level::WARN,
                    "error" => tracing::Level::ERROR,
                    other => return Err(format!("invalid --log-level {other:?}")),
                }
            }
            other => return Err(format!("flag provided but not defined: -{other}")),
        }
    }
    Ok(a)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(msg) => {
            eprintln!(
                "{msg}\nusage: nri-bench-plugin [--bench] [--socket PATH] [--name NAME] [--idx NN] [--adjust noop|adjusting] [--log-level LEVEL]"
            );
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(args.level)
        .with_target(false)
        .init();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("nri-bench-plugin: tokio runtime: {e}");
            return ExitCode::from(1);
        }
    };
    rt.block_on(run(args))
}

async fn run(args: Args) -> ExitCode {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let idx = env("NRI_PLUGIN_IDX").unwrap_or(args.idx);
    let name = match (&args.name, env("NRI_PLUGIN_NAME")) {
        (Some(n), _) => n.clone(),
        (None, Some(n)) => n,
        (None, None) => "go-plugin".into(),
    };
    let full = format!("{idx}-{name}");
    let decode = match Decode::from_env(env(nri_bench::ENV_PLUGIN_DECODE).as_deref()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("nri-bench-plugin {full}: {e}");
            return ExitCode::from(2);
        }
    };
    let plugin = BenchPlugin {
        decode,
        adjust: args.adjusting.then(|| {
            (
                format!("BENCH_PLUGIN_{idx}"),
                format!("bench.example.com/plugin-{idx}"),
                full.clone(),
            )
        }),
    };
    let mut b = Builder::new(plugin)
        .name(name)
        .index(idx)
        .sync_mode(SyncMode::Streaming);
    // The Go harness passes Go flags only; this knob is for side runs.
    if let Some(us) = env(nri_bench::ENV_PLUGIN_SPIN_US).and_then(|v| v.parse().ok()) {
        b = b.spin_budget(std::time::Duration::from_micros(us));
    }
    if let Some(s) = args.socket {
        b = b.socket_path(s);
    }
    let stub = match b.build() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("nri-bench-plugin {full}: {e}");
            return ExitCode::from(1);
        }
    };
    let handle = stub.handle();
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("nri-bench-plugin {full}: SIGTERM handler: {e}");
            return ExitCode::from(1);
        }
    };
    let result = tokio::select! {
        r = stub.run() => r,
        _ = term.recv() => { handle.stop(); Ok(()) }
        _ = tokio::signal::ctrl_c() => { handle.stop(); Ok(()) }
    };
    match result {
        // Stopped by a signal, or the runtime went away / shut us down
        // (Go's stub calls the on-close callback, which exits 0).
        Ok(()) | Err(Error::ConnectionLost { .. }) | Err(Error::ShutDownByRuntime) => {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("nri-bench-plugin {full}: {e}");
            ExitCode::from(1)
        }
    }
}
