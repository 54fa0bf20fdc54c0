//! The proxy on the async runtime of its binary (`cli::async_runtime`, one
//! thread), as an operator runs it: the runtime above it and the plugins
//! behind it on other threads, as other processes would be. Every event
//! goes through and the answers merge as on any runtime.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use nri_proxy::Proxy;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_on_its_binarys_runtime_serves_every_event() {
    let env = Env::new();
    let up = env.upstream(Duration::from_secs(2)).await;
    let proxy = Arc::new(Proxy::new(env.config("", "")).unwrap());
    let shutdown = CancellationToken::new();
    let thread = {
        let (p, s) = (proxy.clone(), shutdown.clone());
        std::thread::spawn(move || {
            let rt = nri_proxy::cli::async_runtime().unwrap();
            rt.block_on(p.run(s))
        })
    };
    until("the proxy's socket", || env.proxy_socket.exists()).await;

    let mut behind = Behind::default();
    let (a, b) = (TestPlugin::adding("A", "10"), TestPlugin::adding("B", "20"));
    behind.connect(&env.proxy_socket, "20", "bee", b.clone());
    behind.connect(&env.proxy_socket, "10", "ay", a.clone());
    until("two plugins behind the proxy", || {
        proxy.adaptation().plugins().len() == 2
    })
    .await;

    up.run_pod_sandbox(&pod("p")).await.unwrap();
    for i in 0..50 {
        let c = ctr("p", &format!("c{i}"));
        let out = up.create_container(&pod("p"), &c).await.unwrap();
        assert_eq!(env_of(&out.adjustment), ["A=10", "B=20"], "container {i}");
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        up.start_container(&pod("p"), &c).await.unwrap();
    }
    up.remove_container(&pod("p"), &ctr("p", "c0"))
        .await
        .unwrap();

    // A plugin that registers now is synchronized from the proxy's view:
    // the pod and the 49 containers still there.
    let late = TestPlugin::adding("C", "30");
    behind.connect(&env.proxy_socket, "30", "late", late.clone());
    until("the late plugin synchronized", || {
        !late.synced.lock().unwrap().is_empty()
    })
    .await;
    let (pods, ctrs) = late.synced.lock().unwrap()[0].clone();
    assert_eq!(pods, ["p"]);
    assert_eq!(ctrs.len(), 49);
    assert!(!ctrs.contains(&"c0".to_owned()), "{ctrs:?}");

    assert_eq!(a.events().len(), 1 + 50 * 2 + 1);
    assert_eq!(a.events(), b.events());

    behind.stop().await;
    shutdown.cancel();
    tokio::task::spawn_blocking(move || thread.join().unwrap())
        .await
        .unwrap()
        .unwrap();
    up.stop().await;
}
