//! A relay between a peer and the socket it dials: what lets the checker
//! cut a connection abruptly (a crash, a network fault) while both ends
//! stay up, as Jepsen's partitions do. Each plugin dials its own relay;
//! in proxy mode the proxy dials the upstream runtime through one.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::observe::lock;

/// A listening relay to a target socket.
#[derive(Debug)]
pub struct Relay {
    /// The socket peers dial.
    pub path: PathBuf,
    /// Cancelled to cut the connections open now.
    current: Mutex<CancellationToken>,
    /// Ends the relay.
    stop: CancellationToken,
    tasks: Mutex<JoinSet<()>>,
}

impl Relay {
    /// Listens on `path`, forwarding every connection to `target`.
    pub fn start(path: &Path, target: &Path) -> std::io::Result<Arc<Relay>> {
        let listener = UnixListener::bind(path)?;
        let relay = Arc::new(Relay {
            path: path.to_owned(),
            current: Mutex::new(CancellationToken::new()),
            stop: CancellationToken::new(),
            tasks: Mutex::new(JoinSet::new()),
        });
        let (r, target) = (relay.clone(), target.to_owned());
        lock(&relay.tasks).spawn(async move { r.accept(listener, target).await });
        Ok(relay)
    }

    async fn accept(self: Arc<Self>, listener: UnixListener, target: PathBuf) {
        loop {
            let accepted = tokio::select! {
                () = self.stop.cancelled() => return,
                a = listener.accept() => a,
            };
            let Ok((a, _)) = accepted else { continue };
            // A target that is down: the peer sees its connection end.
            let Ok(b) = UnixStream::connect(&target).await else {
                continue;
            };
            let cut = lock(&self.current).clone();
            let stop = self.stop.clone();
            let mut tasks = lock(&self.tasks);
            while tasks.try_join_next().is_some() {}
            tasks.spawn(pipe(a, b, cut, stop));
        }
    }

    /// Cuts every connection open now (later ones go through).
    pub fn cut(&self) {
        let mut c = lock(&self.current);
        c.cancel();
        *c = CancellationToken::new();
    }

    /// Ends the relay and every connection through it.
    pub async fn shutdown(&self) {
        self.stop.cancel();
        let mut tasks = std::mem::take(&mut *lock(&self.tasks));
        tasks.shutdown().await;
    }
}

async fn pipe(
    mut a: UnixStream,
    mut b: UnixStream,
    cut: CancellationToken,
    stop: CancellationToken,
) {
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut a, &mut b) => {}
        () = cut.cancelled() => {}
        () = stop.cancelled() => {}
    }
}
