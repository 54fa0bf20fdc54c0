//! Bundled plugins: small NRI plugins built on `nri-plugin` that the `nri`
//! binary runs as separate processes (`nri __bundled-plugin KIND`), so a
//! simulation needs nothing but the one binary.
//!
//! The simulator starts them like a runtime starts pre-launched plugins: a
//! socket on fd 3 and `NRI_PLUGIN_NAME` / `NRI_PLUGIN_IDX` /
//! `NRI_PLUGIN_SOCKET`. Their settings come as JSON in [`ENV_CONFIG`], the
//! subscription (comma-separated event names) in [`ENV_EVENTS`].
//!
//! | kind | does | settings |
//! |---|---|---|
//! | `env` | adds env vars and annotations | `env: {K: V}`, `annotations: {K: V}`, `remove-env: [K]` |
//! | `ulimit` | rlimits from annotations `rlimit.nri.example/<type>: "soft:hard"` (container, else pod) | `prefix` |
//! | `devices` | devices and mounts from annotations `devices.nri.example/inject: "/dev/x:c:1:2,..."`, `mounts.nri.example/inject: "/src:/dst[:ro],..."` | — |
//! | `logger` | logs every event | — |
//! | `crash` | exits (status 3) when the N-th event arrives, or the first `event` | `after: N` (default 3), `event` |
//! | `hang` | never answers an event | `event` (default CreateContainer), `times` (default: always), `pod` |
//! | `slow` | answers every event after a delay | `delay` (default `100ms`) |
//! | `garbage` | writes bytes that are not NRI to the socket | — |

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nri_api::EventMask;
use nri_api::api::{
    Container, ContainerAdjustment, CreateContainerResponse, Event, LinuxDevice, LinuxResources,
    Mount, OptionalFileMode, PodSandbox, StopContainerResponse, UpdateContainerResponse,
};
use nri_plugin::{Builder, HandlerError, HandlerResult, Plugin, SyncKind};
use serde_json::Value;

use crate::error::Error;

/// Environment variable carrying a bundled plugin's settings (JSON object).
pub const ENV_CONFIG: &str = "NRI_SIM_PLUGIN_CONFIG";
/// Environment variable carrying a bundled plugin's subscription.
pub const ENV_EVENTS: &str = "NRI_SIM_PLUGIN_EVENTS";
/// Hidden subcommand of the `nri` binary that runs a bundled plugin.
pub const SUBCOMMAND: &str = "__bundled-plugin";
/// Exit status of the `crash` plugin.
pub const CRASH_STATUS: i32 = 3;

/// Annotation prefix read by the `ulimit` plugin.
pub const RLIMIT_PREFIX: &str = "rlimit.nri.example/";
/// Annotation read by the `devices` plugin for devices.
pub const DEVICES_ANNOTATION: &str = "devices.nri.example/inject";
/// Annotation read by the `devices` plugin for mounts.
pub const MOUNTS_ANNOTATION: &str = "mounts.nri.example/inject";

/// The bundled plugin kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// Env and annotation adjuster.
    Env,
    /// Rlimits from annotations.
    Ulimit,
    /// Devices and mounts from annotations.
    Devices,
    /// Logs every event.
    Logger,
    /// Exits on the N-th event.
    Crash,
    /// Never answers one event.
    Hang,
    /// Answers late.
    Slow,
    /// Speaks something that is not NRI.
    Garbage,
}

const KINDS: [(&str, Kind, &str); 8] = [
    (
        "env",
        Kind::Env,
        "adds env vars and annotations (settings env, annotations, remove-env)",
    ),
    (
        "ulimit",
        Kind::Ulimit,
        "rlimits from annotations rlimit.nri.example/<type>: \"soft:hard\"",
    ),
    (
        "devices",
        Kind::Devices,
        "devices/mounts from annotations devices.nri.example/inject, mounts.nri.example/inject",
    ),
    ("logger", Kind::Logger, "logs every event it receives"),
    (
        "crash",
        Kind::Crash,
        "exits with status 3 on the N-th event (setting after, default 3) or on the first `event`",
    ),
    (
        "hang",
        Kind::Hang,
        "never answers an event (settings event, times, pod)",
    ),
    (
        "slow",
        Kind::Slow,
        "answers every event after a delay (setting delay, default 100ms)",
    ),
    (
        "garbage",
        Kind::Garbage,
        "writes bytes that are not NRI to its socket",
    ),
];

