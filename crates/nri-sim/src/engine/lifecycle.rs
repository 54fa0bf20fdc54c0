//! The events of each lifecycle step as a runtime sends them (in order,
//! only for what exists), the adjustments and updates they bring applied
//! to the containers' OCI specs, and the results reported per event.

use std::sync::Arc;
use std::time::Instant;

use nri_api::api::{
    Container, ContainerState, LinuxContainer, LinuxCpu, LinuxMemory, LinuxNamespace, LinuxPids,
    LinuxPodSandbox, LinuxResources, Mount, OptionalInt64, OptionalUInt64, OwningPlugins,
    PodSandbox,
};
use nri_runtime::Adaptation;
use serde_saphyr::Spanned;

use super::world::World;
use super::{lock, ms};
use crate::error::Error;
use crate::report::{Change, EventResult, PluginFailure};
use crate::scenario::{ResourcesSpec, Scenario, Step, field_name};
use crate::spec;

/// Everything a step needs; cheap to clone into parallel tasks.
#[derive(Clone)]
pub(super) struct Exec {
    pub(super) nri: Adaptation,
    pub(super) world: Arc<World>,
    pub(super) scenario: Arc<Scenario>,
    /// Attribute drained calls to each event (not in parallel groups).
    pub(super) drain: bool,
}

/// Drops nulls and empty lists and maps, and unwraps `{"value": x}`
/// (NRI's optional wrappers), for readable resources.
pub(super) fn compact(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            if m.len() == 1
                && let Some(x) = m.get("value")
            {
                return x.clone();
            }
            Value::Object(
                m.into_iter()
                    .map(|(k, v)| (k, compact(v)))
                    .filter(|(_, v)| match v {
                        Value::Null => false,
                        Value::Array(a) => !a.is_empty(),
                        Value::Object(o) => !o.is_empty(),
                        _ => true,
                    })
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.into_iter().map(compact).collect()),
        other => other,
    }
}

fn pod_id(name: &str) -> String {
    format!("pod-{name}")
}

fn ctr_id(target: &str) -> String {
    format!("ctr-{}", target.replace('/', "-"))
}

fn resources(r: &ResourcesSpec) -> LinuxResources {
    let mut out = LinuxResources::default();
    if let Some(c) = &r.cpu {
        out.cpu = Some(LinuxCpu {
            shares: c.shares.and_then(OptionalUInt64::some),
            quota: c.quota.and_then(OptionalInt64::some),
            period: c.period.and_then(OptionalUInt64::some),
            cpus: c.cpus.clone().unwrap_or_default(),
            mems: c.mems.clone().unwrap_or_default(),
            ..Default::default()
        });
    }
    if let Some(m) = &r.memory {
        let q = |x: &Option<Spanned<crate::scenario::Quantity>>| {
            x.as_ref()
                .and_then(|x| x.value.bytes().ok())
                .and_then(OptionalInt64::some)
        };
        out.memory = Some(LinuxMemory {
            limit: q(&m.limit),
            reservation: q(&m.reservation),
            swap: q(&m.swap),
            ..Default::default()
        });
    }
    if let Some(p) = r.pids {
        out.pids = Some(LinuxPids { limit: p });
    }
    out
}

fn failures(errs: &[nri_runtime::PluginError]) -> Vec<PluginFailure> {
    errs.iter()
        .map(|e| PluginFailure {
            plugin: e.plugin.clone(),
            event: e.event.pretty_name().to_owned(),
            class: e.failure.class().as_str().to_owned(),
            message: e.failure.to_string(),
        })
        .collect()
}

