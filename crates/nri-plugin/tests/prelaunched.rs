//! Pre-launched mode: a plugin binary started the way a runtime starts the
//! executables of its plugin directory (socket on fd 3, NRI_PLUGIN_SOCKET,
//! NRI_PLUGIN_NAME, NRI_PLUGIN_IDX, empty environment), against the
//! in-process fake runtime. The config text arrives in Configure.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::*;
use nri_api::api::{CreateContainerRequest, CreateContainerResponse, KeyValue};
use nri_api::method;

#[tokio::test]
async fn launched_plugin_registers_and_uses_its_config() {
    let bin = example_bin("adjuster");
    let (ours, theirs) = nri_mux::socketpair().unwrap();
    let mut cmd = std::process::Command::new(&bin);
    cmd.env_clear()
        .env("NRI_PLUGIN_NAME", "adjuster")
        .env("NRI_PLUGIN_IDX", "42")
        .stdin(std::process::Stdio::null());
    nri_mux::pass_to_child(&mut cmd, theirs);
    let mut child = tokio::process::Command::from(cmd)
        .kill_on_drop(true)
        .spawn()
        .unwrap();

    let conn = RuntimeConn::new(nri_mux::into_tokio(ours).unwrap(), Register::Accept);
    let reg = conn.registered().await;
    assert_eq!(
        (reg.plugin_name.as_str(), reg.plugin_idx.as_str()),
        ("adjuster", "42")
    );
    let mut req = configure_req("v0.12.2");
    req.config =
        "# from 42-adjuster.conf\nenv GREETING=hello\nannotation example.com/owner=team-a\n".into();
    let resp = conn.configure(req).await.unwrap();
    assert_eq!(resp.events, 0x8, "CreateContainer only");
    conn.sync(vec![], vec![]).await.unwrap();
    let created: CreateContainerResponse = conn
        .call(
            method::CREATE_CONTAINER,
            &CreateContainerRequest {
                pod: Some(pod("p1")),
                container: Some(container("c1", "p1")),
            },
        )
        .await
        .unwrap();
    let adjust = created.adjust.unwrap();
    assert_eq!(
        adjust.env,
        vec![KeyValue {
            key: "GREETING".into(),
            value: "hello".into()
        }]
    );
    assert_eq!(
        adjust
            .annotations
            .get("example.com/owner")
            .map(String::as_str),
        Some("team-a")
    );

    // The runtime goes away: a pre-launched plugin ends (exit 2, connection lost).
    conn.close();
    let status = tokio::time::timeout(TIMEOUT, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(2));
}

#[tokio::test]
async fn launched_plugin_with_bad_config_fails_configure() {
    let bin = example_bin("adjuster");
    let (ours, theirs) = nri_mux::socketpair().unwrap();
    let mut cmd = std::process::Command::new(&bin);
    cmd.env_clear()
        .env("NRI_PLUGIN_NAME", "adjuster")
        .env("NRI_PLUGIN_IDX", "42");
    nri_mux::pass_to_child(&mut cmd, theirs);
    let mut child = tokio::process::Command::from(cmd)
        .kill_on_drop(true)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let conn = RuntimeConn::new(nri_mux::into_tokio(ours).unwrap(), Register::Accept);
    conn.registered().await;
    let mut req = configure_req("v0.12.2");
    req.config = "bogus line".into();
    let err = conn.configure(req).await.unwrap_err();
    assert!(err.to_string().contains("line 1"), "{err}");
    conn.close();
    let out = tokio::time::timeout(TIMEOUT, async {
        use tokio::io::AsyncReadExt;
        let mut s = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut s)
            .await
            .unwrap();
        (child.wait().await.unwrap(), s)
    })
    .await
    .unwrap();
    assert_eq!(out.0.code(), Some(2));
    assert!(out.1.contains("configuration failed"), "{}", out.1);
}
