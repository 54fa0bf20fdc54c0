//! Handing a socket to a child as fd 3, adopting inherited fds, and
//! `from_env` errors. Child processes are `sh` or this test binary itself
//! (re-run with `NRI_MUX_TEST_CHILD` set, entering `child_entry`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::os::fd::{AsRawFd, IntoRawFd};
use std::process::{Command, Stdio};

use nri_mux::{
    Error, Mux, PLUGIN_SERVICE_CONN, PLUGIN_SOCKET_ENV, adopt_inherited_fd, from_env, into_tokio,
    pass_to_child, socketpair,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CHILD_MODE: &str = "NRI_MUX_TEST_CHILD";

/// Not a real test: the body of the child processes.
#[test]
fn child_entry() {
    let Ok(mode) = std::env::var(CHILD_MODE) else {
        return;
    };
    match mode.as_str() {
        "from-env" => {
            let r = from_env().map(|_| ());
            println!("RESULT:{r:?}");
        }
        "mux-echo" => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let mux = Mux::new(into_tokio(from_env().unwrap()).unwrap());
                let mut conn = mux.open(PLUGIN_SERVICE_CONN).unwrap();
                let mut b = [0u8; 4];
                conn.read_exact(&mut b).await.unwrap();
                let mut reply = b"pong:".to_vec();
                reply.extend_from_slice(&b);
                conn.write_all(&reply).await.unwrap();
                conn.flush().await.unwrap();
                // Exit when the parent closes.
                let _ = conn.read(&mut b).await;
            });
        }
        other => panic!("unknown child mode {other}"),
    }
}

fn self_child(mode: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["child_entry", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_MODE, mode)
        .env_remove(PLUGIN_SOCKET_ENV);
    cmd
}

fn child_result(mut cmd: Command) -> String {
    let out = cmd.stderr(Stdio::inherit()).output().unwrap();
    assert!(out.status.success(), "child failed: {:?}", out.status);
    let stdout = String::from_utf8(out.stdout).unwrap();
    let (_, rest) = stdout
        .split_once("RESULT:")
        .unwrap_or_else(|| panic!("no RESULT in child output: {stdout}"));
    rest.lines().next().unwrap_or_default().to_owned()
}

#[test]
fn sh_child_sees_fd3_and_env() {
    let (mut parent, child) = socketpair().unwrap();
    let mut cmd = Command::new("sh");
    cmd.args(["-c", r#"printf 'fd3:%s' "$NRI_PLUGIN_SOCKET" >&3"#]);
    pass_to_child(&mut cmd, child);
    let mut proc = cmd.spawn().unwrap();
    drop(cmd); // closes the parent's copy of the child end
    let mut got = String::new();
    parent.read_to_string(&mut got).unwrap(); // EOF once the child exits
    assert_eq!(got, "fd3:3");
    assert!(proc.wait().unwrap().success());
}

#[test]
fn socketpair_ends_are_cloexec() {
    let (a, b) = socketpair().unwrap();
    for fd in [a.as_raw_fd(), b.as_raw_fd()] {
        let flags = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap();
        let line = flags.lines().find(|l| l.starts_with("flags:")).unwrap();
        let v = u32::from_str_radix(line.trim_start_matches("flags:").trim(), 8).unwrap();
        assert_ne!(v & 0o2000000, 0, "fd {fd} is not O_CLOEXEC: {line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_child_adopts_fd3_and_speaks_mux() {
    let (parent, child) = socketpair().unwrap();
    let mut cmd = self_child("mux-echo");
    cmd.stdout(Stdio::null());
    pass_to_child(&mut cmd, child);
    let mut proc = cmd.spawn().unwrap();
    drop(cmd);

    let mux = Mux::new(into_tokio(parent).unwrap());
    let mut conn = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    conn.write_all(b"ping").await.unwrap();
    let mut b = [0u8; 9];
    conn.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"pong:ping");
    mux.close();
    drop(conn);
    let status = tokio::task::spawn_blocking(move || proc.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
}

#[test]
fn from_env_not_set() {
    assert_eq!(
        child_result(self_child("from-env")),
        r#"Err(EnvNotSet { var: "NRI_PLUGIN_SOCKET" })"#
    );
}

#[test]
fn from_env_not_a_number() {
    for v in ["abc", "-1", "", "3 "] {
        let mut cmd = self_child("from-env");
        cmd.env(PLUGIN_SOCKET_ENV, v);
        let r = child_result(cmd);
        assert!(r.starts_with("Err(EnvNotFd {"), "{v:?}: {r}");
    }
}

#[test]
fn from_env_closed_fd() {
    let mut cmd = self_child("from-env");
    cmd.env(PLUGIN_SOCKET_ENV, "987");
    let r = child_result(cmd);
    assert!(r.starts_with("Err(BadFd { fd: 987"), "{r}");
}

#[test]
fn from_env_not_a_socket() {
    let mut cmd = self_child("from-env");
    cmd.env(PLUGIN_SOCKET_ENV, "0").stdin(Stdio::piped());
    let r = child_result(cmd);
    assert_eq!(r, r#"Err(NotUnixStream { fd: 0, what: "not a socket" })"#);
}

#[test]
fn from_env_ok_on_fd3() {
    let (_parent, child) = socketpair().unwrap();
    let mut cmd = self_child("from-env");
    pass_to_child(&mut cmd, child);
    assert_eq!(child_result(cmd), "Ok(())");
}

#[test]
fn adopt_checks_before_taking_ownership() {
    // A regular file is refused and stays open (not taken, not closed).
    let file = tempfile::tempfile().unwrap();
    let err = adopt_inherited_fd(file.as_raw_fd()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotUnixStream {
                what: "not a socket",
                ..
            }
        ),
        "{err:?}"
    );
    file.metadata().unwrap();

    let (d1, _d2) = std::os::unix::net::UnixDatagram::pair().unwrap();
    let err = adopt_inherited_fd(d1.as_raw_fd()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotUnixStream {
                what: "not a stream socket",
                ..
            }
        ),
        "{err:?}"
    );

    let err = adopt_inherited_fd(1 << 30).unwrap_err();
    assert!(matches!(err, Error::BadFd { .. }), "{err:?}");
}

#[test]
fn adopt_a_stream_once() {
    let (a, mut b) = socketpair().unwrap();
    let fd = a.into_raw_fd();
    let mut adopted = adopt_inherited_fd(fd).unwrap();
    assert!(matches!(adopt_inherited_fd(fd), Err(Error::AlreadyAdopted { fd: f }) if f == fd));
    std::io::Write::write_all(&mut adopted, b"x").unwrap();
    let mut c = [0u8; 1];
    b.read_exact(&mut c).unwrap();
    assert_eq!(&c, b"x");
}
