//! Phases around Synchronize: plugins registering during creations, and a
//! plugin holding its Synchronize open (within, then past, the request
//! timeout) while containers are created.

use std::time::{Duration, Instant};

use crate::Error;
use crate::check::SyncHoldOutcome;
use crate::cri::{ContainerSpec, Cri};
use crate::instances::{is_disconnect_of, ms, wait_until};
use crate::record::{EventKind, RecordKind};
use crate::recorder::{Behaviour, HoldPoint};

use super::{Driver, boxed};

impl<C: Cri> Driver<'_, C> {
    /// Rounds of pod + container creations; two more instances register
    /// during round 1's RunPodSandbox and round 2's CreateContainer.
    pub(crate) async fn sync_race(&mut self) -> Result<(), Error> {
        let c = self.cri;
        let mut made = Vec::new();
        for round in 0..self.plan.sync_rounds {
            let tag = format!("sync-{round}");
            let (pod, spec) = if round == 1 {
                let name = self.inst.spawn("sync1", "11", Behaviour::default())?;
                self.d.sync_instances.push(name.clone());
                let spec = self.spec(&tag);
                let (p, w) = tokio::join!(c.run_pod(&spec), self.inst.wait_synced(&name));
                w?;
                let id = crate::cri::must(|| format!("run pod {}", spec.name), p)?;
                self.made_pod(&id, &spec);
                (id, spec)
            } else {
                self.pod(&tag).await?
            };
            self.d.sync_pods.push(pod.clone());
            let ctr = if round == 2 {
                let name = self.inst.spawn("sync2", "12", Behaviour::default())?;
                self.d.sync_instances.push(name.clone());
                let cs = ContainerSpec {
                    name: "c1".into(),
                    command: None,
                };
                let (ct, w) = tokio::join!(
                    c.create_container(&pod, &spec, &cs),
                    self.inst.wait_synced(&name)
                );
                w?;
                let id = crate::cri::must(|| format!("create c1 in {}", spec.name), ct)?;
                self.made_container(&id, "c1", &pod);
                id
            } else {
                self.must_create(&pod, &spec, "c1").await?
            };
            self.d.sync_containers.push(ctr.clone());
            crate::cri::must(|| "start c1".into(), c.start_container(&ctr).await)?;
            made.push(pod);
        }
        for pod in made {
            self.remove_pod(&pod).await?;
        }
        let observers = self.d.sync_instances.clone();
        for name in &observers {
            self.inst.stop_and_wait(name).await;
        }
        self.d.observers.extend(observers);
        Ok(())
    }

    /// An instance holds its Synchronize open (`late`: one second past the
    /// request timeout; else half of it) while containers are created.
    pub(crate) async fn sync_hold(&mut self, late: bool) -> Result<(), Error> {
        let c = self.cri;
        let timeout = self.plan.request_timeout;
        let hold = if late {
            timeout + Duration::from_secs(1)
        } else {
            timeout / 2
        };
        let (tag, index) = if late {
            ("sync-late", "21")
        } else {
            ("sync-held", "20")
        };
        let (pod, spec) = self.pod(tag).await?;
        let (point, mut rx) = HoldPoint::new(hold);
        let b = Behaviour {
            hold_sync: Some(point),
            ..Behaviour::default()
        };
        let name = self.inst.spawn(tag, index, b)?;
        let mut o = SyncHoldOutcome {
            instance: name.clone(),
            request_timeout_ms: ms(timeout),
            hold_ms: ms(hold),
            ..SyncHoldOutcome::default()
        };
        let reach = self.inst.registration_timeout() + Duration::from_secs(1);
        if let Ok(Some(held)) = tokio::time::timeout(reach, rx.recv()).await {
            o.held = true;
            let until = held.at + hold;
            let release = async move {
                tokio::time::sleep_until(until.into()).await;
                held.release();
            };
            let create = |i: usize| {
                let (pod, spec) = (&pod, &spec);
                async move {
                    let cs = ContainerSpec {
                        name: format!("during-{i}"),
                        command: None,
                    };
                    let t = Instant::now();
                    let r = c.create_container(pod, spec, &cs).await;
                    (cs.name, r, ms(t.elapsed()))
                }
            };
            // Two at once, as critest does (one in one case, three in another).
            let (a, b, ()) = boxed(|| async { tokio::join!(create(0), create(1), release) }).await;
            let results = [a, b];
            for (cname, r, took) in results {
                o.create_ms.push(took);
                match r? {
                    Ok(id) => {
                        self.made_container(&id, &cname, &pod);
                        o.containers.push(id);
                    }
                    Err(e) => o.create_errors.push(e),
                }
            }
            self.settle_sync_hold(&mut o, late).await;
        }
        self.inst.stop_and_wait(&name).await;
        if late {
            self.d.sync_late = Some(o);
        } else {
            self.d.sync_held = Some(o);
        }
        self.remove_pod(&pod).await
    }

    /// After a sync hold: waits for a drop (late: up to the request
    /// timeout) or for the creations to reach the instance, and notes when
    /// the connection ended.
    async fn settle_sync_hold(&mut self, o: &mut SyncHoldOutcome, late: bool) {
        let log = self.inst.log.clone();
        let name = o.instance.clone();
        let gone_wait = if late {
            self.plan.request_timeout
        } else {
            Duration::from_millis(200)
        };
        wait_until(gone_wait, || log.any(|r| is_disconnect_of(r, &name))).await;
        if !self.inst.is_gone(&name) {
            // Kept: creations deferred by the sync may arrive a bit later.
            let want = o.containers.clone();
            wait_until(Duration::from_secs(5), || {
                want.iter().all(|id| {
                    log.any(|r| {
                        r.instance == name
                            && r.as_event().is_some_and(|(e, _, c)| {
                                e == EventKind::CreateContainer && c.is_some_and(|c| &c.id == id)
                            })
                    }) || log.any(|r| {
                        r.instance == name
                            && matches!(&r.kind, RecordKind::Synchronized { containers, .. }
                                if containers.iter().any(|c| &c.id == id))
                    })
                })
            })
            .await;
        }
        let records = log.snapshot();
        let synced = records
            .iter()
            .find(|r| r.instance == name && matches!(r.kind, RecordKind::Synchronized { .. }));
        let gone = records.iter().find(|r| is_disconnect_of(r, &name));
        if let (Some(s), Some(g)) = (synced, gone) {
            o.dropped_after_ms = Some(g.at_ms.saturating_sub(s.at_ms));
        }
    }
}
