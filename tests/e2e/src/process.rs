//! Running commands with a deadline (output through files, the whole
//! process group killed on timeout).

use std::fs;
use std::io::Read as _;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

#[allow(unused_imports)]
use crate::*;

/// Output of a finished command.
#[derive(Debug, Clone)]
pub struct Output {
    /// Exit status.
    pub status: ExitStatus,
    /// Standard output (lossy UTF-8).
    pub stdout: String,
    /// Standard error (lossy UTF-8).
    pub stderr: String,
}

impl Output {
    /// The status code, or -1 if killed by a signal.
    pub fn code(&self) -> i32 {
        self.status.code().unwrap_or(-1)
    }
}

/// Runs `cmd` to completion with a deadline, collecting its output through
/// files in `scratch` (no reader threads). The command runs in its own
/// process group; on timeout the whole group is killed.
pub fn run_with_deadline(mut cmd: Command, scratch: &Path, deadline: Duration) -> Result<Output> {
    use std::os::unix::process::CommandExt as _;
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    fs::create_dir_all(scratch)?;
    let out_path = scratch.join(format!("cmd-{}-{n}.out", std::process::id()));
    let err_path = scratch.join(format!("cmd-{}-{n}.err", std::process::id()));
    let desc = format!("{cmd:?}");
    cmd.stdin(Stdio::null())
        .stdout(fs::File::create(&out_path)?)
        .stderr(fs::File::create(&err_path)?)
        .process_group(0);
    let mut child = cmd.spawn().with_context(|| format!("spawn {desc}"))?;
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break Some(st);
        }
        if start.elapsed() > deadline {
            kill_group(&child);
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read = |p: &Path| -> String {
        let mut s = Vec::new();
        let _ = fs::File::open(p).and_then(|mut f| f.read_to_end(&mut s));
        let _ = fs::remove_file(p);
        String::from_utf8_lossy(&s).into_owned()
    };
    let stdout = read(&out_path);
    let stderr = read(&err_path);
    match status {
        Some(status) => Ok(Output {
            status,
            stdout,
            stderr,
        }),
        None => {
            bail!("{desc} did not finish within {deadline:?}\nstdout: {stdout}\nstderr: {stderr}")
        }
    }
}

/// Kills the process group led by `child` (SIGKILL), best effort.
fn kill_group(child: &Child) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", child.id())])
        .stderr(Stdio::null())
        .status();
}
