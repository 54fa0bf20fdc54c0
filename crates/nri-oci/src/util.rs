//! Small helpers shared by the appliers.

use oci_spec::runtime::{Hooks, Linux, LinuxResources, Process, Spec};
use serde_json::Value;

use crate::Error;

/// Splits an NRI key into (key, is_removal). A leading `-` marks removal.
/// Rejects an empty key and a bare `-`.
pub(crate) fn split_marker<'a>(
    field: &'static str,
    raw: &'a str,
) -> Result<(&'a str, bool), Error> {
    let (key, removal) = match raw.strip_prefix('-') {
        Some(rest) => (rest, true),
        None => (raw, false),
    };
    if key.is_empty() {
        return Err(Error::InvalidKey {
            field,
            key: raw.to_owned(),
            reason: if removal {
                "removal marker without a key"
            } else {
                "empty key"
            },
        });
    }
    Ok((key, removal))
}

/// Parses an OCI string enum through its serde representation, so the value
/// written back to JSON is exactly the string received.
pub(crate) fn parse_oci_enum<T: serde::de::DeserializeOwned>(
    field: &'static str,
    value: &str,
) -> Result<T, Error> {
    serde_json::from_value(Value::String(value.to_owned())).map_err(|_| Error::UnknownValue {
        field,
        value: value.to_owned(),
    })
}

/// `Some(s)` unless `s` is empty (Go's `omitempty`).
pub(crate) fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

/// `Some(v)` unless `v` is empty (Go's `omitempty`).
pub(crate) fn non_empty_vec<T: Clone>(v: &[T]) -> Option<Vec<T>> {
    (!v.is_empty()).then(|| v.to_vec())
}

/// A `Linux` section with nothing set (unlike `Linux::default()`, which
/// carries youki's default namespaces and masked paths).
fn empty_linux() -> Linux {
    let mut l = Linux::default();
    l.set_resources(None)
        .set_namespaces(None)
        .set_masked_paths(None)
        .set_readonly_paths(None)
        .set_uid_mappings(None)
        .set_gid_mappings(None)
        .set_sysctl(None)
        .set_devices(None)
        .set_seccomp(None)
        .set_rootfs_propagation(None)
        .set_mount_label(None)
        .set_cgroups_path(None)
        .set_intel_rdt(None)
        .set_memory_policy(None)
        .set_net_devices(None);
    l
}

/// A `Process` with only the fields the OCI spec requires (user 0:0, cwd
/// "/"), unlike `Process::default()`, which carries `sh` and capabilities.
fn empty_process() -> Process {
    let mut p = Process::default();
    p.set_terminal(None)
        .set_args(None)
        .set_env(None)
        .set_capabilities(None)
        .set_rlimits(None)
        .set_no_new_privileges(None)
        .set_apparmor_profile(None)
        .set_selinux_label(None)
        .set_oom_score_adj(None)
        .set_io_priority(None)
        .set_scheduler(None);
    p
}

pub(crate) fn linux(spec: &mut Spec) -> &mut Linux {
    spec.linux_mut().get_or_insert_with(empty_linux)
}

pub(crate) fn process(spec: &mut Spec) -> &mut Process {
    spec.process_mut().get_or_insert_with(empty_process)
}

pub(crate) fn hooks(spec: &mut Spec) -> &mut Hooks {
    spec.hooks_mut().get_or_insert_with(Hooks::default)
}

pub(crate) fn resources(spec: &mut Spec) -> &mut LinuxResources {
    linux(spec)
        .resources_mut()
        .get_or_insert_with(LinuxResources::default)
}
