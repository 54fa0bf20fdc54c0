//! Who a plugin is, from the kernel: the socket peer's credentials
//! (`SO_PEERCRED`), its executable (`/proc/<pid>/exe`) and its cgroup
//! (`/proc/<pid>/cgroup`), read when the connection is accepted; the
//! container and pod of this runtime the cgroup belongs to, looked up
//! when the plugin registers. Launched and WebAssembly plugins are known
//! by their file. See `docs/runtime/security.md`.

use std::path::{Path, PathBuf};

use nri_merge::{PluginIdentity, PodIdentity};

use crate::adaptation::Shared;
use crate::config::Snapshot;

/// Length of a container id as containerd, CRI-O and Docker make them
/// (64 hex digits), as found in cgroup paths.
const CONTAINER_ID_LEN: usize = 64;

/// At most this many bytes of `/proc/<pid>/cgroup` are read (a process
/// has one line per hierarchy; cgroup v2 has one).
const MAX_CGROUP_FILE: u64 = 64 * 1024;

/// What was learned of a peer when its connection was accepted: its
/// identity so far and the container ids its cgroup paths name.
#[derive(Debug, Clone, Default)]
pub(crate) struct Captured {
    pub(crate) identity: PluginIdentity,
    /// Candidate container ids from the cgroup paths, innermost first.
    pub(crate) container_ids: Vec<String>,
    /// Whether to look for the container the peer runs in (socket peers).
    pub(crate) locate: bool,
}

impl Captured {
    /// A socket peer: its credentials, and what `/proc` says of its pid
    /// now. A pid of 0 (the peer is in a pid namespace the runtime does
    /// not see) or a process that is gone leaves the executable and the
    /// cgroup unknown.
    pub(crate) fn socket_peer(creds: &nri_mux::PeerCredentials) -> Self {
        let pid = creds
            .pid
            .and_then(|p| u32::try_from(p).ok())
            .filter(|p| *p > 0);
        let mut identity = PluginIdentity::process(creds.uid, creds.gid, pid);
        let mut container_ids = Vec::new();
        if let Some(pid) = pid {
            let proc = PathBuf::from(format!("/proc/{pid}"));
            identity.executable = executable(&proc, pid);
            container_ids = cgroup_container_ids(&proc);
        } else {
            tracing::debug!(
                uid = creds.uid,
                "NRI peer's pid unknown (another pid namespace?): no executable or cgroup"
            );
        }
        Self {
            identity,
            container_ids,
            locate: true,
        }
    }

    /// A plugin the runtime launched from `path`, as process `pid`: it
    /// runs with the runtime's own credentials.
    pub(crate) fn launched(path: &Path, pid: Option<u32>) -> Self {
        let (uid, gid) = runtime_credentials();
        Self {
            identity: PluginIdentity::process(uid, gid, pid).with_executable(path),
            ..Self::default()
        }
    }

    /// A WebAssembly plugin loaded from `path` (no process of its own).
    pub(crate) fn wasm(path: &Path) -> PluginIdentity {
        PluginIdentity::default().with_executable(path)
    }
}

/// `/proc/<pid>/exe`, or `None` (logged) when it cannot be read.
fn executable(proc: &Path, pid: u32) -> Option<PathBuf> {
    match std::fs::read_link(proc.join("exe")) {
        Ok(p) => Some(p),
        Err(e) => {
            tracing::debug!(pid, error = %e, "cannot read the NRI peer's executable");
            None
        }
    }
}

/// The container ids named in the process's cgroup paths.
fn cgroup_container_ids(proc: &Path) -> Vec<String> {
    use std::io::Read as _;
    let mut text = String::new();
    let read = std::fs::File::open(proc.join("cgroup"))
        .and_then(|f| f.take(MAX_CGROUP_FILE).read_to_string(&mut text));
    if let Err(e) = read {
        tracing::debug!(path = %proc.display(), error = %e, "cannot read the NRI peer's cgroup");
        return Vec::new();
    }
    container_ids(&text)
}

/// The container ids (64 hex digits) in the paths of a `/proc/<pid>/cgroup`
/// file (`hierarchy:controllers:path` lines), innermost path component
/// first, each once: containerd's `cri-containerd-<id>.scope` (systemd
/// driver) or `.../pod<uid>/<id>` (cgroupfs driver), CRI-O's
/// `crio-<id>.scope`, Docker's `docker-<id>.scope`.
pub(crate) fn container_ids(cgroup: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in cgroup.lines() {
        let Some(path) = line.splitn(3, ':').nth(2) else {
            continue;
        };
        for component in path.rsplit('/') {
            for run in component.split(|c: char| !c.is_ascii_hexdigit()) {
                let lower = run.to_ascii_lowercase();
                if run.len() == CONTAINER_ID_LEN && !out.contains(&lower) {
                    out.push(lower);
                }
            }
        }
    }
    out
}

