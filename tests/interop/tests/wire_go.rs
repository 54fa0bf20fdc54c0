//! Rust ttRPC over Rust nri-mux against the real Go ttrpc + Go multiplexer
//! (`nri-wire-peer peer`), both directions over one trunk, in both roles
//! (Rust listens / Go dials, and Go listens / Rust dials).
//!
//! Go serves `nri.interop.v1.Echo` on mux conn 1 and calls Rust's Echo on
//! conn 2; Rust does the reverse. Each side sends every size sequentially
//! and from 8 concurrent callers and checks the echoed bytes.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use bytes::Bytes;
use nri_interop_tests::{
    BytesValue, ECHO_SERVICE, Empty, Int32Value, Served, UInt64Value, echo_service, go_peer,
    pattern,
};
use nri_mux::{ConnId, Extension, Mux};
use nri_ttrpc::codec::MAX_MESSAGE_LEN;
use nri_ttrpc::{CallOptions, Client, Code, Error, Request, Server};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Conn on which Go serves Echo and Rust calls.
const GO_SERVES: ConnId = ConnId(1);
/// Conn on which Rust serves Echo and Go calls.
const RUST_SERVES: ConnId = ConnId(2);
/// Concurrent callers on each side.
const CONCURRENCY: usize = 8;
/// Largest Echo payload the Go client can send (README: envelope adds 43 bytes).
const GO_MAX_ECHO: usize = 4_194_261;
/// Deadline of ordinary calls (generous: large payloads on a loaded CI box).
const CALL_TIMEOUT: Duration = Duration::from_secs(20);
/// Overall limit of one scenario.
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(90);

#[derive(Clone, Copy, Debug)]
enum Role {
    RustListens,
    GoListens,
}

/// Length of the Request envelope the Rust client sends for an Echo of
/// `n` payload bytes with `timeout`.
fn echo_request_len(n: usize, timeout: Duration, zeros: &Bytes) -> usize {
    let inner = BytesValue {
        value: zeros.slice(..n),
    };
    let bv_len = prost::Message::encoded_len(&inner);
    let req = Request {
        service: ECHO_SERVICE.to_owned(),
        method: "Echo".to_owned(),
        payload: zeros.slice(..bv_len),
        timeout_nano: i64::try_from(timeout.as_nanos()).unwrap_or(i64::MAX),
        metadata: Vec::new(),
    };
    prost::Message::encoded_len(&req)
}

/// The largest Echo payload whose Request envelope fits the 4 MiB cap.
fn max_echo_payload(timeout: Duration) -> usize {
    let zeros = Bytes::from(vec![0u8; MAX_MESSAGE_LEN + 16]);
    let (mut lo, mut hi) = (0usize, MAX_MESSAGE_LEN); // fits(lo), !fits(hi)
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if echo_request_len(mid, timeout, &zeros) <= MAX_MESSAGE_LEN {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    assert_eq!(echo_request_len(lo, timeout, &zeros), MAX_MESSAGE_LEN);
    lo
}

fn sizes_for(max: usize) -> Vec<usize> {
    vec![0, 100, 4095, 4096, 4097, 1 << 20, max]
}

struct GoPeer {
    child: Child,
    events: mpsc::UnboundedReceiver<Value>,
    reader: tokio::task::JoinHandle<()>,
}

impl GoPeer {
    fn spawn(bin: &Path, args: &[String]) -> Result<GoPeer> {
        let mut child = Command::new(bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("spawn {}", bin.display()))?;
        let stdout = child.stdout.take().context("no stdout")?;
        let (tx, events) = mpsc::unbounded_channel();
        let reader = tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                match serde_json::from_str::<Value>(&line) {
                    Ok(v) => {
                        if tx.send(v).is_err() {
                            return;
                        }
                    }
                    Err(e) => eprintln!("go peer: unparsable line {line:?}: {e}"),
                }
            }
        });
        Ok(GoPeer {
            child,
            events,
            reader,
        })
    }

    /// Next event line; fails on end of output.
    async fn next(&mut self) -> Result<Value> {
        self.events
            .recv()
            .await
            .context("Go peer ended its output early")
    }

    /// Skips to the next event named `name`, collecting the skipped ones.
    async fn expect(&mut self, name: &str, skipped: &mut Vec<Value>) -> Result<Value> {
        loop {
            let v = self.next().await?;
            if v["event"] == name {
                return Ok(v);
            }
            skipped.push(v);
        }
    }
}

