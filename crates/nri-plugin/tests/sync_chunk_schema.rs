//! `SyncChunk` parses `SynchronizeRequest` by hand (it counts the pods and
//! containers before decoding any); these tests hold it to the schema: the
//! message has exactly the fields it knows, and with every field of the
//! schema set (driven by the descriptor set, not a hand-kept list) it
//! yields prost's decoding and prost's bytes of each item.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use nri_api::api::{Container, PodSandbox, SynchronizeRequest};
use nri_plugin::SyncChunk;
use nri_test_support::schema::{descriptor_set, every_field, message, unset_fields};
use proptest::prelude::*;
use prost::{Message, Name};

#[test]
fn synchronize_request_has_the_fields_sync_chunk_parses() {
    let fds = descriptor_set();
    let got: Vec<(i32, &str, &str)> = (message(&fds, &SynchronizeRequest::full_name()).field)
        .iter()
        .map(|f| (f.number(), f.name(), f.type_name()))
        .collect();
    assert_eq!(
        got,
        [
            (1, "pods", ".nri.pkg.api.v1alpha1.PodSandbox"),
            (2, "containers", ".nri.pkg.api.v1alpha1.Container"),
            (3, "more", ""),
        ],
        "SynchronizeRequest changed: update SyncChunk (nri-plugin/src/sync_chunk.rs)"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn every_field_set_parses_as_prost_decodes(seed in any::<u64>()) {
        let req: SynchronizeRequest = every_field(seed);
        let bytes = req.encode_to_vec();
        let unset = unset_fields(&descriptor_set(), &SynchronizeRequest::full_name(), &bytes);
        prop_assert!(unset.is_empty(), "fields not set: {:?}", unset);
        prop_assert!(req.more && !req.pods.is_empty() && !req.containers.is_empty());

        let chunk = SyncChunk::new(bytes.clone().into()).unwrap();
        prop_assert_eq!(chunk.pod_count(), req.pods.len());
        prop_assert_eq!(chunk.container_count(), req.containers.len());
        prop_assert_eq!(chunk.more(), req.more);
        prop_assert_eq!(chunk.wire_len(), bytes.len());
        let pods: Vec<PodSandbox> = chunk.pods().map(Result::unwrap).collect();
        let ctrs: Vec<Container> = chunk.containers().map(Result::unwrap).collect();
        prop_assert_eq!(&pods, &req.pods);
        prop_assert_eq!(&ctrs, &req.containers);
        // What the plugin gets encodes back to the runtime's bytes.
        let again = SynchronizeRequest { pods, containers: ctrs, more: chunk.more() };
        prop_assert_eq!(again.encode_to_vec(), bytes);
        let (pods, ctrs) = chunk.into_vecs().unwrap();
        prop_assert_eq!((pods, ctrs), (req.pods, req.containers));
    }
}
