//! Phases without special plugin behaviour: the plain lifecycle, a
//! container exiting on its own, a pod stopped twice and used again.

use std::time::{Duration, Instant};

use crate::Error;
use crate::check::{SelfExitOutcome, StopTwiceOutcome};
use crate::cri::{ContainerState, Cri, must};
use crate::instances::{ms, wait_until};
use crate::record::EventKind;

use super::Driver;

/// How long a container that exits at once may take to be reported exited.
const EXIT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long StopContainer may take to follow a container's own exit
/// (critest waits as long).
const STOP_AFTER_EXIT: Duration = Duration::from_secs(10);

impl<C: Cri> Driver<'_, C> {
    /// A full container lifecycle with an update, then a pod removed with
    /// one started and one never-started container in it.
    pub(crate) async fn lifecycle(&mut self) -> Result<(), Error> {
        let c = self.cri;
        let (pa, sa) = self.pod("lc-a").await?;
        let ca = self.must_run(&pa, &sa, "c1").await?;
        must(|| "update c1".into(), c.update_container(&ca, 512).await)?;
        must(|| "stop c1".into(), c.stop_container(&ca).await)?;
        must(|| "remove c1".into(), c.remove_container(&ca).await)?;
        self.remove_pod(&pa).await?;

        let (pb, sb) = self.pod("lc-b").await?;
        self.must_run(&pb, &sb, "c1").await?;
        self.must_create(&pb, &sb, "c2").await?;
        self.remove_pod(&pb).await
    }

    /// A container whose command exits at once: StopContainer must come
    /// without the checker asking, before the removal.
    pub(crate) async fn self_exit(&mut self) -> Result<(), Error> {
        let c = self.cri;
        let (pod, spec) = self.pod("exit").await?;
        let cmd = ["sh", "-c", "exit 3"].map(String::from).to_vec();
        let r = self.create_cmd(&pod, &spec, "exits", Some(cmd)).await;
        let id = must(|| "create exits".into(), r)?;
        must(|| "start exits".into(), c.start_container(&id).await)?;
        let t = Instant::now();
        let mut exited = false;
        while !exited && t.elapsed() < EXIT_TIMEOUT {
            exited = matches!(
                c.container_status(&id).await?,
                Ok(s) if s.state == ContainerState::Exited
            );
            if !exited {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        let log = self.inst.log.clone();
        let main = self.main_name();
        let t = Instant::now();
        if exited {
            wait_until(STOP_AFTER_EXIT, || {
                log.any(|r| {
                    r.instance == main
                        && r.as_event().is_some_and(|(e, _, c)| {
                            e == EventKind::StopContainer && c.is_some_and(|c| c.id == id)
                        })
                })
            })
            .await;
        }
        let waited_ms = ms(t.elapsed());
        let remove_asked_seq = log.next_seq();
        let remove_error = c.remove_container(&id).await?.err();
        self.d.self_exit = Some(SelfExitOutcome {
            container: id,
            exited,
            waited_ms,
            remove_asked_seq,
            remove_error,
        });
        self.remove_pod(&pod).await
    }

    /// A pod stopped twice, then a container created in it.
    pub(crate) async fn stop_twice(&mut self) -> Result<(), Error> {
        let c = self.cri;
        let log = self.inst.log.clone();
        let (pod, spec) = self.pod("stop2").await?;
        let first_start_seq = log.next_seq();
        let first_error = c.stop_pod(&pod).await?.err();
        let first_done_seq = log.next_seq();
        let second_error = c.stop_pod(&pod).await?.err();
        let second_done_seq = log.next_seq();
        let reuse_created = self.create(&pod, &spec, "reuse").await?.ok();
        let reuse_done_seq = log.next_seq();
        self.d.stop_twice = Some(StopTwiceOutcome {
            pod: pod.clone(),
            first_start_seq,
            first_done_seq,
            second_done_seq,
            first_error,
            second_error,
            reuse_done_seq,
            reuse_created: reuse_created.clone(),
        });
        if let Some(id) = reuse_created {
            // Whatever the runtime made of it, take it down again.
            let _ = c.stop_container(&id).await?;
            let _ = c.remove_container(&id).await?;
        }
        must(|| format!("remove pod {pod}"), c.remove_pod(&pod).await)?;
        self.removed_pod(&pod);
        Ok(())
    }
}
