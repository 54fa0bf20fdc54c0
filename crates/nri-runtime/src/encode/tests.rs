//! Unit tests of the request encoders.

use std::collections::BTreeMap;

use nri_api::api::{
    CreateContainerRequest, LinuxContainer, RemovePodSandboxRequest, StartContainerRequest,
    StateChangeEvent, SynchronizeRequest,
};

use super::*;

fn pod() -> PodSandbox {
    PodSandbox {
        id: "pod-1".into(),
        name: "web".into(),
        namespace: "default".into(),
        labels: BTreeMap::from([("app".into(), "web".into())]),
        ..Default::default()
    }
}

fn ctr(n: u32) -> Container {
    Container {
        id: format!("ctr-{n}"),
        pod_sandbox_id: "pod-1".into(),
        args: vec!["/bin/sh".into(), "-c".into(), "x".repeat(300)],
        env: vec!["A=1".into()],
        annotations: BTreeMap::from([("k".into(), "v".into())]),
        linux: Some(LinuxContainer::default()),
        ..Default::default()
    }
}

/// Every object of these lists.
fn objects(pods: &[PodSandbox], containers: &[Container]) -> SyncObjects {
    SyncObjects::new(
        Snapshot::new(pods.to_vec(), containers.to_vec()),
        |_| true,
        |_| true,
    )
}

fn all_messages(mut enc: SyncEncoder) -> Vec<Bytes> {
    let mut out = Vec::new();
    while let Some(m) = enc.next_message_now() {
        out.push(m);
    }
    out
}

#[test]
fn sync_requests_are_byte_identical_to_prost() {
    use nri_api::api::SynchronizeRequest;
    let pods = [pod(), PodSandbox::default()];
    let ctrs = [ctr(1), Container::default(), ctr(2)];
    // A snapshot that fits goes in one message (more = false), however
    // small the parts of a split sync are.
    let fits = SyncLimits {
        message: 4 << 20,
        part: 1,
    };
    for (np, nc) in [(0, 0), (2, 0), (0, 3), (2, 3), (1, 1)] {
        let want = SynchronizeRequest {
            pods: pods[..np].to_vec(),
            containers: ctrs[..nc].to_vec(),
            more: false,
        }
        .encode_to_vec();
        let got = all_messages(SyncEncoder::new(objects(&pods[..np], &ctrs[..nc]), fits));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].as_ref(), &want[..]);
    }
    // One object per message: every message but the last has more =
    // true, and the split is split_sync's.
    let one = SyncLimits {
        message: 1,
        part: 1,
    };
    let got = all_messages(SyncEncoder::new(objects(&pods, &ctrs), one));
    let mut want = split_sync(pods.to_vec(), ctrs.to_vec(), 1);
    assert_eq!(got.len(), 5);
    assert_eq!(want.len(), 5);
    let n = want.len();
    for (i, (got, want)) in got.iter().zip(want.iter_mut()).enumerate() {
        want.more = i + 1 < n;
        assert_eq!(got.as_ref(), &want.encode_to_vec()[..], "message {i}");
    }
}

#[test]
fn a_split_sync_keeps_every_object_in_order_and_respects_the_part_size() {
    let pods: Vec<PodSandbox> = (0..50)
        .map(|k| PodSandbox {
            id: format!("p{k}"),
            ..pod()
        })
        .collect();
    let ctrs: Vec<Container> = (0..50).map(ctr).collect();
    let total = SynchronizeRequest {
        pods: pods.clone(),
        containers: ctrs.clone(),
        more: false,
    }
    .encoded_len();
    for part in [1, 500, 1000, 5000] {
        // The snapshot does not fit the message limit: it is split
        // into parts of at most `part` bytes.
        let limits = SyncLimits {
            message: total + SYNC_MORE_LEN - 1,
            part,
        };
        let messages = all_messages(SyncEncoder::new(objects(&pods, &ctrs), limits));
        assert!(messages.len() > 1, "{part}");
        let (mut seen_pods, mut seen_ctrs) = (Vec::new(), Vec::new());
        for (i, m) in messages.iter().enumerate() {
            let req = SynchronizeRequest::decode(m.as_ref()).unwrap();
            let objects = req.pods.len() + req.containers.len();
            assert!(objects >= 1, "{part}: message {i} is empty");
            assert!(m.len() <= part || objects == 1, "{part}: message {i}");
            assert_eq!(req.more, i + 1 < messages.len(), "{part}: message {i}");
            seen_pods.extend(req.pods);
            seen_ctrs.extend(req.containers);
        }
        assert_eq!(seen_pods, pods, "{part}");
        assert_eq!(seen_ctrs, ctrs, "{part}");
    }
    // Exactly at the limit (`more` is counted even when absent) it
    // still fits.
    let limits = SyncLimits {
        message: total + SYNC_MORE_LEN,
        part: 1,
    };
    assert_eq!(
        all_messages(SyncEncoder::new(objects(&pods, &ctrs), limits)).len(),
        1
    );
    // Nothing to send is one empty message.
    let empty = all_messages(SyncEncoder::new(objects(&[], &[]), limits));
    assert_eq!(empty.len(), 1);
    assert!(empty[0].is_empty());
}

