//! Proxy mode's upstream faults: the runtime above the proxy restarts with
//! a changed set of pods and containers (some gone, some new, some in
//! another state), and quiescence waits for the proxy to be back.

use std::time::Duration;

use nri_api::api::ContainerState;

use crate::env::{Env, PROXY_NAME, upstream};
use crate::lifecycle::CREATE_MEM;
use crate::model::{TPod, ctr_object, pod_object};
use crate::observe::lock;
use crate::rng::Rng;

/// The upstream runtime restarts: the connection drops, the library
/// stops, the truth changes while it is away (drawn from `seed`), a new
/// library starts on the same socket; the proxy registers again.
pub async fn restart(env: &mut Env, seed: u64) {
    let Some(side) = &env.proxy else { return };
    side.relay.cut();
    let old = env.nri();
    old.stop().await;
    change_truth(env, seed);
    match upstream(&env.setup, env.dir.path(), &env.model).await {
        Ok(a) => *lock(&env.ctx.nri) = a,
        Err(e) => tracing::error!(error = %e, "the upstream runtime did not come back"),
    }
}

/// What happened while the runtime was away.
fn change_truth(env: &mut Env, seed: u64) {
    let mut rng = Rng::new(seed);
    let created = ContainerState::ContainerCreated as i32;
    let running = ContainerState::ContainerRunning as i32;
    let stopped = ContainerState::ContainerStopped as i32;
    let mut new_ids = Vec::new();
    {
        let mut t = lock(&env.model.truth);
        let ids: Vec<String> = t.ctrs.keys().cloned().collect();
        for id in ids {
            if rng.chance(20) {
                t.ctrs.remove(&id);
                lock(&env.model.asked_mem).remove(&id);
                continue;
            }
            // A container starts only in a pod that is ready (a stopped
            // pod's containers were stopped with it, as containerd does).
            let pod_ready = (t.ctrs.get(&id))
                .and_then(|c| t.pods.get(&c.pod_sandbox_id))
                .is_some_and(|p| p.ready);
            if let Some(c) = t.ctrs.get_mut(&id).filter(|_| rng.chance(25)) {
                c.state = if c.state != created {
                    stopped
                } else if pod_ready {
                    running
                } else {
                    created
                };
            }
        }
        let pods: Vec<String> = t.pods.keys().cloned().collect();
        for p in pods {
            let empty = !t.ctrs.values().any(|c| c.pod_sandbox_id == p);
            if empty && rng.chance(25) {
                t.pods.remove(&p);
            }
        }
        for _ in 0..rng.range(0, 2) {
            let pn = env.next_outside_id;
            env.next_outside_id += 1;
            let pod = pod_object(pn);
            new_ids.push(pod.id.clone());
            for _ in 0..rng.range(0, 2) {
                let cn = env.next_outside_id;
                env.next_outside_id += 1;
                let mut c = ctr_object(cn, &pod.id, Some(CREATE_MEM));
                if rng.chance(50) {
                    c.state = running;
                }
                new_ids.push(c.id.clone());
                lock(&env.model.asked_mem).insert(c.id.clone(), Some(CREATE_MEM));
                t.ctrs.insert(c.id.clone(), c);
            }
            t.pods.insert(pod.id.clone(), TPod { pod, ready: true });
        }
    }
    // The plugins behind the proxy learn of these objects when the proxy
    // resynchronizes, not when they appeared: only a plugin subscribed to
    // their creation events is held to know them (`invariants.rs`).
    let mut began = lock(&env.model.began);
    for id in new_ids {
        began.insert(id, u64::MAX);
    }
}

/// Proxy mode: waits (bounded) until the proxy is registered upstream.
pub async fn ensure_upstream(env: &mut Env) {
    if env.proxy.is_none() {
        return;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < deadline {
        let up = env.nri();
        if up.plugins().iter().any(|p| p.id.to_string() == PROXY_NAME) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