/// The changes recorded in the owners of container `id`.
pub(crate) fn changes(owners: &OwningPlugins, id: &str) -> Vec<Change> {
    let mut out = Vec::new();
    let Some(fo) = owners.owners.get(id) else {
        return out;
    };
    let split = |owner: &str| -> Vec<(String, bool)> {
        owner
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|s| match s.strip_prefix('-') {
                Some(p) => (p.to_owned(), true),
                None => (s.to_owned(), false),
            })
            .collect()
    };
    for (f, owner) in &fo.simple {
        for (plugin, removed) in split(owner) {
            out.push(Change {
                plugin,
                field: field_name(*f),
                key: String::new(),
                removed,
            });
        }
    }
    for (f, c) in &fo.compound {
        for (key, owner) in &c.owners {
            for (plugin, removed) in split(owner) {
                out.push(Change {
                    plugin,
                    field: field_name(*f),
                    key: key.clone(),
                    removed,
                });
            }
        }
    }
    out
}

struct Ev {
    res: EventResult,
    t0: Instant,
    done: bool,
}

impl Ev {
    fn new(event: &str, target: &str) -> Ev {
        Ev {
            res: EventResult {
                event: event.to_owned(),
                target: target.to_owned(),
                ok: true,
                error: None,
                ms: 0.0,
                calls: Vec::new(),
                plugin_failures: Vec::new(),
                changes: Vec::new(),
                updates: Vec::new(),
                evictions: Vec::new(),
            },
            t0: Instant::now(),
            done: false,
        }
    }

    fn fail(mut self, e: impl ToString) -> Ev {
        self.res.ok = false;
        self.res.error = Some(e.to_string());
        self
    }
}

