//! Container updates: merged per container, pids honoured, ignore_failure,
//! the UpdateContainer target last, StopContainer, unsolicited updates.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod merge_util;

use merge_util::*;
use nri_api::api::{ContainerUpdate, Field, LinuxResources, UpdateContainerResponse};
use nri_merge::Error;
use nri_merge::{StopResult, UpdateResult, merge_unsolicited};

fn upd(id: &str, f: impl FnOnce(&mut ContainerUpdate)) -> ContainerUpdate {
    let mut u = ContainerUpdate::new(id);
    f(&mut u);
    u
}

fn res(u: &ContainerUpdate) -> &LinuxResources {
    u.linux.as_ref().unwrap().resources.as_ref().unwrap()
}

#[test]
fn pids_from_plugin_updates_are_honoured() {
    let mut r = result();
    r.apply(
        &pid("10-a"),
        None,
        vec![upd("other", |u| {
            u.set_linux_pid_limits(42);
        })],
        vec![],
    )
    .unwrap();
    assert_eq!(res(&r.updates()[0]).pids.as_ref().unwrap().limit, 42);
    assert_eq!(
        r.owners()
            .owner("other", Field::PidsLimit, None)
            .unwrap()
            .plugin(),
        "10-a"
    );

    let mut s = StopResult::new();
    s.apply(
        &pid("10-a"),
        vec![upd("other", |u| {
            u.set_linux_pid_limits(7);
        })],
    )
    .unwrap();
    assert_eq!(res(&s.updates()[0]).pids.as_ref().unwrap().limit, 7);
}

#[test]
fn updates_merge_per_container_and_and_ignore_failure() {
    let mut r = result();
    r.apply(
        &pid("10-a"),
        None,
        vec![
            upd("c1", |u| {
                u.set_linux_cpu_shares(1).set_ignore_failure();
            }),
            upd("c2", |u| {
                u.set_linux_memory_limit(5);
            }),
        ],
        vec![],
    )
    .unwrap();
    r.apply(
        &pid("20-b"),
        None,
        vec![upd("c1", |u| {
            u.set_linux_cpu_quota(9);
        })],
        vec![],
    )
    .unwrap();
    let ids: Vec<_> = r
        .updates()
        .iter()
        .map(|u| u.container_id.as_str())
        .collect();
    assert_eq!(ids, ["c1", "c2"]);
    let c1 = &r.updates()[0];
    let cpu = res(c1).cpu.as_ref().unwrap();
    assert_eq!(
        (cpu.shares.unwrap().value, cpu.quota.unwrap().value),
        (1, 9)
    );
    assert!(!c1.ignore_failure, "AND of true and false");
}

#[test]
fn conflicting_update_with_ignore_failure_is_skipped_alone() {
    let mut r = result();
    r.apply(
        &pid("10-a"),
        None,
        vec![upd("c1", |u| {
            u.set_linux_cpu_shares(1);
        })],
        vec![],
    )
    .unwrap();
    r.apply(
        &pid("20-b"),
        Some(adj(|a| {
            a.add_env("X", "1");
        })),
        vec![
            upd("c1", |u| {
                u.set_linux_cpu_shares(2)
                    .set_linux_memory_limit(3)
                    .set_ignore_failure();
            }),
            upd("c2", |u| {
                u.set_linux_cpu_shares(4);
            }),
        ],
        vec![],
    )
    .unwrap();
    let c1 = res(&r.updates()[0]);
    assert_eq!(c1.cpu.as_ref().unwrap().shares.unwrap().value, 1);
    assert!(
        c1.memory.is_none(),
        "the skipped update left nothing behind"
    );
    assert!(r.owners().owner("c1", Field::MemLimit, None).is_none());
    assert_eq!(r.updates()[1].container_id, "c2");
    assert_eq!(r.adjustment().env[0].key, "X");
}

