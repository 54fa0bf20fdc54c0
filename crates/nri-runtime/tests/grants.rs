//! Grants: a plugin is admitted only under a grant that names it and
//! whose identity requirements its kernel identity meets (deny by
//! default); what it may change is held to that grant on every path:
//! adjustments, updates and evictions in answers, unsolicited
//! UpdateContainers, Synchronize answers, and the pods it may touch. The
//! identity is in `Adaptation::plugins()` and reaches in-process
//! validators (the default validator's per-role overrides).
//! Budget: about 2 s.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use common::*;
use nri_api::api::*;
use nri_api::{Capability, CapabilitySet};
use nri_runtime::validate::{DefaultValidatorConfig, DefaultValidatorRole};
use nri_runtime::{
    Config, ConfigFormat, Error, FailurePolicy, Grant, GrantIdentity, Metrics, PluginFailure,
    PodSelector, RegistrationFailure,
};
use nri_ttrpc::Code;

/// Records grant refusals and admitted identities.
#[derive(Default)]
struct Seen {
    refused: Mutex<Vec<(String, String, String)>>,
    admitted: Mutex<Vec<(String, Option<String>)>>,
}

impl Metrics for Seen {
    fn grant_refused(&self, plugin: &str, operation: &str, field: &str) {
        let r = (plugin.into(), operation.into(), field.into());
        self.refused.lock().unwrap().push(r);
    }
    fn plugin_identity(
        &self,
        plugin: &str,
        _identity: &nri_runtime::PluginIdentity,
        grant: Option<&str>,
    ) {
        let a = (plugin.into(), grant.map(str::to_owned));
        self.admitted.lock().unwrap().push(a);
    }
}

impl Seen {
    fn refused(&self) -> Vec<(String, String, String)> {
        self.refused.lock().unwrap().clone()
    }
}

fn kinds(list: &[Capability]) -> CapabilitySet {
    CapabilitySet::of(list)
}

fn me() -> u32 {
    std::process::id()
}

fn my_uid() -> u32 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(2).unwrap().parse().unwrap()
}

fn identity(f: impl FnOnce(&mut GrantIdentity)) -> GrantIdentity {
    let mut i = GrantIdentity::default();
    f(&mut i);
    i
}

fn registration_error(e: &nri_ttrpc::Error) -> String {
    e.to_string()
}

#[tokio::test]
async fn without_grants_everything_is_allowed_and_the_identity_is_known() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let p = FakePlugin::new("10", "any").on_create(|_| {
        let mut r = CreateContainerResponse::default();
        r.adjust
            .get_or_insert_with(Default::default)
            .add_hooks(Hooks::default());
        r.adjust
            .get_or_insert_with(Default::default)
            .linux_mut()
            .sysctl
            .insert("net.core.somaxconn".into(), "1".into());
        r
    });
    let _c = p.connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    let info = &a.plugins()[0];
    assert_eq!(info.grant, None);
    let id = &info.identity;
    assert_eq!(id.uid, Some(my_uid()));
    assert_eq!(id.pid, Some(me()), "the peer is this test process");
    assert_eq!(id.executable, std::env::current_exe().ok());
    assert_eq!(id.pod, None, "not in a container the runtime lists");
    a.create_container(&pod("p"), &ctr("p", "c")).await.unwrap();
    a.stop().await;
}

#[tokio::test]
async fn a_plugin_no_grant_names_is_refused_at_registration() {
    let env = TestEnv::new();
    let a = env.start(env.builder().grant(Grant::new(["logger"]))).await;
    let err = FakePlugin::new("10", "intruder")
        .connect(&env.socket)
        .await
        .err()
        .expect("refused");
    let text = registration_error(&err);
    assert!(
        text.contains("refused by the grants")
            && text.contains("no grant names plugin 10-intruder"),
        "{text}"
    );
    assert!(a.plugins().is_empty());
    // The granted name is admitted.
    let _c = FakePlugin::new("20", "logger")
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    let info = &a.plugins()[0];
    assert_eq!(info.grant.as_ref().unwrap().plugins, ["logger"]);
    a.stop().await;
}