/// A message larger than a slice is encoded in slices, and other tasks
/// of a current-thread runtime (the mux writing the previous message)
/// run in between.
#[tokio::test]
async fn encoding_a_large_message_lets_other_tasks_run() {
    let ctrs: Vec<Container> = (0..32)
        .map(|n| Container {
            args: vec!["x".repeat(64 * 1024)],
            ..ctr(n)
        })
        .collect();
    let limits = SyncLimits {
        message: 4 << 20,
        part: 4 << 20,
    };
    let mut enc = SyncEncoder::new(objects(&[], &ctrs), limits);
    let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let other = {
        let ran = std::sync::Arc::clone(&ran);
        tokio::spawn(async move { ran.store(true, std::sync::atomic::Ordering::SeqCst) })
    };
    let message = enc.next_message().await.unwrap();
    assert!(message.len() > 2 * ENCODE_SLICE);
    assert!(
        ran.load(std::sync::atomic::Ordering::SeqCst),
        "the encoder never let the other task run"
    );
    other.await.unwrap();
    assert!(enc.next_message().await.is_none());
}

#[test]
fn only_the_kept_objects_are_sent_in_snapshot_order() {
    use nri_api::api::SynchronizeRequest;
    let pods: Vec<PodSandbox> = (0..4)
        .map(|k| PodSandbox {
            id: format!("p{k}"),
            ..pod()
        })
        .collect();
    let ctrs: Vec<Container> = (0..6).map(ctr).collect();
    let objects = SyncObjects::new(
        Snapshot::new(pods.clone(), ctrs.clone()),
        |p| p.id != "p1",
        |c| c.id != "ctr-0" && c.id != "ctr-4",
    );
    let limits = SyncLimits {
        message: 4 << 20,
        part: 1,
    };
    let got = all_messages(SyncEncoder::new(objects, limits));
    let want = SynchronizeRequest {
        pods: vec![pods[0].clone(), pods[2].clone(), pods[3].clone()],
        containers: [1, 2, 3, 5].iter().map(|&i| ctrs[i].clone()).collect(),
        more: false,
    };
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].as_ref(), &want.encode_to_vec()[..]);
}

fn split_limits() -> SyncLimits {
    SyncLimits {
        message: 1,
        part: 1,
    }
}

/// The threaded encoder hands out the inline encoder's messages, in
/// order, with only the last one marked last.
#[tokio::test]
async fn sync_parts_are_the_encoders_messages_in_order() {
    let pods = [pod(), PodSandbox::default()];
    let ctrs: Vec<Container> = (0..20).map(ctr).collect();
    let want = all_messages(SyncEncoder::new(objects(&pods, &ctrs), split_limits()));
    assert_eq!(want.len(), 22);
    let mut parts = SyncParts::spawn(SyncEncoder::new(objects(&pods, &ctrs), split_limits()));
    let mut got = Vec::new();
    while let Some((m, last)) = parts.next().await {
        got.push(m);
        assert_eq!(last, got.len() == want.len(), "message {}", got.len());
    }
    assert_eq!(got, want);
    assert_eq!(parts.worker.await.unwrap(), want.len());
}

