//! The consistency checks of a parsed scenario: every name refers to
//! something (plugins, events, pods, containers, owner fields), every
//! value parses, every step has one action. Each error has the position
//! of what is wrong.

use std::collections::BTreeSet;

use serde_saphyr::{Location, Spanned};

use super::values::{closest, field_names, unknown_event};
use super::{
    Expectation, PLUGIN_OPERATIONS, ParseOptions, PluginSpec, ResourcesSpec, Scenario, Step,
    event_names, parse_duration, parse_event,
};
use crate::error::{Error, Unknown};

/// Names the scenario may refer to plugins by.
struct Plugins<'a> {
    /// `name` and `NN-name` of the scenario's plugins, then the extra ones.
    known: Vec<String>,
    opts: &'a ParseOptions,
}

impl Plugins<'_> {
    fn has(&self, name: &str) -> bool {
        self.known.iter().any(|k| k == name)
    }
}

impl Scenario {
    fn unknown(&self, loc: &Location, what: Unknown) -> Error {
        Error::Unknown {
            at: self.pos(loc),
            what,
        }
    }

    /// Consistency checks with positions.
    pub(super) fn check(&self, opts: &ParseOptions) -> Result<(), Error> {
        self.check_runtime()?;
        let mut names = BTreeSet::new();
        for sp in &self.plugins {
            if !names.insert(sp.value.name.clone()) {
                return Err(self.invalid(
                    &sp.referenced,
                    format!("plugin {:?} is listed twice", sp.value.name),
                ));
            }
            self.check_plugin(&sp.value, &sp.referenced)?;
        }
        self.check_pods()?;
        let mut labels = BTreeSet::new();
        for s in &self.steps {
            self.check_step(s, &mut labels, false)?;
        }
        let plugins = self.plugin_names(opts);
        for (name, p) in &self.runtime.policies {
            self.check_plugin_ref(&plugins, name, &p.referenced)?;
        }
        for e in &self.expect {
            self.check_expectation(e, &labels, &plugins)?;
        }
        Ok(())
    }

