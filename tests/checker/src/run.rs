//! One run of one schedule: a fresh current-thread tokio runtime on
//! paused time (auto-advancing), the peers of `env.rs`, the steps, then
//! quiescence (faults healed, every plugin back, time past every backoff),
//! the checks, the memory probe and the finale (a plugin registering
//! while the runtime stops).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use nri_api::api::ContainerUpdate;
use tokio::sync::{
    Mutex as AsyncMutex, OwnedMutexGuard, OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock,
};
use tokio::task::JoinSet;

use crate::env::{EXTRA_UPDATES, Env};
use crate::invariants::{Evidence, Violation, check};
use crate::lifecycle::Ctx;
use crate::observe::{Seen, lock};
use crate::schedule::{Peer, Schedule, Step};

/// Paused time a foreground step, or all background steps together, may
/// take before the run reports it stuck.
pub const STEP_LIMIT: Duration = Duration::from_secs(600);

/// Paused time quiescence waits for every plugin to be active again.
pub const RECONNECT_LIMIT: Duration = Duration::from_secs(120);

/// Paused time left for deliveries after every plugin is back.
pub const SETTLE_TIME: Duration = Duration::from_secs(10);

/// How a run is done.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Test only: observers forget every `n`th event they get (a broken
    /// observer; the checker must report the loss).
    pub forget_every: Option<u64>,
    /// Put what every plugin saw in the report (`Report::dump`).
    pub dump: bool,
}

/// What a run found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Broken invariants.
    pub violations: Vec<Violation>,
    /// The run could not be set up (not a finding).
    pub setup_error: Option<String>,
    /// Requests the runtime made.
    pub requests: usize,
    /// Events plugins received.
    pub events: usize,
    /// Connection instances of plugins.
    pub instances: usize,
    /// Synchronize messages that said more were to come (split snapshots).
    pub split_syncs: usize,
    /// Paused time the run took.
    pub paused: Duration,
    /// With `Options::dump`: what every plugin saw and every request.
    pub dump: String,
}

/// Runs `schedule` on a fresh runtime.
pub fn run(schedule: &Schedule, opts: &Options) -> Report {
    // WebAssembly observers report through the global subscriber.
    crate::wasm::install_capture();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build();
    match rt {
        Ok(rt) => rt.block_on(run_async(schedule, opts)),
        Err(e) => Report {
            setup_error: Some(format!("tokio runtime: {e}")),
            ..Report::default()
        },
    }
}

async fn run_async(schedule: &Schedule, opts: &Options) -> Report {
    let t0 = tokio::time::Instant::now();
    let env = match Env::new(schedule, opts.forget_every).await {
        Ok(e) => e,
        Err(e) => {
            return Report {
                setup_error: Some(e.to_string()),
                ..Report::default()
            };
        }
    };
    let mut ex = Executor::new(env, schedule);
    for (i, step) in schedule.steps.iter().enumerate() {
        if tokio::time::timeout(STEP_LIMIT, ex.step(step))
            .await
            .is_err()
        {
            ex.stuck(format!("step {i} ({step}) did not finish"));
            break;
        }
    }
    ex.quiesce().await;
    let mut report = ex.evidence();
    if opts.dump {
        report.dump = crate::text::dump(&ex.env);
    }
    report.violations.extend(ex.probe().await);
    report
        .violations
        .extend(ex.finale(schedule.finale_us, schedule.generator >= 4).await);
    report.violations.extend(std::mem::take(&mut ex.found));
    ex.env.teardown().await;
    report.paused = t0.elapsed();
    report
}

/// Per-object locks: steps on one object run in step order, steps on
/// different objects may overlap. Container steps take their pod's lock
/// for reading, pod steps for writing.
#[derive(Default)]
struct Locks {
    pods: HashMap<u32, Arc<RwLock<()>>>,
    ctrs: HashMap<u32, Arc<AsyncMutex<()>>>,
}

/// Held by a step while it runs.
#[allow(dead_code)]
enum Held {
    Pod(OwnedRwLockWriteGuard<()>),
    Ctr(OwnedRwLockReadGuard<()>, OwnedMutexGuard<()>),
}

struct Executor {
    env: Env,
    bg: JoinSet<()>,
    locks: Locks,
    /// The pod of each container a step created (or preloaded).
    pod_of: HashMap<u32, u32>,
    found: Vec<Violation>,
}

impl Executor {
    fn new(env: Env, schedule: &Schedule) -> Self {
        let p = schedule.setup.preload;
        let mut pod_of = HashMap::new();
        for pod in 0..p.pods {
            for k in 0..p.containers_per_pod {
                pod_of.insert(pod * p.containers_per_pod + k, pod);
            }
        }
        Executor {
            env,
            bg: JoinSet::new(),
            locks: Locks::default(),
            pod_of,
            found: Vec::new(),
        }
    }

    fn stuck(&mut self, what: String) {
        self.found
            .push(Violation::new(0, "stuck", None, None, what));
    }

    async fn lock_pod(&mut self, pod: u32) -> Held {
        let l = self.locks.pods.entry(pod).or_default().clone();
        Held::Pod(l.write_owned().await)
    }

