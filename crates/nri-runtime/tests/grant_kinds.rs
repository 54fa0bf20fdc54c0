//! Every adjustment kind a grant does not allow is refused, and audited,
//! and every kind it allows goes through; over random grants and random
//! answers: an answer is refused if and only if it touches a kind outside
//! the grant. The generator below sets each kind by the field itself (not
//! through `adjustment_capabilities`), so the runtime's classification is
//! checked against an independent one; a kind nri-api adds without a
//! generator here fails the test.
//! Budget: about 3 s.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use common::*;
use nri_api::api::*;
use nri_api::{Capability, CapabilitySet};
use nri_runtime::{Error, FailurePolicy, Grant, Metrics, PluginFailure, parse_adjustment_kinds};
use proptest::prelude::*;

/// Sets kind `c` in `a`, with a value the merge takes.
fn touch(c: Capability, a: &mut ContainerAdjustment) {
    use Capability as C;
    match c {
        C::AdjustAnnotations => _ = a.add_annotation("k", "v"),
        C::AdjustMounts => {
            _ = a.add_mount(Mount {
                destination: "/m".into(),
                source: "/host/m".into(),
                r#type: "bind".into(),
                options: vec!["ro".into()],
            })
        }
        C::AdjustEnv => _ = a.add_env("K", "V"),
        C::AdjustOciHooks => {
            _ = a.add_hooks(Hooks {
                prestart: vec![Hook {
                    path: "/bin/h".into(),
                    ..Default::default()
                }],
                ..Default::default()
            })
        }
        C::AdjustPosixRlimits => _ = a.add_rlimit("RLIMIT_NOFILE", 1024, 512),
        C::AdjustCdiDevices => _ = a.add_cdi_device("vendor.com/gpu=0"),
        C::AdjustLinuxContainerArgs => _ = a.set_args(["sleep", "1"]),
        C::AdjustLinuxDevices => {
            _ = a.add_device(LinuxDevice {
                path: "/dev/x".into(),
                r#type: "c".into(),
                major: 1,
                minor: 3,
                ..Default::default()
            })
        }
        C::AdjustLinuxCgroupsPath => _ = a.set_linux_cgroups_path("/kubepods/x"),
        C::AdjustLinuxOomScore => _ = a.set_linux_oom_score_adj(Some(-100)),
        C::AdjustLinuxIoPriority => {
            _ = a.set_linux_io_priority(LinuxIoPriority {
                class: 2,
                priority: 4,
            })
        }
        C::AdjustLinuxSeccompPolicy => {
            _ = a.set_linux_seccomp_policy(LinuxSeccomp {
                default_action: "SCMP_ACT_ERRNO".into(),
                ..Default::default()
            })
        }
        C::AdjustLinuxNamespaces => {
            _ = a.add_or_replace_namespace(LinuxNamespace {
                r#type: "network".into(),
                path: "/proc/9/ns/net".into(),
            })
        }
        C::AdjustLinuxSysctl => _ = a.set_linux_sysctl("net.core.somaxconn", "1024"),
        C::AdjustLinuxNetworkDevices => {
            _ = a.add_linux_net_device(
                "eth1",
                LinuxNetDevice {
                    name: "net1".into(),
                },
            )
        }
        C::AdjustLinuxSchedulingPolicy => {
            _ = a.set_linux_scheduler(LinuxScheduler {
                nice: 5,
                ..Default::default()
            })
        }
        C::AdjustLinuxRdtClos => _ = a.set_linux_rdt_clos_id("gold"),
        C::AdjustLinuxMemoryPolicy => _ = a.set_linux_memory_policy(MpolMode::MpolBind, "0", &[]),
        other => touch_resources(other, a),
    }
}

/// Sets resource kind `c` (`linux.resources`) in `a`.
fn touch_resources(c: Capability, a: &mut ContainerAdjustment) {
    use Capability as C;
    match c {
        C::AdjustLinuxCpu => _ = a.set_linux_cpu_shares(512),
        C::AdjustLinuxMemoryLimit => _ = a.set_linux_memory_limit(1 << 30),
        C::AdjustLinuxMemoryTuning => _ = a.set_linux_memory_swap(1 << 31),
        C::AdjustLinuxHugepageLimits => _ = a.add_linux_hugepage_limit("2MB", 4096),
        C::AdjustLinuxBlockioClass => _ = a.set_linux_blockio_class("gold"),
        C::AdjustLinuxRdtClass => _ = a.set_linux_rdt_class("silver"),
        C::AdjustLinuxCgroupsUnified => _ = a.add_linux_unified("memory.high", "max"),
        C::AdjustLinuxDeviceRules => a.linux_resources_mut().devices.push(LinuxDeviceCgroup {
            allow: true,
            r#type: "c".into(),
            major: Some(OptionalInt64 { value: 1 }),
            minor: Some(OptionalInt64 { value: 3 }),
            access: "rwm".into(),
        }),
        C::AdjustLinuxPidLimit => _ = a.set_linux_pid_limits(99),
        other => panic!("no generator for adjustment kind {other}: add one"),
    }
}

fn all_kinds() -> Vec<Capability> {
    parse_adjustment_kinds(["all"]).unwrap().iter().collect()
}

/// Grant refusals seen, by plugin, operation and field.
#[derive(Default)]
struct Refused(Mutex<Vec<String>>);

impl Metrics for Refused {
    fn grant_refused(&self, _plugin: &str, _operation: &str, field: &str) {
        self.0.lock().unwrap().push(field.into());
    }
}

