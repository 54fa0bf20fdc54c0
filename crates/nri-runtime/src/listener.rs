//! The socket for external plugins.

use std::fs::Metadata;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::Error;

/// Name of the socket inside the private temporary directory.
const TEMP_SOCKET_NAME: &str = "sock";
/// Attempts at a fresh name for the private temporary directory.
const TEMP_DIR_ATTEMPTS: usize = 16;

/// Creates the listening socket at `path` with mode 0600, without a moment
/// at which anyone else could reach it or redirect its creation.
///
/// The parent directory is created with mode 0700 if missing. An existing
/// parent must be a directory owned by the effective user or root and not
/// writable by group or others ([`Error::InsecureSocketDirectory`]
/// otherwise): anyone who can write there could replace the socket. The
/// socket is bound inside a private temporary directory (mode 0700, created
/// by this call in the parent), set to 0600 there, and renamed into place,
/// which atomically replaces a stale socket (or anything else but a
/// directory: a planted symlink is replaced, never followed).
pub(crate) fn bind(path: &Path) -> Result<tokio::net::UnixListener, Error> {
    let dir = match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(d) => d.to_path_buf(),
        None => PathBuf::from("."),
    };
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), &e))?;
    }
    let meta = std::fs::metadata(&dir)
        .map_err(|e| Error::io(format!("inspecting {}", dir.display()), &e))?;
    check_directory(&dir, &meta, effective_uid())?;
    let private = make_private_dir(&dir)?;
    let result = bind_in(&private, path);
    if let Err(e) = std::fs::remove_dir_all(&private) {
        tracing::warn!(path = %private.display(), error = %e, "cannot remove the temporary socket directory");
    }
    let listener = result?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::io("socket non-blocking", &e))?;
    tokio::net::UnixListener::from_std(listener).map_err(|e| Error::io("registering socket", &e))
}

/// Binds `private/sock`, sets it to 0600 and renames it to `path`.
fn bind_in(private: &Path, path: &Path) -> Result<std::os::unix::net::UnixListener, Error> {
    let tmp = private.join(TEMP_SOCKET_NAME);
    let listener = std::os::unix::net::UnixListener::bind(&tmp)
        .map_err(|e| Error::io(format!("binding {}", tmp.display()), &e))?;
    // Nobody else can enter `private`: the path cannot be swapped under us.
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::io(format!("setting the mode of {}", tmp.display()), &e))?;
    let stale = std::fs::symlink_metadata(path).is_ok();
    std::fs::rename(&tmp, path)
        .map_err(|e| Error::io(format!("installing socket {}", path.display()), &e))?;
    if stale {
        tracing::info!(path = %path.display(), "replaced stale NRI socket");
    }
    Ok(listener)
}

/// Refuses a socket directory others could write to (see [`bind`]): it
/// must be a directory, owned by `euid` or root, without write permission
/// for its group or others.
fn check_directory(dir: &Path, meta: &Metadata, euid: u32) -> Result<(), Error> {
    let mode = meta.mode() & 0o7777;
    let owner = meta.uid();
    let refuse = |reason: String| {
        tracing::error!(path = %dir.display(), owner, mode = format_args!("{mode:04o}"), %reason, "refusing to create the NRI socket");
        Err(Error::InsecureSocketDirectory {
            path: dir.display().to_string(),
            owner,
            mode,
            reason,
        })
    };
    if !meta.is_dir() {
        return refuse("it is not a directory".into());
    }
    if mode & 0o022 != 0 {
        let who = if mode & 0o002 != 0 {
            "others"
        } else {
            "its group"
        };
        return refuse(format!(
            "it is writable by {who} (mode {mode:04o}), who could replace the socket; \
             use a directory of its own, mode 0755 or stricter"
        ));
    }
    if owner != euid && owner != 0 {
        return refuse(format!(
            "it is owned by uid {owner}, not by this process's user (uid {euid}) or root, \
             who could replace the socket"
        ));
    }
    Ok(())
}