impl Exec {
    fn pod(&self, name: &str) -> PodSandbox {
        let spec = self.scenario.pod(name).cloned().unwrap_or_default();
        PodSandbox {
            id: pod_id(name),
            name: name.to_owned(),
            uid: format!("uid-{name}"),
            namespace: spec.namespace.unwrap_or_else(|| "default".into()),
            labels: spec.labels,
            annotations: spec.annotations,
            runtime_handler: spec.runtime_handler,
            linux: (!spec.namespaces.is_empty()).then(|| LinuxPodSandbox {
                namespaces: spec
                    .namespaces
                    .iter()
                    .map(|(t, p)| LinuxNamespace {
                        r#type: t.clone(),
                        path: p.clone(),
                    })
                    .collect(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn container(&self, target: &str) -> Container {
        let Some((pod, c)) = self.scenario.container(target) else {
            return Container::default();
        };
        Container {
            id: ctr_id(target),
            pod_sandbox_id: pod_id(&pod.name),
            name: c.name.clone(),
            state: ContainerState::ContainerUnknown as i32,
            labels: c.labels.clone(),
            annotations: c.annotations.clone(),
            args: c.args.clone(),
            env: c.env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            mounts: c
                .mounts
                .iter()
                .map(|m| Mount {
                    destination: m.destination.clone(),
                    r#type: m.kind.clone().unwrap_or_else(|| "bind".into()),
                    source: m.source.clone(),
                    options: m.options.clone(),
                })
                .collect(),
            linux: c.resources.as_ref().map(|r| LinuxContainer {
                resources: Some(resources(r)),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Ends an event: its time and (outside parallel groups) its calls.
    fn fin(&self, mut ev: Ev) -> Ev {
        if ev.done {
            return ev;
        }
        ev.done = true;
        ev.res.ms = ms(ev.t0.elapsed());
        if self.drain {
            ev.res.calls = self.world.drain_calls();
        }
        ev
    }

    /// Runs a lifecycle step.
    pub(super) async fn lifecycle(&self, st: &Step) -> Vec<EventResult> {
        let mut out = Vec::new();
        let push = |ev: Ev, out: &mut Vec<EventResult>| {
            out.push(self.fin(ev).res);
        };
        if let Some(p) = &st.run_pod {
            push(self.run_pod(&p.value).await, &mut out);
        } else if let Some(p) = &st.update_pod {
            let res = st.resources.as_ref().map(resources);
            for ev in self.update_pod(&p.value, res).await {
                push(ev, &mut out);
            }
        } else if let Some(p) = &st.stop_pod {
            push(self.pod_teardown(&p.value, false).await, &mut out);
        } else if let Some(p) = &st.remove_pod {
            push(self.pod_teardown(&p.value, true).await, &mut out);
        } else if let Some(c) = &st.create {
            for ev in self.create(&c.value).await {
                push(ev, &mut out);
            }
        } else if let Some(c) = &st.start {
            for ev in self.start(&c.value).await {
                push(ev, &mut out);
            }
        } else if let Some(c) = &st.update {
            let res = st.resources.as_ref().map(resources);
            for ev in self.update(&c.value, res).await {
                push(ev, &mut out);
            }
        } else if let Some(c) = &st.stop {
            push(self.stop(&c.value).await, &mut out);
        } else if let Some(c) = &st.remove {
            push(self.remove(&c.value).await, &mut out);
        } else if let Some(p) = &st.up {
            let ev = self.run_pod(&p.value).await;
            let pod_ok = ev.res.ok;
            push(ev, &mut out);
            if pod_ok {
                let names: Vec<String> = self
                    .scenario
                    .pod(&p.value)
                    .map(|s| s.containers.iter().map(|c| c.name.clone()).collect())
                    .unwrap_or_default();
                for c in names {
                    let t = format!("{}/{c}", p.value);
                    let evs = self.create(&t).await;
                    let created = evs.first().is_some_and(|e| e.res.ok);
                    for ev in evs {
                        push(ev, &mut out);
                    }
                    if created {
                        for ev in self.start(&t).await {
                            push(ev, &mut out);
                        }
                    }
                }
            }
        } else if let Some(p) = &st.down {
            let pid = pod_id(&p.value);
            let mut ids: Vec<(String, String)> = lock(&self.world.containers)
                .values()
                .filter(|c| c.pod_sandbox_id == pid)
                .map(|c| (c.id.clone(), format!("{}/{}", p.value, c.name)))
                .collect();
            ids.sort();
            for (_, t) in ids {
                push(self.stop(&t).await, &mut out);
                push(self.remove(&t).await, &mut out);
            }
            push(self.pod_teardown(&p.value, false).await, &mut out);
            push(self.pod_teardown(&p.value, true).await, &mut out);
        }
        out
    }

    fn stored_pod(&self, name: &str) -> Option<PodSandbox> {
        lock(&self.world.pods).get(&pod_id(name)).cloned()
    }

    fn stored_container(&self, target: &str) -> Option<Container> {
        lock(&self.world.containers).get(&ctr_id(target)).cloned()
    }

    fn set_state(&self, target: &str, state: ContainerState) {
        if let Some(c) = lock(&self.world.containers).get_mut(&ctr_id(target)) {
            c.state = state as i32;
        }
    }

    async fn run_pod(&self, name: &str) -> Ev {
        let ev = Ev::new("RunPodSandbox", name);
        if self.stored_pod(name).is_some() {
            return ev.fail(format!("pod {name} is already running"));
        }
        let pod = self.pod(name);
        match self.nri.run_pod_sandbox(&pod).await {
            Ok(out) => {
                lock(&self.world.pods).insert(pod.id.clone(), pod);
                drop(out.guard);
                let mut ev = ev;
                ev.res.plugin_failures = failures(&out.errors);
                ev
            }
            Err(e) => ev.fail(e),
        }
    }

    async fn update_pod(&self, name: &str, res: Option<LinuxResources>) -> Vec<Ev> {
        let ev = Ev::new("UpdatePodSandbox", name);
        let Some(pod) = self.stored_pod(name) else {
            return vec![ev.fail(format!("pod {name} is not running"))];
        };
        let ev = match self.nri.update_pod_sandbox(&pod, None, res).await {
            Ok(r) => {
                let mut ev = ev;
                ev.res.plugin_failures = failures(&r.errors);
                ev
            }
            Err(e) => return vec![ev.fail(e)],
        };
        let ev = self.fin(ev);
        let mut post = Ev::new("PostUpdatePodSandbox", name);
        if let Ok(r) = self.nri.post_update_pod_sandbox(&pod).await {
            post.res.plugin_failures = failures(&r.errors);
        }
        vec![ev, post]
    }

    async fn pod_teardown(&self, name: &str, remove: bool) -> Ev {
        let mut ev = Ev::new(
            if remove {
                "RemovePodSandbox"
            } else {
                "StopPodSandbox"
            },
            name,
        );
        let Some(pod) = self.stored_pod(name) else {
            return ev.fail(format!("pod {name} is not running"));
        };
        let r = if remove {
            self.nri.remove_pod_sandbox(&pod).await
        } else {
            self.nri.stop_pod_sandbox(&pod).await
        };
        match r {
            Ok(r) => ev.res.plugin_failures = failures(&r.errors),
            Err(e) => ev = ev.fail(e),
        }
        if remove {
            lock(&self.world.pods).remove(&pod.id);
        }
        ev
    }

    async fn create(&self, target: &str) -> Vec<Ev> {
        let mut ev = Ev::new("CreateContainer", target);
        let pod_name = target.split('/').next().unwrap_or_default();
        let Some(pod) = self.stored_pod(pod_name) else {
            return vec![ev.fail(format!("pod {pod_name} is not running"))];
        };
        if self.stored_container(target).is_some() {
            return vec![ev.fail(format!("container {target} already exists"))];
        }
        let mut ctr = self.container(target);
        let out = match self.nri.create_container(&pod, &ctr).await {
            Ok(o) => o,
            Err(e) => {
                let ev = self.fin(ev.fail(e));
                return self.undo_create(ev, &pod, &ctr).await;
            }
        };
        ev.res.plugin_failures = failures(&out.errors);
        ev.res.changes = changes(&out.owners, &ctr.id);
        ev.res.evictions = self.world.evictions(&out.evictions);
        let base = match spec::base_spec(&ctr) {
            Ok(s) => s,
            Err(e) => {
                drop(out.guard);
                let ev = self.fin(ev.fail(format!("building the container's OCI spec: {e}")));
                return self.undo_create(ev, &pod, &ctr).await;
            }
        };
        let mut cur = base.clone();
        if let Err(e) = spec::applier().apply_adjustment(&mut cur, &out.adjustment) {
            ev = ev.fail(format!("applying the merged adjustment: {e}"));
        }
        let (u, errs) = self.world.apply_updates(&out.updates);
        ev.res.updates = u;
        if let Some(e) = errs.into_iter().next() {
            if ev.res.ok {
                ev = ev.fail(e);
            }
        }
        drop(out.guard);
        if !ev.res.ok {
            let ev = self.fin(ev);
            return self.undo_create(ev, &pod, &ctr).await;
        }
        lock(&self.world.names).insert(ctr.id.clone(), target.to_owned());
        lock(&self.world.owners).insert(target.to_owned(), ev.res.changes.clone());
        {
            let mut specs = lock(&self.world.specs);
            specs.retain(|s| s.0 != ctr.id);
            specs.push((ctr.id.clone(), target.to_owned(), base, cur));
        }
        ctr.state = ContainerState::ContainerCreated as i32;
        lock(&self.world.containers).insert(ctr.id.clone(), ctr.clone());
        let ev = self.fin(ev);
        let mut post = Ev::new("PostCreateContainer", target);
        if let Ok(r) = self.nri.post_create_container(&pod, &ctr).await {
            post.res.plugin_failures = failures(&r.errors);
        }
        vec![ev, post]
    }

    /// After a failed creation (a plugin refused it, or the runtime could
    /// not apply the adjustment or an update): no PostCreateContainer, and
    /// the plugins are told the container is gone with StopContainer and
    /// RemoveContainer, as containerd does. The container is not kept.
    async fn undo_create(&self, failed: Ev, pod: &PodSandbox, ctr: &Container) -> Vec<Ev> {
        let target = failed.res.target.clone();
        let mut stop = Ev::new("StopContainer", &target);
        match self.nri.stop_container(pod, ctr).await {
            Ok(out) => stop.res.plugin_failures = failures(&out.errors),
            Err(e) => stop = stop.fail(e),
        }
        let stop = self.fin(stop);
        let mut remove = Ev::new("RemoveContainer", &target);
        match self.nri.remove_container(pod, ctr).await {
            Ok(r) => remove.res.plugin_failures = failures(&r.errors),
            Err(e) => remove = remove.fail(e),
        }
        vec![failed, stop, remove]
    }

    fn both(&self, target: &str) -> Result<(PodSandbox, Container), Error> {
        let pod_name = target.split('/').next().unwrap_or_default();
        let pod = self
            .stored_pod(pod_name)
            .ok_or_else(|| Error::PodNotRunning {
                pod: pod_name.to_owned(),
            })?;
        let ctr = self
            .stored_container(target)
            .ok_or_else(|| Error::ContainerNotCreated {
                container: target.to_owned(),
            })?;
        Ok((pod, ctr))
    }

    async fn start(&self, target: &str) -> Vec<Ev> {
        let mut ev = Ev::new("StartContainer", target);
        let (pod, ctr) = match self.both(target) {
            Ok(x) => x,
            Err(e) => return vec![ev.fail(e)],
        };
        match self.nri.start_container(&pod, &ctr).await {
            Ok(r) => ev.res.plugin_failures = failures(&r.errors),
            Err(e) => return vec![ev.fail(e)],
        }
        self.set_state(target, ContainerState::ContainerRunning);
        let ev = self.fin(ev);
        let mut post = Ev::new("PostStartContainer", target);
        if let Ok(r) = self.nri.post_start_container(&pod, &ctr).await {
            post.res.plugin_failures = failures(&r.errors);
        }
        vec![ev, post]
    }

    async fn update(&self, target: &str, res: Option<LinuxResources>) -> Vec<Ev> {
        let mut ev = Ev::new("UpdateContainer", target);
        let (pod, ctr) = match self.both(target) {
            Ok(x) => x,
            Err(e) => return vec![ev.fail(e)],
        };
        let out = match self.nri.update_container(&pod, &ctr, res).await {
            Ok(o) => o,
            Err(e) => return vec![ev.fail(e)],
        };
        ev.res.plugin_failures = failures(&out.errors);
        let (u, errs) = self.world.apply_updates(&out.updates);
        ev.res.updates = u;
        ev.res.evictions = self.world.evictions(&out.evictions);
        if let Some(e) = errs.into_iter().next() {
            // The update was not applied: no PostUpdateContainer.
            return vec![ev.fail(e)];
        }
        let ev = self.fin(ev);
        let mut post = Ev::new("PostUpdateContainer", target);
        if let Ok(r) = self.nri.post_update_container(&pod, &ctr).await {
            post.res.plugin_failures = failures(&r.errors);
        }
        vec![ev, post]
    }

    async fn stop(&self, target: &str) -> Ev {
        let mut ev = Ev::new("StopContainer", target);
        let (pod, ctr) = match self.both(target) {
            Ok(x) => x,
            Err(e) => return ev.fail(e),
        };
        match self.nri.stop_container(&pod, &ctr).await {
            Ok(out) => {
                ev.res.plugin_failures = failures(&out.errors);
                ev.res.updates = self.world.apply_updates(&out.updates).0;
            }
            Err(e) => ev = ev.fail(e),
        }
        self.set_state(target, ContainerState::ContainerStopped);
        ev
    }

    async fn remove(&self, target: &str) -> Ev {
        let mut ev = Ev::new("RemoveContainer", target);
        let (pod, ctr) = match self.both(target) {
            Ok(x) => x,
            Err(e) => return ev.fail(e),
        };
        match self.nri.remove_container(&pod, &ctr).await {
            Ok(r) => ev.res.plugin_failures = failures(&r.errors),
            Err(e) => ev = ev.fail(e),
        }
        lock(&self.world.containers).remove(&ctr.id);
        ev
    }
}