#[test]
fn update_of_the_container_being_created_is_refused() {
    let mut r = result();
    let e = r
        .apply(
            &pid("10-a"),
            None,
            vec![upd(CTR, |u| {
                u.set_linux_cpu_shares(1);
            })],
            vec![],
        )
        .unwrap_err();
    assert!(matches!(e, Error::InvalidUpdate { ref container, .. } if container == CTR));
}

#[test]
fn update_container_target_is_last_and_starts_from_request() {
    let requested = LinuxResources {
        cpu: Some(nri_api::api::LinuxCpu {
            shares: Some(100.into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut r = UpdateResult::new(pod(), ctr(), Some(requested));
    r.apply(
        &pid("10-a"),
        vec![
            upd(CTR, |u| {
                u.set_linux_memory_limit(1 << 20).set_linux_pid_limits(5);
            }),
            upd("other", |u| {
                u.set_linux_cpu_shares(3);
            }),
        ],
        vec![],
    )
    .unwrap();
    // The next plugin sees the requested resources as updated.
    let req = r.request();
    let lr = req.linux_resources.as_ref().unwrap();
    assert_eq!(lr.memory.as_ref().unwrap().limit.unwrap().value, 1 << 20);
    assert_eq!(lr.cpu.as_ref().unwrap().shares.unwrap().value, 100);
    assert!(r.target_touched());
    // A second plugin cannot take over the first one's field.
    let e = r.apply(
        &pid("20-b"),
        vec![upd(CTR, |u| {
            u.set_linux_memory_limit(2);
        })],
        vec![],
    );
    assert!(matches!(e, Err(Error::Conflict { .. })));

    let UpdateContainerResponse { update, .. } = r.into_response();
    assert_eq!(update.len(), 2);
    assert_eq!(update[0].container_id, "other");
    let last = update.last().unwrap();
    assert_eq!(last.container_id, CTR);
    assert_eq!(res(last).pids.as_ref().unwrap().limit, 5);
    assert_eq!(res(last).cpu.as_ref().unwrap().shares.unwrap().value, 100);
}

#[test]
fn update_container_target_is_last_even_when_untouched() {
    let r = UpdateResult::new(pod(), ctr(), None);
    assert!(!r.target_touched());
    let resp = r.into_response();
    assert_eq!(resp.update.len(), 1);
    assert_eq!(resp.update[0].container_id, CTR);
}

#[test]
fn stop_container_collects_updates() {
    let mut s = StopResult::new();
    s.apply(
        &pid("10-a"),
        vec![upd("c1", |u| {
            u.set_linux_cpu_set_cpus("0-1");
        })],
    )
    .unwrap();
    let e = s.apply(
        &pid("20-b"),
        vec![upd("c1", |u| {
            u.set_linux_cpu_set_cpus("2");
        })],
    );
    assert!(matches!(e, Err(Error::Conflict { .. })));
    let resp = s.into_response();
    assert_eq!(res(&resp.update[0]).cpu.as_ref().unwrap().cpus, "0-1");
}

#[test]
fn unsolicited_updates_merge_per_container() {
    let merged = merge_unsolicited(vec![
        upd("c1", |u| {
            u.set_linux_cpu_shares(1)
                .add_linux_hugepage_limit("2MB", 1)
                .add_linux_hugepage_limit("2MB", 2);
        }),
        upd("c1", |u| {
            u.set_linux_cpu_shares(2).set_linux_pid_limits(3);
        }),
        upd("", |u| {
            u.set_linux_cpu_shares(9);
        }),
    ]);
    assert_eq!(merged.len(), 1);
    let r = res(&merged[0]);
    assert_eq!(r.cpu.as_ref().unwrap().shares.unwrap().value, 2);
    assert_eq!(r.pids.as_ref().unwrap().limit, 3);
    assert_eq!(r.hugepage_limits.len(), 1);
    assert_eq!(r.hugepage_limits[0].limit, 2);
}
