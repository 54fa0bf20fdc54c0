//! Arbitrary text decoded as the sample plugins decode pod annotations
//! and configurations (`nri-sample-common`: `goyaml` in both dialects,
//! `decode_annotation`, `read_config`, `parse_yaml`), then through the
//! allow-list matchers. Nothing may panic, overflow the stack, take
//! longer than the run's `-timeout` or more memory than its
//! `-rss_limit_mb` / `-malloc_limit_mb` (scripts/fuzz.sh); every error
//! message is short (values are quoted as excerpts); a decoded value has
//! no more notices than the node bound allows.
//!
//! The first byte selects the target shape (so libFuzzer can specialise
//! its corpus per shape); the rest is the text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nri_sample_common::fence::{Glob, PrefixKind, Prefixes, read_config};
use nri_sample_common::goyaml::{
    Field, MAX_NODES, Shape, decode_sigs_value, decode_v3_value,
};
use nri_sample_common::{Source, decode_annotation, decode_yaml, listing, parse_yaml, strict_key};

const DEVICE: Shape = Shape::Struct(&[
    Field::new("path", Shape::Str),
    Field::new("type", Shape::Str),
    Field::new("major", Shape::Int(64)),
    Field::new("minor", Shape::Int(64)),
    Field::new("file_mode", Shape::Uint(32)),
]);
const MOUNT: Shape = Shape::Struct(&[
    Field::new("source", Shape::Str),
    Field::new("destination", Shape::Str),
    Field::new("type", Shape::Str),
    Field::new("options", Shape::Seq(&Shape::Str)),
]);
const ULIMIT: Shape = Shape::Struct(&[
    Field::new("type", Shape::Str),
    Field::new("hard", Shape::Uint(64)),
    Field::new("soft", Shape::Uint(64)),
]);
const SCHED: Shape = Shape::Struct(&[
    Field::new("policy", Shape::Str),
    Field::new("nice", Shape::Int(32)),
    Field::new("flags", Shape::Seq(&Shape::Str)),
    Field::new("runtime", Shape::Uint(64)),
    Field::new("weight", Shape::Float(32)),
    Field::new("enabled", Shape::Bool),
]);
/// A plugin configuration: `strict` and an `allow` section.
const CONFIG: Shape = Shape::Struct(&[
    Field::new("strict", Shape::Bool),
    Field::new(
        "allow",
        Shape::Struct(&[
            Field::new("namespaces", Shape::Seq(&Shape::Str)),
            Field::new("devices", Shape::Seq(&DEVICE)),
            Field::new("mountSources", Shape::Seq(&Shape::Str)),
            Field::new("rlimits", Shape::Map(&Shape::Any)),
        ]),
    ),
]);
const SHAPES: &[Shape] = &[
    Shape::Seq(&DEVICE),
    Shape::Seq(&MOUNT),
    Shape::Seq(&ULIMIT),
    Shape::Map(&Shape::Str),
    Shape::Seq(&Shape::Str),
    SCHED,
    Shape::Any,
    Shape::Map(&Shape::Seq(&Shape::Any)),
];

/// The longest error message a decoding may give (values and paths are
/// excerpts, at most 8 errors).
const MAX_MESSAGE: usize = 8 * 1024;

fn check_error(e: impl std::fmt::Display) {
    let m = e.to_string();
    assert!(m.len() <= MAX_MESSAGE, "an error of {} bytes", m.len());
}

fn decode(shape: &Shape, text: &str) {
    match decode_sigs_value(text, shape, shape.zero()) {
        Ok(d) => assert!(d.notices.len() <= MAX_NODES, "{} notices", d.notices.len()),
        Err(e) => check_error(e),
    }
    match decode_v3_value(text, shape, shape.zero()) {
        Ok(d) => assert!(d.notices.len() <= MAX_NODES, "{} notices", d.notices.len()),
        Err(e) => check_error(e),
    }
}

fn fences(text: &str) {
    let lines: Vec<&str> = text.lines().take(64).collect();
    let entries: Vec<String> = lines.iter().take(4).map(|l| (*l).to_owned()).collect();
    for kind in [PrefixKind::Path, PrefixKind::Sysctl] {
        if let Ok(p) = Prefixes::new("k", Some(entries.clone()), kind) {
            for l in &lines {
                let _ = p.allows(l);
            }
        }
    }
    if let Some((pattern, rest)) = lines.split_first() {
        let g = Glob::new(*pattern);
        for l in rest {
            let _ = g.matches(l);
        }
    }
    let l = listing(lines.iter());
    assert!(l.len() <= 2 * 1024, "a listing of {} bytes", l.len());
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let shape = &SHAPES[usize::from(sel) % SHAPES.len()];
    decode(shape, &text);
    if sel & 0x80 != 0 {
        let src = Source {
            pod: "p",
            container: "c",
            annotation: "k",
            value: &text,
        };
        let strict = sel & 0x40 != 0;
        if let Err(e) = decode_annotation(&src, &Shape::Seq(&DEVICE), &Vec::<serde_json::Value>::new(), strict) {
            check_error(e);
        }
        if let Err(e) = parse_yaml(&text) {
            check_error(e);
        }
        if let Err(e) = decode_yaml::<serde_json::Value>(&text, &["path", "type", "major"]) {
            check_error(e);
        }
        if let Err(e) = read_config::<serde_json::Value>(&text, &CONFIG) {
            check_error(e);
        }
        let _ = strict_key(&text, strict);
    }
    fences(&text);
});
