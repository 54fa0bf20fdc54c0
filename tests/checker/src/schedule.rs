//! What one run does: the set-up (runtime settings, plugins and their
//! settings) and the steps, as values; their text form (one line each, the
//! schedule file of a failure) is `text.rs`, their generation from a seed
//! `generate.rs`.
//!
//! Steps name objects by stable ids (`p3`, `c7`) and are robust to the
//! removal of other steps: each checks its precondition when it runs and
//! is skipped when it no longer applies, so shrinking can delete any step.

use nri_api::EventMask;
use nri_api::api::Event;

/// Where the plugins sit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Plugins connect to the runtime library (`nri_runtime::Adaptation`)
    /// that the model runtime embeds.
    Runtime,
    /// Plugins connect to `nri-proxy`, which is one plugin of an upstream
    /// `Adaptation` standing in for containerd.
    Proxy,
}

impl Mode {
    /// The name used on the command line and in schedule files.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Runtime => "runtime",
            Mode::Proxy => "proxy",
        }
    }
}

/// Which kind of peer a plugin is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// Our plugin SDK (`nri-plugin`), in process.
    Sdk,
    /// A peer on nri-mux and nri-ttrpc directly, answering by hand.
    Raw,
    /// A WebAssembly plugin in the plugin directory (launched at start,
    /// never cut or stopped by the schedule; from generator 6 on it
    /// commits the faults of its program, [`PluginSpec::wasm_faults`]).
    Wasm,
}

impl Peer {
    /// The name in schedule files.
    pub fn as_str(self) -> &'static str {
        match self {
            Peer::Sdk => "sdk",
            Peer::Raw => "raw",
            Peer::Wasm => "wasm",
        }
    }
}

/// The failure policy the runtime is configured with for a plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// No entry: the runtime's default (`fail`).
    Default,
    /// `ignore`.
    Ignore,
    /// `fail`.
    Fail,
    /// `required`.
    Required,
}

impl Policy {
    /// The name in schedule files.
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Default => "default",
            Policy::Ignore => "ignore",
            Policy::Fail => "fail",
            Policy::Required => "required",
        }
    }
}

/// One plugin of a run: who it is and how the runtime treats it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginSpec {
    /// Two-digit index.
    pub index: String,
    /// Name (unique in the run).
    pub name: String,
    /// Kind of peer.
    pub peer: Peer,
    /// Configured failure policy.
    pub policy: Policy,
    /// The subscription it sends in `Configure`.
    pub events: EventMask,
    /// Answers UpdateContainer with an update of the target container that
    /// repeats the resources asked for (as a plugin confirming a limit).
    pub echo: bool,
    /// SDK only: takes Synchronize message by message (`SyncMode::Streaming`).
    pub streaming: bool,
    /// Dials again after losing the connection.
    pub reconnect: bool,
    /// Raw only: answers the dedicated notification RPCs UNIMPLEMENTED, as
    /// a plugin before NRI v0.12 (the runtime falls back to StateChange).
    pub legacy: bool,
    /// WebAssembly only (generator 6 on): the faults its guest commits,
    /// compiled into it (a guest cannot see the schedule's `fault` steps).
    pub wasm_faults: Vec<WasmFault>,
}

/// One entry of a WebAssembly plugin's fault program: its guest commits
/// `fault` on the first `times` requests of `event` about `object` that
/// one instance of it gets (a re-instantiated guest starts the program
/// again: a guest keeps nothing across instances).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WasmFault {
    /// The event (its dedicated RPC).
    pub event: Event,
    /// The pod (`pN`) or container (`cN`) the request is about.
    pub object: String,
    /// What the guest does.
    pub fault: Fault,
    /// How many matching requests, per instance.
    pub times: u32,
}

impl PluginSpec {
    /// `NN-name`.
    pub fn full_name(&self) -> String {
        format!("{}-{}", self.index, self.name)
    }

    /// Whether it subscribes to `e`.
    pub fn subscribed(&self, e: Event) -> bool {
        self.events.contains(e)
    }

    /// Whether it validates (subscribes to ValidateContainerAdjustment).
    pub fn validator(&self) -> bool {
        self.subscribed(Event::ValidateContainerAdjustment)
    }
}

/// Objects that exist before the run starts (a large node makes the
/// Synchronize snapshot split over several messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Preload {
    /// Pods.
    pub pods: u32,
    /// Containers per pod (half of them running).
    pub containers_per_pod: u32,
    /// Bytes of annotation per container.
    pub pad: u32,
}

impl Preload {
    /// Whether the objects make a Synchronize of more than a megabyte
    /// (the generator's large node: about 4.4 MB, split over messages).
    pub fn is_large(&self) -> bool {
        u64::from(self.pods) * u64::from(self.containers_per_pod) * u64::from(self.pad) > 1 << 20
    }
}

/// The settings of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setup {
    /// Where the plugins sit.
    pub mode: Mode,
    /// The request timeout of the runtime that serves the plugins, ms.
    pub timeout_ms: u64,
    /// Consecutive timeouts after which a plugin is disconnected.
    pub strikes: u32,
    /// Start-up grace for required plugins, ms (0: none).
    pub grace_ms: u64,
    /// Runtime mode: every request carries this deadline (ms from its
    /// start, `Adaptation::with_deadline`); proxy mode: the upstream
    /// runtime's request timeout.
    pub deadline_ms: Option<u64>,
    /// Proxy mode (generator 5 on): the upstream runtime's Configure tells
    /// a request timeout of zero (the field absent, as from a runtime on
    /// NRI before v0.7.0) and times the proxy out at NRI's default, 2 s.
    pub configure_timeout_zero: bool,
    /// The model runtime tells plugins about creations that failed (their
    /// teardown events), as containerd does for containers. Always in
    /// proxy mode, whose upstream stands for containerd or CRI-O (both
    /// undo a creation they give up); a runtime that does not leaves the
    /// object in the proxy's view until its next resynchronization.
    pub undo: bool,
    /// Objects that exist before the run.
    pub preload: Preload,
    /// The plugins, by slot.
    pub plugins: Vec<PluginSpec>,
}

