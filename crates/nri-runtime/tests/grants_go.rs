//! The real Go plugin (containerd/nri pkg/stub v0.12.5, built into
//! interop/bin by scripts/build-go-peers.sh), unchanged, under grants: the
//! runtime knows it by what the kernel says it is (uid, pid, executable,
//! and the pod of a container whose process it is), refuses it at
//! registration when it is not who its grant requires, and holds its
//! answers and unsolicited updates to its grant. Missing peers: the test
//! fails if NRI_REQUIRE_INTEROP=1, otherwise it says why and returns.
//! Budget: about 3 s.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use nri_api::{Capability, CapabilitySet};
use nri_runtime::{FailurePolicy, Grant, GrantIdentity, Metrics, PluginFailure, PodSelector};
use tokio::io::AsyncWriteExt;

fn go_plugin(bin: &Path, args: &[&str]) -> tokio::process::Child {
    tokio::process::Command::new(bin)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

fn args<'a>(sock: &'a str, idx: &'a str, name: &'a str, adjust: &'a str) -> Vec<&'a str> {
    vec![
        "--socket", sock, "--idx", idx, "--name", name, "--adjust", adjust,
    ]
}

fn my_uid() -> u32 {
    // SAFETY: getuid(2) cannot fail and touches no memory of ours.
    #[allow(unsafe_code)]
    unsafe {
        libc::getuid()
    }
}

fn real(bin: &Path) -> PathBuf {
    std::fs::canonicalize(bin).unwrap()
}

fn allow(kinds: &[Capability]) -> CapabilitySet {
    CapabilitySet::of(kinds)
}

/// Grant refusals, by plugin, operation and field.
#[derive(Default)]
struct Refusals(Mutex<Vec<(String, String, String)>>);

impl Metrics for Refusals {
    fn grant_refused(&self, plugin: &str, operation: &str, field: &str) {
        self.0
            .lock()
            .unwrap()
            .push((plugin.into(), operation.into(), field.into()));
    }
}

/// Two Go plugins that both add an env variable and an annotation: the
/// one whose grant allows only annotations has its answer refused (policy
/// ignore: the container is created without it), the other's is merged.
#[tokio::test(flavor = "multi_thread")]
async fn an_unchanged_go_plugin_is_known_by_the_kernel_and_fenced_by_its_grant() {
    let Some(bin) = go_peer("nri-go-plugin") else {
        return;
    };
    let env = TestEnv::new();
    let refusals = Arc::new(Refusals::default());
    let mut who = GrantIdentity::default();
    who.uids = vec![my_uid()];
    who.executables = vec![real(&bin).display().to_string()];
    let fenced = Grant::new(["gofenced"])
        .identity(who.clone())
        .allow(allow(&[Capability::AdjustAnnotations]));
    let trusted = Grant::new(["gotrusted"]).identity(who).allow(allow(&[
        Capability::AdjustAnnotations,
        Capability::AdjustEnv,
    ]));
    let b = env
        .builder()
        .metrics(refusals.clone())
        .grant(fenced)
        .grant(trusted)
        .failure_policy("gofenced", FailurePolicy::Ignore);
    let a = env.start(b).await;
    let sock = env.socket.to_str().unwrap().to_owned();
    let g1 = go_plugin(&bin, &args(&sock, "10", "gofenced", "env,annotation"));
    let g2 = go_plugin(&bin, &args(&sock, "20", "gotrusted", "env,annotation"));
    wait_active(&a, 2).await;

    let info = a
        .plugins()
        .into_iter()
        .find(|p| p.id.to_string() == "10-gofenced")
        .unwrap();
    assert_eq!(info.identity.uid, Some(my_uid()));
    assert_eq!(
        info.identity.pid,
        g1.id(),
        "the peer's pid from SO_PEERCRED"
    );
    assert_eq!(info.identity.executable, Some(real(&bin)));

    let p = pod("p");
    let out = a.create_container(&p, &ctr("p", "c")).await.unwrap();
    let env_keys: Vec<&str> = out
        .adjustment
        .env
        .iter()
        .map(|kv| kv.key.as_str())
        .collect();
    assert_eq!(
        env_keys,
        ["BENCH_PLUGIN_20"],
        "only the trusted plugin's env"
    );
    let annotations: Vec<&str> = out
        .adjustment
        .annotations
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        annotations,
        ["bench.example.com/plugin-20"],
        "the fenced answer is refused as a whole"
    );
    let [e] = out.errors.as_slice() else {
        panic!("{:?}", out.errors)
    };
    assert_eq!(e.plugin.to_string(), "10-gofenced");
    let PluginFailure::NotGranted { field, reason } = &e.failure else {
        panic!("{}", e.failure)
    };
    assert_eq!(field, "env");
    assert!(
        reason.contains("sets env (ADJUST_ENV) of container \"c\", which grant #0 (plugins gofenced) does not allow"),
        "{reason}"
    );
    assert_eq!(
        *refusals.0.lock().unwrap(),
        [("10-gofenced".into(), "CreateContainer".into(), "env".into())]
    );
    a.stop().await;
    drop((g1, g2));
}

