//! The runtime's truth: a model container runtime holding pods and
//! containers with their states, implementing `RuntimeCallbacks` (listing,
//! updates, evictions), and what the run recorded about the requests it
//! made.
//!
//! It stores an object only once its creation event succeeded (then
//! releases the creation guard), as the runtime library's contract asks,
//! and changes states as the lifecycle steps say (see `lifecycle.rs`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nri_api::api::{
    Container, ContainerEviction, ContainerState, ContainerUpdate, Event, LinuxContainer,
    LinuxResources, PodSandbox,
};
use nri_runtime::{BoxFuture, CallbackError, ErrorClass, RuntimeCallbacks, Snapshot};

use crate::observe::{Clock, lock};
use crate::schedule::Preload;

/// A pod of the truth.
#[derive(Debug, Clone)]
pub struct TPod {
    /// The pod.
    pub pod: PodSandbox,
    /// Ready (not stopped).
    pub ready: bool,
}

/// The pods and containers the runtime has.
#[derive(Debug, Clone, Default)]
pub struct Truth {
    /// Pods by id.
    pub pods: BTreeMap<String, TPod>,
    /// Containers by id.
    pub ctrs: BTreeMap<String, Container>,
}

/// A request the runtime made, as the run saw it.
#[derive(Debug, Clone)]
pub struct Request {
    /// The event.
    pub event: Event,
    /// Pod or container id.
    pub object: String,
    /// Tick when it started and when it returned.
    pub ticks: (u64, u64),
    /// How long it took (paused time).
    pub elapsed: Duration,
    /// The deadline it was given.
    pub deadline: Option<Duration>,
    /// The error text, if it failed.
    pub error: Option<String>,
    /// The plugin the error names, if any.
    pub failed_by: Option<String>,
    /// The class of that plugin's failure, if it failed the request.
    pub failed_class: Option<ErrorClass>,
    /// Plugin failures reported without failing it: plugin and class.
    pub reported: Vec<(String, ErrorClass)>,
    /// The plugins active in the library it went to when it started
    /// (`NN-name`; proxy mode: the proxy).
    pub active: Vec<String>,
    /// Proxy mode: the plugins active behind the proxy when it started.
    pub behind: Vec<String>,
}

/// The model runtime.
#[derive(Debug)]
pub struct Model {
    /// The run's clock.
    pub clock: Arc<Clock>,
    /// Pods and containers.
    pub truth: Mutex<Truth>,
    /// The memory limit of each container as the runtime last set it
    /// (creation, or a successful UpdateContainer).
    pub asked_mem: Mutex<HashMap<String, Option<i64>>>,
    /// Tick at which each object's creation began.
    pub began: Mutex<HashMap<String, u64>>,
    /// Every request made, in the order they returned.
    pub requests: Mutex<Vec<Request>>,
    /// The listing callback waits this long after taking its snapshot.
    pub listing_delay: Mutex<Duration>,
    /// Updates plugins asked for outside events, applied or failed.
    pub unsolicited: Mutex<Vec<ContainerUpdate>>,
    /// Evictions plugins asked for.
    pub evictions: Mutex<Vec<ContainerEviction>>,
}

impl Model {
    /// A runtime with the preloaded objects of `preload`.
    pub fn new(clock: Arc<Clock>, preload: Preload) -> Arc<Model> {
        let mut truth = Truth::default();
        let mut asked = HashMap::new();
        let mut n = 0u32;
        for p in 0..preload.pods {
            let pod = pod_object(p);
            for k in 0..preload.containers_per_pod {
                let mut c = ctr_object(n, &pod.id, None);
                if k % 2 == 0 {
                    c.state = ContainerState::ContainerRunning as i32;
                }
                if preload.pad > 0 {
                    let pad = "x".repeat(preload.pad as usize);
                    c.annotations.insert("checker.pad".into(), pad);
                }
                asked.insert(c.id.clone(), None);
                truth.ctrs.insert(c.id.clone(), c);
                n += 1;
            }
            truth.pods.insert(pod.id.clone(), TPod { pod, ready: true });
        }
        Arc::new(Model {
            clock,
            truth: Mutex::new(truth),
            asked_mem: Mutex::new(asked),
            began: Mutex::new(HashMap::new()),
            requests: Mutex::new(Vec::new()),
            listing_delay: Mutex::new(Duration::ZERO),
            unsolicited: Mutex::new(Vec::new()),
            evictions: Mutex::new(Vec::new()),
        })
    }