impl Kind {
    /// Parses a kind name.
    pub fn parse(name: &str) -> Option<Kind> {
        KINDS
            .iter()
            .find(|(n, _, _)| *n == name)
            .map(|(_, k, _)| *k)
    }

    /// All kind names.
    pub fn names() -> Vec<&'static str> {
        KINDS.iter().map(|(n, _, _)| *n).collect()
    }

    /// `(name, description)` of every kind.
    pub fn describe() -> impl Iterator<Item = (&'static str, &'static str)> {
        KINDS.iter().map(|(n, _, d)| (*n, *d))
    }

    fn allowed_settings(self) -> &'static [&'static str] {
        match self {
            Kind::Env => &["env", "annotations", "remove-env"],
            Kind::Ulimit => &["prefix"],
            Kind::Crash => &["after", "event"],
            Kind::Hang => &["event", "times", "pod"],
            Kind::Slow => &["delay"],
            Kind::Devices | Kind::Logger | Kind::Garbage => &[],
        }
    }

    /// The default subscription.
    pub fn default_events(self) -> EventMask {
        match self {
            Kind::Env | Kind::Ulimit | Kind::Devices => {
                EventMask::from_events(&[Event::CreateContainer])
            }
            _ => lifecycle_events(),
        }
    }
}

/// Every event but ValidateContainerAdjustment.
pub fn lifecycle_events() -> EventMask {
    let mut m = EventMask::ALL;
    m.clear(Event::ValidateContainerAdjustment);
    m
}

/// Checks the settings of a bundled plugin (for scenario validation).
///
/// # Errors
///
/// [`Error::UnknownBundledPlugin`], [`Error::UnknownBundledSetting`], or
/// the error of the setting whose value is wrong.
pub fn check_config(kind: &str, config: &BTreeMap<String, Value>) -> Result<(), Error> {
    let Some(k) = Kind::parse(kind) else {
        return Err(Error::UnknownBundledPlugin {
            kind: kind.to_owned(),
        });
    };
    for key in config.keys() {
        if !k.allowed_settings().contains(&key.as_str()) {
            return Err(Error::UnknownBundledSetting {
                kind: kind.to_owned(),
                key: key.clone(),
                allowed: k.allowed_settings(),
            });
        }
    }
    Settings::from_map(k, config).map(|_| ())
}

#[derive(Debug, Clone, Default)]
struct Settings {
    env: Vec<(String, String)>,
    remove_env: Vec<String>,
    annotations: Vec<(String, String)>,
    prefix: String,
    after: u64,
    event: Option<Event>,
    times: Option<u64>,
    pod: Option<String>,
    delay: Duration,
}

/// A setting's value that must be what `rule` says.
fn bad(setting: impl Into<String>, rule: &'static str) -> Error {
    Error::BadSetting {
        setting: setting.into(),
        rule,
    }
}

fn string_map(v: &Value, what: &str) -> Result<Vec<(String, String)>, Error> {
    let Some(obj) = v.as_object() else {
        return Err(bad(what, "must be a map of strings"));
    };
    obj.iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k.clone(), s.clone())),
            Value::Number(n) => Ok((k.clone(), n.to_string())),
            Value::Bool(b) => Ok((k.clone(), b.to_string())),
            _ => Err(bad(format!("{what}.{k}"), "must be a string")),
        })
        .collect()
}

