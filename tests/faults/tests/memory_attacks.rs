//! Memory attacks on the runtime, each against a separate victim process
//! (`src/bin/victim.rs`: a real `nri_runtime::Adaptation`), so that its
//! peak memory (`VmHWM`) is measured alone. Under each attack the victim's
//! peak RSS must stay under 100 MB, and a well-behaved plugin must get 100
//! container creations through while the attack goes on:
//!
//! - 4 MiB `UpdateContainers` requests of empty updates (2 bytes each on
//!   the wire, about 400 bytes decoded) on a connection that has not
//!   registered, over and over, from one connection, from four and from
//!   sixteen (as many as may wait to register);
//! - 4 MiB answers to calls never made, written by sixteen connections
//!   that have not registered on the connection where the runtime calls
//!   the plugin.
//!
//! Each test takes a few seconds to a few tens of seconds (the victim
//! reads 4 MiB messages in a debug build).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;
mod victim_proc;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use common::*;
use nri_api::api::{ContainerUpdate, UpdateContainersRequest};
use nri_api::method;
use nri_fault_tests::{empty_entries, peak_rss_kib};
use nri_ttrpc::codec::MessageType;
use prost::Message;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use victim_proc::VictimProc;

/// The victim's peak RSS must stay under 100 MB (in KiB, as `VmHWM`).
const PEAK_LIMIT_KIB: u64 = 100_000_000 / 1024;
/// Creations the well-behaved plugin must complete during an attack.
const CREATIONS: u64 = 100;
/// The attack messages: as large as ttRPC lets a message be (4 MiB), less
/// room for its envelope.
const ATTACK_LEN: usize = 4 * 1024 * 1024 - 1024;
/// gRPC status codes a refused attack message may get.
const RESOURCE_EXHAUSTED: i32 = 8;
const FAILED_PRECONDITION: i32 = 9;
const UNAVAILABLE: i32 = 14;

// ------------------------------------------------------------------ victim

/// The victim process (see `victim.rs`) with its socket.
struct Victim {
    proc: VictimProc,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl std::ops::Deref for Victim {
    type Target = VictimProc;
    fn deref(&self) -> &VictimProc {
        &self.proc
    }
}

impl std::ops::DerefMut for Victim {
    fn deref_mut(&mut self) -> &mut VictimProc {
        &mut self.proc
    }
}

impl Victim {
    async fn start() -> Victim {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("nri/nri.sock");
        let mut cmd = VictimProc::command();
        cmd.arg("--socket")
            .arg(&socket)
            // NRI_VICTIM_LOG: the victim's log filter, to see what it does.
            .env(
                "RUST_LOG",
                std::env::var("NRI_VICTIM_LOG").unwrap_or_else(|_| "error".into()),
            )
            .stderr(Stdio::inherit());
        Victim {
            proc: VictimProc::spawn(cmd).await,
            socket,
            _dir: dir,
        }
    }

    /// Runs `n` container lifecycles, ten at a time (each ten must be
    /// done within the wait for one line: under an attack that makes every
    /// call move 4 MiB, a lifecycle takes a few hundred milliseconds in a
    /// debug build): (creations the good plugin adjusted, others).
    async fn cycle(&mut self, n: u64) -> (u64, u64) {
        let (mut ok, mut bad) = (0, 0);
        let mut left = n;
        while left > 0 {
            let batch = left.min(10);
            left -= batch;
            self.send(&format!("cycle {batch}")).await;
            let l = self.line().await;
            let mut w = l.strip_prefix("cycled ").expect(&l).split(' ');
            let mut next = || w.next().unwrap().parse::<u64>().unwrap();
            ok += next();
            bad += next();
        }
        (ok, bad)
    }

    /// The refusals (by reason) and failed plugin calls (by plugin).
    async fn report(&mut self) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
        self.send("report").await;
        let parse = |l: String, what: &str| -> BTreeMap<String, u64> {
            l.strip_prefix(what)
                .expect(&l)
                .split_whitespace()
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap();
                    (k.to_owned(), v.parse().unwrap())
                })
                .collect()
        };
        let refused = parse(self.line().await, "refused");
        let failed = parse(self.line().await, "failed");
        (refused, failed)
    }

    fn peak_kib(&self) -> u64 {
        peak_rss_kib(&self.pid()).expect("the victim is alive")
    }

    async fn quit(mut self) {
        self.proc.quit().await;
    }
}

