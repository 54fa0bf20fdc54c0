#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use nri_plugin::api::{LinuxNamespace, LinuxPodSandbox};

fn pod(id: &str, annotations: &[(&str, &str)], netns: bool) -> PodSandbox {
    PodSandbox {
        id: id.into(),
        name: format!("pod-{id}"),
        namespace: "default".into(),
        annotations: annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        linux: Some(LinuxPodSandbox {
            namespaces: if netns {
                vec![LinuxNamespace {
                    r#type: "network".into(),
                    path: format!("/var/run/netns/cni-{id}"),
                }]
            } else {
                Vec::new()
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn ctr(id: &str, pod: &str) -> Container {
    Container {
        id: id.into(),
        name: format!("ctr-{id}"),
        pod_sandbox_id: pod.into(),
        ..Default::default()
    }
}

fn parse_as(key: &str, value: &str, strict: bool) -> Result<Vec<NetDevice>, Error> {
    let src = Source {
        pod: "p",
        container: "",
        annotation: key,
        value,
    };
    parse_netdevices(&src, strict)
}

fn parse(value: &str) -> Result<Vec<NetDevice>, Error> {
    parse_as("netdevice.noderesource.dev/pod", value, false)
}

const SAMPLE: &str = "- name: dummy0\n  new_name: eth33\n  address: 192.168.2.2\n  prefix: 24\n  mtu: 1500\n- name: enp2s2f1\n  address: fd00::1\n";

#[test]
fn parses_upstream_sample_and_defaults() {
    let d = parse(SAMPLE).unwrap();
    assert_eq!(d.len(), 2);
    assert_eq!(d[0].name, "dummy0");
    assert_eq!(d[0].pod_name(), "eth33");
    assert_eq!((d[0].prefix, d[0].mtu), (24, 1500));
    assert_eq!(d[1].new_name, "enp2s2f1", "new_name defaults to name");
    assert_eq!(d[1].prefix, 128, "IPv6 prefix default");
    let d = parse("- name: a\n  address: 10.0.0.1\n").unwrap();
    assert_eq!(d[0].prefix, 32, "IPv4 prefix default");
}

#[test]
fn go_decoding_rules() {
    // Case-insensitive keys, unknown keys ignored, flow style and JSON.
    let d = parse("- Name: a\n  NEW_NAME: b\n  colour: red\n").unwrap();
    assert_eq!((d[0].name.as_str(), d[0].new_name.as_str()), ("a", "b"));
    let d = parse(r#"[{"name":"x"},{"name":"y","new_name":"z"}]"#).unwrap();
    assert_eq!(d.len(), 2);
    assert!(parse("").unwrap().is_empty());
    assert!(parse("null").unwrap().is_empty());
    assert!(parse("[]").unwrap().is_empty());
}

#[test]
fn what_go_refuses_is_refused() {
    let cases = [
        ("name: a", "invalid network device annotation"),
        ("- name: a\n  address: 300.1.1.1", "error parsing address"),
        ("- name: [", "invalid network device annotation"),
        (
            "- name: a\n  prefix: x",
            "invalid network device annotation",
        ),
    ];
    for (value, want) in cases {
        for strict in [false, true] {
            let err = parse_as("netdevice.noderesource.dev/pod", value, strict)
                .expect_err(value)
                .to_string();
            assert!(err.contains(want), "{value:?}: {err}");
            assert!(err.contains("netdevice.noderesource.dev/pod"), "{err}");
        }
    }
}

#[test]
fn what_go_cannot_move_is_dropped_or_refused_when_strict() {
    let cases = [
        ("- new_name: b\n- name: ok", "invalid host interface name"),
        ("- name: a\n- name: a\n  new_name: b", "listed twice"),
        ("- name: a\n- name: b\n  new_name: a", "used twice"),
        (
            "- name: averyveryverylongname",
            "invalid host interface name",
        ),
        ("- name: a/b", "invalid host interface name"),
        ("- name: a\n  new_name: x y", "invalid pod interface name"),
    ];
    for (value, want) in cases {
        let kept = parse(value).unwrap();
        assert!(
            kept.iter().all(|d| valid_ifname(&d.name)),
            "{value:?}: {kept:?}"
        );
        let err = parse_as("netdevice.noderesource.dev/pod", value, true)
            .expect_err(value)
            .to_string();
        assert!(
            err.contains(want) && err.contains("strict"),
            "{value:?}: {err}"
        );
    }
    assert_eq!(parse("- new_name: b\n- name: ok").unwrap().len(), 1);
    assert_eq!(
        parse("- name: a\n- name: a\n  new_name: b").unwrap().len(),
        1
    );
    // Prefix and MTU are neither checked nor applied, as upstream.
    let d =
        parse("- name: a\n  address: 10.0.0.1\n  prefix: 33\n  mtu: -1\n- name: b\n  prefix: 24")
            .unwrap();
    assert_eq!((d[0].prefix, d[0].mtu, d[1].prefix), (33, -1, 24));
}

#[test]
fn yaml_as_go_reads_it() {
    // Numbers for names are their text; floats with no fraction fit ints.
    let d = parse("- {name: 1234, prefix: 24.0}").unwrap();
    assert_eq!((d[0].name.as_str(), d[0].prefix), ("1234", 24));
    assert!(parse("- {name: a, prefix: 1.5}").is_err());
    // Unknown keys: ignored, refused when strict.
    assert!(parse("- {name: a, colour: red}").is_ok());
    assert!(parse_as("k", "- {name: a, colour: red}", true).is_err());
}

#[test]
fn annotation_lookup_order() {
    let all = [
        ("netdevices.nri.containerd.io", "old"),
        ("netdevice.noderesource.dev", "bare"),
        ("netdevices.nri.containerd.io/pod", "old-pod"),
        ("netdevice.noderesource.dev/pod", "pod"),
    ];
    // Remove the winner one at a time: the next in upstream's order wins.
    for n in (1..=all.len()).rev() {
        let p = pod("p", &all[..n], true);
        let (key, value) = effective_annotation(&p.annotations).unwrap();
        assert_eq!((key.as_str(), value), all[n - 1]);
    }
    assert!(effective_annotation(&BTreeMap::new()).is_none());
    // Container-scoped keys are not upstream's: ignored.
    let p = pod(
        "p",
        &[("netdevice.noderesource.dev/container.c", "- name: a")],
        true,
    );
    assert!(effective_annotation(&p.annotations).is_none());
}

#[test]
fn plural_key_is_ignored_as_go_does() {
    for key in [
        "netdevices.noderesource.dev/pod",
        "netdevices.noderesource.dev",
    ] {
        let p = pod("p", &[(key, "- name: dummy0")], true);
        assert!(effective_annotation(&p.annotations).is_none());
        assert!(pod_netdevices(&p, false).unwrap().is_empty(), "{key}");
        let err = pod_netdevices(&p, true).unwrap_err().to_string();
        assert!(err.contains(key) && err.contains("strict"), "{err}");
    }
    // Beside a key Go reads: that one applies, no complaint.
    let p = pod(
        "p",
        &[
            ("netdevices.noderesource.dev/pod", "- name: eth-x"),
            (NETDEVICE_KEY, "- name: eth-y"),
        ],
        true,
    );
    let d = pod_netdevices(&p, true).unwrap();
    assert_eq!(d[0].name, "eth-y");
}

#[test]
fn host_network_pod_is_refused() {
    let p = pod("p", &[(NETDEVICE_KEY, "- name: a")], false);
    let err = pod_netdevices(&p, false).unwrap_err().to_string();
    assert!(err.contains("host network"), "{err}");
    // No devices: fine even on the host network.
    assert!(
        pod_netdevices(&pod("p", &[], false), false)
            .unwrap()
            .is_empty()
    );
    assert!(
        pod_netdevices(&pod("p", &[(NETDEVICE_KEY, "[]")], false), false)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn adjustment_maps_host_to_pod_names() {
    let d = parse(SAMPLE).unwrap();
    let a = adjustment(&d);
    let nd = &a.linux.unwrap().net_devices;
    assert_eq!(nd.len(), 2);
    assert_eq!(nd["dummy0"].name, "eth33");
    assert_eq!(nd["enp2s2f1"].name, "enp2s2f1");
}

fn net_devices(r: &CreateContainerResponse) -> Vec<(String, String)> {
    r.adjust
        .as_ref()
        .and_then(|a| a.linux.as_ref())
        .map(|l| {
            l.net_devices
                .iter()
                .map(|(k, v)| (k.clone(), v.name.clone()))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "current_thread")]
async fn first_container_of_the_pod_gets_the_devices() {
    let p = NetDeviceInjector::new();
    let pd = pod(
        "p1",
        &[(
            "netdevice.noderesource.dev/pod",
            "- name: dummy0\n  new_name: eth1",
        )],
        true,
    );
    p.run_pod_sandbox(pd.clone()).await.unwrap();
    let r = p
        .create_container(pd.clone(), ctr("c1", "p1"))
        .await
        .unwrap();
    assert_eq!(net_devices(&r), [("dummy0".to_owned(), "eth1".to_owned())]);
    p.post_create_container(pd.clone(), ctr("c1", "p1"))
        .await
        .unwrap();
    let r = p
        .create_container(pd.clone(), ctr("c2", "p1"))
        .await
        .unwrap();
    assert!(
        net_devices(&r).is_empty(),
        "second container: devices already in the pod"
    );
    // After the pod is gone, a pod with the same id starts afresh.
    p.stop_pod_sandbox(pd.clone()).await.unwrap();
    p.remove_pod_sandbox(pd.clone()).await.unwrap();
    let r = p
        .create_container(pd.clone(), ctr("c3", "p1"))
        .await
        .unwrap();
    assert_eq!(net_devices(&r).len(), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn failed_creation_passes_the_devices_on() {
    let p = NetDeviceInjector::new();
    let pd = pod("p1", &[(NETDEVICE_KEY, "- name: dummy0")], true);
    let r = p
        .create_container(pd.clone(), ctr("c1", "p1"))
        .await
        .unwrap();
    assert_eq!(net_devices(&r).len(), 1);
    // c1 never gets PostCreateContainer (its creation failed): c2 gets them.
    let r = p
        .create_container(pd.clone(), ctr("c2", "p1"))
        .await
        .unwrap();
    assert_eq!(net_devices(&r).len(), 1);
    p.post_create_container(pd.clone(), ctr("c2", "p1"))
        .await
        .unwrap();
    let r = p.create_container(pd, ctr("c3", "p1")).await.unwrap();
    assert!(net_devices(&r).is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn synchronize_marks_pods_with_containers() {
    let p = NetDeviceInjector::new();
    let a = pod("a", &[(NETDEVICE_KEY, "- name: d0")], true);
    let b = pod("b", &[(NETDEVICE_KEY, "- name: d1")], true);
    // Two messages: the container of pod `a` comes in the second.
    let chunk = |pods: Vec<PodSandbox>, containers: Vec<Container>, more: bool| {
        let req = nri_plugin::api::SynchronizeRequest {
            pods,
            containers,
            more,
        };
        SyncChunk::new(prost::Message::encode_to_vec(&req).into()).unwrap()
    };
    p.synchronize_chunk(
        chunk(vec![a.clone(), b.clone()], vec![], true),
        SyncKind::Initial,
    )
    .await
    .unwrap();
    p.synchronize_chunk(chunk(vec![], vec![ctr("x", "a")], false), SyncKind::Initial)
        .await
        .unwrap();
    let r = p.create_container(a, ctr("y", "a")).await.unwrap();
    assert!(net_devices(&r).is_empty(), "pod a already had a container");
    let r = p.create_container(b, ctr("z", "b")).await.unwrap();
    assert_eq!(net_devices(&r).len(), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn errors_reach_the_runtime() {
    let p = NetDeviceInjector::new();
    let bad = pod("p", &[(NETDEVICE_KEY, "- name: a\n  address: nope")], true);
    let e = p.run_pod_sandbox(bad.clone()).await.unwrap_err();
    assert!(e.message().contains("error parsing address"), "{e}");
    let e = p.create_container(bad, ctr("c", "p")).await.unwrap_err();
    assert!(e.message().contains("error parsing address"), "{e}");
    let host = pod("h", &[(NETDEVICE_KEY, "- name: a")], false);
    let e = p.run_pod_sandbox(host).await.unwrap_err();
    assert!(e.message().contains("host network"), "{e}");
    // No annotation: nothing to do, no error.
    let plain = pod("q", &[], false);
    p.run_pod_sandbox(plain.clone()).await.unwrap();
    let r = p.create_container(plain, ctr("c", "q")).await.unwrap();
    assert!(r.adjust.is_none());
}

#[tokio::test(flavor = "current_thread")]
async fn old_runtime_fails_pods_asking_for_devices() {
    let p = NetDeviceInjector::new();
    *p.unsupported.lock().unwrap() = Some(("containerd v2.1.4".into(), NriVersion::new(0, 9, 0)));
    let pd = pod("p", &[(NETDEVICE_KEY, "- name: dummy0")], true);
    let e = p.run_pod_sandbox(pd.clone()).await.unwrap_err();
    assert!(e.message().contains("NRI v0.11 or later needed"), "{e}");
    assert!(e.message().contains("containerd v2.1.4"), "{e}");
    assert!(p.create_container(pd, ctr("c", "p")).await.is_err());
    // Pods without devices are not affected.
    let plain = pod("q", &[], true);
    p.run_pod_sandbox(plain.clone()).await.unwrap();
    assert!(
        p.create_container(plain, ctr("c", "q"))
            .await
            .unwrap()
            .adjust
            .is_none()
    );
}