impl Settings {
    fn from_map(kind: Kind, m: &BTreeMap<String, Value>) -> Result<Settings, Error> {
        let mut s = Settings {
            prefix: RLIMIT_PREFIX.to_owned(),
            after: 3,
            delay: Duration::from_millis(100),
            ..Default::default()
        };
        if kind == Kind::Hang {
            s.event = Some(Event::CreateContainer);
        }
        for (k, v) in m {
            match k.as_str() {
                "env" => s.env = string_map(v, "env")?,
                "annotations" => s.annotations = string_map(v, "annotations")?,
                "remove-env" => {
                    s.remove_env = v
                        .as_array()
                        .ok_or_else(|| bad(k, "must be a list"))?
                        .iter()
                        .map(|x| {
                            x.as_str()
                                .map(str::to_owned)
                                .ok_or_else(|| bad(k, "must list strings"))
                        })
                        .collect::<Result<_, _>>()?;
                }
                "prefix" => s.prefix = string(v).ok_or_else(|| bad(k, "must be a string"))?,
                "after" => {
                    s.after = v
                        .as_u64()
                        .ok_or_else(|| bad(k, "must be a positive number"))?;
                }
                "times" => s.times = Some(v.as_u64().ok_or_else(|| bad(k, "must be a number"))?),
                "pod" => s.pod = Some(string(v).ok_or_else(|| bad(k, "must be a string"))?),
                "event" => {
                    let name = v.as_str().ok_or_else(|| bad(k, "must be an event name"))?;
                    let event = crate::scenario::parse_event(name);
                    s.event = Some(event.map_err(|what| Error::UnknownName { what })?);
                }
                "delay" => {
                    let d = v
                        .as_str()
                        .ok_or_else(|| bad(k, "must be a duration like 100ms"))?;
                    s.delay = crate::scenario::parse_duration(d)?;
                }
                other => {
                    return Err(Error::UnknownSetting {
                        key: other.to_owned(),
                    });
                }
            }
        }
        if kind == Kind::Crash && s.after == 0 {
            return Err(bad("after", "must be at least 1"));
        }
        Ok(s)
    }
}

struct Bundled {
    kind: Kind,
    settings: Settings,
    /// Settings from the Configure configuration text (a plugin launched
    /// from a plugin directory with `NN-name.conf`), replacing `settings`.
    configured: std::sync::OnceLock<Settings>,
    seen: AtomicU64,
    hung: AtomicU64,
}

impl Bundled {
    fn settings(&self) -> &Settings {
        self.configured.get().unwrap_or(&self.settings)
    }

    /// Common behaviour of every event: count, log, crash, hang, delay.
    async fn on_event(&self, ev: Event, pod: &PodSandbox, ctr: Option<&Container>) {
        let n = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
        let what = match ctr {
            Some(c) => format!("{}/{}", pod.name, c.name),
            None => pod.name.clone(),
        };
        match self.kind {
            Kind::Logger => tracing::info!("{} {}", ev.pretty_name(), what),
            Kind::Crash
                if self
                    .settings
                    .event
                    .map_or(n >= self.settings().after, |e| e == ev) =>
            {
                tracing::error!(
                    "crashing on event #{n} ({} {what}) as configured",
                    ev.pretty_name()
                );
                std::process::exit(CRASH_STATUS);
            }
            Kind::Hang => {
                let pod_ok = self.settings().pod.as_ref().is_none_or(|p| *p == pod.name);
                if self.settings().event == Some(ev) && pod_ok {
                    let h = self.hung.fetch_add(1, Ordering::SeqCst);
                    if self.settings().times.is_none_or(|t| h < t) {
                        tracing::warn!("hanging on {} {what}", ev.pretty_name());
                        std::future::pending::<()>().await;
                    }
                }
            }
            Kind::Slow => tokio::time::sleep(self.settings().delay).await,
            _ => {}
        }
    }