/// Every log line of the process (the audit events of every test).
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn logs() -> &'static Logs {
    static LOGS: OnceLock<Logs> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Logs::default();
        let w = logs.clone();
        let sub = tracing_subscriber::fmt()
            .with_writer(move || w.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .finish();
        tracing::subscriber::set_global_default(sub).unwrap();
        logs
    })
}

/// A runtime with one plugin, `name`, granted `allow`, answering each
/// CreateContainer with the kinds in `answer`; its policy is `ignore`,
/// so a refused answer is reported and dropped.
async fn runtime(
    name: &str,
    allow: CapabilitySet,
    answer: Arc<Mutex<Vec<Capability>>>,
) -> (TestEnv, nri_runtime::Adaptation, Connected, Arc<Refused>) {
    let env = TestEnv::new();
    let refused = Arc::new(Refused::default());
    let b = env
        .builder()
        .metrics(refused.clone())
        .grant(Grant::new([name]).allow(allow))
        .failure_policy(name, FailurePolicy::Ignore);
    let a = env.start(b).await;
    let p = FakePlugin::new("10", name).on_create(move |_| {
        let mut adjust = ContainerAdjustment::default();
        for c in answer.lock().unwrap().iter() {
            touch(*c, &mut adjust);
        }
        CreateContainerResponse {
            adjust: Some(adjust),
            ..Default::default()
        }
    });
    let c = p.connect(&env.socket).await.unwrap();
    wait_active(&a, 1).await;
    (env, a, c, refused)
}

/// Whether the creation took the plugin's answer (else it was refused as
/// not granted and dropped); panics on any other outcome.
async fn created(a: &nri_runtime::Adaptation, id: &str) -> Result<(), String> {
    let out = a.create_container(&pod("p"), &ctr("p", id)).await;
    let out = match out {
        Ok(out) => out,
        Err(Error::PluginFailed { cause, .. }) => panic!("unexpected failure: {cause}"),
        Err(e) => panic!("{e}"),
    };
    match out.errors.as_slice() {
        [] => Ok(()),
        [e] => match &e.failure {
            PluginFailure::NotGranted { reason, .. } => Err(reason.clone()),
            other => panic!("unexpected failure: {other}"),
        },
        many => panic!("{many:?}"),
    }
}

#[tokio::test]
async fn every_kind_outside_the_grant_is_refused_and_audited_and_every_kind_in_it_passes() {
    let logs = logs();
    let kinds = all_kinds();
    // Every second kind granted.
    let allow: CapabilitySet = kinds.iter().copied().step_by(2).collect();
    let answer = Arc::new(Mutex::new(Vec::new()));
    let (_env, a, _c, refused) = runtime("every-kind", allow, answer.clone()).await;
    for (i, c) in kinds.iter().enumerate() {
        *answer.lock().unwrap() = vec![*c];
        let r = created(&a, &format!("c{i}")).await;
        if allow.contains(*c) {
            assert_eq!(r, Ok(()), "{c} is granted");
            continue;
        }
        let reason = r.expect_err(c.name());
        assert!(
            reason.contains(&format!("({c}) of container \"c{i}\"")),
            "{reason}"
        );
        assert!(
            reason.contains("which grant #0 (plugins every-kind) does not allow"),
            "{reason}"
        );
    }
    let outside: Vec<&Capability> = kinds.iter().filter(|c| !allow.contains(**c)).collect();
    assert_eq!(refused.0.lock().unwrap().len(), outside.len());
    let text = String::from_utf8_lossy(&logs.0.lock().unwrap()).into_owned();
    let audits: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("nri::audit") && l.contains("plugin=\"10-every-kind\""))
        .filter(|l| l.contains("outside its grant"))
        .collect();
    assert_eq!(audits.len(), outside.len(), "{text}");
    for c in outside {
        let field = format!("({c})");
        assert!(
            audits
                .iter()
                .any(|l| l.contains(&field) && l.contains("identity=uid=")),
            "no audit of {c}: {audits:?}"
        );
    }
    a.stop().await;
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Random grants, random answers: refused iff outside the grant.
    #[test]
    fn an_answer_is_refused_iff_it_touches_a_kind_outside_the_grant(
        grant_bits in proptest::collection::vec(any::<bool>(), 1..40),
        answers in proptest::collection::vec(
            proptest::collection::vec(any::<prop::sample::Index>(), 0..4), 1..6),
    ) {
        let kinds = all_kinds();
        let allow: CapabilitySet = kinds
            .iter()
            .zip(grant_bits.iter().cycle())
            .filter(|(_, b)| **b)
            .map(|(c, _)| *c)
            .collect();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let answer = Arc::new(Mutex::new(Vec::new()));
            let (_env, a, _c, _) = runtime("random", allow, answer.clone()).await;
            for (i, picks) in answers.iter().enumerate() {
                // Each kind once: the same field set twice in one answer
                // is a conflict of the plugin with itself.
                let mut touched: Vec<Capability> = picks.iter().map(|ix| *ix.get(&kinds)).collect();
                touched.sort_by_key(|c| c.name());
                touched.dedup();
                *answer.lock().unwrap() = touched.clone();
                let outside = touched.iter().any(|c| !allow.contains(*c));
                let r = created(&a, &format!("c{i}")).await;
                assert_eq!(r.is_err(), outside, "{touched:?} under {allow}: {r:?}");
            }
            a.stop().await;
        });
    }
}
