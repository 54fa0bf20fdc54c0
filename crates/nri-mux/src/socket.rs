//! Socket helpers: socketpair, handing a socket to a child as fd 3,
//! adopting an inherited socket, peer credentials.

use std::collections::HashSet;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::{Arc, Mutex};

use crate::Error;

/// Environment variable that tells a launched plugin which file descriptor
/// is its connected socket. Mirrors `NRI_PLUGIN_SOCKET` in containerd/nri
/// (`pkg/adaptation`, `pkg/stub`).
pub const PLUGIN_SOCKET_ENV: &str = "NRI_PLUGIN_SOCKET";

/// File descriptor on which a runtime hands a launched plugin its socket
/// (the first fd after stdio). Mirrors containerd/nri's launch via
/// `ExtraFiles`.
pub const PLUGIN_SOCKET_FD: RawFd = 3;

/// Creates a connected pair of unix stream sockets, both close-on-exec
/// (created atomically with `SOCK_CLOEXEC`, so a concurrent `fork`+`exec`
/// elsewhere in the process cannot leak them).
///
/// The streams are blocking std streams: hand one to a child with
/// [`pass_to_child`] and turn the other into a tokio stream with
/// [`into_tokio`].
///
/// # Errors
///
/// [`Error::Io`] if the system call fails.
pub fn socketpair() -> Result<(StdUnixStream, StdUnixStream), Error> {
    // std creates the pair with SOCK_CLOEXEC on Linux and the BSDs.
    StdUnixStream::pair().map_err(|e| Error::io("socketpair", e))
}

/// Turns a std unix stream into a tokio one (sets it non-blocking).
///
/// # Errors
///
/// [`Error::Io`] if the socket cannot be made non-blocking or registered
/// with the runtime (for example outside a tokio runtime).
pub fn into_tokio(stream: StdUnixStream) -> Result<tokio::net::UnixStream, Error> {
    stream
        .set_nonblocking(true)
        .map_err(|e| Error::io("set socket non-blocking", e))?;
    tokio::net::UnixStream::from_std(stream).map_err(|e| Error::io("register socket", e))
}

/// Arranges for `child_end` to be the child's fd 3 ([`PLUGIN_SOCKET_FD`])
/// and sets `NRI_PLUGIN_SOCKET=3` in the child's environment, the way NRI
/// launches pre-installed plugins.
///
/// `cmd` takes ownership of `child_end`: the parent's copy is closed when
/// `cmd` is dropped, so **drop the `Command` right after spawning**, or the
/// parent keeps the child's end open and never sees end of file when the
/// child exits. Other environment changes (NRI launches plugins with an
/// environment of exactly `NRI_PLUGIN_NAME`, `NRI_PLUGIN_IDX`,
/// `NRI_PLUGIN_SOCKET`) are up to the caller; call `env_clear` *before* this
/// function. For a `tokio::process::Command`, pass `cmd.as_std_mut()`.
pub fn pass_to_child(cmd: &mut Command, child_end: StdUnixStream) {
    let fd = OwnedFd::from(child_end);
    cmd.env(PLUGIN_SOCKET_ENV, PLUGIN_SOCKET_FD.to_string());
    install_fd3(cmd, fd);
}

