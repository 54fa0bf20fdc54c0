#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use nri_plugin::api::KeyValue;
use serde_json::json;

#[test]
fn indices() {
    assert_eq!(parse_indices("0,99").unwrap(), [0, 99]);
    assert_eq!(parse_indices(" 80, 45 ,00,45").unwrap(), [0, 45, 80]);
    for bad in ["", "5", "1,x", "0,100", "0,-1", "7,7"] {
        let e = parse_indices(bad).unwrap_err().to_string();
        assert!(e.contains("invalid indices"), "{bad:?}: {e}");
    }
}

#[test]
fn config_keys_merge_over_flags() {
    let base = Config {
        indices: "0,99".into(),
        verbose_level: 1,
        ..Default::default()
    };
    let c = base
        .merge_yaml("indices: 10,20,30\nYAML: true\nlogFile: /tmp/x.log\n")
        .unwrap();
    assert_eq!(c.indices, "10,20,30");
    assert!(c.yaml);
    assert_eq!(c.log_file, "/tmp/x.log");
    assert_eq!(c.verbose_level, 1, "absent keys keep their value");
    assert_eq!(base.merge_yaml("").unwrap(), base);
    for bad in ["verboseLevel: loud", "indices: '5'", "- a", "yaml: ["] {
        assert!(base.merge_yaml(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn field_changes() {
    let before = json!({"name": "c", "env": ["A=1"], "annotations": {"x": "1", "y": "2"},
                        "linux": {"resources": {"memory": {"limit": {"value": 100}}}}});
    let after = json!({"name": "c", "env": ["A=1", "B=2"], "annotations": {"x": "9"},
                       "linux": {"resources": {"memory": {"limit": {"value": 200}}}}});
    let c = diff_values(&before, &after);
    let text: Vec<String> = c
        .iter()
        .map(|c| format!("{} {} {} {}", c.kind, c.path, c.from, c.to))
        .collect();
    assert_eq!(
        text,
        [
            "update annotations.x 1 9",
            "delete annotations.y 2 <nil>",
            "create env.1 <nil> B=2",
            "update linux.resources.memory.limit.value 100 200",
        ]
    );
    // Unset and empty are the same (protobuf).
    assert!(diff_values(&json!({"a": "", "b": [], "c": {}, "d": 0}), &json!({})).is_empty());
}

#[test]
fn yaml_line_diff() {
    let before = json!({"name": "c", "env": ["A=1"], "args": ["sleep", "1"]});
    let after = json!({"name": "c", "env": ["A=1", "B=2"], "args": ["sleep", "1"]});
    let d = yaml_diff(&before, &after);
    assert!(
        d.iter().any(|l| l.starts_with("+ ") && l.contains("B=2")),
        "{d:?}"
    );
    assert!(!d.iter().any(|l| l.starts_with("- ")), "{d:?}");
    assert!(yaml_diff(&before, &before).is_empty());
}

fn ctr(env: &[(&str, &str)]) -> Container {
    Container {
        id: "c1".into(),
        name: "app".into(),
        pod_sandbox_id: "p1".into(),
        env: env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        ..Default::default()
    }
}

fn pod() -> PodSandbox {
    PodSandbox {
        id: "p1".into(),
        name: "pod".into(),
        ..Default::default()
    }
}

fn lines(rx: &std::sync::mpsc::Receiver<String>) -> Vec<String> {
    rx.try_iter().collect()
}

#[test]
fn chain_of_three_reports_each_step() {
    let shared = Shared::new(Config::default(), vec![0, 50, 99]);
    let (tx, rx) = std::sync::mpsc::channel();
    shared.set_sink(tx);
    let p = pod();
    shared.observe(0, Event::CreateContainer, &p, Some(&ctr(&[])));
    assert!(lines(&rx).is_empty(), "the first index only records");
    shared.observe(50, Event::CreateContainer, &p, Some(&ctr(&[("A", "1")])));
    let l = lines(&rx);
    assert!(
        l.contains(&"[50] CreateContainer: pod: <no changes>".to_owned()),
        "{l:?}"
    );
    assert!(
        l.contains(
            &"[50] CreateContainer: container: create: env.0: From: <nil> -> To: A=1".to_owned()
        ),
        "{l:?}"
    );
    shared.observe(
        99,
        Event::CreateContainer,
        &p,
        Some(&ctr(&[("A", "1"), ("B", "2")])),
    );
    let l = lines(&rx);
    assert!(
        l.contains(
            &"[99] CreateContainer: container: create: env.1: From: <nil> -> To: B=2".to_owned()
        ),
        "only the change between 50 and 99: {l:?}"
    );
    assert!(!l.iter().any(|x| x.contains("env.0")), "{l:?}");
}

#[test]
fn recordings_are_keyed_by_event_and_object() {
    let shared = Shared::new(Config::default(), vec![0, 99]);
    let (tx, rx) = std::sync::mpsc::channel();
    shared.set_sink(tx);
    let p = pod();
    let mut a = ctr(&[]);
    let mut b = ctr(&[]);
    a.id = "a".into();
    b.id = "b".into();
    // Two creations in flight, answered out of order.
    shared.observe(0, Event::CreateContainer, &p, Some(&a));
    shared.observe(0, Event::CreateContainer, &p, Some(&b));
    b.args = vec!["changed".into()];
    shared.observe(99, Event::CreateContainer, &p, Some(&b));
    shared.observe(99, Event::CreateContainer, &p, Some(&a));
    let l = lines(&rx);
    let changed: Vec<&String> = l.iter().filter(|x| x.contains("args.0")).collect();
    assert_eq!(changed.len(), 1, "{l:?}");
    assert_eq!(
        l.iter()
            .filter(|x| x.contains("container: <no changes>"))
            .count(),
        1,
        "{l:?}"
    );
    // No recording from the previous index: nothing printed, no panic.
    shared.observe(99, Event::StartContainer, &p, Some(&a));
    assert!(lines(&rx).is_empty());
}

#[test]
fn verbose_and_yaml_modes() {
    let shared = Shared::new(
        Config {
            verbose_level: 2,
            yaml: true,
            ..Default::default()
        },
        vec![0, 99],
    );
    let (tx, rx) = std::sync::mpsc::channel();
    shared.set_sink(tx);
    let p = pod();
    shared.observe(0, Event::StartContainer, &p, Some(&ctr(&[])));
    let l = lines(&rx);
    assert!(
        l.iter()
            .any(|x| x.starts_with("[00] StartContainer: container:")),
        "{l:?}"
    );
    shared.observe(99, Event::StartContainer, &p, Some(&ctr(&[("X", "y")])));
    let l = lines(&rx);
    assert!(
        l.iter()
            .any(|x| x.contains("Original values for container")),
        "{l:?}"
    );
    assert!(
        l.iter()
            .any(|x| x.contains("container: + ") && x.contains("X=y")),
        "{l:?}"
    );
    assert!(
        l.iter()
            .any(|x| x.contains("Values after changes for container")),
        "{l:?}"
    );
}

#[test]
fn pending_is_bounded() {
    let shared = Shared::new(Config::default(), vec![0, 99]);
    let p = pod();
    for i in 0..(MAX_PENDING + 10) {
        let mut c = ctr(&[]);
        c.id = format!("c{i}");
        shared.observe(0, Event::CreateContainer, &p, Some(&c));
    }
    let pending = lock(&shared.pending);
    assert_eq!(pending[&0].map.len(), MAX_PENDING);
    assert!(
        !pending[&0]
            .map
            .contains_key(&(Event::CreateContainer, "c0".to_owned()))
    );
}

#[tokio::test(flavor = "current_thread")]
async fn handlers_record_and_never_fail() {
    let shared = Shared::new(Config::default(), vec![0, 99]);
    let first = DifferInstance::new(0, Arc::clone(&shared), None, None);
    let last = DifferInstance::new(99, Arc::clone(&shared), None, None);
    let (tx, rx) = std::sync::mpsc::channel();
    shared.set_sink(tx);
    let r = first.create_container(pod(), ctr(&[])).await.unwrap();
    assert!(r.adjust.is_none(), "the differ never adjusts");
    let mut c = ctr(&[]);
    c.env.push(
        KeyValue {
            key: "K".into(),
            value: "V".into(),
        }
        .key,
    );
    last.create_container(pod(), c).await.unwrap();
    assert!(lines(&rx).iter().any(|l| l.contains("create: env.0")));
}