/// Where a fault strikes: an event's request, or Synchronize.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// The request of this event.
    Event(Event),
    /// Synchronize (every message of it).
    Synchronize,
}

impl Hook {
    /// The name in schedule files.
    pub fn name(self) -> &'static str {
        match self {
            Hook::Event(e) => e.pretty_name(),
            Hook::Synchronize => "Synchronize",
        }
    }
}

/// How a plugin answers a request a fault strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Answers after this many milliseconds.
    Delay(u64),
    /// Never answers (until the run heals its faults).
    Hang,
    /// Answers with an error.
    Error,
    /// Drops its connection instead of answering.
    Crash,
}

/// One step of a schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// RunPodSandbox of a new pod.
    RunPod {
        /// The pod.
        pod: u32,
        /// Started in the background (concurrent with what follows).
        bg: bool,
    },
    /// CreateContainer (then PostCreateContainer) of a new container.
    Create {
        /// The container.
        ctr: u32,
        /// Its pod.
        pod: u32,
        /// The runtime gives the container up after NRI created it (as
        /// when the OCI runtime fails): the creation guard is dropped
        /// without storing it.
        abandon: bool,
        /// Started in the background.
        bg: bool,
    },
    /// StartContainer (then PostStartContainer) of a created container.
    Start {
        /// The container.
        ctr: u32,
        /// Started in the background.
        bg: bool,
    },
    /// UpdateContainer (then PostUpdateContainer) to a new memory limit.
    Update {
        /// The container.
        ctr: u32,
        /// The new limit, MiB.
        mem_mib: u32,
        /// Started in the background.
        bg: bool,
    },
    /// The runtime stops a container (StopContainer).
    Stop {
        /// The container.
        ctr: u32,
        /// Started in the background.
        bg: bool,
    },
    /// A running container exits on its own: the truth changes at once,
    /// the runtime delivers StopContainer `after_ms` later.
    Exit {
        /// The container.
        ctr: u32,
        /// Delay of the notification, ms.
        after_ms: u64,
    },
    /// RemoveContainer of a stopped (or never started) container.
    Remove {
        /// The container.
        ctr: u32,
        /// Started in the background.
        bg: bool,
    },
    /// UpdatePodSandbox (then PostUpdatePodSandbox).
    UpdatePod {
        /// The pod.
        pod: u32,
        /// Started in the background.
        bg: bool,
    },
    /// StopPodSandbox (its running containers stopped first).
    StopPod {
        /// The pod.
        pod: u32,
        /// Started in the background.
        bg: bool,
    },
    /// RemovePodSandbox (its containers removed first).
    RemovePod {
        /// The pod.
        pod: u32,
        /// Started in the background.
        bg: bool,
    },
    /// Waits for every background step.
    Settle,
    /// Lets this much (paused) time pass.
    Advance {
        /// Milliseconds.
        ms: u64,
    },
    /// Starts a plugin that is not running (it registers in the background).
    Connect {
        /// Plugin slot.
        plugin: usize,
    },
    /// Waits (bounded) until a plugin is active.
    WaitActive {
        /// Plugin slot.
        plugin: usize,
    },
    /// Cuts a plugin's connection (it reconnects if its policy says so).
    Cut {
        /// Plugin slot.
        plugin: usize,
    },
    /// Stops a plugin for good (until a later `connect`).
    StopPlugin {
        /// Plugin slot.
        plugin: usize,
    },
    /// The plugin's next `times` answers at `hook` are faulty.
    Fault {
        /// Plugin slot.
        plugin: usize,
        /// Where.
        hook: Hook,
        /// How.
        fault: Fault,
        /// How many requests.
        times: u32,
    },
    /// The plugin sends an unsolicited UpdateContainers for a container.
    Unsolicited {
        /// Plugin slot.
        plugin: usize,
        /// The container.
        ctr: u32,
    },
    /// The runtime's listing callback takes this long from now on.
    SlowListing {
        /// Milliseconds.
        ms: u64,
    },
    /// Proxy mode: the upstream connection drops (the runtime side is
    /// unaffected; the proxy registers again).
    UpstreamCut,
    /// Proxy mode: the upstream runtime restarts; while it is down the
    /// truth changes (objects go, appear, change state), chosen by `seed`.
    UpstreamRestart {
        /// Seed of the changes.
        seed: u64,
    },
}

impl Step {
    /// Whether the step runs in the background.
    pub fn is_background(&self) -> bool {
        matches!(
            self,
            Step::RunPod { bg: true, .. }
                | Step::Create { bg: true, .. }
                | Step::Start { bg: true, .. }
                | Step::Update { bg: true, .. }
                | Step::Stop { bg: true, .. }
                | Step::Remove { bg: true, .. }
                | Step::UpdatePod { bg: true, .. }
                | Step::StopPod { bg: true, .. }
                | Step::RemovePod { bg: true, .. }
        )
    }
}

/// A whole run: seed (for the record), set-up, steps, and how the run
/// ends (a plugin registering while the runtime stops, after this many
/// microseconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// The seed it was generated from.
    pub seed: u64,
    /// The generator version that made it.
    pub generator: u32,
    /// Settings.
    pub setup: Setup,
    /// Steps.
    pub steps: Vec<Step>,
    /// The final stop comes this many microseconds after a last plugin
    /// started to register (generator 4 on: under 1000, this many
    /// scheduler turns, so that the stop lands inside the registration).
    pub finale_us: u64,
}