/// A synchronization given up half-way stops its encoder thread.
#[tokio::test]
async fn an_abandoned_sync_stops_its_encoder() {
    let ctrs: Vec<Container> = (0..1000).map(ctr).collect();
    let mut parts = SyncParts::spawn(SyncEncoder::new(objects(&[], &ctrs), split_limits()));
    let (_, last) = parts.next().await.unwrap();
    assert!(!last);
    let SyncParts { rx, worker } = parts;
    drop(rx);
    // At most the message taken, the one in the channel and the one
    // whose send failed; not the other 997.
    let encoded = worker.await.unwrap();
    assert!(encoded <= 3, "{encoded} messages encoded");
}

#[test]
fn requests_are_byte_identical_to_prost() {
    for p in [pod(), PodSandbox::default()] {
        for c in [ctr(1), Container::default()] {
            let want = StartContainerRequest {
                pod: Some(p.clone()),
                container: Some(c.clone()),
            }
            .encode_to_vec();
            assert_eq!(&pod_container_request(&p, Some(&c))[..], &want[..]);
            let want = CreateContainerRequest {
                pod: Some(p.clone()),
                container: Some(c.clone()),
            }
            .encode_to_vec();
            let mut payload = CreatePayload::new(&p, &c);
            assert_eq!(&payload.first()[..], &want[..]);
            assert_eq!(&payload.request(0, &c, None)[..], &want[..]);
            assert_eq!(&payload.request(1, &c, None)[..], &want[..]);
            for ev in [
                Event::StartContainer,
                Event::RemoveContainer,
                Event::Unknown,
            ] {
                let want = StateChangeEvent {
                    event: ev as i32,
                    pod: Some(p.clone()),
                    container: Some(c.clone()),
                }
                .encode_to_vec();
                assert_eq!(&state_change(ev, &p, Some(&c))[..], &want[..]);
            }
        }
        let want = RemovePodSandboxRequest {
            pod: Some(p.clone()),
        }
        .encode_to_vec();
        assert_eq!(&pod_container_request(&p, None)[..], &want[..]);
        let want = StateChangeEvent {
            event: Event::StopPodSandbox as i32,
            pod: Some(p.clone()),
            container: None,
        }
        .encode_to_vec();
        assert_eq!(
            &state_change(Event::StopPodSandbox, &p, None)[..],
            &want[..]
        );
    }
}

fn env_delta(n: u32) -> Container {
    Container {
        env: vec![format!("E{n}=x")],
        ..Default::default()
    }
}

#[test]
fn deltas_are_appended_in_place_while_nobody_else_holds_the_request() {
    let p = pod();
    let mut c = ctr(1);
    let mut payload = CreatePayload::new(&p, &c);
    let first = payload.first();
    // The first request is shared (the barrier holds it): copied.
    c.env.push("E1=x".into());
    let r1 = payload.request(1, &c, Some(&env_delta(1)));
    assert_ne!(r1.as_ptr(), first.as_ptr());
    assert!(r1.starts_with(&first));
    let r1_ptr = r1.as_ptr();
    drop(r1);
    // Nobody holds the second buffer: appended in place.
    c.env.push("E2=x".into());
    let r2 = payload.request(2, &c, Some(&env_delta(2)));
    assert_eq!(r2.as_ptr(), r1_ptr);
    // Held (a request in flight): copied, the held one untouched.
    c.env.push("E3=x".into());
    let r3 = payload.request(3, &c, Some(&env_delta(3)));
    assert_ne!(r3.as_ptr(), r2.as_ptr());
    assert!(r3.starts_with(&r2));
    for (r, n) in [(&r2, 3), (&r3, 4)] {
        let got = CreateContainerRequest::decode(r.as_ref()).unwrap();
        assert_eq!(got.container.unwrap().env.len(), n);
    }
    assert_eq!(
        CreateContainerRequest::decode(r3.as_ref()).unwrap(),
        CreateContainerRequest {
            pod: Some(p),
            container: Some(c),
        }
    );
}

