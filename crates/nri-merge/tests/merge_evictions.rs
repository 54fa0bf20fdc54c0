//! Evictions requested by plugins reach the runtime (upstream drops them).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod merge_util;

use merge_util::*;
use nri_api::api::ContainerEviction;
use nri_merge::Error;
use nri_merge::UpdateResult;

#[test]
fn create_collects_evictions_once_per_container() {
    let mut r = result();
    r.apply(
        &pid("10-a"),
        None,
        vec![],
        vec![ContainerEviction::new("v1", "first")],
    )
    .unwrap();
    r.apply(
        &pid("20-b"),
        None,
        vec![],
        vec![
            ContainerEviction::new("v1", "second"),
            ContainerEviction::new("v2", "other"),
        ],
    )
    .unwrap();
    let ev: Vec<_> = r
        .evictions()
        .iter()
        .map(|e| {
            (
                e.container_id.as_str(),
                e.reason.as_str(),
                e.plugin.to_string(),
            )
        })
        .collect();
    assert_eq!(
        ev,
        [
            ("v1", "first", "10-a".to_string()),
            ("v2", "other", "20-b".to_string())
        ]
    );
    let resp = r.into_response();
    assert_eq!(
        resp.evict,
        vec![
            ContainerEviction::new("v1", "first"),
            ContainerEviction::new("v2", "other")
        ]
    );
}

#[test]
fn evicting_the_container_being_created_is_refused() {
    let mut r = result();
    let e = r
        .apply(
            &pid("10-a"),
            None,
            vec![],
            vec![ContainerEviction::new(CTR, "no")],
        )
        .unwrap_err();
    assert!(matches!(e, Error::InvalidUpdate { .. }));
    let e = r
        .apply(
            &pid("10-a"),
            None,
            vec![],
            vec![ContainerEviction::new("", "no")],
        )
        .unwrap_err();
    assert!(matches!(e, Error::InvalidUpdate { .. }));
    assert!(r.evictions().is_empty());
}

#[test]
fn update_container_returns_evictions() {
    let mut r = UpdateResult::new(pod(), ctr(), None);
    r.apply(&pid("10-a"), vec![], vec![ContainerEviction::new("v", "r")])
        .unwrap();
    assert_eq!(r.evictions()[0].container_id, "v");
    assert_eq!(
        r.into_response().evict,
        vec![ContainerEviction::new("v", "r")]
    );
}
