//! Property: plugins adjusting disjoint keys never conflict, and the merged
//! adjustment contains every addition.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod merge_util;

use std::collections::BTreeMap;

use merge_util::*;
use nri_api::api::ContainerAdjustment;
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct PluginAdds {
    annotations: BTreeMap<String, String>,
    env: Vec<(String, String)>,
    mounts: Vec<String>,
    sysctl: BTreeMap<String, String>,
    unified: BTreeMap<String, String>,
}

fn plugin_adds(i: usize) -> impl Strategy<Value = PluginAdds> {
    let keys = || proptest::collection::btree_set("[a-z]{1,6}", 0..5);
    (keys(), keys(), keys(), keys(), keys()).prop_map(move |(a, e, m, s, u)| PluginAdds {
        annotations: a.into_iter().map(|k| (format!("p{i}.{k}"), k)).collect(),
        env: e.into_iter().map(|k| (format!("P{i}_{k}"), k)).collect(),
        mounts: m.into_iter().map(|k| format!("/p{i}/{k}")).collect(),
        sysctl: s
            .into_iter()
            .map(|k| (format!("net.p{i}.{k}"), k))
            .collect(),
        unified: u.into_iter().map(|k| (format!("p{i}.{k}"), k)).collect(),
    })
}

fn to_adjustment(p: &PluginAdds) -> ContainerAdjustment {
    let mut a = ContainerAdjustment::default();
    for (k, v) in &p.annotations {
        a.add_annotation(k.clone(), v.clone());
    }
    for (k, v) in &p.env {
        a.add_env(k.clone(), v.clone());
    }
    for m in &p.mounts {
        a.add_mount(mount(m, "/src"));
    }
    for (k, v) in &p.sysctl {
        a.set_linux_sysctl(k.clone(), v.clone());
    }
    for (k, v) in &p.unified {
        a.add_linux_unified(k.clone(), v.clone());
    }
    a
}

proptest! {
    #[test]
    fn disjoint_keys_never_conflict(plugins in (1usize..6).prop_flat_map(|n| {
        (0..n).map(plugin_adds).collect::<Vec<_>>()
    })) {
        let mut r = result();
        for (i, p) in plugins.iter().enumerate() {
            r.apply(&pid(&format!("{:02}-p{i}", i * 10)), Some(to_adjustment(p)), vec![], vec![])
                .expect("disjoint keys must not conflict");
        }
        let container = r.container().clone();
        let m = r.adjustment();
        for p in &plugins {
            for (k, v) in &p.annotations {
                prop_assert_eq!(m.annotations.get(k), Some(v));
            }
            for (k, v) in &p.env {
                prop_assert!(m.env.iter().any(|e| &e.key == k && &e.value == v));
                let kv = format!("{k}={v}");
                prop_assert!(container.env.contains(&kv));
            }
            for d in &p.mounts {
                prop_assert!(m.mounts.iter().any(|x| &x.destination == d));
            }
            for (k, v) in &p.sysctl {
                prop_assert_eq!(linux(m).sysctl.get(k), Some(v));
            }
            for (k, v) in &p.unified {
                prop_assert_eq!(linux(m).resources.as_ref().unwrap().unified.get(k), Some(v));
            }
        }
        prop_assert_eq!(r.plugins().len(), plugins.len());
    }
}
