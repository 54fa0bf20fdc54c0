//! The text form of a schedule: one line per setting, plugin and step,
//! written with every failure (readable, and replayed with
//! `nri-checker replay --file`).
//!
//! ```text
//! seed 42
//! mode runtime
//! setup timeout=2000 strikes=2 grace=0 deadline=1800 undo=yes preload=0x0x0
//! plugin 10-obs0 peer=sdk policy=fail echo=no streaming=no reconnect=yes events=RunPodSandbox,CreateContainer
//! run-pod p1
//! create c1 p1 &
//! fault 0 CreateContainer delay=2500 x1
//! finale 300
//! ```
//!
//! A WebAssembly plugin's fault program (generator 6 on) follows the
//! plugin lines, one entry a line, naming the plugin by its slot:
//!
//! ```text
//! plugin 07-obs1 peer=wasm policy=ignore echo=no streaming=no reconnect=yes legacy=no events=CreateContainer
//! wasm-fault 1 CreateContainer c4 hang x1
//! ```

use std::fmt::{self, Write as _};

use nri_api::EventMask;
use nri_api::api::Event;

use crate::schedule::{
    Fault, Hook, Mode, Peer, PluginSpec, Policy, Preload, Schedule, Setup, Step, WasmFault,
};

/// A schedule file that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("schedule line {line}: {reason}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.setup;
        writeln!(f, "seed {}", self.seed)?;
        writeln!(f, "generator {}", self.generator)?;
        writeln!(f, "mode {}", s.mode.as_str())?;
        let deadline = s.deadline_ms.map_or("none".to_owned(), |d| d.to_string());
        let p = s.preload;
        writeln!(
            f,
            "setup timeout={} strikes={} grace={} deadline={deadline} undo={} preload={}x{}x{}",
            s.timeout_ms,
            s.strikes,
            s.grace_ms,
            yes(s.undo),
            p.pods,
            p.containers_per_pod,
            p.pad
        )?;
        if s.configure_timeout_zero {
            writeln!(f, "setup configure-timeout=zero")?;
        }
        for p in &s.plugins {
            writeln!(
                f,
                "plugin {} peer={} policy={} echo={} streaming={} reconnect={} legacy={} events={}",
                p.full_name(),
                p.peer.as_str(),
                p.policy.as_str(),
                yes(p.echo),
                yes(p.streaming),
                yes(p.reconnect),
                yes(p.legacy),
                if p.events.is_empty() {
                    "none".to_owned()
                } else {
                    p.events.to_string()
                }
            )?;
        }
        for (slot, p) in s.plugins.iter().enumerate() {
            for w in &p.wasm_faults {
                writeln!(
                    f,
                    "wasm-fault {slot} {} {} {} x{}",
                    w.event.pretty_name(),
                    w.object,
                    fault_text(w.fault),
                    w.times
                )?;
            }
        }
        for step in &self.steps {
            writeln!(f, "{step}")?;
        }
        writeln!(f, "finale {}", self.finale_us)
    }
}

/// A fault as a schedule file writes it (`delay=MS`, `hang`, `error`,
/// `crash`).
fn fault_text(f: Fault) -> String {
    match f {
        Fault::Delay(ms) => format!("delay={ms}"),
        Fault::Hang => "hang".into(),
        Fault::Error => "error".into(),
        Fault::Crash => "crash".into(),
    }
}