#[tokio::test]
async fn an_identity_that_does_not_meet_the_grant_is_refused_naming_what_is_wrong() {
    let exe = std::env::current_exe().unwrap();
    for (identity, wanted) in [
        (
            identity(|i| i.uids = vec![my_uid() + 4242]),
            format!("its uid {} is not one of [{}]", my_uid(), my_uid() + 4242),
        ),
        (
            identity(|i| i.executables = vec!["/usr/bin/the-real-logger".into()]),
            format!(
                "its executable {} matches none of [\"/usr/bin/the-real-logger\"]",
                exe.display()
            ),
        ),
        (
            identity(|i| i.pod = Some(PodSelector::namespaces(["kube-system"]))),
            "it does not run in a container of this runtime".to_owned(),
        ),
    ] {
        let env = TestEnv::new();
        let seen = Arc::new(Seen::default());
        let grant = Grant::new(["logger"]).identity(identity);
        let a = env
            .start(env.builder().metrics(seen.clone()).grant(grant))
            .await;
        let err = FakePlugin::new("10", "logger")
            .connect(&env.socket)
            .await
            .err()
            .expect("refused");
        let text = registration_error(&err);
        assert!(text.contains(&wanted), "{text}\nwanted: {wanted}");
        assert!(text.contains("grant #0 (plugins logger)"), "{text}");
        assert!(a.plugins().is_empty());
        assert!(seen.admitted.lock().unwrap().is_empty());
        a.stop().await;
    }
}

#[tokio::test]
async fn the_first_grant_whose_name_and_identity_match_admits() {
    let exe = std::env::current_exe().unwrap();
    let env = TestEnv::new();
    let seen = Arc::new(Seen::default());
    let stranger = Grant::new(["*logger"])
        .role("stranger")
        .identity(identity(|i| i.uids = vec![my_uid() + 1]))
        .allow(kinds(&[Capability::AdjustEnv]));
    let mut real = GrantIdentity::default();
    real.executables = vec![format!("{}*", exe.parent().unwrap().display())];
    real.uids = vec![my_uid()];
    let logger = Grant::new(["10-logger"])
        .role("observer")
        .identity(real)
        .allow(kinds(&[Capability::AdjustAnnotations]));
    let b = env
        .builder()
        .metrics(seen.clone())
        .grant(stranger)
        .grant(logger.clone());
    let a = env.start(b).await;
    let _c = FakePlugin::new("10", "logger")
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    let info = &a.plugins()[0];
    assert_eq!(info.grant.as_ref(), Some(&logger));
    assert_eq!(info.identity.executable.as_ref(), Some(&exe));
    let admitted = seen.admitted.lock().unwrap().clone();
    assert_eq!(admitted.len(), 1);
    assert!(
        admitted[0]
            .1
            .as_deref()
            .unwrap()
            .starts_with("grant #1 (role \"observer\""),
        "{admitted:?}"
    );
    a.stop().await;
}