async fn echo_once(client: &Client, size: usize, k: usize) -> Result<()> {
    let payload = pattern(size, k);
    let req = BytesValue {
        value: payload.clone(),
    };
    let reply: BytesValue = client
        .call_message(ECHO_SERVICE, "Echo", &req, CallOptions::new(CALL_TIMEOUT))
        .await
        .with_context(|| format!("caller {k}: Echo size {size}"))?;
    ensure!(
        reply.value == payload,
        "caller {k}: Echo size {size}: reply mismatch (got {} bytes)",
        reply.value.len()
    );
    Ok(())
}

/// Echo checks from Rust to Go: every size sequentially (pattern 0), then
/// `CONCURRENCY` callers at once, caller `k` starting at size index `k % n`.
/// Returns the number of calls made.
async fn rust_echo_checks(client: &Client, sizes: &[usize]) -> Result<u64> {
    let mut calls = 0;
    for &size in sizes {
        echo_once(client, size, 0).await?;
        calls += 1;
    }
    let mut set = JoinSet::new();
    for k in 1..=CONCURRENCY {
        let client = client.clone();
        let sizes = sizes.to_vec();
        set.spawn(async move {
            for j in 0..sizes.len() {
                let size = sizes[(k + j) % sizes.len()];
                echo_once(&client, size, k).await?;
            }
            Ok::<_, anyhow::Error>(sizes.len() as u64)
        });
    }
    while let Some(r) = set.join_next().await {
        calls += r??;
    }
    Ok(calls)
}

/// Error behaviour of Go's service as seen by the Rust client. Returns the
/// number of (Echo, Sleep, Fail) calls that reached Go.
async fn rust_error_checks(client: &Client, max: usize) -> Result<(u64, u64, u64)> {
    let opts = CallOptions::new(CALL_TIMEOUT);

    // One byte over the cap: refused locally, the connection stays usable.
    let over = BytesValue {
        value: pattern(max + 1, 0),
    };
    let err = client
        .call_message::<_, BytesValue>(ECHO_SERVICE, "Echo", &over, opts.clone())
        .await
        .err()
        .context("Echo of max+1 bytes succeeded")?;
    ensure!(
        matches!(err, Error::MessageTooLarge { .. }) && err.code() == Code::ResourceExhausted,
        "Echo of max+1: unexpected error {err:?}"
    );

    // Fail with a code: a typed status error with that code.
    for (code, want) in [(7, Code::PermissionDenied), (42, Code::Other(42))] {
        let err = client
            .call_message::<_, Empty>(
                ECHO_SERVICE,
                "Fail",
                &Int32Value { value: code },
                opts.clone(),
            )
            .await
            .err()
            .with_context(|| format!("Fail({code}) succeeded"))?;
        match &err {
            Error::Status { code: c, message } => {
                ensure!(*c == want, "Fail({code}): got code {c:?}");
                ensure!(
                    message == "requested failure",
                    "Fail({code}): message {message:?}"
                );
            }
            other => bail!("Fail({code}): not a status error: {other:?}"),
        }
    }

    // A method Go does not serve: UNIMPLEMENTED.
    let err = client
        .call_message::<_, Empty>(ECHO_SERVICE, "NoSuch", &Empty {}, opts.clone())
        .await
        .err()
        .context("NoSuch succeeded")?;
    ensure!(err.code() == Code::Unimplemented, "NoSuch: {err:?}");

    // Sleep past a short deadline: deadline error, connection still works.
    let deadline = Duration::from_millis(200);
    let started = Instant::now();
    let err = client
        .call_message::<_, Empty>(
            ECHO_SERVICE,
            "Sleep",
            &UInt64Value { value: 5_000 },
            CallOptions::new(deadline),
        )
        .await
        .err()
        .context("Sleep(5s) with a 200ms deadline succeeded")?;
    let waited = started.elapsed();
    // Either the client's own timer fires first (Error::DeadlineExceeded),
    // or Go's server, which got the deadline as timeout_nano, answers
    // DEADLINE_EXCEEDED first (seen under load: tokio timers round up to
    // the next millisecond and may run late).
    ensure!(
        err.code() == Code::DeadlineExceeded
            && matches!(err, Error::DeadlineExceeded { .. } | Error::Status { .. }),
        "Sleep: unexpected error {err:?}"
    );
    ensure!(
        waited >= deadline && waited < Duration::from_secs(3),
        "Sleep: gave up after {waited:?}"
    );
    ensure!(!client.is_closed(), "client closed after a deadline");
    echo_once(client, 100, 0)
        .await
        .context("Echo after the deadline")?;
    Ok((1, 1, 2))
}