/// The container of `snapshot` the peer runs in: the first candidate id
/// the snapshot has, else a container whose process is the peer's.
pub(crate) fn find_pod(
    snapshot: &Snapshot,
    container_ids: &[String],
    pid: Option<u32>,
) -> Option<PodIdentity> {
    let container = container_ids
        .iter()
        .find_map(|id| snapshot.containers.iter().find(|c| c.id == *id))
        .or_else(|| {
            let pid = pid?;
            snapshot.containers.iter().find(|c| c.pid == pid)
        })?;
    let pod = snapshot
        .pods
        .iter()
        .find(|p| p.id == container.pod_sandbox_id)?;
    Some(PodIdentity::of(pod, container))
}

impl Shared {
    /// The full identity of a socket peer: what was captured at accept,
    /// with the container and pod of this runtime it runs in (from the
    /// runtime's listing, within the registration timeout; a listing that
    /// fails or takes longer leaves the pod unknown, with a warning). The
    /// pod is looked up only when grants are configured.
    pub(crate) async fn locate(&self, captured: &Captured, peer: &str) -> PluginIdentity {
        let mut identity = captured.identity.clone();
        // The pod costs a listing of the runtime's state, on top of the
        // one the plugin's Synchronize takes: only grants need it.
        if !captured.locate || self.config.grants.is_none() {
            return identity;
        }
        let listing = tokio::time::timeout(
            self.config.registration_timeout,
            self.callbacks.list_pods_and_containers(),
        );
        let snapshot = tokio::select! {
            r = listing => r,
            () = self.stopping.cancelled() => return identity,
        };
        match snapshot {
            Ok(Ok(snapshot)) => {
                identity.pod = find_pod(&snapshot, &captured.container_ids, identity.pid);
            }
            Ok(Err(e)) => {
                tracing::warn!(peer, error = %e, "cannot list containers to find the NRI plugin's pod; its pod is unknown");
            }
            Err(_) => {
                tracing::warn!(
                    peer,
                    "listing containers to find the NRI plugin's pod took longer than the registration timeout; its pod is unknown"
                );
            }
        }
        identity
    }
}

#[allow(unsafe_code)]
fn runtime_credentials() -> (u32, u32) {
    // SAFETY: geteuid(2) and getegid(2) take no arguments, cannot fail
    // and touch no memory of ours.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const A: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const B: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

    #[test]
    fn container_ids_of_the_usual_cgroup_layouts() {
        let systemd = format!(
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1234_5678.slice/cri-containerd-{A}.scope\n"
        );
        assert_eq!(container_ids(&systemd), [A]);
        let cgroupfs = format!(
            "12:memory:/kubepods/burstable/pod11111111-2222-3333-4444-555555555555/{B}\n11:cpu,cpuacct:/kubepods/burstable/pod11111111-2222-3333-4444-555555555555/{B}\n"
        );
        assert_eq!(container_ids(&cgroupfs), [B]);
        let crio = format!(
            "0::/system.slice/crio-{}.scope/container\n",
            A.to_uppercase()
        );
        assert_eq!(container_ids(&crio), [A], "lower-cased");
        // Innermost first.
        let nested = format!("0::/{B}/x/{A}\n");
        assert_eq!(container_ids(&nested), [A, B]);
        for none in [
            "0::/user.slice/user-0.slice/session-1.scope\n",
            "0::/\n",
            "garbage",
            "",
            "0::/docker-0123.scope\n",
        ] {
            assert!(container_ids(none).is_empty(), "{none:?}");
        }
    }

    #[test]
    fn find_pod_by_cgroup_id_then_by_pid() {
        use nri_api::api::{Container, PodSandbox};
        let pod = PodSandbox {
            id: "p".into(),
            name: "logger-x".into(),
            namespace: "kube-system".into(),
            uid: "u".into(),
            labels: [("app".to_owned(), "logger".to_owned())].into(),
            ..Default::default()
        };
        let c = Container {
            id: A.into(),
            pod_sandbox_id: "p".into(),
            name: "logger".into(),
            pid: 4242,
            ..Default::default()
        };
        let snap = Snapshot::new(vec![pod], vec![c]);
        let found = find_pod(&snap, &[B.to_owned(), A.to_owned()], None).unwrap();
        assert_eq!(
            (found.namespace.as_str(), found.name.as_str()),
            ("kube-system", "logger-x")
        );
        assert_eq!(found.container_id, A);
        assert_eq!(found.labels["app"], "logger");
        assert!(find_pod(&snap, &[B.to_owned()], None).is_none());
        assert!(find_pod(&snap, &[], Some(4242)).is_some(), "by pid");
        assert!(find_pod(&snap, &[], Some(1)).is_none());
    }

    #[test]
    fn this_process_is_captured_with_its_executable() {
        let me = nri_mux::PeerCredentials {
            uid: 7,
            gid: 8,
            pid: i32::try_from(std::process::id()).ok(),
        };
        let c = Captured::socket_peer(&me);
        assert_eq!((c.identity.uid, c.identity.gid), (Some(7), Some(8)));
        assert_eq!(c.identity.executable, std::env::current_exe().ok());
        let gone = nri_mux::PeerCredentials {
            uid: 0,
            gid: 0,
            pid: Some(0),
        };
        let c = Captured::socket_peer(&gone);
        assert_eq!(c.identity.pid, None);
        assert_eq!(c.identity.executable, None);
    }
}