/// Creates a new directory, mode 0700, in `dir`, under a name no one else
/// has taken (creating it fails if the name exists, and does not follow a
/// symlink; then another name is tried).
fn make_private_dir(dir: &Path) -> Result<PathBuf, Error> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let context = || format!("creating a temporary directory in {}", dir.display());
    let mut last = None;
    for _ in 0..TEMP_DIR_ATTEMPTS {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!(".nri-socket.{}.{n}.{nanos:08x}", std::process::id());
        let candidate = dir.join(name);
        match std::fs::DirBuilder::new().mode(0o700).create(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(Error::io(context(), &e)),
        }
    }
    let e = last.unwrap_or_else(|| std::io::Error::from(std::io::ErrorKind::AlreadyExists));
    Err(Error::io(context(), &e))
}

#[allow(unsafe_code)]
fn effective_uid() -> u32 {
    // SAFETY: geteuid(2) takes no arguments, cannot fail and touches no
    // memory of ours.
    unsafe { libc::geteuid() }
}

/// Whether a peer may connect: always when no allow-list is configured,
/// otherwise when its uid is in `uids` or its gid is in `gids`.
pub(crate) fn peer_allowed(uid: u32, gid: u32, uids: &[u32], gids: &[u32]) -> bool {
    if uids.is_empty() && gids.is_empty() {
        return true;
    }
    uids.contains(&uid) || gids.contains(&gid)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A fresh directory with `mode`, and its metadata.
    fn dir_with_mode(mode: u32) -> (tempfile::TempDir, Metadata) {
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(mode)).unwrap();
        let meta = std::fs::metadata(d.path()).unwrap();
        (d, meta)
    }

    #[test]
    fn owner_must_be_the_effective_user_or_root() {
        let (d, meta) = dir_with_mode(0o755);
        let owner = meta.uid();
        assert!(check_directory(d.path(), &meta, owner).is_ok());
        if owner == 0 {
            // A root-owned 0755 directory (`/var/run/nri` as usually found)
            // is fine for a runtime running as any user.
            assert!(check_directory(d.path(), &meta, 4242).is_ok());
        } else {
            let e = check_directory(d.path(), &meta, owner + 1).unwrap_err();
            match e {
                Error::InsecureSocketDirectory {
                    owner: o, reason, ..
                } => {
                    assert_eq!(o, owner);
                    assert!(
                        reason.contains(&format!("owned by uid {owner}")),
                        "{reason}"
                    );
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn group_or_world_writable_is_refused_whoever_owns_it() {
        for (mode, ok) in [
            (0o700, true),
            (0o750, true),
            (0o755, true),
            (0o2755, true),
            (0o775, false),
            (0o757, false),
            (0o1777, false),
        ] {
            let (d, meta) = dir_with_mode(mode);
            let r = check_directory(d.path(), &meta, meta.uid());
            assert_eq!(r.is_ok(), ok, "{mode:o}: {r:?}");
            if let Err(e) = r {
                let text = e.to_string();
                assert!(
                    text.starts_with("refusing to create the NRI socket in "),
                    "{text}"
                );
                assert!(text.contains(&format!("(mode {mode:04o})")), "{text}");
            }
        }
    }

    #[test]
    fn a_file_is_not_a_directory() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        std::fs::write(&f, "").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let meta = std::fs::metadata(&f).unwrap();
        let e = check_directory(&f, &meta, meta.uid()).unwrap_err();
        assert!(e.to_string().ends_with("it is not a directory"), "{e}");
    }

    #[test]
    fn private_directories_get_fresh_names_and_mode_0700() {
        let d = tempfile::tempdir().unwrap();
        let a = make_private_dir(d.path()).unwrap();
        let b = make_private_dir(d.path()).unwrap();
        assert_ne!(a, b);
        let mode = std::fs::metadata(&a).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o700);
    }
}