// ----------------------------------------------------------------- attacks

/// Attacks running in the background, each counting the attack messages
/// it got through to the victim.
struct Attacks {
    stop: CancellationToken,
    set: JoinSet<()>,
    sent: Arc<watch::Sender<u64>>,
    /// Status codes the victim answered attack requests with.
    codes: Arc<std::sync::Mutex<BTreeMap<i32, u64>>>,
}

impl Attacks {
    fn new() -> Attacks {
        Attacks {
            stop: CancellationToken::new(),
            set: JoinSet::new(),
            sent: Arc::new(watch::channel(0).0),
            codes: Arc::default(),
        }
    }

    fn sent(&self) -> u64 {
        *self.sent.borrow()
    }

    /// Waits until `n` attack messages went out (the attack is under way).
    async fn under_way(&self, n: u64) {
        let mut rx = self.sent.subscribe();
        tokio::time::timeout(WAIT, rx.wait_for(|s| *s >= n))
            .await
            .expect("the attack got going")
            .unwrap();
    }

    /// `conns` connections that never register, each sending 4 MiB
    /// `UpdateContainers` requests of empty updates one after the other
    /// (and connecting again when the victim drops them).
    fn unregistered_flood(&mut self, socket: &Path, conns: usize) {
        let payload = empty_entries(update_key(), ATTACK_LEN);
        for _ in 0..conns {
            let (socket, payload) = (socket.to_owned(), payload.clone());
            let (stop, sent, codes) = (self.stop.clone(), self.sent.clone(), self.codes.clone());
            self.set.spawn(async move {
                while !stop.is_cancelled() {
                    let Ok(stream) = UnixStream::connect(&socket).await else {
                        continue;
                    };
                    let mut p =
                        RawPlugin::from_stream(stream, RawOpts::default(), Arc::new(|_, _| None));
                    while !p.is_closed() {
                        let r = tokio::select! {
                            _ = stop.cancelled() => return,
                            r = p.call(method::UPDATE_CONTAINERS, payload.clone()) => r,
                        };
                        let code = r.map_or_else(|st| st.code, |_| 0);
                        *codes.lock().unwrap().entry(code).or_default() += 1;
                        sent.send_modify(|n| *n += 1);
                    }
                }
            });
        }
    }

    /// `conns` connections that never register, each writing 4 MiB
    /// answers on the plugin service connection (where the runtime calls
    /// the plugin) for calls never made, one after the other.
    fn stray_answer_flood(&mut self, socket: &Path, conns: usize) {
        let envelope = response_envelope(None, vec![0; ATTACK_LEN]);
        let bytes = ttrpc_frames(1, 1, MessageType::Response, &envelope);
        for _ in 0..conns {
            let (socket, bytes) = (socket.to_owned(), bytes.clone());
            let (stop, sent) = (self.stop.clone(), self.sent.clone());
            self.set.spawn(async move {
                while !stop.is_cancelled() {
                    let Ok(mut stream) = UnixStream::connect(&socket).await else {
                        continue;
                    };
                    loop {
                        let r = tokio::select! {
                            _ = stop.cancelled() => return,
                            r = stream.write_all(&bytes) => r,
                        };
                        if r.is_err() {
                            break;
                        }
                        sent.send_modify(|n| *n += 1);
                    }
                }
            });
        }
    }

    async fn stop(mut self) -> BTreeMap<i32, u64> {
        self.stop.cancel();
        self.set.shutdown().await;
        self.codes.lock().unwrap().clone()
    }
}

/// The key byte of `UpdateContainersRequest.update` (an empty entry
/// encodes as `key, 0`).
fn update_key() -> u8 {
    key_of(UpdateContainersRequest {
        update: vec![ContainerUpdate::default()],
        evict: vec![],
    })
}

/// The first byte of a message with one empty entry in one repeated field.
fn key_of(m: impl Message) -> u8 {
    let b = m.encode_to_vec();
    assert_eq!(b.len(), 2, "{b:?}");
    b[0]
}

// ------------------------------------------------------------------- tests

/// What one attack run measured.
struct Outcome {
    baseline_kib: u64,
    peak_kib: u64,
    during: u64,
    refused: BTreeMap<String, u64>,
    failed: BTreeMap<String, u64>,
    codes: BTreeMap<i32, u64>,
}

