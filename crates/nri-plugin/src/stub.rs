//! [`Stub`]: runs a [`Plugin`]: connect, register, serve, reconnect.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use nri_api::api::{Empty, RegisterPluginRequest};
use nri_api::{NRI_VERSION, PLUGIN_SERVICE, RUNTIME_SERVICE, method};
use nri_mux::{Mux, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use nri_ttrpc::{CallOptions, Client, Server};
use tokio::net::UnixStream;
use tokio_util::sync::CancellationToken;

use crate::builder::{Config, ConnectMode};
use crate::handle::{Shared, lock};
use crate::service::{ConnState, PluginService};
use crate::{Error, Phase, Plugin, PluginHandle, SyncKind};

/// After the runtime's `Shutdown`, how long to wait for it to close the
/// connection before closing it ourselves (lets the answer go out).
const SHUTDOWN_GRACE: Duration = Duration::from_millis(500);

/// After a fatal error answered to the runtime (failed `Configure`), how
/// long to wait for the runtime to close the connection.
const FAILURE_GRACE: Duration = Duration::from_millis(500);

/// A configured plugin, ready to [`run`](Stub::run). Built by
/// [`Builder`](crate::Builder).
pub struct Stub<P> {
    pub(crate) plugin: Arc<P>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) config: Arc<Config>,
}

impl<P> std::fmt::Debug for Stub<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stub")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// How one connection ended.
enum End {
    /// The plugin stopped itself.
    Stopped,
    /// The connection ended; `synced` tells whether it got as far as a
    /// completed synchronization (resets the backoff).
    Failed { error: Error, synced: bool },
}

impl<P: Plugin> Stub<P> {
    /// A handle for unsolicited updates, runtime information and stopping.
    pub fn handle(&self) -> PluginHandle {
        PluginHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// The plugin's full name, `NN-name`.
    pub fn plugin_name(&self) -> String {
        self.config.plugin_name()
    }

    /// Whether this stub connects as a pre-launched plugin (after
    /// [`ConnectMode::Auto`] detection).
    pub fn is_pre_launched(&self) -> bool {
        self.config.mode == ConnectMode::PreLaunched
    }

    /// The plugin.
    pub fn plugin(&self) -> &P {
        &self.plugin
    }

    /// Runs the plugin: connect, register, configure, synchronize, serve
    /// events, until the plugin stops itself ([`PluginHandle::stop`]:
    /// `Ok(())`) or the connection ends (an [`Error`]). With a reconnect
    /// policy, connection losses and failed attempts are retried with
    /// backoff instead.
    ///
    /// Never exits the process. Dropping the returned future closes the
    /// connection and releases everything.
    ///
    /// # Errors
    ///
    /// [`Error::AlreadyStarted`] if already running; otherwise why the
    /// (last) connection ended, see [`Error`].
    pub async fn run(&self) -> Result<(), Error> {
        if self.shared.running.swap(true, Ordering::AcqRel) {
            return Err(Error::AlreadyStarted);
        }
        let _running = RunningGuard(&self.shared);
        let mut failures: u32 = 0;
        let mut connection: u32 = 0;
        loop {
            let kind = if connection == 0 {
                SyncKind::Initial
            } else {
                SyncKind::Resync {
                    reconnect: connection,
                }
            };
            let (error, synced) = match self.run_connection(kind).await {
                End::Stopped => return Ok(()),
                End::Failed { error, synced } => (error, synced),
            };
            if synced {
                connection += 1;
                failures = 0;
            }
            self.plugin.disconnected(&error);
            let policy = match &self.config.reconnect {
                Some(p) if error.is_retryable() => p,
                _ => return Err(error),
            };
            failures += 1;
            if policy.max_attempts.is_some_and(|max| failures > max) {
                return Err(Error::ReconnectGaveUp {
                    attempts: failures - 1,
                    last: Box::new(error),
                });
            }
            let delay = policy.delay(failures);
            // With its causes: the OS error tells a missing socket from a
            // refused connection from a permission problem.
            tracing::warn!(
                error = %crate::error_chain(&error),
                attempt = failures,
                delay_ms = delay.as_millis() as u64,
                "nri-plugin: connection failed, reconnecting"
            );
            tokio::select! {
                biased;
                () = self.shared.stop.cancelled() => return Ok(()),
                () = tokio::time::sleep(delay) => {}
            }
        }
    }

    async fn connect(&self) -> Result<UnixStream, Error> {
        match self.config.mode {
            ConnectMode::PreLaunched => {
                let std = nri_mux::from_env().map_err(|source| Error::Transport { source })?;
                nri_mux::into_tokio(std).map_err(|source| Error::Transport { source })
            }
            _ => {
                let path = &self.config.socket_path;
                UnixStream::connect(path)
                    .await
                    .map_err(|source| Error::Connect {
                        path: path.clone(),
                        source,
                    })
            }
        }
    }

    /// One connection, from dialling to its end.
    #[allow(clippy::too_many_lines)]
    async fn run_connection(&self, kind: SyncKind) -> End {
        let stop = self.shared.stop.clone();
        let conn = Arc::new(ConnState::new(kind));
        let fail = |error: Error, conn: &ConnState| End::Failed {
            error,
            synced: conn.phase() == Phase::Running,
        };
        if stop.is_cancelled() {
            return End::Stopped;
        }
        let stream = tokio::select! {
            biased;
            () = stop.cancelled() => return End::Stopped,
            r = self.connect() => match r {
                Ok(s) => s,
                Err(e) => return fail(e, &conn),
            },
        };
        // Plain until Configure tells who the runtime is (`latency.rs`).
        self.shared.latency.connecting();
        let mux = Mux::new_paused(stream);
        // The trunk must end with this connection: the server answers from
        // the trunk reader (see below) and so holds the trunk open itself.
        let _close_mux = CloseOnDrop(&mux);
        let (plugin_conn, runtime_conn) = match (
            mux.open(PLUGIN_SERVICE_CONN),
            mux.open(RUNTIME_SERVICE_CONN),
        ) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(source), _) | (_, Err(source)) => {
                return fail(Error::Transport { source }, &conn);
            }
        };
        mux.start();