#[tokio::test]
async fn a_plugin_in_a_pod_of_this_runtime_is_known_by_its_pod() {
    let env = TestEnv::new();
    // The runtime lists a container whose process is this test process
    // (a plugin deployed as a DaemonSet pod).
    let mut p = pod("logger-pod");
    p.namespace = "kube-system".into();
    p.labels.insert("app".into(), "nri-logger".into());
    env.runtime.add_pod(p);
    let mut c = ctr("logger-pod", "logger-ctr");
    c.pid = me();
    env.runtime.add_container(c);
    let grant = Grant::new(["logger"]).identity(identity(|i| {
        i.pod = Some(PodSelector::namespaces(["kube-system"]).label("app", "nri-logger"));
    }));
    let a = env.start(env.builder().grant(grant)).await;
    let _c = FakePlugin::new("10", "logger")
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    let found = a.plugins()[0].identity.pod.clone().unwrap();
    assert_eq!(found.namespace, "kube-system");
    assert_eq!(found.name, "logger-pod-name");
    assert_eq!(found.container_id, "logger-ctr");
    assert_eq!(found.labels["app"], "nri-logger");
    a.stop().await;

    // The wrong label: refused, naming the pod and the label.
    let env2 = TestEnv::new();
    let mut p = pod("x");
    p.namespace = "kube-system".into();
    p.labels.insert("app".into(), "other".into());
    env2.runtime.add_pod(p);
    let mut c = ctr("x", "xc");
    c.pid = me();
    env2.runtime.add_container(c);
    let grant = Grant::new(["logger"]).identity(identity(|i| {
        i.pod = Some(PodSelector::namespaces(["kube-system"]).label("app", "nri-logger"));
    }));
    let a = env2.start(env2.builder().grant(grant)).await;
    let err = FakePlugin::new("10", "logger")
        .connect(&env2.socket)
        .await
        .err()
        .expect("refused");
    let text = registration_error(&err);
    assert!(
        text.contains("its pod kube-system/x-name: label app=\"other\", not \"nri-logger\""),
        "{text}"
    );
    a.stop().await;
}

fn other_update(id: &str) -> ContainerUpdate {
    let mut u = ContainerUpdate::new(id);
    u.linux_resources_mut().pids = Some(LinuxPids { limit: 64 });
    u
}

#[tokio::test]
async fn updates_and_evictions_outside_the_grant_are_refused_on_every_path() {
    let env = TestEnv::new();
    env.runtime.add_pod(pod("p"));
    env.runtime.add_container(ctr("p", "other"));
    let seen = Arc::new(Seen::default());
    // Adjusts annotations only: no updates, no evictions, no unsolicited.
    let grant = Grant::new(["tuner"]).allow(kinds(&[Capability::AdjustAnnotations]));
    let b = env.builder().metrics(seen.clone()).grant(grant);
    let a = env.start(b).await;
    let mut p = FakePlugin::new("10", "tuner")
        .on_create(|_| CreateContainerResponse {
            update: vec![other_update("other")],
            ..Default::default()
        })
        .on_update(|_| UpdateContainerResponse {
            evict: vec![ContainerEviction::new("other", "make room")],
            ..Default::default()
        })
        .on_stop(|_| StopContainerResponse {
            update: vec![other_update("other")],
        });
    p.sync_updates = vec![other_update("other")];
    let c = p.connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    // Synchronize: dropped, the plugin stays.
    assert!(env.runtime.updates.lock().unwrap().is_empty());
    // CreateContainer: refused for the plugin (policy fail fails it).
    let err = a
        .create_container(&pod("p"), &ctr("p", "new"))
        .await
        .unwrap_err();
    assert_not_granted(
        &err,
        "update",
        "CreateContainer answer of plugin 10-tuner updates container \"other\", which grant #0 (plugins tuner) does not allow (it allows: annotations; no updates, no evictions, no unsolicited updates)",
    );
    // UpdateContainer: the eviction is refused.
    let err = a
        .update_container(&pod("p"), &ctr("p", "other"), None)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("evicts container \"other\""),
        "{err}"
    );
    // StopContainer never fails: the update is dropped and reported.
    let out = a
        .stop_container(&pod("p"), &ctr("p", "other"))
        .await
        .unwrap();
    assert!(out.updates.is_empty());
    assert_eq!(out.errors.len(), 1);
    assert!(matches!(
        out.errors[0].failure,
        PluginFailure::NotGranted { .. }
    ));
    // Unsolicited: PERMISSION_DENIED.
    let e = c
        .update_containers(UpdateContainersRequest {
            update: vec![other_update("other")],
            evict: Vec::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e}");
    assert!(
        e.to_string()
            .contains("does not allow unsolicited container updates"),
        "{e}"
    );
    assert!(env.runtime.updates.lock().unwrap().is_empty());
    assert!(env.runtime.evictions.lock().unwrap().is_empty());
    assert_refused(
        &seen,
        &[
            ("Synchronize", "update"),
            ("CreateContainer", "update"),
            ("UpdateContainer", "evict"),
            ("StopContainer", "update"),
            ("UpdateContainers", "UpdateContainers"),
        ],
    );
    a.stop().await;
}