#[test]
fn create_payload_reencodes_only_on_a_new_revision() {
    let p = pod();
    let mut payload = CreatePayload::new(&p, &ctr(1));
    let a = payload.request(0, &ctr(1), None);
    assert_eq!(a.as_ptr(), payload.first().as_ptr());
    // Same revision: the cached bytes, even if handed another container.
    let b = payload.request(0, &ctr(2), None);
    assert_eq!(a.as_ptr(), b.as_ptr());
    let c = payload.request(1, &ctr(2), None);
    let want = CreateContainerRequest {
        pod: Some(p),
        container: Some(ctr(2)),
    }
    .encode_to_vec();
    assert_eq!(&c[..], &want[..]);
}

/// A request built from the previous one and an appended delta
/// decodes to the container merged with the delta; without the
/// previous revision cached, the container is encoded in full.
#[test]
fn a_delta_request_decodes_to_the_merged_container() {
    use nri_api::api::Mount;
    let p = pod();
    let base = ctr(1);
    let delta = Container {
        env: vec!["B=2".into()],
        annotations: BTreeMap::from([("k".into(), "w".into()), ("n".into(), "x".into())]),
        mounts: vec![Mount {
            destination: "/m".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut merged = base.clone();
    merged.env.push("B=2".into());
    merged.annotations.insert("k".into(), "w".into());
    merged.annotations.insert("n".into(), "x".into());
    merged.mounts.extend(delta.mounts.clone());
    let mut payload = CreatePayload::new(&p, &base);
    let first = payload.request(0, &base, None);
    let second = payload.request(1, &merged, Some(&delta));
    assert!(second.starts_with(&first));
    assert!(
        second.len() < first.len() + 100,
        "the container was encoded again"
    );
    let got = CreateContainerRequest::decode(second.as_ref()).unwrap();
    assert_eq!(got.pod.as_ref(), Some(&p));
    assert_eq!(got.container.as_ref(), Some(&merged));
    // Cached: the same bytes again.
    assert_eq!(payload.request(1, &merged, Some(&delta)), second);
    // Two revisions on: the delta of one cannot be used.
    let third = payload.request(3, &merged, Some(&delta));
    let want = CreateContainerRequest {
        pod: Some(p),
        container: Some(merged),
    }
    .encode_to_vec();
    assert_eq!(&third[..], &want[..]);
}

/// The reference split the encoder must match: splits a snapshot into `SynchronizeRequest`s each encoding to at most
/// `limit` bytes (one message when everything fits; a single object larger
/// than the limit goes alone in its message). `more` is left false.
fn split_sync(
    pods: Vec<PodSandbox>,
    containers: Vec<Container>,
    limit: usize,
) -> Vec<SynchronizeRequest> {
    let mut out = Vec::new();
    let mut cur = SynchronizeRequest::default();
    let mut packer = Packer::new(limit);
    // Starts a new message first when the object does not fit this one.
    let mut place = |len: usize, cur: &mut SynchronizeRequest| {
        if !packer.admit(len) {
            out.push(std::mem::take(cur));
            packer = Packer::new(limit);
            packer.admit(len);
        }
    };
    for p in pods {
        place(p.encoded_len(), &mut cur);
        cur.pods.push(p);
    }
    for c in containers {
        place(c.encoded_len(), &mut cur);
        cur.containers.push(c);
    }
    out.push(cur);
    out
}

#[test]
fn split_sync_respects_the_limit_and_keeps_everything() {
    use prost::Message;
    let pods: Vec<PodSandbox> = (0..100)
        .map(|k| PodSandbox {
            id: format!("p{k}"),
            ..pod()
        })
        .collect();
    let ctrs: Vec<Container> = (0..100).map(ctr).collect();
    let one = split_sync(pods.clone(), ctrs.clone(), 4 << 20);
    assert_eq!(one.len(), 1, "everything in one message when it fits");
    let many = split_sync(pods, ctrs, 1000);
    assert!(many.len() > 5);
    for m in &many {
        assert!(m.encoded_len() <= 1000 || m.pods.len() + m.containers.len() == 1);
    }
    assert_eq!(many.iter().map(|m| m.pods.len()).sum::<usize>(), 100);
    assert_eq!(many.iter().map(|m| m.containers.len()).sum::<usize>(), 100);
}
