//! Event metadata: every event names its pod (id, name, namespace, UID)
//! and container (name) as the pod and container were created.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Violation, of, short};
use crate::cri::PodSpec;
use crate::record::{EventKind, Record};

/// What the checker created, by id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MetadataExpectation {
    /// Sandbox id -> the pod as asked for.
    pub pods: BTreeMap<String, PodSpec>,
    /// Container id -> (container name, sandbox id).
    pub containers: BTreeMap<String, (String, String)>,
}

fn field(out: &mut Vec<Violation>, ev: EventKind, what: &str, got: &str, want: &str, obj: &str) {
    if got == want {
        return;
    }
    let (kind, msg) = if got.is_empty() {
        (
            "missing",
            format!("{ev} of {obj}: {what} is empty (want {want:?})"),
        )
    } else {
        (
            "wrong",
            format!("{ev} of {obj}: {what} is {got:?} (want {want:?})"),
        )
    };
    out.push(Violation::new(
        format!("{ev}-{}-{kind}", what.replace(' ', "-")),
        msg,
    ));
}

/// Event metadata: for each event of `instance` about a pod or container in
/// `expect`, the pod's id, name, namespace and UID, and the container's
/// name, are those it was created with. Codes: `E-pod-F-missing` (F one of
/// `id`, `name`, `namespace`, `uid`; E the event), `E-pod-F-wrong`,
/// `E-container-name-missing`, `E-container-name-wrong`.
pub fn check_event_metadata(
    records: &[Record],
    instance: &str,
    expect: &MetadataExpectation,
) -> Vec<Violation> {
    let mut out = Vec::new();
    for r in of(records, instance) {
        let Some((ev, pod, ctr)) = r.as_event() else {
            continue;
        };
        let pod_id = match ctr {
            Some(c) => match expect.containers.get(&c.id) {
                Some((name, pod_id)) => {
                    let obj = format!("container {}", short(&c.id));
                    field(&mut out, ev, "container name", &c.name, name, &obj);
                    field(&mut out, ev, "pod id", &pod.id, pod_id, &obj);
                    pod_id.as_str()
                }
                None => continue,
            },
            None => pod.id.as_str(),
        };
        let Some(spec) = expect.pods.get(pod_id) else {
            continue;
        };
        let obj = match ctr {
            Some(c) => format!("container {} in pod {}", short(&c.id), spec.name),
            None => format!("pod {}", spec.name),
        };
        field(&mut out, ev, "pod name", &pod.name, &spec.name, &obj);
        field(
            &mut out,
            ev,
            "pod namespace",
            &pod.namespace,
            &spec.namespace,
            &obj,
        );
        field(&mut out, ev, "pod uid", &pod.uid, &spec.uid, &obj);
    }
    out
}