/// `err` is plugin 10-tuner's answer refused as not granted, for `field`,
/// with a reason containing `reason`.
fn assert_not_granted(err: &Error, want_field: &str, want_reason: &str) {
    match err {
        Error::PluginFailed {
            plugin,
            cause: PluginFailure::NotGranted { field, reason },
            ..
        } => {
            assert_eq!((plugin.as_str(), field.as_str()), ("10-tuner", want_field));
            assert!(reason.contains(want_reason), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

/// The grant refusals `seen` counted, by operation and field, in order.
fn assert_refused(seen: &Seen, want: &[(&str, &str)]) {
    let fields: Vec<(String, String)> = seen
        .refused()
        .into_iter()
        .map(|(_, op, f)| (op, f))
        .collect();
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(o, f)| ((*o).to_owned(), (*f).to_owned()))
        .collect();
    assert_eq!(fields, want);
}

#[tokio::test]
async fn granted_updates_need_the_kinds_of_what_they_set_and_unsolicited_its_own_grant() {
    let env = TestEnv::new();
    env.runtime.add_pod(pod("p"));
    env.runtime.add_container(ctr("p", "other"));
    let mut allow = kinds(&[Capability::AdjustLinuxPidLimit]);
    allow.insert(Capability::UpdateContainers);
    let grant = Grant::new(["tuner"]).allow(allow).unsolicited(true);
    let a = env.start(env.builder().grant(grant)).await;
    let c = FakePlugin::new("10", "tuner")
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    c.update_containers(UpdateContainersRequest {
        update: vec![other_update("other")],
        evict: Vec::new(),
    })
    .await
    .unwrap();
    assert_eq!(env.runtime.updates.lock().unwrap().len(), 1);
    let mut mem = ContainerUpdate::new("other");
    mem.set_linux_memory_limit(1 << 20);
    let e = c
        .update_containers(UpdateContainersRequest {
            update: vec![mem],
            evict: Vec::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert!(
        e.to_string().contains(
            "sets linux.resources.memory.limit (ADJUST_LINUX_MEMORY_LIMIT) of container \"other\""
        ),
        "{e}"
    );
    let e = c
        .update_containers(UpdateContainersRequest {
            update: Vec::new(),
            evict: vec![ContainerEviction::new("other", "x")],
        })
        .await
        .unwrap_err();
    assert!(e.to_string().contains("evicts container"), "{e}");
    a.stop().await;
}

#[tokio::test]
async fn changes_to_pods_outside_the_grant_are_refused_and_policy_ignore_drops_them() {
    let env = TestEnv::new();
    let mut pa = pod("a");
    pa.namespace = "tenant-a".into();
    let mut pb = pod("b");
    pb.namespace = "tenant-b".into();
    env.runtime.add_pod(pa.clone());
    env.runtime.add_pod(pb.clone());
    env.runtime.add_container(ctr("a", "a0"));
    env.runtime.add_container(ctr("b", "b0"));
    let mut allow = kinds(&[Capability::AdjustEnv, Capability::AdjustLinuxPidLimit]);
    allow.insert(Capability::UpdateContainers);
    let grant = Grant::new(["tenant"])
        .allow(allow)
        .pods(PodSelector::namespaces(["tenant-a"]));
    let target = Arc::new(Mutex::new(String::from("a0")));
    let t = target.clone();
    let p = FakePlugin::new("10", "tenant").on_create(move |_| {
        let mut r = CreateContainerResponse::default();
        r.adjust
            .get_or_insert_with(Default::default)
            .add_env("TENANT", "a");
        r.update = vec![other_update(&t.lock().unwrap())];
        r
    });
    let b = env
        .builder()
        .grant(grant)
        .failure_policy("tenant", FailurePolicy::Ignore);
    let a = env.start(b).await;
    let _c = p.connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    // In its namespace, updating a container of its namespace: applied.
    let out = a.create_container(&pa, &ctr("a", "a1")).await.unwrap();
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(out.updates.len(), 1);
    // Updating a container of another namespace (found through the
    // runtime's listing): refused; ignore drops the whole answer.
    *target.lock().unwrap() = "b0".into();
    let out = a.create_container(&pa, &ctr("a", "a2")).await.unwrap();
    assert!(out.updates.is_empty() && out.adjustment.env.is_empty());
    assert!(
        out.errors[0].to_string().contains("changes container \"b0\" of pod tenant-b/b-name, outside the pods of grant #0 (plugins tenant) (namespaces [\"tenant-a\"])"),
        "{}",
        out.errors[0]
    );
    // A container the runtime does not list: refused too.
    *target.lock().unwrap() = "ghost".into();
    let out = a.create_container(&pa, &ctr("a", "a3")).await.unwrap();
    assert!(
        out.errors[0]
            .to_string()
            .contains("which the runtime does not list")
    );
    // Adjusting a container of another namespace: refused.
    *target.lock().unwrap() = "a0".into();
    let out = a.create_container(&pb, &ctr("b", "b1")).await.unwrap();
    assert!(out.adjustment.env.is_empty());
    assert!(
        out.errors[0]
            .to_string()
            .contains("changes container \"b1\" of pod tenant-b/b-name"),
        "{}",
        out.errors[0]
    );
    a.stop().await;
}

fn hooks_answer() -> CreateContainerResponse {
    let mut r = CreateContainerResponse::default();
    r.adjust
        .get_or_insert_with(Default::default)
        .add_hooks(Hooks {
            prestart: vec![Hook {
                path: "/bin/hook".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
    r
}

#[tokio::test]
async fn the_default_validator_judges_each_plugin_by_its_grants_role() {
    let env = TestEnv::new();
    let mut dv = DefaultValidatorConfig::default();
    dv.enable = true;
    dv.reject_oci_hook_adjustment = true;
    let mut trusted = DefaultValidatorRole::default();
    trusted.reject_oci_hook_adjustment = Some(false);
    dv.roles = BTreeMap::from([("hooks-admin".to_owned(), trusted)]);
    let all = nri_runtime::parse_adjustment_kinds(["all"]).unwrap();
    let b = env
        .builder()
        .default_validator(dv)
        .grant(Grant::new(["injector"]).role("hooks-admin").allow(all))
        .grant(Grant::new(["other"]).allow(all));
    let a = env.start(b).await;
    let _i = FakePlugin::new("10", "injector")
        .on_create(|_| hooks_answer())
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    a.create_container(&pod("p"), &ctr("p", "c1"))
        .await
        .unwrap();
    let _o = FakePlugin::new("20", "other")
        .on_create(|_| hooks_answer())
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 2).await;
    let err = a
        .create_container(&pod("p"), &ctr("p", "c2"))
        .await
        .unwrap_err();
    match err {
        Error::ValidationRejected { reason, .. } => {
            assert!(
                reason.contains("plugin \"20-other\" attempted restricted OCI hook"),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    a.stop().await;
}

#[test]
fn the_grants_section_of_the_configuration_file() {
    let yaml = r#"
grants:
  - plugins: [logger, "*-logger"]
    role: observer
    identity:
      uids: [0]
      executables: [/usr/local/bin/nri-logger]
      pod: { namespaces: [kube-system], labels: { app: nri-logger } }
    adjust: [annotations]
  - plugins: [resource-manager]
    adjust: [resources, ADJUST_LINUX_OOM_SCORE]
    updates: true
    evictions: true
    unsolicited: true
    pods: { namespaces: [batch] }
default-validator:
  reject-oci-hook-adjustment: true
  roles:
    observer: { reject-oci-hook-adjustment: false, reject-fields: [Env] }
"#;
    let mut c = Config::new("rt", "1");
    c.apply_str("nri.yaml", ConfigFormat::Yaml, yaml).unwrap();
    let g = c.grants.clone().unwrap();
    assert_eq!(g.len(), 2);
    assert_eq!(g[0].plugins, ["logger", "*-logger"]);
    assert_eq!(g[0].role.as_deref(), Some("observer"));
    assert_eq!(g[0].identity.uids, [0]);
    assert_eq!(g[0].identity.executables, ["/usr/local/bin/nri-logger"]);
    let sel = g[0].identity.pod.as_ref().unwrap();
    assert_eq!(sel.namespaces, ["kube-system"]);
    assert_eq!(g[0].allow, kinds(&[Capability::AdjustAnnotations]));
    assert!(!g[0].unsolicited);
    let r = &g[1];
    for c in [
        Capability::AdjustLinuxCpu,
        Capability::AdjustLinuxPidLimit,
        Capability::AdjustLinuxOomScore,
        Capability::UpdateContainers,
        Capability::EvictContainers,
    ] {
        assert!(r.allow.contains(c), "{c}");
    }
    assert!(!r.allow.contains(Capability::AdjustEnv));
    assert!(r.unsolicited);
    assert_eq!(r.pods.namespaces, ["batch"]);
    let role = &c.default_validator.as_ref().unwrap().roles["observer"];
    assert_eq!(role.reject_oci_hook_adjustment, Some(false));

    let toml = r#"
[[grants]]
plugins = ["ulimit-adjuster"]
adjust = ["rlimits"]
"#;
    let mut c = Config::new("rt", "1");
    c.apply_str("nri.toml", ConfigFormat::Toml, toml).unwrap();
    let g = c.grants.unwrap();
    assert_eq!(g[0].allow, kinds(&[Capability::AdjustPosixRlimits]));

    // `grants: []`: grants configured, none admits anybody.
    let mut c = Config::new("rt", "1");
    c.apply_str("nri.yaml", ConfigFormat::Yaml, "grants: []\n")
        .unwrap();
    assert_eq!(c.grants, Some(Vec::new()));
}

#[test]
fn a_bad_grants_section_is_an_error_naming_the_entry() {
    for (text, wanted) in [
        (
            "grants:\n  - plugins: [x]\n    adjust: [sysctls]\n",
            "nri.yaml:1:1: grants[0]: unknown adjustment kind \"sysctls\"",
        ),
        (
            "grants:\n  - plugins: [\"a/b\"]\n",
            "grants[0]: plugin name pattern \"a/b\" has '/'",
        ),
        (
            "grants:\n  - plugins: []\n",
            "grants[0]: `plugins` lists no plugin",
        ),
        (
            "grants:\n  - plugins: [x]\n    adjust: [updates]\n",
            "container updates are allowed with `updates: true`",
        ),
        (
            "grants:\n  - plugins: [x]\n    mounts: true\n",
            "unknown field `mounts`",
        ),
    ] {
        let mut c = Config::new("rt", "1");
        let e = c
            .apply_str("nri.yaml", ConfigFormat::Yaml, text)
            .unwrap_err()
            .to_string();
        assert!(e.contains(wanted), "{e}\nwanted: {wanted}");
    }
}

#[test]
fn a_registration_refused_by_grants_is_a_typed_failure() {
    let f = RegistrationFailure::NotGranted {
        reason: "no grant names plugin 10-x".into(),
    };
    assert_eq!(
        f.to_string(),
        "refused by the grants: no grant names plugin 10-x"
    );
}
