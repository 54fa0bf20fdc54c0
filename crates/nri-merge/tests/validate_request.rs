//! The validation request: pristine pod and container, merged adjustment and
//! updates, owners, plugins; and validator responses.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod merge_util;

use merge_util::*;
use nri_api::api::{ContainerUpdate, PluginInstance, ValidateContainerAdjustmentResponse};
use nri_merge::Error;
use nri_merge::validate::{Rejection, UNKNOWN_REJECTION_REASON, build_request, check_response};

#[test]
fn request_has_pristine_container_and_merged_result() {
    let mut r = result();
    let mut u = ContainerUpdate::new("other");
    u.set_linux_cpu_shares(1);
    r.apply(
        &pid("10-a"),
        Some(adj(|a| {
            a.remove_env("OLD");
        })),
        vec![u],
        vec![],
    )
    .unwrap();
    r.note_plugin(&pid("05-idle"));
    let q = build_request(&r);
    assert_eq!(q.pod.as_ref(), Some(&pod()));
    assert_eq!(q.container.as_ref(), Some(&ctr()), "pristine, not adjusted");
    assert_eq!(q.adjust.as_ref(), Some(r.adjustment()));
    assert_eq!(q.update, r.updates());
    assert_eq!(q.owners.as_ref(), Some(&r.owners().to_wire()));
    assert_eq!(
        q.plugins,
        vec![
            PluginInstance {
                name: "a".into(),
                index: "10".into()
            },
            PluginInstance {
                name: "idle".into(),
                index: "05".into()
            },
        ]
    );
}

#[test]
fn responses_become_results() {
    let v = pid("50-check");
    assert!(check_response(&v, &ValidateContainerAdjustmentResponse::default()).is_ok());
    let e = check_response(
        &v,
        &ValidateContainerAdjustmentResponse {
            reject: true,
            reason: String::new(),
        },
    )
    .unwrap_err();
    assert_eq!(
        e,
        Error::ValidationRejected {
            plugin: "50-check".into(),
            reason: UNKNOWN_REJECTION_REASON.into()
        }
    );
    let resp = Rejection::new("no", vec![]).to_response();
    assert!(resp.reject);
    assert_eq!(resp.reason, "no");
}