fn go_args(role: Role, sock: &Path) -> Vec<String> {
    let sizes = sizes_for(GO_MAX_ECHO)
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let mut args: Vec<String> = vec!["peer".into()];
    args.push(
        match role {
            Role::RustListens => "--connect",
            Role::GoListens => "--listen",
        }
        .into(),
    );
    args.push(sock.display().to_string());
    for a in [
        "--serve-conn",
        "1",
        "--call-conn",
        "2",
        "--sizes",
        &sizes,
        "--concurrency",
        "8",
        "--timeout",
        "20s",
        "--call",
        "NoSuch=12",
        "--call",
        "other.Svc/X=12",
        "--call",
        "Fail:7=7",
        "--call",
        "Echo:4194262=8",
    ] {
        args.push(a.into());
    }
    args
}

#[allow(clippy::too_many_lines)]
async fn scenario(role: Role) -> Result<()> {
    let Some(bin) = go_peer("nri-wire-peer") else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let sock = dir.path().join("trunk.sock");
    let rust_max = max_echo_payload(CALL_TIMEOUT);
    let sizes = sizes_for(rust_max);
    let mut skipped = Vec::new();

    // Connect the trunk.
    let (stream, mut go) = match role {
        Role::RustListens => {
            let listener = UnixListener::bind(&sock)?;
            let go = GoPeer::spawn(&bin, &go_args(role, &sock))?;
            let (stream, _) = listener.accept().await.context("accept Go")?;
            (stream, go)
        }
        Role::GoListens => {
            let mut go = GoPeer::spawn(&bin, &go_args(role, &sock))?;
            let l = go.expect("listening", &mut skipped).await?;
            ensure!(l["socket"] == sock.display().to_string(), "listening: {l}");
            (UnixStream::connect(&sock).await.context("dial Go")?, go)
        }
    };

    // Our extension frames (wake hints) first: Go's mux must read past
    // them, as it does frames for any connection it has not opened.
    let mut stream = stream;
    stream.write_all(&Extension::WakeHint.frame()).await?;
    // Open both conns before reading, so no early frame of Go's is dropped.
    let mux = Mux::new_paused(stream);
    ensure!(mux.accept_wake_hints(), "announce wake hints");
    let client = Client::new(mux.open(GO_SERVES)?);
    let served = Arc::new(Served::default());
    let mut server = Server::new();
    server.register(ECHO_SERVICE, echo_service(served.clone()))?;
    let shutdown = CancellationToken::new();
    let serving = tokio::spawn({
        let conn = mux.open(RUST_SERVES)?;
        let shutdown = shutdown.clone();
        async move { server.serve(conn, shutdown).await }
    });
    mux.start();

    let ready = go.expect("ready", &mut skipped).await?;
    ensure!(
        ready["serve_conn"] == 1 && ready["call_conn"] == 2,
        "{ready}"
    );

    // Rust's calls and Go's calls run at the same time over the one trunk.
    let rust_side = async {
        let echo = rust_echo_checks(&client, &sizes).await?;
        let (e, s, f) = rust_error_checks(&client, rust_max).await?;
        Ok::<_, anyhow::Error>((echo + e, s, f))
    };
    let go_side = async {
        let mut calls = Vec::new();
        let result = go.expect("result", &mut calls).await?;
        Ok::<_, anyhow::Error>((calls, result))
    };
    let (rust_res, go_res) = tokio::join!(rust_side, go_side);
    let (want_echo, want_sleep, want_fail) = rust_res.context("Rust -> Go calls")?;
    let (calls, result) = go_res?;

    // Go -> Rust: the Echo checks and the extra calls.
    ensure!(
        result["ok"] == true && result["errors"].as_array().is_some_and(Vec::is_empty),
        "Go's checks of the Rust server failed: {result}"
    );
    let go_calls: Vec<&Value> = calls.iter().filter(|v| v["event"] == "call").collect();
    ensure!(go_calls.len() == 4, "expected 4 call lines, got {calls:?}");
    for c in &go_calls {
        ensure!(c["ok"] == true, "Go call failed: {c}");
    }
    ensure!(
        go_calls[0]["code"] == 12 && go_calls[0]["message"] == "method NoSuch",
        "{}",
        go_calls[0]
    );
    ensure!(
        go_calls[1]["code"] == 12 && go_calls[1]["message"] == "service other.Svc",
        "{}",
        go_calls[1]
    );
    ensure!(
        go_calls[2]["code"] == 7 && go_calls[2]["message"] == "requested failure",
        "{}",
        go_calls[2]
    );
    let per_round = (sizes.len() * (1 + CONCURRENCY)) as u64;
    ensure!(
        result["calls"] == per_round + go_calls.len() as u64,
        "Go made {} calls, expected {per_round} Echo checks + {} extra",
        result["calls"],
        go_calls.len()
    );
    // Go's own Echo calls plus nothing else reached Rust's Echo (the
    // 4194262-byte call is refused by Go's client before sending).
    ensure!(
        served.snapshot() == (per_round, 0, 1),
        "Rust served {:?}",
        served.snapshot()
    );

    // Go never announces hints, so none were sent to it.
    ensure!(
        !mux.peer_accepts_wake_hints() && !mux.send_wake_hint(),
        "Go takes no hints"
    );

    // Close the trunk from the Rust side; Go then reports what it served.
    client.close();
    mux.close();
    let mut rest = Vec::new();
    let closed = go.expect("closed", &mut rest).await?;
    ensure!(
        closed.get("error").is_none(),
        "Go saw a trunk error: {closed}"
    );
    let s = &closed["served"];
    ensure!(
        s["echo"] == want_echo && s["sleep"] == want_sleep && s["fail"] == want_fail,
        "Go served {s}, expected echo {want_echo} sleep {want_sleep} fail {want_fail}"
    );
    let status = go.child.wait().await?;
    ensure!(status.success(), "Go peer exited with {status}");
    go.reader.await?;

    shutdown.cancel();
    serving.await?.context("Rust server")?;
    eprintln!(
        "{role:?}: ok; Rust max Echo payload {rust_max} B, {} Rust->Go calls, {per_round} Go->Rust Echo calls",
        want_echo + want_sleep + want_fail + 1
    );
    Ok(())
}

async fn run(role: Role) {
    match tokio::time::timeout(SCENARIO_TIMEOUT, scenario(role)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("{role:?}: {e:#}"),
        Err(_) => panic!("{role:?}: timed out after {SCENARIO_TIMEOUT:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_listens_go_dials() {
    run(Role::RustListens).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_listens_rust_dials() {
    run(Role::GoListens).await;
}

#[test]
fn max_echo_payload_is_exact() {
    // The cap is on the encoded Request envelope: the largest payload makes
    // it exactly MAX_MESSAGE_LEN, one more byte goes over.
    let t = CALL_TIMEOUT;
    let max = max_echo_payload(t);
    let zeros = Bytes::from(vec![0u8; MAX_MESSAGE_LEN + 16]);
    assert_eq!(echo_request_len(max, t, &zeros), MAX_MESSAGE_LEN);
    assert!(echo_request_len(max + 1, t, &zeros) > MAX_MESSAGE_LEN);
    // Same envelope overhead (43 bytes) as Go's client.
    assert_eq!(max, GO_MAX_ECHO, "max {max}");
}