/// Starts a victim with the good plugin, starts the attack (and waits
/// until `plugins` are registered and `warm_up` attack messages went out),
/// runs
/// [`CREATIONS`] lifecycles while it goes on, and checks that every
/// creation got the good plugin's adjustment and the victim's peak RSS
/// stayed under [`PEAK_LIMIT_KIB`].
async fn under_attack(
    name: &str,
    plugins: usize,
    warm_up: u64,
    attack: impl FnOnce(&mut Attacks, &Path),
) -> Outcome {
    let guard = no_panics();
    let mut victim = Victim::start().await;
    let good = GoodPlugin::start(&victim.socket);
    victim.active(1).await;
    let baseline_kib = victim.peak_kib();
    let mut attacks = Attacks::new();
    attack(&mut attacks, &victim.socket);
    victim.active(plugins).await;
    attacks.under_way(warm_up).await;
    let before = attacks.sent();
    let (ok, bad) = victim.cycle(CREATIONS).await;
    let during = attacks.sent() - before;
    let codes = attacks.stop().await;
    let peak_kib = victim.peak_kib();
    let (refused, failed) = victim.report().await;
    victim.quit().await;
    good.stop().await;
    guard.check();
    eprintln!(
        "{name}: victim peak RSS {peak_kib} KiB (before the attack {baseline_kib} KiB); \
         {during} attack messages during {CREATIONS} creations; refused {refused:?}"
    );
    assert_eq!(
        (ok, bad),
        (CREATIONS, 0),
        "{name}: every creation went through with the good plugin's adjustment"
    );
    assert!(
        during > 0,
        "{name}: the attack went on during the creations"
    );
    assert!(
        peak_kib < PEAK_LIMIT_KIB,
        "{name}: victim peak RSS {peak_kib} KiB >= {PEAK_LIMIT_KIB} KiB"
    );
    Outcome {
        baseline_kib,
        peak_kib,
        during,
        refused,
        failed,
        codes,
    }
}

/// Checks an unregistered flood was refused, every time, undecoded.
fn assert_flood_refused(name: &str, o: &Outcome) {
    let total: u64 = o.codes.values().sum();
    assert!(
        o.codes
            .keys()
            .all(|c| [RESOURCE_EXHAUSTED, FAILED_PRECONDITION, UNAVAILABLE].contains(c)),
        "{name}: a request was not refused: {:?}",
        o.codes
    );
    assert!(
        o.codes.get(&RESOURCE_EXHAUSTED).copied().unwrap_or(0) > 0,
        "{name}: {:?}",
        o.codes
    );
    let refused: u64 = o.refused.values().sum();
    assert!(
        refused > 0
            && o.refused
                .keys()
                .all(|r| r == "too_large" || r == "unregistered" || r == "pending_connections"),
        "{name}: refusals counted by reason: {:?} ({total} requests)",
        o.refused
    );
    assert!(o.failed.is_empty(), "{name}: {:?}", o.failed);
    assert!(o.peak_kib >= o.baseline_kib);
}

#[tokio::test(flavor = "current_thread")]
async fn unregistered_4mib_update_floods_cost_the_victim_nothing() {
    let o = under_attack("one connection", 1, 2, |a, s| a.unregistered_flood(s, 1)).await;
    assert_flood_refused("one connection", &o);
}

#[tokio::test(flavor = "current_thread")]
async fn several_connections_flooding_at_once_cost_the_victim_nothing() {
    let o = under_attack("four connections", 1, 4, |a, s| a.unregistered_flood(s, 4)).await;
    assert_flood_refused("four connections", &o);
    assert!(o.during >= 4, "{}", o.during);
}

#[tokio::test(flavor = "current_thread")]
async fn sixteen_connections_flooding_at_once_stay_bounded() {
    let o = under_attack("sixteen connections", 1, 16, |a, s| {
        a.unregistered_flood(s, 16)
    })
    .await;
    assert_flood_refused("sixteen connections", &o);
    assert!(o.during >= 16, "{}", o.during);
}

#[tokio::test(flavor = "current_thread")]
async fn unregistered_connections_writing_4mib_stray_answers_stay_bounded() {
    let o = under_attack("sixteen stray answer floods", 1, 16, |a, s| {
        a.stray_answer_flood(s, 16)
    })
    .await;
    assert!(o.failed.is_empty(), "{:?}", o.failed);
    assert!(o.during >= 16, "{}", o.during);
}
