//! End to end, our plugin SDK under our runtime: the plugin spins and asks
//! for wake hints because Configure's `nri_version` carries our `+nri-rs`
//! tag, and the runtime hints it; the same runtime with that field
//! rewritten on the wire to what Go's runtime sends (`v0.12.5`) leaves the
//! plugin plain, and no hint is asked for or sent.
//!
//! The plugins reach the runtime through a relay that counts the mux's
//! extension frames each way (a plugin's "I take hints", the runtime's
//! hints) and, for the Go half, rewrites Configure's `nri_version`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use common::*;
use nri_api::api::{ConfigureRequest, Container, CreateContainerResponse, PodSandbox};
use nri_mux::{EXTENSION_CONN, PLUGIN_SERVICE_CONN};
use nri_plugin::{Builder, HandlerResult, Plugin, PluginHandle};
use nri_ttrpc::codec::{MessageType, encode_message};
use nri_ttrpc::proto::Request;
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

const TIMEOUT: Duration = Duration::from_secs(10);
/// The extension frames' one-byte payloads (docs/runtime/spinning.md).
const TAKES_HINTS: u8 = 1;
const WAKE_HINT: u8 = 2;

struct Noop;

#[nri_plugin::plugin]
impl Plugin for Noop {
    async fn create_container(
        &self,
        _pod: PodSandbox,
        _container: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        Ok(CreateContainerResponse::default())
    }
}

/// What the relay counted, over all its connections.
#[derive(Default)]
struct Counts {
    /// Plugins that said they take wake hints.
    takes_hints: AtomicU64,
    /// Wake hints the runtime sent.
    hints: AtomicU64,
    /// Configure requests seen (and rewritten, if asked).
    configures: AtomicU64,
}

/// Relays every connection to `listener` to the runtime's socket.
async fn relay(
    listener: UnixListener,
    runtime: PathBuf,
    go_version: Option<&'static str>,
    counts: Arc<Counts>,
) {
    let mut conns = tokio::task::JoinSet::new();
    while let Ok((plugin, _)) = listener.accept().await {
        let up = UnixStream::connect(&runtime).await.unwrap();
        let (pr, pw) = plugin.into_split();
        let (ur, uw) = up.into_split();
        conns.spawn(pump(pr, uw, None, counts.clone()));
        conns.spawn(pump(ur, pw, Some(go_version), counts.clone()));
    }
}

