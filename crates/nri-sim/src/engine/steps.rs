//! The step runner: one step at a time (a parallel group's steps at
//! once), each step's outcome and its `expect: ok|fail`.

use serde_saphyr::Spanned;
use tokio::task::JoinSet;

use super::Engine;
use crate::report::{Call, EventResult, Record, Reporter};
use crate::scenario::{Step, parse_duration};

impl Engine {
    pub(super) async fn step(
        &mut self,
        index: &str,
        s: &Spanned<Step>,
        reporter: &mut dyn Reporter,
    ) {
        let st = &s.value;
        self.in_failing_step = st.expect.as_ref().is_some_and(|e| e.value == "fail");
        let action = st.actions().first().copied().unwrap_or("(none)");
        let target = step_target(st);
        reporter.report(&Record::Step {
            index: index.to_owned(),
            label: st.label.clone(),
            action: action.to_owned(),
            target: target.clone(),
        });
        self.summary.steps += 1;
        let mut ok = true;
        let mut group_calls = Vec::new();
        if let Some(name) = st
            .start_plugin
            .as_ref()
            .or(st.kill_plugin.as_ref())
            .or(st.restart_plugin.as_ref())
        {
            ok = self.plugin_step(st, &name.value, reporter).await;
        } else if let Some(d) = &st.sleep {
            reporter.progress(&format!("sleeping {}", d.value));
            tokio::time::sleep(parse_duration(&d.value).unwrap_or_default()).await;
            reporter.progress("");
        } else if let Some(group) = &st.parallel {
            ok = self.parallel_step(index, group, reporter).await;
            group_calls = self.exec.world.drain_calls();
        } else {
            reporter.progress(&format!("{action} {target}"));
            let evs = self.exec.lifecycle(st).await;
            reporter.progress("");
            ok = self.report_events(evs, reporter);
        }
        self.end_step(index, st, ok, group_calls, reporter);
    }

    /// `start-plugin`, `kill-plugin` or `restart-plugin` of plugin `name`;
    /// `start-plugin` of a running plugin upgrades it (a new instance takes
    /// over, then the old one is stopped).
    async fn plugin_step(&mut self, st: &Step, name: &str, reporter: &mut dyn Reporter) -> bool {
        // None: a bundled plugin left out with --no-bundled.
        let Some(i) = self.find_proc(name) else {
            return false;
        };
        if st.start_plugin.is_some() && self.procs[i].child.is_some() {
            return self.upgrade_plugin(i, reporter).await;
        }
        let mut ok = true;
        if st.kill_plugin.is_some() || st.restart_plugin.is_some() {
            ok &= self.kill_plugin(i, reporter).await;
        }
        if st.start_plugin.is_some() || st.restart_plugin.is_some() {
            if self.procs[i].child.is_some() {
                ok = false;
            } else {
                ok &= self.start_plugin(i, reporter).await;
            }
        }
        ok
    }

    /// The steps of a `parallel` group at once (plugin steps first, in
    /// this task), then their reports in order.
    async fn parallel_step(
        &mut self,
        index: &str,
        group: &[Spanned<Step>],
        reporter: &mut dyn Reporter,
    ) -> bool {
        let mut set = JoinSet::new();
        let mut plugin_steps = Vec::new();
        for (j, g) in group.iter().enumerate() {
            let sub = format!("{index}.{}", j + 1);
            let gs = &g.value;
            if gs.start_plugin.is_some() || gs.kill_plugin.is_some() || gs.restart_plugin.is_some()
            {
                plugin_steps.push((sub, g.clone()));
                continue;
            }
            let mut exec = self.exec.clone();
            exec.drain = false;
            let gs = gs.clone();
            set.spawn(async move {
                let evs = exec.lifecycle(&gs).await;
                (j, sub, gs, evs)
            });
        }
        reporter.progress(&format!("running {} steps at once", group.len()));
        for (sub, g) in plugin_steps {
            Box::pin(self.step(&sub, &g, reporter)).await;
        }
        let mut results = Vec::new();
        while let Some(r) = set.join_next().await {
            match r {
                Ok(r) => results.push(r),
                Err(e) => tracing::error!(error = %e, "simulation task failed"),
            }
        }
        reporter.progress("");
        results.sort_by_key(|r| r.0);
        let mut ok = true;
        for (_, sub, gs, evs) in results {
            reporter.report(&Record::Step {
                index: sub.clone(),
                label: gs.label.clone(),
                action: gs.actions().first().copied().unwrap_or("(none)").to_owned(),
                target: step_target(&gs),
            });
            let sub_ok = self.report_events(evs, reporter);
            ok &= sub_ok;
            self.end_step(&sub, &gs, sub_ok, Vec::new(), reporter);
        }
        ok
    }

    fn end_step(
        &mut self,
        index: &str,
        st: &Step,
        ok: bool,
        calls: Vec<Call>,
        reporter: &mut dyn Reporter,
    ) {
        if let Some(l) = &st.label {
            self.outcomes.insert(l.clone(), ok);
        }
        reporter.report(&Record::StepEnd {
            index: index.to_owned(),
            ok,
            expected: st.expect.as_ref().map(|e| e.value.clone()),
            calls,
        });
        if let Some(e) = &st.expect {
            let want_ok = e.value == "ok";
            let held = want_ok == ok;
            if held {
                self.summary.expectations_held += 1;
            } else {
                self.summary.expectations_failed += 1;
            }
            reporter.report(&Record::Expectation {
                at: self.exec.scenario.pos(&e.referenced).to_string(),
                step: Some(index.to_owned()),
                what: format!(
                    "step {index} ({}) {}",
                    step_target(st),
                    if want_ok { "succeeds" } else { "fails" }
                ),
                held,
                detail: if held {
                    String::new()
                } else if ok {
                    "it succeeded".into()
                } else {
                    "it failed".into()
                },
            });
        }
    }

    fn report_events(&mut self, evs: Vec<EventResult>, reporter: &mut dyn Reporter) -> bool {
        let mut ok = true;
        for e in evs {
            self.summary.events += 1;
            if !e.ok {
                self.summary.failed_events += 1;
                ok = false;
            }
            self.summary.plugin_failures += e.plugin_failures.len();
            reporter.report(&Record::Event(e));
        }
        ok
    }
}

fn step_target(st: &Step) -> String {
    [
        &st.run_pod,
        &st.update_pod,
        &st.stop_pod,
        &st.remove_pod,
        &st.create,
        &st.start,
        &st.update,
        &st.stop,
        &st.remove,
        &st.up,
        &st.down,
        &st.start_plugin,
        &st.kill_plugin,
        &st.restart_plugin,
        &st.sleep,
    ]
    .into_iter()
    .flatten()
    .map(|s| s.value.clone())
    .next()
    .unwrap_or_else(|| {
        st.parallel
            .as_ref()
            .map(|g| format!("{} steps", g.len()))
            .unwrap_or_default()
    })
}
