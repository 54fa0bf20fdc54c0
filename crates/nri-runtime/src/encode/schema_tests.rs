//! The hand-written encoders against the schema: the field numbers they
//! write are those of the descriptor set, and with every field of the
//! schema set (driven by the descriptor set, not a hand-kept list) their
//! bytes are prost's.

use nri_api::api::{
    CreateContainerRequest, PostCreateContainerRequest, PostStartContainerRequest,
    PostUpdateContainerRequest, PostUpdatePodSandboxRequest, RemoveContainerRequest,
    RemovePodSandboxRequest, RunPodSandboxRequest, StartContainerRequest, StateChangeEvent,
    StopContainerRequest, StopPodSandboxRequest, SynchronizeRequest,
};
use nri_test_support::schema::{descriptor_set, every_field, message, unset_fields};
use proptest::prelude::*;
use prost::Name;

use super::*;

/// `(number, name, type)` of each field of `full_name`, as the schema says.
fn fields(full_name: &str) -> Vec<(i32, String, String)> {
    let fds = descriptor_set();
    (message(&fds, full_name).field.iter())
        .map(|f| {
            let ty = match f.type_name() {
                "" => format!("{:?}", f.r#type()),
                name => name.to_owned(),
            };
            (f.number(), f.name().to_owned(), ty)
        })
        .collect()
}

fn field(number: i32, name: &str, ty: &str) -> (i32, String, String) {
    (number, name.to_owned(), ty.to_owned())
}

const POD: &str = ".nri.pkg.api.v1alpha1.PodSandbox";
const CONTAINER: &str = ".nri.pkg.api.v1alpha1.Container";

/// The request types [`pod_container_request`] and [`CreatePayload`]
/// stand for: `(full name, has a container)`.
fn pod_container_requests() -> [(String, bool); 11] {
    [
        (RunPodSandboxRequest::full_name(), false),
        (StopPodSandboxRequest::full_name(), false),
        (RemovePodSandboxRequest::full_name(), false),
        (PostUpdatePodSandboxRequest::full_name(), false),
        (CreateContainerRequest::full_name(), true),
        (PostCreateContainerRequest::full_name(), true),
        (StartContainerRequest::full_name(), true),
        (PostStartContainerRequest::full_name(), true),
        (PostUpdateContainerRequest::full_name(), true),
        (StopContainerRequest::full_name(), true),
        (RemoveContainerRequest::full_name(), true),
    ]
}

#[test]
fn the_field_numbers_written_by_hand_are_the_schemas() {
    for (name, with_container) in pod_container_requests() {
        let mut want = vec![field(REQUEST_POD as i32, "pod", POD)];
        if with_container {
            want.push(field(REQUEST_CONTAINER as i32, "container", CONTAINER));
        }
        assert_eq!(fields(&name), want, "{name}");
    }
    assert_eq!(
        fields(&StateChangeEvent::full_name()),
        [
            field(
                STATE_CHANGE_EVENT as i32,
                "event",
                ".nri.pkg.api.v1alpha1.Event"
            ),
            field(STATE_CHANGE_POD as i32, "pod", POD),
            field(STATE_CHANGE_CONTAINER as i32, "container", CONTAINER),
        ]
    );
    assert_eq!(
        fields(&SynchronizeRequest::full_name()),
        [
            field(SYNC_PODS as i32, "pods", POD),
            field(SYNC_CONTAINERS as i32, "containers", CONTAINER),
            field(SYNC_MORE as i32, "more", "Bool"),
        ]
    );
}

/// A pod and a container with every field of the schema set.
fn full(seed: u64) -> (PodSandbox, Container) {
    let pod: PodSandbox = every_field(seed);
    let ctr: Container = every_field(seed.wrapping_add(1));
    let fds = descriptor_set();
    let unset = unset_fields(&fds, POD, &pod.encode_to_vec());
    assert!(unset.is_empty(), "pod fields not set: {unset:?}");
    let unset = unset_fields(&fds, CONTAINER, &ctr.encode_to_vec());
    assert!(unset.is_empty(), "container fields not set: {unset:?}");
    (pod, ctr)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn requests_with_every_field_set_are_prosts_bytes(seed in any::<u64>()) {
        let (pod, ctr) = full(seed);
        let want = CreateContainerRequest {
            pod: Some(pod.clone()),
            container: Some(ctr.clone()),
        }
        .encode_to_vec();
        prop_assert_eq!(&pod_container_request(&pod, Some(&ctr))[..], &want[..]);
        let mut payload = CreatePayload::new(&pod, &ctr);
        prop_assert_eq!(&payload.first()[..], &want[..]);
        prop_assert_eq!(&payload.request(1, &ctr, None)[..], &want[..]);
        let want = RemovePodSandboxRequest { pod: Some(pod.clone()) }.encode_to_vec();
        prop_assert_eq!(&pod_container_request(&pod, None)[..], &want[..]);
        for ev in Event::ALL_EVENTS {
            let want = StateChangeEvent {
                event: ev as i32,
                pod: Some(pod.clone()),
                container: Some(ctr.clone()),
            }
            .encode_to_vec();
            prop_assert_eq!(&state_change(ev, &pod, Some(&ctr))[..], &want[..]);
        }
    }

    #[test]
    fn a_sync_with_every_field_set_is_prosts_bytes(seed in any::<u64>()) {
        let (pod, ctr) = full(seed);
        let (pods, ctrs) = (vec![pod.clone(), pod], vec![ctr.clone(), ctr]);
        let one = SyncLimits { message: 4 << 20, part: 4 << 20 };
        let mut enc = SyncEncoder::new(
            SyncObjects::new(Snapshot::new(pods.clone(), ctrs.clone()), |_| true, |_| true),
            one,
        );
        let got = enc.next_message_now().unwrap_or_default();
        prop_assert!(enc.next_message_now().is_none());
        let want = SynchronizeRequest { pods, containers: ctrs, more: false }.encode_to_vec();
        prop_assert_eq!(&got[..], &want[..]);
    }
}