    async fn lock_ctr(&mut self, ctr: u32) -> Option<Held> {
        let pod = *self.pod_of.get(&ctr)?;
        let p = self.locks.pods.entry(pod).or_default().clone();
        let c = self.locks.ctrs.entry(ctr).or_default().clone();
        let pg = p.read_owned().await;
        Some(Held::Ctr(pg, c.lock_owned().await))
    }

    /// Runs `f` with `held`, in the background or now.
    async fn launch<F, Fut>(&mut self, bg: bool, held: Held, f: F)
    where
        F: FnOnce(Arc<Ctx>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let ctx = self.env.ctx.clone();
        let fut = async move {
            f(ctx).await;
            drop(held);
        };
        if bg {
            self.bg.spawn(fut);
        } else {
            fut.await;
        }
    }

    async fn step(&mut self, step: &Step) {
        match *step {
            Step::RunPod { pod, bg } => {
                let h = self.lock_pod(pod).await;
                self.launch(bg, h, move |c| async move { c.run_pod(pod).await })
                    .await;
            }
            Step::Create {
                ctr,
                pod,
                abandon,
                bg,
            } => {
                self.pod_of.entry(ctr).or_insert(pod);
                let Some(h) = self.lock_ctr(ctr).await else {
                    return;
                };
                self.launch(
                    bg,
                    h,
                    move |c| async move { c.create(ctr, pod, abandon).await },
                )
                .await;
            }
            Step::Start { ctr, bg } => {
                self.ctr_step(ctr, bg, |c, n| async move { c.start(n).await })
                    .await
            }
            Step::Update { ctr, mem_mib, bg } => {
                self.ctr_step(
                    ctr,
                    bg,
                    move |c, n| async move { c.update(n, mem_mib).await },
                )
                .await;
            }
            Step::Stop { ctr, bg } => {
                self.ctr_step(ctr, bg, |c, n| async move { c.stop(n).await })
                    .await
            }
            Step::Remove { ctr, bg } => {
                self.ctr_step(ctr, bg, |c, n| async move { c.remove(n).await })
                    .await
            }
            Step::Exit { ctr, after_ms } => self.exit(ctr, after_ms).await,
            Step::UpdatePod { pod, bg } => {
                self.pod_step(pod, bg, |c, n| async move { c.update_pod(n).await })
                    .await
            }
            Step::StopPod { pod, bg } => {
                self.pod_step(pod, bg, |c, n| async move { c.stop_pod(n).await })
                    .await
            }
            Step::RemovePod { pod, bg } => {
                self.pod_step(pod, bg, |c, n| async move { c.remove_pod(n).await })
                    .await
            }
            Step::Settle => self.settle().await,
            Step::Advance { ms } => tokio::time::sleep(Duration::from_millis(ms)).await,
            _ => self.plugin_step(step).await,
        }
    }