/// Registers the pre-exec hook that puts `fd` on fd 3 in the child.
#[allow(unsafe_code)]
fn install_fd3(cmd: &mut Command, fd: OwnedFd) {
    let hook = move || -> std::io::Result<()> {
        let src = fd.as_raw_fd();
        // SAFETY: `dup2` and `fcntl` are async-signal-safe, take plain
        // integers, and `src` is open (owned by this closure, which lives in
        // the parent's `Command` until after the fork). No allocation, no
        // lock; `last_os_error` only reads errno.
        let rc = unsafe {
            if src == PLUGIN_SOCKET_FD {
                // dup2 onto itself keeps FD_CLOEXEC; clear it instead.
                libc::fcntl(src, libc::F_SETFD, 0)
            } else {
                // dup2 gives fd 3 without FD_CLOEXEC; `src` itself stays
                // close-on-exec and disappears at exec.
                libc::dup2(src, PLUGIN_SOCKET_FD)
            }
        };
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    };
    // SAFETY: the hook runs between fork and exec and only makes
    // async-signal-safe calls (see above).
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// Takes ownership of the inherited socket named by `NRI_PLUGIN_SOCKET`
/// (what a launched plugin does at start). See [`adopt_inherited_fd`].
///
/// # Errors
///
/// [`Error::EnvNotSet`], [`Error::EnvNotFd`] (not a non-negative number),
/// and the errors of [`adopt_inherited_fd`].
pub fn from_env() -> Result<StdUnixStream, Error> {
    let Some(value) = std::env::var_os(PLUGIN_SOCKET_ENV) else {
        return Err(Error::EnvNotSet {
            var: PLUGIN_SOCKET_ENV,
        });
    };
    let bad = || Error::EnvNotFd {
        var: PLUGIN_SOCKET_ENV,
        value: value.to_string_lossy().into_owned(),
    };
    let fd: RawFd = value.to_str().ok_or_else(bad)?.parse().map_err(|_| bad())?;
    if fd < 0 {
        return Err(bad());
    }
    adopt_inherited_fd(fd)
}

/// File descriptors adopted so far by this process.
static ADOPTED: Mutex<Option<HashSet<RawFd>>> = Mutex::new(None);

/// Takes ownership of an inherited file descriptor that must be a connected
/// unix stream socket, and marks it close-on-exec (so the plugin's own
/// children do not inherit it).
///
/// The descriptor is checked with `fstat` (must be a socket) and
/// `getsockopt` (must be `AF_UNIX`, `SOCK_STREAM`) before ownership is
/// taken, so a wrong or closed descriptor yields an error, not a stream
/// that fails later. Each descriptor number can be adopted once per
/// process; a second call for the same number fails with
/// [`Error::AlreadyAdopted`]. Use it only for descriptors nothing else in
/// the process owns (an inherited fd, early in `main`).
///
/// # Errors
///
/// [`Error::BadFd`] (not open), [`Error::NotUnixStream`],
/// [`Error::AlreadyAdopted`], [`Error::Io`] (setting close-on-exec).
pub fn adopt_inherited_fd(fd: RawFd) -> Result<StdUnixStream, Error> {
    check_unix_stream(fd)?;
    {
        let mut adopted = crate::sync::lock(&ADOPTED);
        if !adopted.get_or_insert_with(HashSet::new).insert(fd) {
            return Err(Error::AlreadyAdopted { fd });
        }
    }
    let owned = take_fd(fd);
    let stream = StdUnixStream::from(owned);
    set_cloexec(fd)?;
    Ok(stream)
}

/// Takes ownership of `fd`.
#[allow(unsafe_code)]
fn take_fd(fd: RawFd) -> OwnedFd {
    // SAFETY: `fd` was checked to be an open unix stream socket, and the
    // ADOPTED registry guarantees we create at most one owner for it; the
    // caller's contract (documented on `adopt_inherited_fd`) is that nothing
    // else in the process owns it.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Checks that `fd` is an open `AF_UNIX` `SOCK_STREAM` socket.
#[allow(unsafe_code)]
fn check_unix_stream(fd: RawFd) -> Result<(), Error> {
    let os_err = || std::io::Error::last_os_error();
    // SAFETY: `stat` is plain data, fully written by a successful fstat;
    // fstat on any integer is memory-safe (EBADF for a closed one).
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } < 0 {
        return Err(Error::BadFd {
            fd,
            source: Arc::new(os_err()),
        });
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(Error::NotUnixStream {
            fd,
            what: "not a socket",
        });
    }
    let getopt = |opt: libc::c_int| -> Result<libc::c_int, Error> {
        let mut val: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `val` and `len` are valid for writes of the sizes given.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&mut val as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        if rc < 0 {
            return Err(Error::BadFd {
                fd,
                source: Arc::new(os_err()),
            });
        }
        Ok(val)
    };
    if getopt(libc::SO_DOMAIN)? != libc::AF_UNIX {
        return Err(Error::NotUnixStream {
            fd,
            what: "not a unix socket",
        });
    }
    if getopt(libc::SO_TYPE)? != libc::SOCK_STREAM {
        return Err(Error::NotUnixStream {
            fd,
            what: "not a stream socket",
        });
    }
    Ok(())
}

/// Sets FD_CLOEXEC on `fd`.
#[allow(unsafe_code)]
fn set_cloexec(fd: RawFd) -> Result<(), Error> {
    // SAFETY: fcntl with F_GETFD/F_SETFD takes and returns integers only.
    let rc = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags < 0 {
            flags
        } else {
            libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC)
        }
    };
    if rc < 0 {
        return Err(Error::io(
            "set close-on-exec",
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Credentials of the process at the other end of a unix socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCredentials {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
    /// Process id, when the platform reports it. For a `socketpair` it is the
    /// process that created the pair, not the one holding the other end.
    pub pid: Option<i32>,
}

/// The peer's credentials (`SO_PEERCRED`), taken when the connection was
/// made.
///
/// # Errors
///
/// [`Error::Io`] if the socket option cannot be read.
pub fn peer_credentials(stream: &tokio::net::UnixStream) -> Result<PeerCredentials, Error> {
    let c = stream
        .peer_cred()
        .map_err(|e| Error::io("read peer credentials", e))?;
    Ok(PeerCredentials {
        uid: c.uid(),
        gid: c.gid(),
        pid: c.pid(),
    })
}
