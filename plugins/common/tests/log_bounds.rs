//! What one hostile annotation can make a plugin log: the warnings about
//! what Go drops (unknown keys, repeated keys, names it does not know)
//! and the refusals of the allow-list stay under 4 KiB per annotation,
//! however large the value and however many items it drops. Before, each
//! dropped item was one warning carrying the whole value.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::Write;
use std::sync::{Arc, Mutex};

use nri_sample_common::fence::Refused;
use nri_sample_common::goyaml::{Field, Shape};
use nri_sample_common::{Source, decode_annotation};

/// The log bytes one annotation may cause.
const MAX_LOG_BYTES: usize = 4096;

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

/// Runs `f` with a subscriber like the plugins' (plain lines, no
/// colours); returns what it logged.
fn logged(f: impl FnOnce()) -> String {
    let sink = Sink::default();
    let out = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || out.clone())
        .with_ansi(false)
        .with_target(false)
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    String::from_utf8(sink.0.lock().unwrap().clone()).unwrap()
}

const DEVICE: Shape = Shape::Struct(&[
    Field::new("path", Shape::Str),
    Field::new("major", Shape::Int(64)),
]);
const DEVICES: Shape = Shape::Seq(&DEVICE);

#[derive(serde::Deserialize, serde::Serialize, Default, Debug)]
#[serde(default)]
struct Device {
    path: String,
    major: i64,
}

#[test]
fn one_warning_per_annotation_however_many_keys_it_drops() {
    // 1,500 items with an unknown key each, and a long path in each so
    // the value is large: 1,500 notices.
    let value: String = (0..1_500)
        .map(|i| format!("- {{path: /dev/{i}{}, majr: 1}}\n", "x".repeat(40)))
        .collect();
    let src = Source {
        pod: "p",
        container: "c",
        annotation: "devices.noderesource.dev/container.c",
        value: &value,
    };
    let log = logged(|| {
        let list: Vec<Device> = decode_annotation(&src, &DEVICES, &Vec::new(), false).unwrap();
        assert_eq!(list.len(), 1_500);
    });
    eprintln!(
        "{} bytes of annotation, 1,500 unknown keys: {} bytes of log in {} lines",
        value.len(),
        log.len(),
        log.lines().count()
    );
    assert!(
        log.len() <= MAX_LOG_BYTES,
        "{} bytes of log for one annotation",
        log.len()
    );
    assert_eq!(log.lines().count(), 1, "{log}");
    // The warning still says what was dropped, and how many.
    assert!(log.contains("[0].majr"), "{log}");
    assert!(log.contains("1496 more"), "{log}");
}

#[test]
fn a_refusal_of_a_huge_value_is_short() {
    let huge = "y".repeat(1 << 20);
    let log = logged(|| {
        let r = Refused::new(
            "default/p".to_owned(),
            "mounts.noderesource.dev/pod",
            format!("mount source {huge:?}"),
            "allow.mountSources [/srv]",
        );
        assert!(
            r.to_string().len() <= MAX_LOG_BYTES,
            "{}",
            r.to_string().len()
        );
    });
    assert!(log.len() <= MAX_LOG_BYTES, "{} bytes of log", log.len());
}

#[test]
fn a_dropped_item_quotes_an_excerpt_of_the_value() {
    let value = format!(
        "- {{path: /dev/x, majr: 1, extra: {}}}",
        "z".repeat(200_000)
    );
    let src = Source {
        pod: "p",
        container: "c",
        annotation: "k",
        value: &value,
    };
    let log = logged(|| {
        src.dropped(false, "something").unwrap();
    });
    assert!(log.len() <= MAX_LOG_BYTES, "{} bytes of log", log.len());
}
