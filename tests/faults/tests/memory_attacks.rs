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
//!   the plugin;
//! - a registered plugin answering every CreateContainer, UpdateContainer
//!   and StopContainer with 4 MiB of empty updates and evictions.
//!
//! Each refusal must be counted by reason and logged with the peer's pid
//! and uid (the attackers run in this test process).
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
use nri_api::api::{
    ContainerEviction, ContainerUpdate, CreateContainerResponse, Event, StopContainerResponse,
    UpdateContainerResponse, UpdateContainersRequest,
};
use nri_api::method;
use nri_fault_tests::{empty_entries, peak_rss_kib};
use nri_plugin::EventMask;
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

/// The victim process (see `victim.rs`) with its socket and log.
struct Victim {
    proc: VictimProc,
    socket: PathBuf,
    log: PathBuf,
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
        let log = dir.path().join("victim.log");
        let mut cmd = VictimProc::command();
        cmd.arg("--socket")
            .arg(&socket)
            // NRI_VICTIM_LOG: the victim's log filter (default: warnings,
            // where refusals are logged).
            .env(
                "RUST_LOG",
                std::env::var("NRI_VICTIM_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()));
        Victim {
            proc: VictimProc::spawn(cmd).await,
            socket,
            log,
            _dir: dir,
        }
    }

    /// What the victim logged so far.
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap()
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
    /// Attackers on threads (and tokio runtimes) of their own.
    threads: Vec<std::thread::JoinHandle<()>>,
    sent: Arc<watch::Sender<u64>>,
    /// Status codes the victim answered attack requests with.
    codes: Arc<std::sync::Mutex<BTreeMap<i32, u64>>>,
}

impl Attacks {
    fn new() -> Attacks {
        Attacks {
            stop: CancellationToken::new(),
            set: JoinSet::new(),
            threads: Vec::new(),
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

    /// A plugin that registers as `10-hostile` and answers every
    /// CreateContainer, UpdateContainer and StopContainer with about 4 MiB
    /// of empty updates and evictions. It runs on a thread and a tokio
    /// runtime of its own, so that writing its answers never holds up the
    /// good plugin's tasks on this test's runtime.
    fn oversize_answers(&mut self, socket: &Path) {
        let (upd, evict) = (ContainerUpdate::default(), ContainerEviction::default());
        // Half empty updates, half empty evictions.
        let halves = |update_key: u8, evict_key: u8| {
            let mut b = empty_entries(update_key, ATTACK_LEN / 2);
            b.extend(empty_entries(evict_key, ATTACK_LEN / 2));
            b
        };
        let create = halves(
            key_of(CreateContainerResponse {
                update: vec![upd.clone()],
                ..Default::default()
            }),
            key_of(CreateContainerResponse {
                evict: vec![evict.clone()],
                ..Default::default()
            }),
        );
        let update = halves(
            key_of(UpdateContainerResponse {
                update: vec![upd.clone()],
                evict: vec![],
            }),
            key_of(UpdateContainerResponse {
                update: vec![],
                evict: vec![evict],
            }),
        );
        let stop_answer = empty_entries(
            key_of(StopContainerResponse { update: vec![upd] }),
            ATTACK_LEN,
        );
        let answers: BTreeMap<&'static str, Vec<u8>> = [
            (method::CREATE_CONTAINER, create),
            (method::UPDATE_CONTAINER, update),
            (method::STOP_CONTAINER, stop_answer),
        ]
        .into();
        let (socket, stop, sent) = (socket.to_owned(), self.stop.clone(), self.sent.clone());
        self.threads.push(std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let events = [
                    Event::CreateContainer,
                    Event::UpdateContainer,
                    Event::StopContainer,
                ];
                let opts = RawOpts {
                    events: EventMask::from_events(&events).as_i32(),
                };
                let mut p = RawPlugin::connect(&socket, opts, move |m, _| {
                    let answer = answers.get(m)?.clone();
                    sent.send_modify(|n| *n += 1);
                    Some(Act::Reply(answer))
                })
                .await;
                p.register("hostile", "10").await.unwrap();
                stop.cancelled().await;
            });
        }));
    }

    async fn stop(mut self) -> BTreeMap<i32, u64> {
        self.stop.cancel();
        self.set.shutdown().await;
        for t in std::mem::take(&mut self.threads) {
            tokio::task::spawn_blocking(move || t.join())
                .await
                .unwrap()
                .unwrap();
        }
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
    /// The victim's log.
    log: String,
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
    let log = victim.log();
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
        log,
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
    // `unknown_connection`: a frame the attacker wrote after the runtime
    // had already closed that connection's stream (under load the close
    // and the attacker's next write can cross).
    assert!(
        refused > 0
            && o.refused.keys().all(|r| [
                "too_large",
                "unregistered",
                "pending_connections",
                "registration_timeout",
                "unknown_connection"
            ]
            .contains(&r.as_str())),
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
    assert!(
        o.refused.get("unknown_connection").copied().unwrap_or(0) >= 16,
        "every stray frame is counted: {:?}",
        o.refused
    );
    let logged = refusal_lines(&o.log, "unknown_connection");
    assert!(
        !logged.is_empty() && logged.iter().all(|l| l.contains(&this_process())),
        "every stray frame is logged with the peer's pid and uid:\n{}",
        logged.join("\n")
    );
}

/// `pid=Some(..) uid=Some(..)` of this process, as a refusal logs its
/// peer.
fn this_process() -> String {
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata("/proc/self").unwrap().uid();
    format!("pid=Some({}) uid=Some({uid})", std::process::id())
}

/// The victim's log lines that refuse a message for `kind`.
fn refusal_lines<'a>(log: &'a str, kind: &str) -> Vec<&'a str> {
    log.lines()
        .filter(|l| l.contains("refusing a message from an NRI peer") && l.contains(kind))
        .collect()
}

#[tokio::test(flavor = "current_thread")]
async fn a_plugin_answering_with_4mib_of_updates_costs_only_its_own_part() {
    let o = under_attack("oversize answers", 2, 0, |a, s| a.oversize_answers(s)).await;
    // Three calls of the hostile plugin per lifecycle, every answer refused
    // undecoded and its part of the event failed.
    let refused = o.refused.get("too_many_updates").copied().unwrap_or(0);
    assert!(
        refused >= 3 * CREATIONS && o.refused.len() == 1,
        "{:?}",
        o.refused
    );
    let failed = o.failed.get("10-hostile").copied().unwrap_or(0);
    assert!(
        failed >= 3 * CREATIONS && o.failed.len() == 1,
        "{:?}",
        o.failed
    );
    let logged = refusal_lines(&o.log, "too_many_updates");
    for m in [
        method::CREATE_CONTAINER,
        method::UPDATE_CONTAINER,
        method::STOP_CONTAINER,
    ] {
        assert!(
            logged.iter().any(|l| l.contains("peer=10-hostile")
                && l.contains(&this_process())
                && l.contains(m)),
            "the refused {m} answer is logged with the plugin's name, pid and uid:\n{}",
            logged.join("\n")
        );
    }
}
