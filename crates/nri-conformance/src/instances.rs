//! The recording plugin instances of a run: started, waited for, stopped.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nri_plugin::{Builder, ConnectMode, PluginHandle};
use tokio::task::JoinSet;

use crate::Error;
use crate::record::{EventLog, Record, RecordKind};
use crate::recorder::{Behaviour, Recorder};

/// The running recording instances, all writing to one log.
pub(crate) struct Instances {
    pub(crate) log: Arc<EventLog>,
    socket: PathBuf,
    base_name: String,
    registration_timeout: Duration,
    tasks: JoinSet<()>,
    handles: Vec<(String, PluginHandle)>,
}

impl Instances {
    pub(crate) fn new(socket: PathBuf, base_name: &str, registration_timeout: Duration) -> Self {
        Instances {
            log: Arc::new(EventLog::new()),
            socket,
            base_name: base_name.to_owned(),
            registration_timeout,
            tasks: JoinSet::new(),
            handles: Vec::new(),
        }
    }

    /// Starts instance `suffix` (empty: the main one) at `index` and
    /// returns its name.
    pub(crate) fn spawn(
        &mut self,
        suffix: &str,
        index: &str,
        behaviour: Behaviour,
    ) -> Result<String, Error> {
        let name = if suffix.is_empty() {
            self.base_name.clone()
        } else {
            format!("{}-{suffix}", self.base_name)
        };
        // Only an instance that refuses teardown events on purpose sends
        // those errors to the runtime (the SDK answers them with success by
        // default): the checker probes whether they starve later plugins.
        let send_teardown_errors = behaviour.fail_teardown.is_some();
        let stub = Builder::new(Recorder::new(&name, self.log.clone(), behaviour))
            .name(name.clone())
            .index(index)
            .mode(ConnectMode::External)
            .socket_path(&self.socket)
            .registration_timeout(self.registration_timeout)
            .send_teardown_errors(send_teardown_errors)
            .build()
            .map_err(|source| Error::Plugin { source })?;
        self.handles.push((name.clone(), stub.handle()));
        let log = self.log.clone();
        let n = name.clone();
        self.tasks.spawn(async move {
            let cause = match stub.run().await {
                Ok(()) => "stopped by the checker".to_owned(),
                Err(e) => error_chain(&e),
            };
            log.push(&n, RecordKind::Disconnected { cause });
        });
        Ok(name)
    }

    /// Starts an instance and waits until it synchronized.
    pub(crate) async fn spawn_synced(
        &mut self,
        suffix: &str,
        index: &str,
        behaviour: Behaviour,
    ) -> Result<String, Error> {
        let name = self.spawn(suffix, index, behaviour)?;
        self.wait_synced(&name).await?;
        Ok(name)
    }

    /// Waits until `name` synchronized (or failed).
    pub(crate) async fn wait_synced(&self, name: &str) -> Result<(), Error> {
        let deadline = self.registration_timeout + Duration::from_secs(1);
        let t = Instant::now();
        loop {
            let mut cause = None;
            let mut synced = false;
            for r in self.log.snapshot().iter().filter(|r| r.instance == name) {
                match &r.kind {
                    RecordKind::Synchronized { .. } => synced = true,
                    RecordKind::Disconnected { cause: c } => cause = Some(c.clone()),
                    _ => {}
                }
            }
            if synced {
                return Ok(());
            }
            if cause.is_some() || t.elapsed() > deadline {
                return Err(Error::Register {
                    instance: name.to_owned(),
                    timeout: deadline,
                    cause,
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// How long an instance may take to register.
    pub(crate) fn registration_timeout(&self) -> Duration {
        self.registration_timeout
    }

    pub(crate) fn handle(&self, name: &str) -> Option<&PluginHandle> {
        self.handles.iter().find(|(n, _)| n == name).map(|(_, h)| h)
    }

    /// Whether `name`'s connection ended.
    pub(crate) fn is_gone(&self, name: &str) -> bool {
        self.log.any(|r| is_disconnect_of(r, name))
    }

    /// Stops instance `name` (its connection ends).
    pub(crate) fn stop(&self, name: &str) {
        if let Some(h) = self.handle(name) {
            h.stop();
        }
    }

    /// Stops instance `name` and waits (up to 2 s) until its connection
    /// ended, so the runtime notices before the next request (containerd
    /// 2.3 still calls a plugin that closed a moment ago as a validator).
    pub(crate) async fn stop_and_wait(&self, name: &str) {
        self.stop(name);
        wait_until(Duration::from_secs(2), || self.is_gone(name)).await;
    }

    pub(crate) async fn shutdown(mut self) {
        for (_, h) in &self.handles {
            h.stop();
        }
        while self.tasks.join_next().await.is_some() {}
    }
}

/// Whether `r` is the end of `name`'s connection.
pub(crate) fn is_disconnect_of(r: &Record, name: &str) -> bool {
    r.instance == name && matches!(r.kind, RecordKind::Disconnected { .. })
}

pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

/// Polls `cond` every 20 ms for up to `max`; returns whether it held.
pub(crate) async fn wait_until(max: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if t.elapsed() > max {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Milliseconds, saturating.
pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