fn amp(bg: bool) -> &'static str {
    if bg { " &" } else { "" }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::RunPod { pod, bg } => write!(f, "run-pod p{pod}{}", amp(*bg)),
            Step::Create {
                ctr,
                pod,
                abandon,
                bg,
            } => {
                let ab = if *abandon { " abandon" } else { "" };
                write!(f, "create c{ctr} p{pod}{ab}{}", amp(*bg))
            }
            Step::Start { ctr, bg } => write!(f, "start c{ctr}{}", amp(*bg)),
            Step::Update { ctr, mem_mib, bg } => {
                write!(f, "update c{ctr} {mem_mib}{}", amp(*bg))
            }
            Step::Stop { ctr, bg } => write!(f, "stop c{ctr}{}", amp(*bg)),
            Step::Exit { ctr, after_ms } => write!(f, "exit c{ctr} {after_ms}"),
            Step::Remove { ctr, bg } => write!(f, "remove c{ctr}{}", amp(*bg)),
            Step::UpdatePod { pod, bg } => write!(f, "update-pod p{pod}{}", amp(*bg)),
            Step::StopPod { pod, bg } => write!(f, "stop-pod p{pod}{}", amp(*bg)),
            Step::RemovePod { pod, bg } => write!(f, "remove-pod p{pod}{}", amp(*bg)),
            Step::Settle => f.write_str("settle"),
            Step::Advance { ms } => write!(f, "advance {ms}"),
            Step::Connect { plugin } => write!(f, "connect {plugin}"),
            Step::WaitActive { plugin } => write!(f, "wait-active {plugin}"),
            Step::Cut { plugin } => write!(f, "cut {plugin}"),
            Step::StopPlugin { plugin } => write!(f, "stop-plugin {plugin}"),
            Step::Fault {
                plugin,
                hook,
                fault,
                times,
            } => write!(
                f,
                "fault {plugin} {} {} x{times}",
                hook.name(),
                fault_text(*fault)
            ),
            Step::Unsolicited { plugin, ctr } => write!(f, "unsolicited {plugin} c{ctr}"),
            Step::SlowListing { ms } => write!(f, "slow-listing {ms}"),
            Step::UpstreamCut => f.write_str("upstream-cut"),
            Step::UpstreamRestart { seed } => write!(f, "upstream-restart {seed}"),
        }
    }
}

/// Reads a schedule written by its `Display`.
pub fn parse(text: &str) -> Result<Schedule, ParseError> {
    let mut seed = 0;
    let mut generator = 1;
    let mut setup = Setup {
        mode: Mode::Runtime,
        timeout_ms: 2000,
        strikes: 3,
        grace_ms: 0,
        deadline_ms: None,
        configure_timeout_zero: false,
        undo: true,
        preload: Preload::default(),
        plugins: Vec::new(),
    };
    let mut steps = Vec::new();
    let mut finale_us = 0;
    for (n, raw) in text.lines().enumerate() {
        let err = |reason: String| ParseError {
            line: n + 1,
            reason,
        };
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        match words[0] {
            "seed" => seed = num(words.get(1)).map_err(err)?,
            "generator" => generator = num(words.get(1)).map_err(err)?,
            "mode" => {
                setup.mode = match words.get(1).copied() {
                    Some("runtime") => Mode::Runtime,
                    Some("proxy") => Mode::Proxy,
                    other => return Err(err(format!("unknown mode {other:?}"))),
                }
            }
            "setup" => parse_setup(&mut setup, &words[1..]).map_err(err)?,
            "plugin" => setup.plugins.push(parse_plugin(&words[1..]).map_err(err)?),
            "wasm-fault" => parse_wasm_fault(&mut setup, &words[1..]).map_err(err)?,
            "finale" => finale_us = num(words.get(1)).map_err(err)?,
            _ => steps.push(parse_step(&words).map_err(err)?),
        }
    }
    Ok(Schedule {
        seed,
        generator,
        setup,
        steps,
        finale_us,
    })
}

fn num<T: std::str::FromStr>(w: Option<&&str>) -> Result<T, String> {
    let w = w.ok_or("missing number")?;
    w.parse().map_err(|_| format!("not a number: {w:?}"))
}

fn id(w: Option<&&str>, prefix: char) -> Result<u32, String> {
    let w = w.ok_or("missing id")?;
    w.strip_prefix(prefix)
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("not an id {prefix}N: {w:?}"))
}

fn flag(v: &str) -> Result<bool, String> {
    match v {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err(format!("not yes/no: {v:?}")),
    }
}

/// `key=value` pairs.
fn pairs<'a>(words: &[&'a str]) -> Result<Vec<(&'a str, &'a str)>, String> {
    words
        .iter()
        .map(|w| {
            w.split_once('=')
                .ok_or_else(|| format!("not key=value: {w:?}"))
        })
        .collect()
}