    /// A copy of the truth.
    pub fn truth(&self) -> Truth {
        lock(&self.truth).clone()
    }

    /// Records that the creation of `id` begins now.
    pub fn begin(&self, id: &str) -> u64 {
        let t = self.clock.tick();
        lock(&self.began).insert(id.to_owned(), t);
        t
    }

    /// Records a finished request.
    pub fn push(&self, r: Request) {
        lock(&self.requests).push(r);
    }

    fn apply_updates(&self, updates: &[ContainerUpdate]) -> Vec<ContainerUpdate> {
        let mut truth = lock(&self.truth);
        let mut failed = Vec::new();
        for u in updates {
            match truth.ctrs.get_mut(&u.container_id) {
                Some(c) => set_resources(c, u.linux.as_ref().and_then(|l| l.resources.as_ref())),
                None => failed.push(u.clone()),
            }
        }
        lock(&self.unsolicited).extend(updates.iter().cloned());
        failed
    }
}

/// Sets the memory limit and CPU shares of `c` that `r` sets.
pub fn set_resources(c: &mut Container, r: Option<&LinuxResources>) {
    let Some(r) = r else { return };
    let res = c
        .linux
        .get_or_insert_with(LinuxContainer::default)
        .resources
        .get_or_insert_with(LinuxResources::default);
    if let Some(limit) = r.memory_limit() {
        res.memory_mut().limit = Some(limit.into());
    }
    if let Some(shares) = r.cpu_shares() {
        res.cpu_mut().shares = Some(shares.into());
    }
}

/// Pod `p{n}`.
pub fn pod_object(n: u32) -> PodSandbox {
    let id = format!("p{n}");
    PodSandbox {
        name: format!("{id}-name"),
        uid: format!("{id}-uid"),
        namespace: "default".into(),
        id,
        ..Default::default()
    }
}

/// Container `c{n}` of `pod`, created, with memory limit `mem`.
pub fn ctr_object(n: u32, pod: &str, mem: Option<i64>) -> Container {
    let id = format!("c{n}");
    let mut c = Container {
        name: format!("{id}-name"),
        pod_sandbox_id: pod.into(),
        state: ContainerState::ContainerCreated as i32,
        id,
        ..Default::default()
    };
    if let Some(m) = mem {
        let mut r = LinuxResources::default();
        r.memory_mut().limit = Some(m.into());
        set_resources(&mut c, Some(&r));
    }
    c
}

/// The model as the runtime library's callbacks.
#[derive(Debug, Clone)]
pub struct Callbacks(pub Arc<Model>);

impl RuntimeCallbacks for Callbacks {
    fn list_pods_and_containers(&self) -> BoxFuture<'_, Result<Snapshot, CallbackError>> {
        Box::pin(async move {
            let (pods, ctrs) = {
                let t = lock(&self.0.truth);
                let pods: Vec<PodSandbox> = t.pods.values().map(|p| p.pod.clone()).collect();
                let ctrs: Vec<Container> = t.ctrs.values().cloned().collect();
                (pods, ctrs)
            };
            let delay = *lock(&self.0.listing_delay);
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            Ok(Snapshot::new(pods, ctrs))
        })
    }

    fn update_containers(
        &self,
        updates: Vec<ContainerUpdate>,
    ) -> BoxFuture<'_, Result<Vec<ContainerUpdate>, CallbackError>> {
        Box::pin(async move { Ok(self.0.apply_updates(&updates)) })
    }

    fn evict_containers(
        &self,
        evictions: Vec<ContainerEviction>,
    ) -> BoxFuture<'_, Result<(), CallbackError>> {
        Box::pin(async move {
            lock(&self.0.evictions).extend(evictions);
            Ok(())
        })
    }
}
