//! The victim process (`src/bin/victim.rs`, a real runtime) and its line
//! protocol on stdin/stdout, shared by the fault tests that measure a
//! runtime in a process of its own.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::common::WAIT;

/// A running victim: its stdin takes commands, its stdout gives answers
/// and `active N` notices (the number of registered plugins).
pub struct VictimProc {
    pub child: Child,
    stdin: ChildStdin,
    out: Lines<BufReader<ChildStdout>>,
    /// The last `active N` notice seen.
    pub active: usize,
}

impl VictimProc {
    /// The victim command, to be given its arguments, environment and
    /// stderr.
    pub fn command() -> Command {
        Command::new(env!("CARGO_BIN_EXE_victim"))
    }

    /// Starts `cmd` (from [`VictimProc::command`]) and waits until the
    /// victim listens.
    pub async fn spawn(mut cmd: Command) -> VictimProc {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let out = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut v = VictimProc {
            child,
            stdin,
            out,
            active: 0,
        };
        assert_eq!(v.line().await, "listening");
        v
    }

    pub fn pid(&self) -> String {
        self.child.id().unwrap().to_string()
    }

    /// The next line of the victim (an `active N` notice is noted too).
    pub async fn raw_line(&mut self) -> String {
        let l = tokio::time::timeout(WAIT, self.out.next_line())
            .await
            .expect("the victim answers in time")
            .unwrap()
            .expect("the victim is alive");
        if let Some(n) = l.strip_prefix("active ") {
            self.active = n.parse().unwrap();
        }
        l
    }

    /// The next line that is not an `active N` notice.
    pub async fn line(&mut self) -> String {
        loop {
            let l = self.raw_line().await;
            if !l.starts_with("active ") {
                return l;
            }
        }
    }

    /// Waits until `n` plugins are registered.
    pub async fn active(&mut self, n: usize) {
        while self.active != n {
            let l = self.raw_line().await;
            assert!(
                l.starts_with("active "),
                "unexpected line {l:?} while waiting for {n} plugins"
            );
        }
    }

    pub async fn send(&mut self, cmd: &str) {
        self.stdin
            .write_all(format!("{cmd}\n").as_bytes())
            .await
            .unwrap();
    }

    /// Asks the victim to quit; it must exit cleanly and in time.
    pub async fn quit(&mut self) {
        self.send("quit").await;
        let status = tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("the victim exits in time")
            .unwrap();
        assert!(status.success(), "the victim exited with {status}");
    }
}
