//! The runtime states what it does (`Config::capabilities`, changed with
//! `Adaptation::declare`), and a plugin built on our SDK that requires more
//! fails at start-up with the runtime's declaration as the reason. The
//! default declaration is checked against what is applied: every ADJUST_*
//! capability it states passes the library whole and `nri-oci` writes it;
//! evictions, which the default callbacks do not carry out, are not
//! stated.
//!
//! Budget: about a second (every wait is on a message or a state).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use nri_api::api::{Container, ContainerAdjustment, CreateContainerResponse, Event, PodSandbox};
use nri_api::{Capability, CapabilityBasis, CapabilitySet, EventMask, RuntimeCapabilities};
use nri_plugin::{Builder, Error, HandlerResult, Plugin, Requirement};

const TIMEOUT: Duration = Duration::from_secs(10);

struct Tuner;

#[nri_plugin::plugin]
impl Plugin for Tuner {
    async fn create_container(
        &self,
        _pod: PodSandbox,
        _container: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        Ok(CreateContainerResponse::default())
    }
}

fn tuner(socket: &Path, index: &str) -> nri_plugin::Stub<Tuner> {
    Builder::new(Tuner)
        .name("tuner")
        .index(index)
        .socket_path(socket)
        .requires([Capability::AdjustLinuxSysctl])
        .requires([Event::UpdatePodSandbox])
        .build()
        .unwrap()
}

/// Runs `stub` until it is active in `a` (then stops it) or fails.
async fn outcome(a: &nri_runtime::Adaptation, stub: nri_plugin::Stub<Tuner>) -> Result<(), Error> {
    let handle = stub.handle();
    let watch = async {
        wait_active(a, 1).await;
        handle.stop();
    };
    tokio::time::timeout(TIMEOUT, async {
        tokio::select! {
            r = stub.run() => r,
            () = watch => Ok(()),
        }
    })
    .await
    .expect("the plugin neither ran nor failed")
}

#[tokio::test]
async fn by_default_a_plugin_requiring_sysctls_and_pod_updates_runs() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    assert_eq!(a.declared(), nri_runtime::Config::DEFAULT_CAPABILITIES);
    outcome(&a, tuner(&env.socket, "10")).await.unwrap();
    a.stop().await;
}

#[tokio::test]
async fn a_runtime_that_declares_less_refuses_the_plugin_at_start_up() {
    let env = TestEnv::new();
    let without = CapabilitySet::all().without(Capability::AdjustLinuxSysctl);
    let b = env
        .builder()
        .capabilities(without, EventMask::ALL_BEFORE_V0_10);
    let a = env.start(b).await;
    let err = outcome(&a, tuner(&env.socket, "10")).await.unwrap_err();
    let Error::Unsupported {
        runtime,
        missing,
        basis,
        ..
    } = &err
    else {
        panic!("want Unsupported, got {err:?}");
    };
    assert_eq!(runtime, "fake-runtime");
    assert_eq!(*basis, CapabilityBasis::Declared);
    assert_eq!(
        &missing[..],
        [
            Requirement::from(Capability::AdjustLinuxSysctl),
            Requirement::from(Event::UpdatePodSandbox)
        ]
    );
    assert!(a.plugins().is_empty());

    // Declared anew (a proxy that learned its runtime): the next plugin
    // is checked against the new declaration.
    a.declare(RuntimeCapabilities::declared(
        CapabilitySet::all(),
        EventMask::ALL,
    ));
    outcome(&a, tuner(&env.socket, "11")).await.unwrap();
    a.stop().await;
}

#[tokio::test]
async fn evictions_are_declared_only_by_an_embedder_that_carries_them_out() {
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    // The default RuntimeCallbacks::evict_containers only logs.
    let evict = Requirement::from(Capability::EvictContainers);
    assert_eq!(a.declared().supports(evict), Some(false));
    assert_eq!(
        a.declared().supported,
        CapabilitySet::all().without(Capability::EvictContainers)
    );
    let stub = Builder::new(Tuner)
        .name("evicter")
        .index("10")
        .socket_path(&env.socket)
        .requires([evict])
        .build()
        .unwrap();
    let err = outcome(&a, stub).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("EVICT_CONTAINERS not supported (capabilities declared by the runtime)"),
        "{err}"
    );
    a.stop().await;
}

