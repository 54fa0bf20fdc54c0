//! Phases where a plugin fails or answers late: CreateContainer refused,
//! every teardown event refused, CreateContainer answered after the
//! request timeout.

use std::time::{Duration, Instant};

use crate::Error;
use crate::check::{CreateErrorOutcome, TeardownErrorOutcome, TimeoutOutcome};
use crate::cri::{Cri, CriResult};
use crate::instances::{ms, wait_until};
use crate::record::EventKind;
use crate::recorder::Behaviour;

use super::Driver;

/// The error of a CRI step, if it was refused.
fn refused<T>(step: &str, r: CriResult<T>, into: &mut Vec<(String, String)>) -> Result<(), Error> {
    if let Err(e) = r? {
        into.push((step.to_owned(), e));
    }
    Ok(())
}

impl<C: Cri> Driver<'_, C> {
    /// A plugin refuses CreateContainer: that creation fails and leaves
    /// nothing; the next one is created, started, stopped and removed.
    pub(crate) async fn create_error(&mut self) -> Result<(), Error> {
        let c = self.cri;
        let b = Behaviour {
            fail_create: Some("refuse-".into()),
            ..Behaviour::default()
        };
        let failer = self.inst.spawn_synced("fail", "90", b).await?;
        let (pod, spec) = self.pod("err").await?;
        let mut o = CreateErrorOutcome {
            pod: pod.clone(),
            refused_name: "refuse-1".into(),
            ..CreateErrorOutcome::default()
        };
        match self.create(&pod, &spec, "refuse-1").await? {
            Ok(_) => {}
            Err(e) => {
                o.refused_error = Some(e);
                (self.d.teardown.failed_creates).push((pod.clone(), "refuse-1".into()));
                if let Ok(list) = c.list_containers(&pod).await? {
                    o.refused_listed = list.iter().any(|c| c.name == o.refused_name);
                }
            }
        }
        match self.create(&pod, &spec, "ok-1").await? {
            Ok(id) => {
                let mut steps = Vec::new();
                refused("start", c.start_container(&id).await, &mut steps)?;
                refused("stop", c.stop_container(&id).await, &mut steps)?;
                refused("remove", c.remove_container(&id).await, &mut steps)?;
                o.next_lifecycle_error = (!steps.is_empty()).then(|| {
                    let v: Vec<String> = steps.iter().map(|(s, e)| format!("{s}: {e}")).collect();
                    v.join("; ")
                });
            }
            Err(e) => o.next_error = Some(e),
        }
        self.inst.stop_and_wait(&failer).await;
        self.d.create_error = Some(o);
        self.remove_pod(&pod).await
    }

    /// A plugin refuses every teardown event of a pod; the plugin after it
    /// must still get each of them and the CRI calls must work.
    pub(crate) async fn teardown_error(&mut self) -> Result<(), Error> {
        let c = self.cri;
        let spec = self.spec("tderr");
        let b = Behaviour {
            fail_teardown: Some(spec.name.clone()),
            ..Behaviour::default()
        };
        let failing = self.inst.spawn_synced("fail-teardown", "94", b).await?;
        let later = (self.inst)
            .spawn_synced("after-teardown", "95", Behaviour::default())
            .await?;
        let (pod, spec) = self.pod("tderr").await?;
        let ctr = self.must_run(&pod, &spec, "c1").await?;
        let mut steps = Vec::new();
        refused("stop-container", c.stop_container(&ctr).await, &mut steps)?;
        refused(
            "remove-container",
            c.remove_container(&ctr).await,
            &mut steps,
        )?;
        refused("stop-pod", c.stop_pod(&pod).await, &mut steps)?;
        refused("remove-pod", c.remove_pod(&pod).await, &mut steps)?;
        let removed = !steps.iter().any(|(s, _)| s == "remove-pod");
        // The later instance may get the last event a moment after the
        // call returned (a runtime that delivers it asynchronously).
        let log = self.inst.log.clone();
        let (l, p) = (later.clone(), pod.clone());
        wait_until(Duration::from_secs(2), || {
            log.any(|r| {
                r.instance == l
                    && r.as_event()
                        .is_some_and(|(e, pr, _)| e == EventKind::RemovePodSandbox && pr.id == p)
            })
        })
        .await;
        self.inst.stop_and_wait(&failing).await;
        self.inst.stop_and_wait(&later).await;
        self.d.teardown_error = Some(TeardownErrorOutcome {
            pod: pod.clone(),
            container: ctr,
            failing,
            later,
            failed_steps: steps,
        });
        if removed {
            self.removed_pod(&pod);
            Ok(())
        } else {
            // Gone with the cleanup, now that no plugin refuses it.
            self.remove_pod(&pod).await
        }
    }

    /// A plugin answers CreateContainer one second after the request
    /// timeout; then another container is created.
    pub(crate) async fn request_timeout(&mut self) -> Result<(), Error> {
        let timeout = self.plan.request_timeout;
        let delay = timeout.max(Duration::from_millis(100)) + Duration::from_secs(1);
        let b = Behaviour {
            delay_create: Some(("slow-".into(), delay)),
            ..Behaviour::default()
        };
        let slow = self.inst.spawn_synced("slow", "91", b).await?;
        let (pod, spec) = self.pod("tmo").await?;
        let t = Instant::now();
        let slow_res = self.create(&pod, &spec, "slow-1").await?;
        let slow_elapsed = t.elapsed();
        let slow_error = slow_res.err();
        if slow_error.is_some() {
            (self.d.teardown.failed_creates).push((pod.clone(), "slow-1".into()));
        }
        let log = self.inst.log.clone();
        // The slow handler is still sleeping past the deadline; give the
        // runtime's disconnect a moment to arrive.
        let inst = &*self.inst;
        wait_until(Duration::from_secs(2), || inst.is_gone(&slow)).await;
        let next_error = self.create(&pod, &spec, "after-1").await?.err();
        let disconnected = self.inst.is_gone(&slow);
        let next_seen = log.any(|r| {
            r.instance == slow
                && r.as_event().is_some_and(|(e, _, c)| {
                    e == EventKind::CreateContainer && c.is_some_and(|c| c.name == "after-1")
                })
        });
        self.inst.stop_and_wait(&slow).await;
        self.d.timeout = Some(TimeoutOutcome {
            request_timeout_ms: ms(timeout),
            delay_ms: ms(delay),
            slow_error,
            slow_elapsed_ms: ms(slow_elapsed),
            disconnected,
            next_seen_by_slow_plugin: next_seen,
            next_error,
        });
        self.remove_pod(&pod).await
    }
}