fn parse_setup(s: &mut Setup, words: &[&str]) -> Result<(), String> {
    for (k, v) in pairs(words)? {
        let n = |v: &str| v.parse::<u64>().map_err(|_| format!("{k}: not a number"));
        match k {
            "timeout" => s.timeout_ms = n(v)?,
            "strikes" => s.strikes = n(v)? as u32,
            "grace" => s.grace_ms = n(v)?,
            "deadline" => s.deadline_ms = if v == "none" { None } else { Some(n(v)?) },
            "undo" => s.undo = flag(v)?,
            "configure-timeout" => {
                s.configure_timeout_zero = match v {
                    "zero" => true,
                    "told" => false,
                    _ => return Err(format!("configure-timeout is zero or told: {v:?}")),
                }
            }
            "preload" => {
                let parts: Vec<u64> = v.split('x').map(n).collect::<Result<_, _>>()?;
                let [pods, per, pad] = parts[..] else {
                    return Err("preload is PODSxCONTAINERSxPAD".into());
                };
                s.preload = Preload {
                    pods: pods as u32,
                    containers_per_pod: per as u32,
                    pad: pad as u32,
                };
            }
            _ => return Err(format!("unknown setting {k}")),
        }
    }
    Ok(())
}

fn parse_plugin(words: &[&str]) -> Result<PluginSpec, String> {
    let name = words.first().ok_or("missing NN-name")?;
    let (index, name) = name.split_once('-').ok_or("not NN-name")?;
    let mut p = PluginSpec {
        index: index.into(),
        name: name.into(),
        peer: Peer::Sdk,
        policy: Policy::Default,
        events: EventMask::EMPTY,
        echo: false,
        streaming: false,
        reconnect: true,
        legacy: false,
        wasm_faults: Vec::new(),
    };
    for (k, v) in pairs(&words[1..])? {
        match k {
            "peer" => {
                p.peer = match v {
                    "sdk" => Peer::Sdk,
                    "raw" => Peer::Raw,
                    "wasm" => Peer::Wasm,
                    _ => return Err(format!("unknown peer {v}")),
                }
            }
            "policy" => {
                p.policy = match v {
                    "default" => Policy::Default,
                    "ignore" => Policy::Ignore,
                    "fail" => Policy::Fail,
                    "required" => Policy::Required,
                    _ => return Err(format!("unknown policy {v}")),
                }
            }
            "echo" => p.echo = flag(v)?,
            "streaming" => p.streaming = flag(v)?,
            "reconnect" => p.reconnect = flag(v)?,
            "legacy" => p.legacy = flag(v)?,
            "events" if v == "none" => p.events = EventMask::EMPTY,
            "events" => p.events = v.parse().map_err(|e| format!("events: {e}"))?,
            _ => return Err(format!("unknown plugin setting {k}")),
        }
    }
    Ok(p)
}

/// `SLOT EVENT OBJECT FAULT xTIMES`: an entry of the fault program of
/// the plugin in `SLOT` (listed before).
fn parse_wasm_fault(setup: &mut Setup, words: &[&str]) -> Result<(), String> {
    let w = |i: usize| words.get(i);
    let slot: usize = num(w(0))?;
    let Some(Hook::Event(event)) = parse_hook(w(1)).ok() else {
        return Err(format!("wasm-fault: not an event: {:?}", w(1)));
    };
    let object = w(2).ok_or("wasm-fault: missing object")?.to_string();
    let fault = parse_fault(w(3))?;
    let times = times(w(4))?;
    let p = (setup.plugins.get_mut(slot)).ok_or(format!("wasm-fault: no plugin {slot}"))?;
    p.wasm_faults.push(WasmFault {
        event,
        object,
        fault,
        times,
    });
    Ok(())
}

fn times(w: Option<&&str>) -> Result<u32, String> {
    w.and_then(|t| t.strip_prefix('x'))
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| "a fault needs xTIMES".to_owned())
}

fn parse_hook(w: Option<&&str>) -> Result<Hook, String> {
    let w = w.ok_or("missing hook")?;
    if *w == "Synchronize" {
        return Ok(Hook::Synchronize);
    }
    Event::ALL_EVENTS
        .into_iter()
        .find(|e| e.pretty_name() == *w)
        .map(Hook::Event)
        .ok_or_else(|| format!("unknown hook {w:?}"))
}