/// A Go plugin that takes the name of a plugin whose grant requires
/// another executable, or that is not in the pod its grant requires, is
/// refused at registration: it never becomes active, and the stub exits
/// with the runtime's reason.
#[tokio::test(flavor = "multi_thread")]
async fn a_go_plugin_that_is_not_who_its_grant_requires_is_refused_at_registration() {
    let Some(bin) = go_peer("nri-go-plugin") else {
        return;
    };
    for (identity, wanted) in [
        (
            {
                let mut i = GrantIdentity::default();
                i.executables = vec!["/usr/local/bin/the-real-logger".into()];
                i
            },
            "matches none of [",
        ),
        (
            {
                let mut i = GrantIdentity::default();
                i.pod = Some(PodSelector::namespaces(["kube-system"]));
                i
            },
            "it does not run in a container of this runtime",
        ),
    ] {
        let env = TestEnv::new();
        let grant = Grant::new(["logger"]).identity(identity);
        let a = env.start(env.builder().grant(grant)).await;
        let sock = env.socket.to_str().unwrap().to_owned();
        let g = tokio::process::Command::new(&bin)
            .args(args(&sock, "10", "logger", "annotation"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(10), g)
            .await
            .expect("the refused Go plugin exits")
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.status.success(), "{}: {text}", out.status);
        assert!(
            text.contains("code = PermissionDenied desc = refused by the grants")
                && text.contains(wanted),
            "{text}"
        );
        assert!(a.plugins().is_empty());
        a.stop().await;
    }
}