    fn adjustment(&self, pod: &PodSandbox, ctr: &Container) -> HandlerResult<ContainerAdjustment> {
        let mut adj = ContainerAdjustment::default();
        match self.kind {
            Kind::Env => {
                for k in &self.settings().remove_env {
                    adj.remove_env(k);
                }
                for (k, v) in &self.settings().env {
                    adj.add_env(k.clone(), v.clone());
                }
                for (k, v) in &self.settings().annotations {
                    adj.add_annotation(k.clone(), v.clone());
                }
            }
            Kind::Ulimit => {
                let mut found: BTreeMap<String, String> = BTreeMap::new();
                for ann in [&pod.annotations, &ctr.annotations] {
                    for (k, v) in ann {
                        if let Some(t) = k.strip_prefix(&self.settings().prefix) {
                            found.insert(t.to_owned(), v.clone());
                        }
                    }
                }
                for (t, v) in found {
                    let (soft, hard) = parse_limit(&v).map_err(|e| {
                        HandlerError::msg(format!("annotation {}{t}: {e}", self.settings().prefix))
                    })?;
                    let ty = format!("RLIMIT_{}", t.to_ascii_uppercase());
                    adj.add_rlimit(ty, hard, soft);
                }
            }
            Kind::Devices => {
                let get = |k: &str| ctr.annotations.get(k).or_else(|| pod.annotations.get(k));
                if let Some(list) = get(DEVICES_ANNOTATION) {
                    for d in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                        adj.add_device(
                            parse_device(d).map_err(|e| HandlerError::msg(e.to_string()))?,
                        );
                    }
                }
                if let Some(list) = get(MOUNTS_ANNOTATION) {
                    for m in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                        adj.add_mount(
                            parse_mount(m).map_err(|e| HandlerError::msg(e.to_string()))?,
                        );
                    }
                }
            }
            _ => {}
        }
        Ok(adj)
    }
}

/// A string setting's value.
fn string(v: &Value) -> Option<String> {
    v.as_str().map(str::to_owned)
}

fn parse_limit(v: &str) -> Result<(u64, u64), Error> {
    let num = |s: &str| {
        s.trim().parse::<u64>().map_err(|_| Error::BadValue {
            value: v.to_owned(),
            expected: "N or SOFT:HARD",
        })
    };
    match v.split_once(':') {
        Some((s, h)) => Ok((num(s)?, num(h)?)),
        None => {
            let n = num(v)?;
            Ok((n, n))
        }
    }
}

fn parse_device(d: &str) -> Result<LinuxDevice, Error> {
    let parts: Vec<&str> = d.split(':').collect();
    let bad = || Error::BadInjection {
        what: "device",
        value: d.to_owned(),
        problem: "expected PATH:TYPE:MAJOR:MINOR (e.g. /dev/fuse:c:10:229)",
    };
    let [path, ty, major, minor] = parts.as_slice() else {
        return Err(bad());
    };
    if !path.starts_with('/') || !matches!(*ty, "c" | "b" | "u" | "p") {
        return Err(bad());
    }
    Ok(LinuxDevice {
        path: (*path).to_owned(),
        r#type: (*ty).to_owned(),
        major: major.parse().map_err(|_| bad())?,
        minor: minor.parse().map_err(|_| bad())?,
        file_mode: Some(OptionalFileMode { value: 0o666 }),
        ..Default::default()
    })
}

fn parse_mount(m: &str) -> Result<Mount, Error> {
    let parts: Vec<&str> = m.split(':').collect();
    let bad = |problem| Error::BadInjection {
        what: "mount",
        value: m.to_owned(),
        problem,
    };
    let (src, dst, opts) = match parts.as_slice() {
        [s, d] => (*s, *d, None),
        [s, d, o] => (*s, *d, Some(*o)),
        _ => return Err(bad("expected SOURCE:DEST[:ro]")),
    };
    if !dst.starts_with('/') {
        return Err(bad("the destination must be absolute"));
    }
    let mut options = vec!["rbind".to_owned()];
    options.push(if opts == Some("ro") { "ro" } else { "rw" }.to_owned());
    Ok(Mount {
        destination: dst.to_owned(),
        r#type: "bind".into(),
        source: src.to_owned(),
        options,
    })
}

#[nri_plugin::plugin]
impl Plugin for Bundled {
    /// A non-empty configuration text is a YAML map of this kind's
    /// settings; anything else fails Configure (so the registration).
    async fn configure(
        &self,
        info: &nri_plugin::ConfigureInfo,
    ) -> HandlerResult<Option<EventMask>> {
        if info.config.trim().is_empty() {
            return Ok(None);
        }
        let map: BTreeMap<String, Value> = serde_saphyr::from_str(&info.config)
            .map_err(|e| HandlerError::msg(format!("invalid configuration: {e}")))?;
        let settings = Settings::from_map(self.kind, &map)
            .map_err(|e| HandlerError::msg(format!("invalid configuration: {e}")))?;
        tracing::info!("configured by the runtime: {} settings", map.len());
        let _ = self.configured.set(settings);
        Ok(None)
    }