fn parse_fault(w: Option<&&str>) -> Result<Fault, String> {
    match w.copied() {
        Some("hang") => Ok(Fault::Hang),
        Some("error") => Ok(Fault::Error),
        Some("crash") => Ok(Fault::Crash),
        Some(d) if d.starts_with("delay=") => d["delay=".len()..]
            .parse()
            .map(Fault::Delay)
            .map_err(|_| format!("bad delay {d:?}")),
        other => Err(format!("unknown fault {other:?}")),
    }
}

fn parse_step(words: &[&str]) -> Result<Step, String> {
    let bg = words.last() == Some(&"&");
    let w = |i: usize| words.get(i);
    let step = match words[0] {
        "run-pod" => Step::RunPod {
            pod: id(w(1), 'p')?,
            bg,
        },
        "create" => Step::Create {
            ctr: id(w(1), 'c')?,
            pod: id(w(2), 'p')?,
            abandon: words.contains(&"abandon"),
            bg,
        },
        "start" => Step::Start {
            ctr: id(w(1), 'c')?,
            bg,
        },
        "update" => Step::Update {
            ctr: id(w(1), 'c')?,
            mem_mib: num(w(2))?,
            bg,
        },
        "stop" => Step::Stop {
            ctr: id(w(1), 'c')?,
            bg,
        },
        "exit" => Step::Exit {
            ctr: id(w(1), 'c')?,
            after_ms: num(w(2))?,
        },
        "remove" => Step::Remove {
            ctr: id(w(1), 'c')?,
            bg,
        },
        "update-pod" => Step::UpdatePod {
            pod: id(w(1), 'p')?,
            bg,
        },
        "stop-pod" => Step::StopPod {
            pod: id(w(1), 'p')?,
            bg,
        },
        "remove-pod" => Step::RemovePod {
            pod: id(w(1), 'p')?,
            bg,
        },
        "settle" => Step::Settle,
        "advance" => Step::Advance { ms: num(w(1))? },
        "connect" => Step::Connect { plugin: num(w(1))? },
        "wait-active" => Step::WaitActive { plugin: num(w(1))? },
        "cut" => Step::Cut { plugin: num(w(1))? },
        "stop-plugin" => Step::StopPlugin { plugin: num(w(1))? },
        "fault" => Step::Fault {
            plugin: num(w(1))?,
            hook: parse_hook(w(2))?,
            fault: parse_fault(w(3))?,
            times: times(w(4))?,
        },
        "unsolicited" => Step::Unsolicited {
            plugin: num(w(1))?,
            ctr: id(w(2), 'c')?,
        },
        "slow-listing" => Step::SlowListing { ms: num(w(1))? },
        "upstream-cut" => Step::UpstreamCut,
        "upstream-restart" => Step::UpstreamRestart { seed: num(w(1))? },
        other => return Err(format!("unknown step {other:?}")),
    };
    Ok(step)
}

/// The schedule's steps, numbered, for a report.
pub fn numbered(steps: &[Step]) -> String {
    let mut out = String::new();
    for (i, s) in steps.iter().enumerate() {
        let _ = writeln!(out, "  {i:>3}  {s}");
    }
    out
}

/// What every plugin saw (per connection instance) and every request the
/// runtime made, for a person debugging a failure.
pub fn dump(env: &crate::env::Env) -> String {
    let mut out = String::new();
    for s in &env.slots {
        for (k, i) in s.obs.instances().iter().enumerate() {
            let _ = writeln!(
                out,
                "plugin {} instance {k} configured at tick {}",
                s.obs.spec.full_name(),
                i.configured
            );
            for r in &i.records {
                let _ = writeln!(
                    out,
                    "  {:>6} {:>10.3?} {:?}",
                    r.tick,
                    r.at.elapsed(),
                    r.seen
                );
            }
        }
    }
    for r in crate::observe::lock(&env.model.requests).iter() {
        let _ = writeln!(out, "request {r:?}");
    }
    out
}