/// A Go plugin deployed in a pod of this runtime (here: a container the
/// runtime lists whose process is the plugin's) is known by that pod, is
/// admitted under a grant that requires it, and its unsolicited
/// UpdateContainers is refused when its grant does not allow them.
#[tokio::test(flavor = "multi_thread")]
async fn a_go_plugin_in_a_pod_is_known_by_it_and_its_unsolicited_updates_are_fenced() {
    let Some(bin) = go_peer("nri-go-plugin") else {
        return;
    };
    let env = TestEnv::new();
    let refusals = Arc::new(Refusals::default());
    let mut who = GrantIdentity::default();
    who.pod = Some(PodSelector::namespaces(["kube-system"]).label("app", "nri-go"));
    let grant = Grant::new(["godaemon"]).identity(who).allow(allow(&[
        Capability::UpdateContainers,
        Capability::AdjustLinuxCpu,
    ]));
    let a = env
        .start(env.builder().metrics(refusals.clone()).grant(grant))
        .await;
    // The process waits for a line before it becomes the Go plugin (same
    // pid), so the runtime lists its container before it registers.
    let sock = env.socket.to_str().unwrap().to_owned();
    let script = format!(
        "read go; exec {} --socket {sock} --idx 10 --name godaemon --unsolicited-update victim",
        bin.display()
    );
    let mut g = tokio::process::Command::new("/bin/sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut ds = pod("ds");
    ds.namespace = "kube-system".into();
    ds.labels.insert("app".into(), "nri-go".into());
    env.runtime.add_pod(ds);
    let mut c = ctr("ds", "ds-ctr");
    c.pid = g.id().unwrap();
    env.runtime.add_container(c);
    env.runtime.add_pod(pod("v"));
    env.runtime.add_container(ctr("v", "victim"));
    g.stdin.take().unwrap().write_all(b"go\n").await.unwrap();
    wait_active(&a, 1).await;

    let found = a.plugins()[0].identity.pod.clone().unwrap();
    assert_eq!(
        (
            found.namespace.as_str(),
            found.name.as_str(),
            found.container_id.as_str()
        ),
        ("kube-system", "ds-name", "ds-ctr")
    );
    assert_eq!(a.plugins()[0].identity.executable, Some(real(&bin)));
    let refused = eventually(Duration::from_secs(10), || {
        !refusals.0.lock().unwrap().is_empty()
    })
    .await;
    assert!(refused, "the unsolicited update was not refused");
    assert_eq!(
        refusals.0.lock().unwrap()[0],
        (
            "10-godaemon".into(),
            "UpdateContainers".into(),
            "UpdateContainers".into()
        )
    );
    assert!(
        env.runtime.updates.lock().unwrap().is_empty(),
        "nothing was applied"
    );
    a.stop().await;
    drop(g);
}

/// A process that claims the name of a connected plugin from another
/// executable is refused at registration, and the plugin it impersonates
/// keeps its events: the real plugin (this test's process, whose
/// executable its grant requires) is admitted; the Go plugin, started as
/// `10-logger` too, is refused with the runtime's reason and never
/// answers an event.
#[tokio::test(flavor = "multi_thread")]
async fn a_process_claiming_a_connected_plugins_name_from_another_executable_is_refused() {
    let Some(bin) = go_peer("nri-go-plugin") else {
        return;
    };
    let env = TestEnv::new();
    let mut who = GrantIdentity::default();
    who.uids = vec![my_uid()];
    who.executables = vec![std::env::current_exe().unwrap().display().to_string()];
    let grant = Grant::new(["logger"])
        .identity(who)
        .allow(allow(&[Capability::AdjustAnnotations]));
    let a = env.start(env.builder().grant(grant)).await;
    let real_logger = FakePlugin::new("10", "logger").on_create(|_| {
        let mut adjust = nri_api::api::ContainerAdjustment::default();
        adjust
            .annotations
            .insert("by".into(), "the-real-logger".into());
        nri_api::api::CreateContainerResponse {
            adjust: Some(adjust),
            ..Default::default()
        }
    });
    let _real = real_logger.connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;

    let sock = env.socket.to_str().unwrap().to_owned();
    let impostor = tokio::process::Command::new(&bin)
        .args(args(&sock, "10", "logger", "annotation"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(10), impostor)
        .await
        .expect("the refused impostor exits")
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{}: {text}", out.status);
    assert!(
        text.contains("code = PermissionDenied desc = refused by the grants")
            && text.contains(&format!("its executable {}", real(&bin).display())),
        "{text}"
    );

    // The real plugin is the only one, and it gets the event.
    let infos = a.plugins();
    assert_eq!(infos.len(), 1, "{infos:?}");
    assert_eq!(infos[0].identity.executable, std::env::current_exe().ok());
    let out = a.create_container(&pod("p"), &ctr("p", "c")).await.unwrap();
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    let annotations: Vec<(&str, &str)> = out
        .adjustment
        .annotations
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(annotations, [("by", "the-real-logger")]);
    a.stop().await;
}