    async fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
        kind: SyncKind,
    ) -> HandlerResult<Vec<nri_api::api::ContainerUpdate>> {
        tracing::info!(
            "Synchronize: {} pods, {} containers ({kind:?})",
            pods.len(),
            containers.len()
        );
        Ok(Vec::new())
    }

    async fn run_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.on_event(Event::RunPodSandbox, &pod, None).await;
        Ok(())
    }

    async fn update_pod_sandbox(
        &self,
        pod: PodSandbox,
        _overhead: Option<LinuxResources>,
        _resources: Option<LinuxResources>,
    ) -> HandlerResult<()> {
        self.on_event(Event::UpdatePodSandbox, &pod, None).await;
        Ok(())
    }

    async fn post_update_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.on_event(Event::PostUpdatePodSandbox, &pod, None).await;
        Ok(())
    }

    async fn stop_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.on_event(Event::StopPodSandbox, &pod, None).await;
        Ok(())
    }

    async fn remove_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.on_event(Event::RemovePodSandbox, &pod, None).await;
        Ok(())
    }

    async fn create_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        self.on_event(Event::CreateContainer, &pod, Some(&ctr))
            .await;
        let adjust = self.adjustment(&pod, &ctr)?;
        Ok(CreateContainerResponse {
            adjust: Some(adjust),
            ..Default::default()
        })
    }

    async fn post_create_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        self.on_event(Event::PostCreateContainer, &pod, Some(&ctr))
            .await;
        Ok(())
    }

    async fn start_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        self.on_event(Event::StartContainer, &pod, Some(&ctr)).await;
        Ok(())
    }

    async fn post_start_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        self.on_event(Event::PostStartContainer, &pod, Some(&ctr))
            .await;
        Ok(())
    }

    async fn update_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
        _resources: Option<LinuxResources>,
    ) -> HandlerResult<UpdateContainerResponse> {
        self.on_event(Event::UpdateContainer, &pod, Some(&ctr))
            .await;
        Ok(UpdateContainerResponse::default())
    }

    async fn post_update_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        self.on_event(Event::PostUpdateContainer, &pod, Some(&ctr))
            .await;
        Ok(())
    }

    async fn stop_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<StopContainerResponse> {
        self.on_event(Event::StopContainer, &pod, Some(&ctr)).await;
        Ok(StopContainerResponse::default())
    }

    async fn remove_container(&self, pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        self.on_event(Event::RemoveContainer, &pod, Some(&ctr))
            .await;
        Ok(())
    }
}

/// Runs bundled plugin `kind` in this process, the way the simulator
/// launches it (socket on fd 3, settings in [`ENV_CONFIG`]). Returns when
/// the runtime shuts the plugin down or goes away.
pub async fn run(kind: &str) -> Result<(), Error> {
    let name = || kind.to_owned();
    let k = Kind::parse(kind).ok_or_else(|| Error::UnknownBundledKind { name: name() })?;
    let config: BTreeMap<String, Value> = match std::env::var(ENV_CONFIG) {
        Ok(s) if !s.is_empty() => {
            serde_json::from_str(&s).map_err(|source| Error::BundledSettingsJson {
                name: name(),
                variable: ENV_CONFIG,
                source,
            })?
        }
        _ => BTreeMap::new(),
    };
    let settings = Settings::from_map(k, &config).map_err(|reason| Error::BundledSettings {
        name: name(),
        reason: Box::new(reason),
    })?;
    if k == Kind::Garbage {
        return garbage().await.map_err(|source| Error::BundledIo {
            name: name(),
            source,
        });
    }
    let events = match std::env::var(ENV_EVENTS) {
        Ok(s) if !s.is_empty() => EventMask::parse(&s).map_err(|source| Error::BundledEvents {
            name: name(),
            variable: ENV_EVENTS,
            source,
        })?,
        _ => k.default_events(),
    };
    let plugin = Bundled {
        kind: k,
        settings,
        configured: std::sync::OnceLock::new(),
        seen: AtomicU64::new(0),
        hung: AtomicU64::new(0),
    };
    let stub = Builder::new(plugin)
        .events(events)
        .build()
        .map_err(|source| Error::BundledPlugin {
            name: name(),
            source: Box::new(source),
        })?;
    match stub.run().await {
        Ok(()) | Err(nri_plugin::Error::ShutDownByRuntime) => Ok(()),
        Err(e @ nri_plugin::Error::ConnectionLost { .. }) => {
            tracing::info!("runtime went away: {e}");
            Ok(())
        }
        Err(source) => Err(Error::BundledPlugin {
            name: name(),
            source: Box::new(source),
        }),
    }
}