    fn plugin_names<'a>(&self, opts: &'a ParseOptions) -> Plugins<'a> {
        let mut known = Vec::new();
        for (i, p) in self.plugins.iter().enumerate() {
            known.push(p.value.name.clone());
            known.push(format!("{}-{}", self.plugin_index(i), p.value.name));
        }
        for x in &opts.extra_plugins {
            known.push(x.clone());
            if let Ok((_, name)) = nri_api::parse_plugin_file_name(x) {
                known.push(name.to_owned());
            }
        }
        Plugins { known, opts }
    }

    /// `name` is a plugin of the scenario or of the command line; with a
    /// plugin directory, any name may be one of its plugins (the run
    /// reports those it does not have).
    fn check_plugin_ref(
        &self,
        plugins: &Plugins<'_>,
        name: &str,
        at: &Location,
    ) -> Result<(), Error> {
        if plugins.has(name) || plugins.opts.plugin_dir {
            return Ok(());
        }
        // List names only (not also NN-name), in declaration order.
        let mut shown: Vec<String> = self.plugins.iter().map(|p| p.value.name.clone()).collect();
        shown.extend(plugins.opts.extra_plugins.iter().cloned());
        Err(self.unknown(
            at,
            Unknown::Plugin {
                name: name.to_owned(),
                suggestion: closest(name, &plugins.known),
                known: shown,
            },
        ))
    }

    fn check_runtime(&self) -> Result<(), Error> {
        let rt = &self.runtime;
        for d in [&rt.request_timeout, &rt.registration_timeout]
            .into_iter()
            .flatten()
        {
            parse_duration(&d.value).map_err(|e| self.invalid(&d.referenced, e.to_string()))?;
        }
        if let Some(p) = &rt.default_policy {
            self.check_policy(p)?;
        }
        for p in rt.policies.values() {
            self.check_policy(p)?;
        }
        Ok(())
    }

    fn check_plugin(&self, p: &PluginSpec, at: &Location) -> Result<(), Error> {
        nri_api::check_plugin_name(&p.name)
            .map_err(|e| self.invalid(at, format!("plugin name {:?}: {e}", p.name)))?;
        if let Some(ix) = &p.index {
            nri_api::check_plugin_index(&ix.value).map_err(|e| {
                self.invalid(&ix.referenced, format!("plugin index {:?}: {e}", ix.value))
            })?;
        }
        self.check_plugin_kind(p, at)?;
        if let Some(pol) = &p.policy {
            self.check_policy(pol)?;
        }
        for (ev, pol) in &p.event_policy {
            self.check_policy(pol)?;
            parse_event(ev).map_err(|u| self.unknown(&pol.referenced, u))?;
        }
        if let Some(t) = &p.timeout {
            parse_duration(&t.value).map_err(|e| self.invalid(&t.referenced, e.to_string()))?;
        }
        let plugin = |what: &str| self.invalid(at, format!("plugin {:?}: {what}", p.name));
        if p.launch && p.path.is_none() {
            return Err(plugin("`launch` applies to executables (`path`)"));
        }
        if p.launch && !p.start {
            return Err(plugin("a launched plugin starts with the runtime"));
        }
        if p.config_text.is_some() && !p.launch {
            return Err(plugin(
                "`config-text` needs `launch: true` (only launched plugins get a configuration)",
            ));
        }
        if let Some(evs) = &p.events {
            if p.path.is_some() {
                return Err(self.invalid(
                    &evs.referenced,
                    "`events` applies to bundled plugins only (an executable subscribes itself)",
                ));
            }
            for e in &evs.value {
                parse_event(e).map_err(|u| self.unknown(&evs.referenced, u))?;
            }
        }
        Ok(())
    }

    /// Exactly one of `bundled` (a known kind, valid settings) and `path`.
    fn check_plugin_kind(&self, p: &PluginSpec, at: &Location) -> Result<(), Error> {
        match (&p.bundled, &p.path) {
            (Some(b), None) => {
                if crate::bundled::Kind::parse(&b.value).is_none() {
                    return Err(self.invalid(
                        &b.referenced,
                        format!(
                            "unknown bundled plugin {:?}; expected one of: {}",
                            b.value,
                            crate::bundled::Kind::names().join(", ")
                        ),
                    ));
                }
                crate::bundled::check_config(&b.value, &p.config)
                    .map_err(|m| self.invalid(at, format!("plugin {:?}: {m}", p.name)))
            }
            (None, Some(_)) => Ok(()),
            _ => Err(self.invalid(
                at,
                format!(
                    "plugin {:?}: expected exactly one of `bundled: KIND` or `path: EXECUTABLE`",
                    p.name
                ),
            )),
        }
    }

    fn check_pods(&self) -> Result<(), Error> {
        let mut pods = BTreeSet::new();
        for sp in &self.pods {
            let p = &sp.value;
            if p.name.is_empty() || p.name.contains('/') {
                return Err(self.invalid(
                    &sp.referenced,
                    format!("pod name {:?} must be non-empty without '/'", p.name),
                ));
            }
            if !pods.insert(p.name.clone()) {
                return Err(
                    self.invalid(&sp.referenced, format!("pod {:?} is listed twice", p.name))
                );
            }
            let mut ctrs = BTreeSet::new();
            for c in &p.containers {
                if !ctrs.insert(c.name.clone()) {
                    return Err(self.invalid(
                        &sp.referenced,
                        format!("pod {:?}: container {:?} is listed twice", p.name, c.name),
                    ));
                }
                if let Some(r) = &c.resources {
                    self.check_resources(r)?;
                }
            }
        }
        Ok(())
    }

    fn check_policy(&self, p: &Spanned<String>) -> Result<(), Error> {
        nri_runtime::FailurePolicy::parse(&p.value)
            .map(|_| ())
            .ok_or_else(|| {
                self.invalid(
                    &p.referenced,
                    format!(
                        "unknown failure policy {:?}; expected ignore, fail or required",
                        p.value
                    ),
                )
            })
    }

    fn check_resources(&self, r: &ResourcesSpec) -> Result<(), Error> {
        if let Some(m) = &r.memory {
            for q in [&m.limit, &m.reservation, &m.swap].into_iter().flatten() {
                q.value
                    .bytes()
                    .map_err(|e| self.invalid(&q.referenced, e.to_string()))?;
            }
        }
        Ok(())
    }

    /// `name` is a pod of the scenario.
    fn check_pod_ref(&self, name: &Spanned<String>) -> Result<(), Error> {
        if self.pod(&name.value).is_some() {
            return Ok(());
        }
        Err(self.unknown(
            &name.referenced,
            Unknown::Pod {
                pod: name.value.clone(),
                pods: self.pods.iter().map(|p| p.value.name.clone()).collect(),
            },
        ))
    }

    /// `target` is `POD/CONTAINER` of a container of the scenario.
    fn check_container_ref(&self, target: &Spanned<String>) -> Result<(), Error> {
        let at = &target.referenced;
        let Some((pod, ctr)) = target.value.split_once('/') else {
            let example = self
                .pods
                .iter()
                .find_map(|p| {
                    let c = p.value.containers.first()?;
                    Some(format!("{}/{}", p.value.name, c.name))
                })
                .unwrap_or_else(|| "web/app".into());
            return Err(self.unknown(
                at,
                Unknown::ContainerRef {
                    target: target.value.clone(),
                    example,
                },
            ));
        };
        let Some(p) = self.pod(pod) else {
            return self.check_pod_ref(&Spanned {
                value: pod.to_owned(),
                referenced: *at,
                defined: target.defined,
            });
        };
        if p.containers.iter().any(|c| c.name == ctr) {
            return Ok(());
        }
        Err(self.unknown(
            at,
            Unknown::Container {
                pod: pod.to_owned(),
                container: ctr.to_owned(),
                containers: p.containers.iter().map(|c| c.name.clone()).collect(),
            },
        ))
    }

    fn check_step(
        &self,
        s: &Spanned<Step>,
        labels: &mut BTreeSet<String>,
        nested: bool,
    ) -> Result<(), Error> {
        let st = &s.value;
        let at = &s.referenced;
        let actions = st.actions();
        if actions.len() != 1 {
            return Err(self.invalid(
                at,
                format!(
                    "a step needs exactly one action ({}), found {}",
                    Step::ACTIONS.join(", "),
                    if actions.is_empty() {
                        "none".to_owned()
                    } else {
                        actions.join(" and ")
                    }
                ),
            ));
        }
        if let Some(l) = &st.label
            && !labels.insert(l.clone())
        {
            return Err(self.invalid(at, format!("step label {l:?} is used twice")));
        }
        if let Some(e) = &st.expect {
            self.check_ok_fail(e)?;
        }
        self.check_step_targets(st)?;
        if let Some(d) = &st.sleep {
            parse_duration(&d.value).map_err(|e| self.invalid(&d.referenced, e.to_string()))?;
        }
        if st.resources.is_some() && st.update.is_none() && st.update_pod.is_none() {
            return Err(self.invalid(at, "`resources` goes with `update` or `update-pod`"));
        }
        if let Some(r) = &st.resources {
            self.check_resources(r)?;
        }
        if let Some(group) = &st.parallel {
            if nested {
                return Err(self.invalid(at, "`parallel` cannot be nested"));
            }
            for g in group {
                self.check_step(g, labels, true)?;
            }
        }
        Ok(())
    }

    fn check_ok_fail(&self, v: &Spanned<String>) -> Result<(), Error> {
        if matches!(v.value.as_str(), "ok" | "fail") {
            return Ok(());
        }
        Err(self.invalid(
            &v.referenced,
            format!("expected `ok` or `fail`, got {:?}", v.value),
        ))
    }

    /// The pods, containers and plugins a step acts on exist.
    fn check_step_targets(&self, st: &Step) -> Result<(), Error> {
        for pod in [
            &st.run_pod,
            &st.update_pod,
            &st.stop_pod,
            &st.remove_pod,
            &st.up,
            &st.down,
        ]
        .into_iter()
        .flatten()
        {
            self.check_pod_ref(pod)?;
        }
        for c in [&st.create, &st.start, &st.update, &st.stop, &st.remove]
            .into_iter()
            .flatten()
        {
            self.check_container_ref(c)?;
        }
        for p in [&st.start_plugin, &st.kill_plugin, &st.restart_plugin]
            .into_iter()
            .flatten()
        {
            match self.plugin(&p.value) {
                None => {
                    let names: Vec<String> =
                        self.plugins.iter().map(|p| p.value.name.clone()).collect();
                    return Err(self.unknown(
                        &p.referenced,
                        Unknown::Plugin {
                            name: p.value.clone(),
                            suggestion: closest(&p.value, &names),
                            known: names,
                        },
                    ));
                }
                Some((_, pl)) if pl.launch => {
                    return Err(self.invalid(
                        &p.referenced,
                        format!(
                            "plugin {:?} is launched by the runtime: it cannot be started, killed or restarted by a step",
                            p.value
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    fn check_expectation(
        &self,
        e: &Spanned<Expectation>,
        labels: &BTreeSet<String>,
        plugins: &Plugins<'_>,
    ) -> Result<(), Error> {
        let ex = &e.value;
        let at = &e.referenced;
        let kinds = [
            ex.container.is_some(),
            ex.plugin.is_some(),
            ex.step.is_some(),
            ex.conflict.is_some(),
        ];
        if kinds.iter().filter(|k| **k).count() != 1 {
            return Err(self.invalid(
                at,
                "an expectation needs exactly one of `container`, `plugin`, `step` or `conflict`",
            ));
        }
        if let Some(c) = &ex.container {
            self.check_container_expectation(ex, c, plugins)?;
        }
        if let Some(p) = &ex.plugin {
            self.check_plugin_expectation(ex, p, at, plugins)?;
        }
        if let Some(b) = &ex.by {
            if ex.conflict.is_none() {
                return Err(self.invalid(&b.referenced, "`by` goes with `conflict`"));
            }
            self.check_plugin_ref(plugins, &b.value, &b.referenced)?;
        }
        if let Some(s) = &ex.step {
            if !labels.contains(&s.value) {
                return Err(self.invalid(
                    &s.referenced,
                    format!("no step has the label {:?}", s.value),
                ));
            }
            match &ex.outcome {
                Some(o) => self.check_ok_fail(o)?,
                None => {
                    return Err(
                        self.invalid(&s.referenced, "a step expectation needs `outcome: ok|fail`")
                    );
                }
            }
        }
        Ok(())
    }

    fn check_container_expectation(
        &self,
        ex: &Expectation,
        c: &Spanned<String>,
        plugins: &Plugins<'_>,
    ) -> Result<(), Error> {
        self.check_container_ref(c)?;
        for (list, key) in [(&ex.mounts, "destination"), (&ex.devices, "path")] {
            if list.iter().any(|i| i.key(key).is_none()) {
                return Err(self.invalid(
                    &c.referenced,
                    format!("each entry of `mounts`/`devices` is a string or a map with `{key}`"),
                ));
            }
        }
        if let Some(r) = &ex.resources {
            self.check_resources(r)?;
        }
        let fields = field_names();
        for (owned, plugin) in &ex.owners {
            let field = owned.split_once('/').map_or(owned.as_str(), |(f, _)| f);
            if !fields.iter().any(|f| f == field) {
                return Err(self.unknown(
                    &plugin.referenced,
                    Unknown::OwnerField {
                        field: field.to_owned(),
                        suggestion: closest(field, &fields),
                        valid: fields,
                    },
                ));
            }
            self.check_plugin_ref(plugins, &plugin.value, &plugin.referenced)?;
        }
        Ok(())
    }

    fn check_plugin_expectation(
        &self,
        ex: &Expectation,
        p: &Spanned<String>,
        at: &Location,
        plugins: &Plugins<'_>,
    ) -> Result<(), Error> {
        if ex.event.is_some() != (ex.calls.is_some() || ex.min_calls.is_some()) {
            return Err(self.invalid(
                at,
                "a plugin expectation with `event` needs `calls` or `min-calls` (and they need `event`)",
            ));
        }
        if ex.event.is_none() && ex.registered.is_none() {
            return Err(self.invalid(
                &p.referenced,
                "a plugin expectation needs `event` with `calls`/`min-calls`, or `registered`",
            ));
        }
        if let Some(ev) = &ex.event {
            let mut valid = event_names();
            valid.extend(PLUGIN_OPERATIONS.iter().map(|s| (*s).to_owned()));
            if !valid
                .iter()
                .any(|v| v.eq_ignore_ascii_case(ev.value.trim()))
            {
                return Err(self.unknown(&ev.referenced, unknown_event(&ev.value, valid)));
            }
        }
        self.check_plugin_ref(plugins, &p.value, &p.referenced)
    }
}
