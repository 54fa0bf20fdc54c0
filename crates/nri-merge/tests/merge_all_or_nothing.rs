//! Property: a response that fails to merge leaves no trace. Plugins
//! adjust colliding keys (and remove some), so some responses conflict;
//! the collector that saw every response ends exactly like one that only
//! saw the responses that merged: the same merged adjustment, owners and
//! container for the next plugin.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod merge_util;

use std::collections::BTreeMap;

use merge_util::*;
use nri_api::api::{ContainerAdjustment, LinuxContainerAdjustment, LinuxMemory, LinuxResources};
use proptest::prelude::*;

/// One plugin's adjustment over small key sets, so keys collide with the
/// container's and with other plugins' (and some are removals).
fn adjustment() -> impl Strategy<Value = ContainerAdjustment> {
    let key = "-?[a-c]";
    (
        proptest::collection::btree_map(key, "[x-z]", 0..3),
        proptest::collection::vec((key, "[x-z]"), 0..3),
        proptest::collection::vec(key, 0..3),
        proptest::collection::btree_map(key, "[x-z]", 0..2),
        proptest::option::of(0i64..3),
        any::<bool>(),
    )
        .prop_map(|(annotations, env, mounts, sysctl, memory, args)| {
            let mut a = ContainerAdjustment {
                annotations,
                ..Default::default()
            };
            for (k, v) in env {
                a.add_env(k, v);
            }
            for d in mounts {
                a.add_mount(mount(&format!("{d}/m"), "/src"));
            }
            if !sysctl.is_empty() || memory.is_some() {
                a.linux = Some(LinuxContainerAdjustment {
                    sysctl: sysctl.into_iter().collect::<BTreeMap<_, _>>(),
                    resources: memory.map(|m| LinuxResources {
                        memory: Some(LinuxMemory {
                            limit: Some(nri_api::api::OptionalInt64 { value: m << 20 }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                });
            }
            if args {
                a.args = vec!["/bin/sh".into()];
            }
            a
        })
}

proptest! {
    /// With `each_step`, the container is compared after every response
    /// (so it is written from the second on); without, only at the end
    /// (failed responses before the collector first writes it).
    #[test]
    fn a_failed_response_leaves_no_trace(
        adjustments in proptest::collection::vec(adjustment(), 1..6),
        each_step in any::<bool>(),
    ) {
        let mut all = result();
        let mut merged_only = result();
        for (i, a) in adjustments.iter().enumerate() {
            let plugin = format!("{:02}-p{i}", 10 + i);
            if apply(&mut all, &plugin, a.clone()).is_ok() {
                apply(&mut merged_only, &plugin, a.clone())
                    .expect("a response that merged before merges again");
            }
            prop_assert_eq!(all.adjustment(), merged_only.adjustment());
            prop_assert_eq!(all.owners(), merged_only.owners());
            if each_step {
                prop_assert_eq!(all.container(), merged_only.container());
            }
        }
        prop_assert_eq!(all.container(), merged_only.container());
    }
}