    async fn ctr_step<F, Fut>(&mut self, ctr: u32, bg: bool, f: F)
    where
        F: FnOnce(Arc<Ctx>, u32) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let Some(h) = self.lock_ctr(ctr).await else {
            return;
        };
        self.launch(bg, h, move |c| f(c, ctr)).await;
    }

    async fn pod_step<F, Fut>(&mut self, pod: u32, bg: bool, f: F)
    where
        F: FnOnce(Arc<Ctx>, u32) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let h = self.lock_pod(pod).await;
        self.launch(bg, h, move |c| f(c, pod)).await;
    }

    async fn exit(&mut self, ctr: u32, after_ms: u64) {
        let Some(h) = self.lock_ctr(ctr).await else {
            return;
        };
        let Some((pod, c)) = self.env.ctx.exit(ctr) else {
            return;
        };
        let after = Duration::from_millis(after_ms);
        self.launch(true, h, move |x| async move {
            x.exit_notify(pod, c, after).await
        })
        .await;
    }

    /// Waits for every background step.
    async fn settle(&mut self) {
        let bg = &mut self.bg;
        let all = async { while bg.join_next().await.is_some() {} };
        if tokio::time::timeout(STEP_LIMIT, all).await.is_err() {
            self.stuck("background steps did not finish".into());
            self.bg.abort_all();
        }
    }

    async fn plugin_step(&mut self, step: &Step) {
        let n = self.env.slots.len();
        match *step {
            Step::Connect { plugin } if plugin < n => self.env.connect(plugin),
            Step::WaitActive { plugin } if plugin < n => {
                let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
                while !self.env.active(plugin) && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            Step::Cut { plugin } if plugin < n => {
                self.env.slots[plugin].obs.record(Seen::Cut);
                self.env.slots[plugin].relay.cut();
            }
            Step::StopPlugin { plugin } if plugin < n => self.env.stop_plugin(plugin),
            Step::Fault {
                plugin,
                hook,
                fault,
                times,
            } if plugin < n => self.env.slots[plugin].obs.add_fault(hook, fault, times),
            Step::Unsolicited { plugin, ctr } if plugin < n => self.unsolicited(plugin, ctr),
            Step::SlowListing { ms } => {
                *lock(&self.env.model.listing_delay) = Duration::from_millis(ms);
            }
            Step::UpstreamCut => {
                if let Some(p) = &self.env.proxy {
                    p.relay.cut();
                }
            }
            Step::UpstreamRestart { seed } => {
                let held: Vec<Held> = self.lock_everything().await;
                crate::proxy::restart(&mut self.env, seed).await;
                drop(held);
            }
            _ => {}
        }
    }

    /// Every pod's lock (nothing else runs while the upstream restarts).
    async fn lock_everything(&mut self) -> Vec<Held> {
        let pods: Vec<u32> = self.pod_of.values().copied().collect();
        let mut pods: Vec<u32> = pods
            .into_iter()
            .chain(self.locks.pods.keys().copied())
            .collect();
        pods.sort_unstable();
        pods.dedup();
        let mut held = Vec::new();
        for p in pods {
            held.push(self.lock_pod(p).await);
        }
        held
    }

    fn unsolicited(&mut self, plugin: usize, ctr: u32) {
        let Some(h) = self.env.slots[plugin].handle.clone() else {
            return;
        };
        let mut u = ContainerUpdate::new(format!("c{ctr}"));
        u.set_linux_cpu_shares(512 + u64::from(ctr));
        self.bg.spawn(async move {
            if let Err(e) = h.update_containers(vec![u]).await {
                tracing::debug!(error = %e, "unsolicited update failed");
            }
        });
    }

    /// Heals every fault, waits for the background steps, brings every
    /// plugin back and lets the deliveries finish.
    async fn quiesce(&mut self) {
        for s in &self.env.slots {
            s.obs.heal();
        }
        *lock(&self.env.model.listing_delay) = Duration::ZERO;
        self.settle().await;
        crate::proxy::ensure_upstream(&mut self.env).await;
        // Twice: a plugin stopped by the last step may still look active
        // in the first round (its end not yet read by the runtime).
        self.reconnect_all().await;
        tokio::time::sleep(SETTLE_TIME).await;
        self.reconnect_all().await;
        tokio::time::sleep(SETTLE_TIME).await;
        self.settle().await;
        for i in 0..self.env.slots.len() {
            // A WebAssembly plugin closed for good at its strike limit is
            // not started again (`wasm_checks.rs` judges it).
            if !self.env.active(i) && self.env.slots[i].obs.spec.peer != Peer::Wasm {
                let p = Some(self.env.slots[i].obs.spec.full_name());
                let detail = format!("not active {RECONNECT_LIMIT:?} after the faults healed");
                self.found
                    .push(Violation::new(0, "not-reconnected", p, None, detail));
            }
        }
    }

    /// Starts every peer that ended (stopped, or gave up) and waits until
    /// every plugin is active (at most [`RECONNECT_LIMIT`]).
    async fn reconnect_all(&mut self) {
        let deadline = tokio::time::Instant::now() + RECONNECT_LIMIT;
        while tokio::time::Instant::now() < deadline {
            for i in 0..self.env.slots.len() {
                self.env.connect(i);
            }
            if (0..self.env.slots.len()).all(|i| self.env.active(i)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The checks of invariants 1-4 on what the run left.
    fn evidence(&self) -> Report {
        let truth = self.env.model.truth();
        let instances: Vec<_> = self.env.slots.iter().map(|s| s.obs.instances()).collect();
        let active = (0..self.env.slots.len())
            .map(|i| self.env.active(i))
            .collect();
        let setup = &self.env.setup;
        let ev = Evidence {
            setup,
            model: &self.env.model,
            truth: &truth,
            instances: instances.clone(),
            active,
        };
        let violations = check(&ev);
        let records = instances.iter().flatten().flat_map(|i| i.records.iter());
        let (mut events, mut split) = (0, 0);
        for r in records {
            match &r.seen {
                Seen::Event { .. } => events += 1,
                Seen::Sync { more: true, .. } => split += 1,
                _ => {}
            }
        }
        Report {
            violations,
            requests: lock(&self.env.model.requests).len(),
            events,
            instances: instances.iter().map(Vec::len).sum(),
            split_syncs: split,
            ..Report::default()
        }
    }

    /// Invariant 5: the library counts as many known containers as the
    /// runtime has. An unsolicited update with one entry more than the
    /// truth allows must be refused, and the refusal says the count.
    async fn probe(&mut self) -> Vec<Violation> {
        let Some(h) = (self.env.slots.iter())
            .enumerate()
            .find(|(i, _)| self.env.active(*i))
            .and_then(|(_, s)| s.handle.clone())
        else {
            return Vec::new();
        };
        let truth = self.env.model.truth().ctrs.len();
        let n = truth + EXTRA_UPDATES + 1;
        let updates = (0..n)
            .map(|k| ContainerUpdate::new(format!("probe{k}")))
            .collect();
        let r = h.update_containers(updates).await;
        crate::memory::judge(r, truth)
    }

    async fn finale(&mut self, us: u64, turns: bool) -> Vec<Violation> {
        crate::memory::finale(&mut self.env, us, turns).await
    }
}
