//! The socket for external plugins.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

use crate::error::Error;

/// Creates the listening socket at `path` with mode 0600.
///
/// The parent directory is created with mode 0700 if missing (an existing
/// directory is left as it is). A stale socket at `path` is removed. The
/// socket is bound under a temporary name, set to 0600, then renamed into
/// place, so it is never reachable with looser permissions.
pub(crate) fn bind(path: &Path) -> Result<tokio::net::UnixListener, Error> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| Error::io(format!("creating {}", dir.display()), &e))?;
        }
    }
    match std::fs::remove_file(path) {
        Ok(()) => tracing::info!(path = %path.display(), "removed stale NRI socket"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(format!("removing {}", path.display()), &e)),
    }
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "nri.sock".into());
    let tmp = path.with_file_name(format!(".{file_name}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let listener = std::os::unix::net::UnixListener::bind(&tmp)
        .map_err(|e| Error::io(format!("binding {}", tmp.display()), &e))?;
    let finish = || -> std::io::Result<()> {
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
        std::fs::rename(&tmp, path)
    };
    if let Err(e) = finish() {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::io(
            format!("installing socket {}", path.display()),
            &e,
        ));
    }
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::io("socket non-blocking", &e))?;
    tokio::net::UnixListener::from_std(listener).map_err(|e| Error::io("registering socket", &e))
}

/// Whether a peer may connect: always when no allow-list is configured,
/// otherwise when its uid is in `uids` or its gid is in `gids`.
pub(crate) fn peer_allowed(uid: u32, gid: u32, uids: &[u32], gids: &[u32]) -> bool {
    if uids.is_empty() && gids.is_empty() {
        return true;
    }
    uids.contains(&uid) || gids.contains(&gid)
}