        let mut server = Server::new();
        let service = PluginService {
            plugin: Arc::clone(&self.plugin),
            conn: Arc::clone(&conn),
            shared: Arc::clone(&self.shared),
            config: Arc::clone(&self.config),
        };
        if let Err(e) = server.register(PLUGIN_SERVICE, service) {
            // Cannot happen: a fresh server has no services.
            tracing::error!(error = %e, "nri-plugin: cannot register the plugin service");
        }
        // Both connections take their data straight from the trunk reader:
        // a request is decoded and its handler started by the reader, with
        // no reader task of the server in between, and so is an answer to
        // our calls.
        let (requests, answers) = plugin_conn.into_split();
        let (runtime_answers, runtime_requests) = runtime_conn.into_split();
        let (client, client_feed) = Client::with_feed(runtime_requests);
        runtime_answers.into_sink(client_feed);
        let serve_stop = CancellationToken::new();
        let _serve_guard = serve_stop.clone().drop_guard();
        let (server_feed, serving) = server.serve_fed(answers, serve_stop.clone());
        requests.into_sink(server_feed);
        // The server's own future (it runs the handlers that do not answer
        // at once and sees the connection end) is a task of its own, not
        // part of this future: waking the caller of `run` for it would cost,
        // under `block_on` of a current_thread runtime, an extra
        // zero-timeout poll of the reactor. The task ends when `serve_stop`
        // is cancelled (the guard above, on every return).
        let serve = {
            let task = tokio::spawn(serving);
            async move {
                match task.await {
                    Ok(r) => r,
                    // Panicked in a handler or aborted at runtime shutdown.
                    Err(e) => Err(nri_ttrpc::Error::from(std::io::Error::other(format!(
                        "plugin server task ended: {e}"
                    )))),
                }
            }
        };
        tokio::pin!(serve);
        *lock(&self.shared.client) = Some(client.clone());
        let _client_guard = ClientGuard(&self.shared);

        // Register.
        conn.set_phase(Phase::Registering);
        let req = RegisterPluginRequest {
            plugin_name: self.config.name.clone(),
            plugin_idx: self.config.index.clone(),
            nri_version: NRI_VERSION.to_owned(),
        };
        let timeout = self.config.registration_timeout;
        tracing::info!(plugin = %self.config.plugin_name(), "nri-plugin: registering");
        let register = client.call_message::<_, Empty>(
            RUNTIME_SERVICE,
            method::REGISTER_PLUGIN,
            &req,
            CallOptions::new(timeout),
        );
        let deadline = tokio::time::Instant::now() + timeout;
        let registered = tokio::select! {
            biased;
            () = stop.cancelled() => return End::Stopped,
            r = register => r,
            r = &mut serve => return fail(lost(&conn, r.err()), &conn),
        };
        // A runtime may call Configure before it answers RegisterPlugin
        // (NRI v0.8.0 does) and close the connection when our Configure
        // handler refuses: the handler's error is the real cause then.
        if registered.is_err() {
            if let Some(e) = conn.take_fatal() {
                return fail(e, &conn);
            }
        }
        match registered {
            Ok(_) => {}
            Err(nri_ttrpc::Error::DeadlineExceeded { .. })
            | Err(nri_ttrpc::Error::Status {
                code: nri_ttrpc::Code::DeadlineExceeded,
                ..
            }) => {
                return fail(
                    Error::RegistrationTimeout {
                        timeout,
                        phase: Phase::Registering,
                    },
                    &conn,
                );
            }
            Err(nri_ttrpc::Error::Status { message, .. }) => {
                return fail(Error::RegistrationRefused { reason: message }, &conn);
            }
            Err(e) if e.is_connection_closed() => {
                return fail(
                    Error::ConnectionLost {
                        phase: Phase::Registering,
                        source: Some(Box::new(e)),
                    },
                    &conn,
                );
            }
            Err(source) => {
                return fail(
                    Error::Rpc {
                        method: method::REGISTER_PLUGIN,
                        source,
                    },
                    &conn,
                );
            }
        }
        if conn.phase() == Phase::Registering {
            conn.set_phase(Phase::Configuring);
        }