async fn garbage() -> std::io::Result<()> {
    use std::io::Write;
    let mut s = nri_mux::from_env().map_err(std::io::Error::other)?;
    s.write_all(b"HELLO, I AM NOT A TTRPC PEER\r\n\xff\xff\xff\xff\x00\x00")?;
    tokio::time::sleep(Duration::from_secs(30)).await;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked() {
        let mut m = BTreeMap::new();
        m.insert("env".to_owned(), serde_json::json!({"A": "1"}));
        check_config("env", &m).unwrap();
        m.insert("after".to_owned(), serde_json::json!(2));
        let e = check_config("env", &m).unwrap_err();
        assert!(
            matches!(&e, Error::UnknownBundledSetting { key, .. } if key == "after"),
            "{e}"
        );
        assert!(e.to_string().contains("unknown setting"), "{e}");
        let mut m = BTreeMap::new();
        m.insert("event".to_owned(), serde_json::json!("Nope"));
        assert!(check_config("hang", &m).is_err());
        m.insert("event".to_owned(), serde_json::json!("StartContainer"));
        check_config("hang", &m).unwrap();
    }

    #[test]
    fn annotation_parsers() {
        assert_eq!(parse_limit("1024:2048").ok(), Some((1024, 2048)));
        assert_eq!(parse_limit("7").ok(), Some((7, 7)));
        assert!(matches!(parse_limit("x"), Err(Error::BadValue { .. })));
        let d = parse_device("/dev/fuse:c:10:229").unwrap();
        assert_eq!((d.major, d.minor, d.r#type.as_str()), (10, 229, "c"));
        assert!(parse_device("/dev/fuse").is_err());
        let m = parse_mount("/srv/data:/data:ro").unwrap();
        assert_eq!(m.destination, "/data");
        assert!(m.options.contains(&"ro".to_owned()));
        assert!(parse_mount("a:b").is_err());
    }

    #[test]
    fn adjusters_build_adjustments() {
        let mut cfg = BTreeMap::new();
        cfg.insert("env".to_owned(), serde_json::json!({"A": "1"}));
        let p = Bundled {
            kind: Kind::Env,
            settings: Settings::from_map(Kind::Env, &cfg).unwrap(),
            configured: std::sync::OnceLock::new(),
            seen: AtomicU64::new(0),
            hung: AtomicU64::new(0),
        };
        let adj = p
            .adjustment(&PodSandbox::default(), &Container::default())
            .unwrap();
        assert_eq!(adj.env.len(), 1);
        let p = Bundled {
            kind: Kind::Ulimit,
            settings: Settings::from_map(Kind::Ulimit, &BTreeMap::new()).unwrap(),
            configured: std::sync::OnceLock::new(),
            seen: AtomicU64::new(0),
            hung: AtomicU64::new(0),
        };
        let mut ctr = Container::default();
        ctr.annotations
            .insert(format!("{RLIMIT_PREFIX}nofile"), "10:20".into());
        let adj = p.adjustment(&PodSandbox::default(), &ctr).unwrap();
        assert_eq!(adj.rlimits[0].r#type, "RLIMIT_NOFILE");
        assert_eq!((adj.rlimits[0].soft, adj.rlimits[0].hard), (10, 20));
    }
}
