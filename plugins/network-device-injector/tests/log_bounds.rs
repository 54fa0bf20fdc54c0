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