        // Wait for Configure, within the same registration budget.
        tokio::select! {
            biased;
            () = stop.cancelled() => return End::Stopped,
            () = conn.configured.notified() => {}
            () = conn.fatal_notify.notified() => {
                return fail(self.fatal_end(&conn, &mut serve).await, &conn);
            }
            r = &mut serve => return fail(lost(&conn, r.err()), &conn),
            () = tokio::time::sleep_until(deadline) => {
                return fail(
                    Error::RegistrationTimeout { timeout, phase: Phase::Configuring },
                    &conn,
                );
            }
        }
        self.shared.latency.apply(&mux, self.config.spin_budget);
        tracing::info!(
            plugin = %self.config.plugin_name(),
            events = %PluginHandle { shared: Arc::clone(&self.shared) }.subscribed_events(),
            "nri-plugin: configured"
        );
        // The synchronization must be over within the registration timeout
        // after Configure (a runtime sending chunks forever is dropped).
        let sync_deadline = tokio::time::Instant::now() + timeout;

        // Serve until the end.
        loop {
            let syncing = conn.phase() == Phase::Synchronizing;
            tokio::select! {
                biased;
                () = stop.cancelled() => {
                    tracing::info!("nri-plugin: stopping");
                    client.close();
                    mux.close();
                    return End::Stopped;
                }
                () = conn.fatal_notify.notified() => {
                    return fail(self.fatal_end(&conn, &mut serve).await, &conn);
                }
                () = conn.synced.notified() => {
                    // The synchronization's decoded state has been dropped
                    // (unless the plugin kept it): return it to the OS.
                    crate::mem::release_freed_memory();
                    tracing::info!(plugin = %self.config.plugin_name(), "nri-plugin: synchronized");
                }
                () = conn.shutdown.notified() => {
                    let _ = tokio::time::timeout(SHUTDOWN_GRACE, &mut serve).await;
                    return fail(Error::ShutDownByRuntime, &conn);
                }
                r = &mut serve => return fail(lost(&conn, r.err()), &conn),
                () = tokio::time::sleep_until(sync_deadline), if syncing => {
                    client.close();
                    mux.close();
                    return fail(
                        Error::RegistrationTimeout { timeout, phase: Phase::Synchronizing },
                        &conn,
                    );
                }
            }
        }
    }

    /// The error recorded by a handler; waits briefly for the runtime to
    /// close the connection after it received our error answer.
    async fn fatal_end<F>(&self, conn: &ConnState, serve: &mut std::pin::Pin<&mut F>) -> Error
    where
        F: std::future::Future,
    {
        let _ = tokio::time::timeout(FAILURE_GRACE, serve.as_mut()).await;
        conn.take_fatal().unwrap_or(Error::ConnectionLost {
            phase: conn.phase(),
            source: None,
        })
    }
}

/// The error for a connection whose server ended: a recorded handler
/// failure if there is one, else a lost connection.
fn lost(conn: &ConnState, err: Option<nri_ttrpc::Error>) -> Error {
    if let Some(e) = conn.take_fatal() {
        return e;
    }
    Error::ConnectionLost {
        phase: conn.phase(),
        source: err.map(|e| Box::new(e) as crate::error::BoxError),
    }
}

/// Clears `running` when `run` returns or is dropped.
struct RunningGuard<'a>(&'a Shared);

impl Drop for RunningGuard<'_> {
    fn drop(&mut self) {
        self.0.running.store(false, Ordering::Release);
    }
}

/// Forgets the connection's client when the connection ends.
struct ClientGuard<'a>(&'a Shared);

impl Drop for ClientGuard<'_> {
    fn drop(&mut self) {
        self.0.disconnected();
    }
}

/// Closes a trunk when dropped.
struct CloseOnDrop<'a>(&'a Mux);

impl Drop for CloseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.close();
    }
}
