//! What plugins saw, per connection instance, and the faults they are told
//! to commit. Every observer (SDK, raw) records through an [`Observer`];
//! the invariants read the records.
//!
//! Records are stamped with a [`Clock`] tick shared with the model
//! runtime, so that "this creation began before that plugin was
//! configured" can be decided after the run.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use nri_api::api::{Container, Event, PodSandbox};
use tokio_util::sync::CancellationToken;

use crate::schedule::{Fault, Hook, PluginSpec};

/// The run's logical clock: every record and every creation takes a tick.
#[derive(Debug, Default)]
pub struct Clock(AtomicU64);

impl Clock {
    /// The next tick.
    pub fn tick(&self) -> u64 {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }
}

/// Locks `m`, going on after a poisoning panic (the harness reports, it
/// does not propagate a panic of a plugin task).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A container as a plugin saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CtrView {
    /// Id.
    pub id: String,
    /// Its pod.
    pub pod: String,
    /// `ContainerState` as an integer.
    pub state: i32,
    /// Memory limit, if any.
    pub mem: Option<i64>,
}

impl CtrView {
    /// The view of `c`.
    pub fn of(c: &Container) -> Self {
        CtrView {
            id: c.id.clone(),
            pod: c.pod_sandbox_id.clone(),
            state: c.state,
            mem: c.memory_limit(),
        }
    }
}

/// One thing a plugin saw.
#[derive(Debug, Clone)]
pub enum Seen {
    /// A Synchronize (all of it, or one message of a split one).
    Sync {
        /// Pod ids.
        pods: Vec<String>,
        /// Containers.
        ctrs: Vec<CtrView>,
        /// More messages follow.
        more: bool,
    },
    /// An event's request.
    Event {
        /// The event.
        event: Event,
        /// The pod's id.
        pod: String,
        /// The container, for container events.
        ctr: Option<CtrView>,
        /// UpdateContainer: the memory limit asked for.
        asked_mem: Option<i64>,
        /// The fault the plugin committed answering it.
        fault: Option<Fault>,
    },
    /// The runtime's Shutdown.
    Shutdown,
    /// The harness cut or stopped the connection (or a crash fault did):
    /// the end that follows is not the runtime's doing.
    Cut,
    /// The connection ended.
    Lost,
}

/// A record: the tick, the paused-clock time, what was seen.
#[derive(Debug, Clone)]
pub struct Record {
    /// Logical time.
    pub tick: u64,
    /// Paused tokio time.
    pub at: tokio::time::Instant,
    /// What.
    pub seen: Seen,
}

/// One connection of a plugin, from its Configure.
#[derive(Debug, Clone)]
pub struct Instance {
    /// Tick of the Configure request.
    pub configured: u64,
    /// Everything after it, in arrival order.
    pub records: Vec<Record>,
}

/// How an observer's answers go wrong: faults queued per hook.
#[derive(Debug, Default)]
struct Faults {
    queued: HashMap<&'static str, VecDeque<Fault>>,
}

/// Cuts a plugin's connection.
pub type Cut = Arc<dyn Fn() + Send + Sync>;

/// The recorder and fault source behind one plugin slot.
pub struct Observer {
    /// The plugin's settings.
    pub spec: PluginSpec,
    /// Its slot.
    pub slot: usize,
    clock: Arc<Clock>,
    instances: Mutex<Vec<Instance>>,
    faults: Mutex<Faults>,
    /// Cancelled when the run heals its faults: hung answers go out then.
    heal: Mutex<CancellationToken>,
    /// Cuts the plugin's connection (a crash).
    cut: Mutex<Option<Cut>>,
    /// Test only: forget every `n`th event (a broken observer, to show the
    /// checker reports what it loses).
    pub forget_every: Option<u64>,
    forgotten: AtomicU64,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer")
            .field("plugin", &self.spec.full_name())
            .field("slot", &self.slot)
            .finish_non_exhaustive()
    }
}

impl Observer {
    /// A new observer for `spec` in `slot`.
    pub fn new(spec: PluginSpec, slot: usize, clock: Arc<Clock>) -> Self {
        Observer {
            spec,
            slot,
            clock,
            instances: Mutex::new(Vec::new()),
            faults: Mutex::new(Faults::default()),
            heal: Mutex::new(CancellationToken::new()),
            cut: Mutex::new(None),
            forget_every: None,
            forgotten: AtomicU64::new(0),
        }
    }

    /// Sets what a crash does (cut the connection).
    pub fn set_cut(&self, cut: Cut) {
        *lock(&self.cut) = Some(cut);
    }

    /// A new connection instance (its Configure arrived).
    pub fn configured(&self) {
        let tick = self.clock.tick();
        lock(&self.instances).push(Instance {
            configured: tick,
            records: Vec::new(),
        });
    }

    /// Records `seen` in the current instance (dropped before any).
    pub fn record(&self, seen: Seen) {
        if let (Some(n), Seen::Event { .. }) = (self.forget_every, &seen) {
            if self.forgotten.fetch_add(1, Ordering::Relaxed) % n == n - 1 {
                return;
            }
        }
        let tick = self.clock.tick();
        let at = tokio::time::Instant::now();
        if let Some(i) = lock(&self.instances).last_mut() {
            i.records.push(Record { tick, at, seen });
        }
    }

    /// Records a Synchronize (or one message of it).
    pub fn record_sync(&self, pods: &[PodSandbox], ctrs: &[Container], more: bool) {
        self.record(Seen::Sync {
            pods: pods.iter().map(|p| p.id.clone()).collect(),
            ctrs: ctrs.iter().map(CtrView::of).collect(),
            more,
        });
    }

    /// How many instances so far.
    pub fn instance_count(&self) -> usize {
        lock(&self.instances).len()
    }

    /// Every instance so far.
    pub fn instances(&self) -> Vec<Instance> {
        lock(&self.instances).clone()
    }

    /// Queues `times` faults at `hook`.
    pub fn add_fault(&self, hook: Hook, fault: Fault, times: u32) {
        let mut f = lock(&self.faults);
        let q = f.queued.entry(hook.name()).or_default();
        q.extend(std::iter::repeat_n(fault, times as usize));
    }

    /// The fault for the next request at `hook`, if one is queued.
    pub fn take_fault(&self, hook: Hook) -> Option<Fault> {
        lock(&self.faults)
            .queued
            .get_mut(hook.name())
            .and_then(VecDeque::pop_front)
    }

    /// Drops every queued fault and lets every hung answer go.
    pub fn heal(&self) {
        lock(&self.faults).queued.clear();
        let mut h = lock(&self.heal);
        h.cancel();
        *h = CancellationToken::new();
    }

    /// Commits `fault` (before the answer): waits, hangs until healed, or
    /// cuts the connection and hangs. `Err(())` when the answer must be an
    /// error.
    pub async fn commit(&self, fault: Option<Fault>) -> Result<(), ()> {
        match fault {
            None => Ok(()),
            Some(Fault::Delay(ms)) => {
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                Ok(())
            }
            Some(Fault::Error) => Err(()),
            Some(Fault::Hang) => {
                let heal = lock(&self.heal).clone();
                heal.cancelled().await;
                Ok(())
            }
            Some(Fault::Crash) => {
                self.record(Seen::Cut);
                let cut = lock(&self.cut).clone();
                if let Some(cut) = cut {
                    cut();
                }
                let heal = lock(&self.heal).clone();
                heal.cancelled().await;
                Err(())
            }
        }
    }
}
