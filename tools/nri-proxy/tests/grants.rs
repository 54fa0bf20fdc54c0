//! Grants hold behind the proxy: the `grants:` section of the proxy's
//! configuration file admits the plugins that connect to the proxy by
//! name and kernel identity, and holds their answers to their grant
//! before the proxy merges them and answers the runtime above.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use nri_plugin::{Builder, ConnectMode};

fn my_uid() -> u32 {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self").unwrap().uid()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_hold_for_the_plugins_behind_the_proxy() {
    let me = my_uid();
    let other = me.wrapping_add(1);
    let env = Env::new();
    let up = env.upstream(Duration::from_secs(2)).await;
    let grants = format!(
        "grants:\n\
         \x20 - plugins: [ay]\n\
         \x20   identity: {{ uids: [{me}] }}\n\
         \x20   adjust: [env]\n\
         \x20 - plugins: [bee]\n\
         \x20   adjust: [annotations]\n\
         \x20 - plugins: [impostor]\n\
         \x20   identity: {{ uids: [{other}] }}\n\
         \x20   adjust: [all]\n\
         plugins:\n\
         \x20 bee: {{ policy: ignore }}\n"
    );
    let proxy = Running::start(env.config(&grants, "")).await;
    proxy.wait_serving(&env.proxy_socket).await;

    // A plugin whose uid is not the one its grant requires is refused at
    // registration, with the runtime's reason.
    let impostor = Builder::new(TestPlugin::adding("X", "1"))
        .name("impostor")
        .index("30")
        .socket_path(&env.proxy_socket)
        .mode(ConnectMode::External)
        .build()
        .unwrap();
    let refused = tokio::time::timeout(Duration::from_secs(20), impostor.run())
        .await
        .expect("the impostor's registration is answered")
        .expect_err("the impostor is refused");
    let refused = refused.to_string();
    assert!(
        refused.contains("refused by the grants") && refused.contains(&format!("uid {me}")),
        "{refused}"
    );

    let mut behind = Behind::default();
    behind.connect(&env.proxy_socket, "10", "ay", TestPlugin::adding("A", "1"));
    behind.connect(&env.proxy_socket, "20", "bee", TestPlugin::adding("B", "2"));
    until("two plugins behind the proxy", || {
        proxy.proxy.adaptation().plugins().len() == 2
    })
    .await;
    until("the proxy upstream", || up.plugins().len() == 1).await;
    let infos = proxy.proxy.adaptation().plugins();
    for i in &infos {
        assert_eq!(i.identity.uid, Some(me), "{i:?}");
        assert!(i.grant.is_some(), "admitted under a grant: {i:?}");
    }

    // bee's answer sets env, which its grant does not allow: refused for
    // bee (policy ignore), ay's is merged; the runtime above gets ay's.
    up.run_pod_sandbox(&pod("p")).await.unwrap();
    let out = up
        .create_container(&pod("p"), &ctr("p", "c"))
        .await
        .unwrap();
    assert_eq!(env_of(&out.adjustment), ["A=1"]);
    assert_eq!(
        metric(
            &proxy.proxy,
            "nri_grant_refusals_total{plugin=\"20-bee\",operation=\"CreateContainer\",field=\"env\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(
            &proxy.proxy,
            "nri_grant_refusals_total{plugin=\"10-ay\",operation=\"CreateContainer\",field=\"env\"}"
        ),
        None
    );

    behind.stop().await;
    proxy.stop().await;
    up.stop().await;
}
