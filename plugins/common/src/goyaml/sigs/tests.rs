#![allow(clippy::unwrap_used)]
use serde_json::json;

use super::super::Field;
use super::*;

const DEVICE: Shape = Shape::Struct(&[
    Field::new("path", Shape::Str),
    Field::new("type", Shape::Str),
    Field::new("major", Shape::Int(64)),
    Field::new("minor", Shape::Int(64)),
    Field::new("file_mode", Shape::Uint(32)),
    Field::new("uid", Shape::Uint(32)),
]);
const DEVICES: Shape = Shape::Seq(&DEVICE);
const STRINGS: Shape = Shape::Seq(&Shape::Str);
const SYSCTL: Shape = Shape::Map(&Shape::Str);

fn dec(text: &str, shape: &Shape) -> Result<Decoded<Value>, DecodeError> {
    decode_sigs_value(text, shape, shape.zero())
}

fn ok(text: &str, shape: &Shape) -> Value {
    dec(text, shape).unwrap().value
}

#[test]
fn scalars_become_strings_where_go_wants_a_string() {
    assert_eq!(
        ok(
            "net.core.somaxconn: 256\nip_forward: on\nb: yes\nf: 1.0\ng: 1e6\nh: 0.1\nnul: ~\nq: '07'\nx: 0666\n",
            &SYSCTL
        ),
        json!({"net.core.somaxconn": "256", "ip_forward": "true", "b": "true", "f": "1", "g": "1e+06", "h": "0.1", "nul": "", "q": "07", "x": "438"})
    );
    assert_eq!(
        ok("[size=1m, 755, yes, 1.5, off]", &STRINGS),
        json!(["size=1m", "755", "true", "1.5", "false"])
    );
    // Keys of any scalar type become strings; YAML 1.1 makes `y` and `n`
    // booleans, keys too.
    assert_eq!(
        ok("1: a\ntrue: b\n1.5: c\ny: d\nn: e\n", &SYSCTL),
        json!({"1": "a", "true": "d", "1.5": "c", "false": "e"})
    );
}

#[test]
fn floats_fit_integers_when_whole() {
    let v = ok(
        "- {path: /dev/x, major: 1.0, minor: 1e1, file_mode: 0666, uid: 1_000}",
        &DEVICES,
    );
    assert_eq!(v[0]["major"], 1);
    assert_eq!(v[0]["minor"], 10);
    assert_eq!(v[0]["file_mode"], 0o666);
    assert_eq!(v[0]["uid"], 1000);
    for bad in [
        "- {major: 1.5}",
        "- {major: '1'}",
        "- {major: true}",
        "- {major: 1e21}",
        "- {major: .inf}",
        "- {file_mode: -1}",
        "- {file_mode: 4294967296}",
        "- {major: [1]}",
        "- {path: [a]}",
        "- {path: {a: b}}",
        "{path: /dev/x}",
        "- 1",
        "just text",
    ] {
        assert!(dec(bad, &DEVICES).is_err(), "{bad}");
    }
    // NaN anywhere fails the encoding to JSON, even under an unknown key.
    assert!(dec("- {extra: .nan}", &DEVICES).is_err());
}

#[test]
fn keys_fold_case_and_unknown_ones_are_noticed() {
    let d = dec("- {PATH: /dev/a, Type: c, majr: 1}", &DEVICES).unwrap();
    assert_eq!(d.value[0]["path"], "/dev/a");
    assert_eq!(d.value[0]["type"], "c");
    assert_eq!(
        d.notices,
        [Notice::UnknownKey {
            path: "[0].majr".into()
        }]
    );
    // `Path` and `path`: JSON keys sorted byte-wise, the last one wins.
    let d = dec("- {path: /dev/b, Path: /dev/a}", &DEVICES).unwrap();
    assert_eq!(d.value[0]["path"], "/dev/b");
    assert!(matches!(&d.notices[..], [Notice::DuplicateKey { .. }]));
    // The long s and the Kelvin sign fold onto ASCII letters in Go.
    let d = dec("- {\u{17f}ource: x, \u{212a}ey: y, path: /p}", &DEVICES).unwrap();
    assert_eq!(d.notices.len(), 2);
}

#[test]
fn duplicate_keys_keep_the_last_value() {
    let d = dec("a: '1'\nb: '2'\na: '3'\n", &SYSCTL).unwrap();
    assert_eq!(d.value, json!({"a": "3", "b": "2"}));
    assert_eq!(d.notices, [Notice::DuplicateKey { path: "a".into() }]);
    // Merge keys are not duplicates.
    let d = dec(
        "base: &b {x: '1', z: '2'}\nm:\n  <<: *b\n  z: '3'\n",
        &Shape::Map(&SYSCTL),
    )
    .unwrap();
    assert_eq!(d.value["m"], json!({"x": "1", "z": "3"}));
    assert!(d.notices.is_empty(), "{:?}", d.notices);
}

#[test]
fn null_and_empty_keep_the_variable() {
    let start =
        json!([{"path": "/keep", "type": "", "major": 0, "minor": 0, "file_mode": 0, "uid": 0}]);
    for text in ["", "~", "# comment\n", "null"] {
        let d = decode_sigs_value(text, &DEVICES, start.clone()).unwrap();
        assert_eq!(d.value, start, "{text:?}");
    }
    // A null list element is a zero element; a null field keeps the zero.
    assert_eq!(ok("- ~\n- {major: ~}", &DEVICES)[1]["major"], 0);
    assert_eq!(ok("[]", &DEVICES), json!([]));
}

#[test]
fn decoding_into_a_value_merges_like_go() {
    // A struct already holding values: absent keys keep theirs.
    const CFG: Shape = Shape::Struct(&[
        Field::new("logFile", Shape::Str),
        Field::new("events", Shape::Seq(&Shape::Str)),
    ]);
    let start = json!({"logFile": "/a", "events": ["x", "y"]});
    let d = decode_sigs_value("events: [z]", &CFG, start.clone()).unwrap();
    assert_eq!(d.value, json!({"logFile": "/a", "events": ["z"]}));
    let d = decode_sigs_value("logFile: /b", &CFG, start).unwrap();
    assert_eq!(d.value, json!({"logFile": "/b", "events": ["x", "y"]}));
}

#[test]
fn syntax_errors() {
    assert!(matches!(dec("- [", &DEVICES), Err(DecodeError::Syntax(_))));
    assert!(matches!(
        dec("a: !!int x", &SYSCTL),
        Err(DecodeError::Shape(_))
    ));
    assert!(dec("? [a]\n: b\n", &SYSCTL).is_err());
}
