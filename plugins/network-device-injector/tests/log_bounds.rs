//! Devices upstream drops without a word are dropped with one warning for
//! the annotation (the first few named, all counted), not one warning per
//! device carrying the whole value. In a test binary of its own: the log
//! is captured with a subscriber for this thread only.
#![allow(clippy::unwrap_used, missing_docs)]

use std::io::Write;
use std::sync::{Arc, Mutex};

use nri_network_device_injector::{NETDEVICE_KEY, parse_netdevices};
use nri_sample_common::Source;

#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn dropped_devices_cost_one_warning() {
    // 2,000 devices with a name too long for an interface.
    let value: String = (0..2_000)
        .map(|i| format!("- {{name: {}{i}}}\n", "n".repeat(60)))
        .collect();
    let key = format!("{NETDEVICE_KEY}/pod");
    let src = Source {
        pod: "p",
        container: "",
        annotation: &key,
        value: &value,
    };
    let sink = Sink::default();
    let out = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || out.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        assert!(parse_netdevices(&src, false).unwrap().is_empty());
    });
    let log = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    eprintln!(
        "{} bytes of annotation, 2,000 devices dropped: {} bytes of log",
        value.len(),
        log.len()
    );
    assert!(log.len() <= 4096, "{} bytes of log", log.len());
    assert!(log.contains("and 1996 more"), "{log}");
}

/// A device name cannot forge a log line: upstream's name check lets a
/// line break through (the kernel refuses it later), and the plugin's
/// line of what a pod asks for quotes the names. Before, it wrote them as
/// they came.
#[tokio::test(flavor = "current_thread")]
async fn device_names_cannot_forge_log_lines() {
    use nri_plugin::Plugin;
    use nri_plugin::api::{LinuxNamespace, LinuxPodSandbox, PodSandbox};

    let pod = PodSandbox {
        id: "p".into(),
        name: "p".into(),
        namespace: "default".into(),
        annotations: [(
            format!("{NETDEVICE_KEY}/pod"),
            "- {name: \"a\\nFORGED\", new_name: \"b\\nFORGED\"}".to_owned(),
        )]
        .into(),
        linux: Some(LinuxPodSandbox {
            namespaces: vec![LinuxNamespace {
                r#type: "network".into(),
                path: "/var/run/netns/cni-p".into(),
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    let sink = Sink::default();
    let out = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || out.clone())
        .with_ansi(false)
        .finish();
    let plugin = nri_network_device_injector::NetDeviceInjector::new();
    {
        let _guard = tracing::subscriber::set_default(subscriber);
        plugin.run_pod_sandbox(pod).await.unwrap();
    }
    let log = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    assert!(log.contains("FORGED"), "the names are logged:\n{log}");
    assert!(
        log.lines().all(|l| !l.starts_with("FORGED")),
        "a line forged by an annotation:\n{log}"
    );
}
