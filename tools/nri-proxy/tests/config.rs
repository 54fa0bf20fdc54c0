//! The proxy's configuration file: the runtime library's keys for the
//! plugin side and the `proxy:` section; errors name the line and key.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use nri_proxy::{Error, ProxyConfig};
use nri_runtime::{ConfigFormat, FailurePolicy};

fn yaml(text: &str) -> Result<ProxyConfig, Error> {
    ProxyConfig::parse("proxy.yaml", ConfigFormat::Yaml, text)
}

fn line_of(e: &Error) -> Option<usize> {
    match e {
        Error::Config(nri_runtime::Error::ConfigFile { line, .. }) => *line,
        other => panic!("{other:?}"),
    }
}

const FULL: &str = "\
socket-path: /run/nri-proxy/nri.sock
plugin-dir: /opt/nri-proxy/plugins
config-dir: /etc/nri-proxy/conf.d
request-timeout: 1500ms
allowed-uids: [0, 1000]
plugins:
  guard:
    policy: required
proxy:
  name: proxy
  index: \"05\"
  upstream-socket: /run/containerd/nri.sock
  safety-margin: 100ms
  metrics-address: 127.0.0.1:9464
  fail-request: true
";

#[test]
fn every_key_is_read() {
    let c = yaml(FULL).unwrap();
    assert_eq!(
        c.runtime.socket_path.to_str(),
        Some("/run/nri-proxy/nri.sock")
    );
    assert_eq!(
        c.runtime.plugin_dir.to_str(),
        Some("/opt/nri-proxy/plugins")
    );
    assert_eq!(c.runtime.request_timeout, Duration::from_millis(1500));
    assert_eq!(c.runtime.allowed_uids, [0, 1000]);
    let id: nri_runtime::PluginId = "10-guard".parse().unwrap();
    assert_eq!(
        c.runtime
            .failure_policy(&id, nri_api::api::Event::CreateContainer),
        FailurePolicy::Required
    );
    assert_eq!(
        (c.name.as_deref(), c.index.as_deref()),
        (Some("proxy"), Some("05"))
    );
    assert_eq!(c.upstream_socket.to_str(), Some("/run/containerd/nri.sock"));
    assert_eq!(c.safety_margin, Duration::from_millis(100));
    assert_eq!(c.metrics_address, Some("127.0.0.1:9464".parse().unwrap()));
    assert!(c.fail_request);
    assert_eq!(
        c.budget(Duration::from_secs(2)),
        Duration::from_millis(1900)
    );
}

#[test]
fn defaults_keep_the_proxy_off_the_runtimes_paths() {
    let c = yaml("").unwrap();
    assert_eq!(c.runtime.runtime_name, "nri-proxy");
    assert_eq!(
        c.runtime.socket_path.to_str(),
        Some(nri_proxy::DEFAULT_PROXY_SOCKET)
    );
    assert_eq!(
        c.runtime.plugin_dir.to_str(),
        Some(nri_proxy::DEFAULT_PROXY_PLUGIN_DIR)
    );
    assert_eq!(
        c.upstream_socket.to_str(),
        Some(nri_api::DEFAULT_SOCKET_PATH)
    );
    assert_eq!(c.safety_margin, nri_proxy::DEFAULT_SAFETY_MARGIN);
    assert_eq!((c.name, c.index, c.metrics_address), (None, None, None));
    assert!(!c.fail_request);
}

#[test]
fn errors_name_the_line_and_the_key() {
    let e = yaml("proxy:\n  name: p\n  upstream-sockt: /x\n").unwrap_err();
    assert_eq!(line_of(&e), Some(3), "{e}");
    assert!(e.to_string().contains("upstream-sockt"), "{e}");

    let e = yaml("request-timeout: 1s\nproxy:\n  safety-margin: 100\n").unwrap_err();
    assert_eq!(line_of(&e), Some(3), "{e}");

    let e = yaml("proxy:\n  metrics-address: nowhere\n").unwrap_err();
    assert_eq!(line_of(&e), Some(2), "{e}");

    let e = yaml("proxy:\n  name: p\nrequest-timeot: 1s\n").unwrap_err();
    assert_eq!(line_of(&e), Some(3), "{e}");

    let e = yaml("proxy:\n  index: \"5\"\n").unwrap_err();
    assert!(
        matches!(&e, Error::InvalidSetting { key: "index", .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("proxy.index"), "{e}");
}

#[test]
fn the_file_is_read_from_disk_in_both_formats() {
    let dir = tempfile::tempdir().unwrap();
    let y = dir.path().join("proxy.yaml");
    std::fs::write(&y, FULL).unwrap();
    assert_eq!(ProxyConfig::load(&y).unwrap().index.as_deref(), Some("05"));
    let t = dir.path().join("proxy.toml");
    std::fs::write(
        &t,
        "request-timeout = \"1s\"\n[proxy]\nname = \"p\"\nindex = \"07\"\n",
    )
    .unwrap();
    let c = ProxyConfig::load(&t).unwrap();
    assert_eq!(
        (c.index.as_deref(), c.runtime.request_timeout),
        (Some("07"), Duration::from_secs(1))
    );
    let e = ProxyConfig::load(&dir.path().join("missing.yaml")).unwrap_err();
    assert!(e.to_string().contains("missing.yaml"), "{e}");
}