/// One adjustment per ADJUST_* capability, each with values `nri-oci`
/// accepts.
fn one_per_capability() -> Vec<(Capability, ContainerAdjustment)> {
    let mut cases = outside_linux_resources();
    cases.extend(linux_and_resources());
    cases
}

/// The cases of [`one_per_capability`] up to the namespaces.
fn outside_linux_resources() -> Vec<(Capability, ContainerAdjustment)> {
    use Capability as C;
    use nri_api::api::*;
    let mut cases = Vec::new();
    let mut case = |c: Capability, f: &dyn Fn(&mut ContainerAdjustment)| {
        let mut a = ContainerAdjustment::default();
        f(&mut a);
        cases.push((c, a));
    };
    case(C::AdjustAnnotations, &|a| {
        a.add_annotation("owner", "nri");
    });
    case(C::AdjustMounts, &|a| {
        a.add_mount(Mount::new("/scratch", "tmpfs", "tmpfs", ["rw"]));
    });
    case(C::AdjustEnv, &|a| {
        a.add_env("GREETING", "hello");
    });
    case(C::AdjustOciHooks, &|a| {
        a.add_hooks(Hooks {
            prestart: vec![Hook {
                path: "/bin/hook".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
    });
    case(C::AdjustPosixRlimits, &|a| {
        a.add_rlimit("RLIMIT_NOFILE", 456, 123);
    });
    case(C::AdjustCdiDevices, &|a| {
        a.add_cdi_device("vendor.com/gpu=0");
    });
    case(C::AdjustLinuxContainerArgs, &|a| {
        a.set_args(["sleep", "1"]);
    });
    case(C::AdjustLinuxDevices, &|a| {
        a.add_device(LinuxDevice {
            path: "/dev/test".into(),
            r#type: "c".into(),
            major: 1,
            minor: 3,
            ..Default::default()
        });
    });
    case(C::AdjustLinuxCgroupsPath, &|a| {
        a.set_linux_cgroups_path("/nri/test");
    });
    case(C::AdjustLinuxOomScore, &|a| {
        a.set_linux_oom_score_adj(Some(10));
    });
    case(C::AdjustLinuxIoPriority, &|a| {
        a.set_linux_io_priority(LinuxIoPriority {
            class: IoPrioClass::IoprioClassBe as i32,
            priority: 4,
        });
    });
    case(C::AdjustLinuxSeccompPolicy, &|a| {
        a.set_linux_seccomp_policy(LinuxSeccomp {
            default_action: "SCMP_ACT_ALLOW".into(),
            ..Default::default()
        });
    });
    case(C::AdjustLinuxNamespaces, &|a| {
        a.add_or_replace_namespace(LinuxNamespace {
            r#type: "network".into(),
            path: "/var/run/netns/test".into(),
        });
    });
    cases
}

/// The cases of [`one_per_capability`] from the sysctls on.
fn linux_and_resources() -> Vec<(Capability, ContainerAdjustment)> {
    use Capability as C;
    use nri_api::api::*;
    let mut cases = Vec::new();
    let mut case = |c: Capability, f: &dyn Fn(&mut ContainerAdjustment)| {
        let mut a = ContainerAdjustment::default();
        f(&mut a);
        cases.push((c, a));
    };
    case(C::AdjustLinuxSysctl, &|a| {
        a.set_linux_sysctl("net.core.somaxconn", "1024");
    });
    case(C::AdjustLinuxNetworkDevices, &|a| {
        a.add_linux_net_device(
            "eth1",
            LinuxNetDevice {
                name: "net1".into(),
            },
        );
    });
    case(C::AdjustLinuxSchedulingPolicy, &|a| {
        a.set_linux_scheduler(LinuxScheduler {
            policy: LinuxSchedulerPolicy::SchedBatch as i32,
            ..Default::default()
        });
    });
    case(C::AdjustLinuxRdtClos, &|a| {
        a.set_linux_rdt_clos_id("gold");
    });
    case(C::AdjustLinuxMemoryPolicy, &|a| {
        a.set_linux_memory_policy(MpolMode::MpolInterleave, "0-1", &[]);
    });
    case(C::AdjustLinuxCpu, &|a| {
        a.set_linux_cpu_set_cpus("0-1");
    });
    case(C::AdjustLinuxMemoryLimit, &|a| {
        a.set_linux_memory_limit(1 << 30);
    });
    case(C::AdjustLinuxMemoryTuning, &|a| {
        a.set_linux_memory_swappiness(10);
    });
    case(C::AdjustLinuxHugepageLimits, &|a| {
        a.add_linux_hugepage_limit("2MB", 1 << 21);
    });
    case(C::AdjustLinuxBlockioClass, &|a| {
        a.set_linux_blockio_class("slow");
    });
    case(C::AdjustLinuxRdtClass, &|a| {
        a.set_linux_rdt_class("silver");
    });
    case(C::AdjustLinuxCgroupsUnified, &|a| {
        a.add_linux_unified("memory.high", "1G");
    });
    case(C::AdjustLinuxDeviceRules, &|a| {
        a.linux_resources_mut().devices.push(LinuxDeviceCgroup {
            allow: true,
            r#type: "c".into(),
            major: Some(OptionalInt64 { value: 10 }),
            minor: Some(OptionalInt64 { value: 200 }),
            access: "rwm".into(),
        });
    });
    case(C::AdjustLinuxPidLimit, &|a| {
        a.set_linux_pid_limits(100);
    });
    cases
}

/// The default declaration states what an embedder applies that applies
/// the merged adjustment with `nri-oci` (`Config::capabilities`): every
/// ADJUST_* capability is declared, a plugin's answer using all of them
/// reaches the embedder whole, and `nri-oci` writes each into the spec.
#[tokio::test]
async fn the_default_declaration_is_what_an_nri_oci_embedder_applies() {
    use nri_api::adjustment_capabilities;
    let declared = nri_runtime::Config::DEFAULT_CAPABILITIES;
    let adjust_caps: CapabilitySet = Capability::ALL
        .iter()
        .copied()
        .filter(|c| c.name().starts_with("ADJUST_"))
        .collect();
    let applier = nri_oci::Applier::builder()
        .cdi_injector(
            |spec: &mut oci_spec::runtime::Spec,
             devices: &[String]|
             -> Result<(), nri_oci::BoxError> {
                let mut ann = spec.annotations().clone().unwrap_or_default();
                ann.insert("cdi-injected".into(), devices.join(","));
                spec.set_annotations(Some(ann));
                Ok(())
            },
        )
        .blockio_class_resolver(
            |_class: &str| -> Result<oci_spec::runtime::LinuxBlockIo, nri_oci::BoxError> {
                Ok(oci_spec::runtime::LinuxBlockIoBuilder::default()
                    .weight(100u16)
                    .build()?)
            },
        )
        .build();
    let base = oci_spec::runtime::Spec::default();
    let before = nri_oci::spec_json(&base).unwrap();
    let mut all = ContainerAdjustment::default();
    let mut covered = CapabilitySet::EMPTY;
    for (c, adjust) in one_per_capability() {
        assert_eq!(adjustment_capabilities(&adjust), CapabilitySet::from(c));
        assert_eq!(declared.supports(c.into()), Some(true), "{c}");
        let mut spec = base.clone();
        applier
            .apply_adjustment(&mut spec, &adjust)
            .unwrap_or_else(|e| panic!("{c}: {e}"));
        let after = nri_oci::spec_json(&spec).unwrap();
        assert_ne!(after, before, "{c} left the spec as it was");
        covered.insert(c);
        prost::Message::merge(&mut all, prost::Message::encode_to_vec(&adjust).as_slice()).unwrap();
    }
    assert_eq!(covered, adjust_caps);

    // Through the library: one plugin answers with all of it.
    let env = TestEnv::new();
    let a = env.start(env.builder()).await;
    let answer = all.clone();
    let _p = FakePlugin::new("10", "all")
        .on_create(move |_| CreateContainerResponse {
            adjust: Some(answer.clone()),
            ..Default::default()
        })
        .connect(&env.socket)
        .await
        .unwrap();
    wait_active(&a, 1).await;
    let out = a.create_container(&pod("p"), &ctr("p", "c")).await.unwrap();
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(adjustment_capabilities(&out.adjustment), adjust_caps);
    let mut spec = base.clone();
    applier
        .apply_adjustment(&mut spec, &out.adjustment)
        .unwrap();
    a.stop().await;
}
