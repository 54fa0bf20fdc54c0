//! The server side: this binary re-executed with `--serve KIND` (Rust),
//! and the server processes the clients talk to.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixListener as StdListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use nri_interop_tests::{ECHO_SERVICE, Served, echo_service};
use nri_mux::Mux;
use nri_ttrpc::Server;
use tokio_util::sync::CancellationToken;

use crate::client::{block_on_mode, in_task};
use crate::{BENCH_CONN, Rt, ServeKind};

pub(crate) fn announce() -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening")?;
    out.flush()?;
    Ok(())
}

pub(crate) fn serve(kind: ServeKind, socket: &Path, rt: Rt) -> Result<()> {
    // A stale file from an earlier run would make bind fail.
    let _ = std::fs::remove_file(socket);
    match kind {
        ServeKind::Raw => {
            let l = StdListener::bind(socket)?;
            announce()?;
            let (mut s, _) = l.accept()?;
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = s.read(&mut buf)?;
                if n == 0 {
                    return Ok(());
                }
                s.write_all(&buf[..n])?;
            }
        }
        ServeKind::RawTokio => rt.build()?.block_on(async {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let l = tokio::net::UnixListener::bind(socket)?;
            announce()?;
            let (mut s, _) = l.accept().await?;
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = s.read(&mut buf).await?;
                if n == 0 {
                    return Ok(());
                }
                s.write_all(&buf[..n]).await?;
            }
        }),
        // In a spawned task, so with a multi_thread runtime everything runs
        // on worker threads (not on the block_on thread).
        ServeKind::Ttrpc => in_task(&rt.build()?, {
            let socket = socket.to_owned();
            async move {
                let l = tokio::net::UnixListener::bind(&socket)?;
                announce()?;
                let (s, _) = l.accept().await?;
                let mux = Mux::new_paused(s);
                let conn = mux.open(BENCH_CONN)?;
                let mut server = Server::new();
                server.register(ECHO_SERVICE, echo_service(Arc::new(Served::default())))?;
                mux.start();
                server.serve(conn, CancellationToken::new()).await?;
                Ok(())
            }
        }),
    }
}

pub(crate) struct ServerProc {
    pub(crate) child: Child,
}

impl ServerProc {
    /// Spawns `cmd` and waits for its "listening" line.
    pub(crate) fn spawn(
        mut cmd: Command,
    ) -> Result<(ServerProc, BufReader<std::process::ChildStdout>)> {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("spawn {cmd:?}"))?;
        let mut out = BufReader::new(child.stdout.take().context("stdout")?);
        let mut line = String::new();
        out.read_line(&mut line)?;
        ensure!(line.contains("listening"), "server said {line:?}");
        Ok((ServerProc { child }, out))
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn wait(mut self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(st) = self.child.try_wait()? {
                ensure!(st.success(), "server exited with {st}");
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                bail!("server did not exit");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

pub(crate) fn rust_server(kind: ServeKind, socket: &Path, rt: Rt) -> Result<ServerProc> {
    let mut cmd = Command::new(std::env::current_exe()?);
    let kind = match kind {
        ServeKind::Ttrpc => "ttrpc",
        ServeKind::Raw => "raw",
        ServeKind::RawTokio => "raw-tokio",
    };
    if block_on_mode() {
        cmd.arg("--block-on");
    }
    cmd.args(["--serve", kind, "--server-rt", rt_name(rt), "--socket"])
        .arg(socket);
    Ok(ServerProc::spawn(cmd)?.0)
}

pub(crate) fn rt_name(rt: Rt) -> &'static str {
    match rt {
        Rt::Current => "current",
        Rt::Multi => "multi",
    }
}