/// Copies mux frames from `rd` to `wr`, counting extension frames; on the
/// runtime's side (`to_plugin` set), rewrites Configure's `nri_version`
/// when it holds a version.
async fn pump(
    mut rd: impl tokio::io::AsyncRead + Unpin,
    mut wr: impl tokio::io::AsyncWrite + Unpin,
    to_plugin: Option<Option<&'static str>>,
    counts: Arc<Counts>,
) {
    let mut buf = BytesMut::new();
    loop {
        while buf.len() >= nri_mux::HEADER_LEN {
            let conn = u32::from_be_bytes(buf[0..4].try_into().unwrap());
            let len = u32::from_be_bytes(buf[4..8].try_into().unwrap()) as usize;
            if buf.len() < nri_mux::HEADER_LEN + len {
                break;
            }
            let mut frame = buf.split_to(nri_mux::HEADER_LEN + len);
            let payload = &frame[nri_mux::HEADER_LEN..];
            match (conn, to_plugin) {
                (c, None) if c == EXTENSION_CONN.0 && payload == [TAKES_HINTS] => {
                    counts.takes_hints.fetch_add(1, Ordering::Relaxed);
                }
                (c, Some(_)) if c == EXTENSION_CONN.0 && payload == [WAKE_HINT] => {
                    counts.hints.fetch_add(1, Ordering::Relaxed);
                }
                (c, Some(go)) if c == PLUGIN_SERVICE_CONN.0 => {
                    if let Some(f) = configure(payload, go) {
                        counts.configures.fetch_add(1, Ordering::Relaxed);
                        frame = f;
                    }
                }
                _ => {}
            }
            if wr.write_all(&frame).await.is_err() {
                return;
            }
        }
        match rd.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// The mux frame to send for a plugin service frame holding a Configure
/// request (`None` for any other), with `nri_version` replaced by `go`
/// when set.
fn configure(ttrpc: &[u8], go: Option<&str>) -> Option<BytesMut> {
    let mut b = ttrpc;
    if b.len() < nri_ttrpc::codec::HEADER_LEN {
        return None;
    }
    let len = b.get_u32() as usize;
    let stream = b.get_u32();
    let (kind, flags) = (b.get_u8(), b.get_u8());
    if kind != 1 || b.len() != len {
        return None;
    }
    let mut req = Request::decode(b).ok()?;
    if req.method != "Configure" {
        return None;
    }
    let mut conf = ConfigureRequest::decode(req.payload.clone()).ok()?;
    if let Some(v) = go {
        conf.nri_version = v.to_owned();
    }
    req.payload = conf.encode_to_vec().into();
    let mut msg = BytesMut::new();
    encode_message(stream, MessageType::Request, flags, &req, &mut msg).unwrap();
    let mut out = BytesMut::new();
    out.extend_from_slice(&PLUGIN_SERVICE_CONN.0.to_be_bytes());
    out.extend_from_slice(&u32::try_from(msg.len()).unwrap().to_be_bytes());
    out.extend_from_slice(&msg);
    Some(out)
}

/// Whether the plugin's connection spins, once it has chosen.
async fn chosen(handle: &PluginHandle) -> bool {
    eventually_some(TIMEOUT, || handle.spins())
        .await
        .expect("the plugin chooses how it reads once configured")
}

/// Two of our plugins under our runtime, through the relay (rewriting
/// Configure's `nri_version` to `go_version` if set), 20 creations: whether
/// each plugin spins, and what the relay counted.
async fn run(go_version: Option<&'static str>) -> (Vec<bool>, Arc<Counts>) {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let relay_path: PathBuf = env.dir.path().join("relay.sock");
    let counts = Arc::new(Counts::default());
    let listener = UnixListener::bind(&relay_path).unwrap();
    let relaying = tokio::spawn(relay(
        listener,
        env.socket.clone(),
        go_version,
        counts.clone(),
    ));
    let mut stubs = tokio::task::JoinSet::new();
    let mut handles = Vec::new();
    for (idx, name) in [("10", "first"), ("20", "second")] {
        let stub = plugin(&relay_path, idx, name);
        handles.push(stub.handle());
        stubs.spawn(async move { stub.run().await });
    }
    let mut spins = Vec::new();
    for h in &handles {
        spins.push(chosen(h).await);
    }
    wait_active(&a, 2).await;
    let p = pod("p");
    for i in 0..20 {
        a.create_container(&p, &ctr("p", &format!("c{i}")))
            .await
            .unwrap();
    }
    for h in &handles {
        h.stop();
    }
    while let Some(r) = stubs.join_next().await {
        r.unwrap().unwrap();
    }
    a.stop().await;
    relaying.abort();
    (spins, counts)
}

fn plugin(socket: &Path, idx: &str, name: &str) -> nri_plugin::Stub<Noop> {
    Builder::new(Noop)
        .name(name)
        .index(idx)
        .socket_path(socket)
        .spin_budget(Duration::from_micros(100))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_plugin_spins_and_is_hinted_under_our_runtime() {
    let (spins, counts) = run(None).await;
    assert_eq!(counts.configures.load(Ordering::Relaxed), 2);
    assert_eq!(spins, [true, true]);
    assert_eq!(counts.takes_hints.load(Ordering::Relaxed), 2);
    // The second plugin is hinted while the first works (one per creation
    // unless its socket did not take the hint at once).
    assert!(counts.hints.load(Ordering::Relaxed) > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_plugin_stays_plain_when_the_runtime_says_it_is_go() {
    let (spins, counts) = run(Some("v0.12.5")).await;
    assert_eq!(counts.configures.load(Ordering::Relaxed), 2);
    assert_eq!(spins, [false, false]);
    assert_eq!(counts.takes_hints.load(Ordering::Relaxed), 0);
    assert_eq!(counts.hints.load(Ordering::Relaxed), 0);
}
