//! The one-call `main` of a plugin program: [`Runner`].

use std::process::ExitCode;

use crate::{Builder, Error, Plugin, ReconnectPolicy};

/// Runs a plugin as a plugin program's `main` does, in one call: a
/// single-threaded tokio runtime, reconnection with backoff when the plugin
/// is external (it dialed the runtime's socket; a pre-launched plugin ends
/// with its connection and the runtime launches it again), SIGINT and
/// SIGTERM stop it cleanly, an error is logged once with its causes, and
/// the outcome becomes the exit status:
///
/// * 0: stopped by SIGINT or SIGTERM, or through a
///   [`PluginHandle`](crate::PluginHandle);
/// * 1: any other end: the runtime's Shutdown, a lost connection without
///   reconnection, a refused registration, a failed Configure, invalid
///   identity (as the Go sample plugins exit 1 when their connection ends).
///
/// ```no_run
/// use nri_plugin::api::{Container, CreateContainerResponse, PodSandbox};
/// use nri_plugin::{Builder, HandlerResult, Plugin, Runner};
///
/// struct Mine;
///
/// #[nri_plugin::plugin]
/// impl Plugin for Mine {
///     async fn create_container(
///         &self,
///         _pod: PodSandbox,
///         _ctr: Container,
///     ) -> HandlerResult<CreateContainerResponse> {
///         Ok(CreateContainerResponse::default())
///     }
/// }
///
/// fn main() -> std::process::ExitCode {
///     Runner::new().run(Builder::new(Mine).name("mine").index("50"))
/// }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Runner {
    reconnect: Option<ReconnectPolicy>,
}

impl Default for Runner {
    fn default() -> Self {
        Runner {
            reconnect: Some(ReconnectPolicy::default()),
        }
    }
}

/// Whether the runtime launched this process (it passed the socket in
/// `NRI_PLUGIN_SOCKET`).
fn prelaunched() -> bool {
    std::env::var_os(nri_api::ENV_PLUGIN_SOCKET).is_some_and(|v| !v.is_empty())
}

impl Runner {
    /// Reconnects external plugins with [`ReconnectPolicy::default`].
    pub fn new() -> Self {
        Runner::default()
    }

    /// How an external plugin reconnects after losing the runtime; `None`:
    /// it ends with its connection. Pre-launched plugins never reconnect.
    pub fn reconnect(mut self, policy: Option<ReconnectPolicy>) -> Self {
        self.reconnect = policy;
        self
    }

    /// Runs the plugin built by `builder` until it ends (see [`Runner`]);
    /// returns the exit status for `main`.
    pub fn run<P: Plugin>(self, builder: Builder<P>) -> ExitCode {
        match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt.block_on(self.run_async(builder)),
            Err(e) => {
                tracing::error!(error = %e, "cannot start the async runtime");
                ExitCode::FAILURE
            }
        }
    }

    /// [`Runner::run`] on the caller's tokio runtime.
    pub async fn run_async<P: Plugin>(self, builder: Builder<P>) -> ExitCode {
        let external = !prelaunched();
        let builder = match (&self.reconnect, external) {
            (Some(p), true) => builder.reconnect(p.clone()),
            _ => builder,
        };
        let stub = match builder.build() {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("plugin exited: {}", error_chain(&e));
                return ExitCode::FAILURE;
            }
        };
        tracing::info!(plugin = %stub.plugin_name(), external, "starting");
        let handle = stub.handle();
        let result = tokio::select! {
            r = stub.run() => r,
            sig = terminated() => {
                tracing::info!(signal = sig, "stopping");
                handle.stop();
                Ok(())
            }
        };
        exit_status(result)
    }
}

/// The exit status of a plugin's end (see [`Runner`]), logged.
fn exit_status(result: Result<(), Error>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Error::ShutDownByRuntime) => {
            tracing::info!("the runtime shut the plugin down, exiting");
            ExitCode::FAILURE
        }
        Err(e) => {
            let mut text = error_chain(&e);
            if e.is_socket_missing() {
                text.push_str(" (is NRI enabled in the runtime, and the runtime running?)");
            }
            tracing::error!("plugin exited: {text}");
            ExitCode::FAILURE
        }
    }
}

/// `error` and its causes, joined by `: `, each text once: a cause whose
/// text the message already contains (an error that prints its source) is
/// left out, and a cause that repeats its error's text and adds to it
/// replaces that text (`invalid index "x"` caused by `invalid index "x":
/// must be two digits` reads `invalid index "x": must be two digits`).
///
/// ```
/// #[derive(Debug, thiserror::Error)]
/// #[error("reading config: {0}")]
/// struct Outer(#[source] std::io::Error);
///
/// let e = Outer(std::io::Error::other("denied"));
/// assert_eq!(nri_plugin::error_chain(&e), "reading config: denied");
/// ```
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    // Where the text of the innermost error shown so far starts.
    let mut last = 0;
    let mut src = error.source();
    while let Some(s) = src {
        let t = s.to_string();
        if t.starts_with(&text[last..]) {
            text.truncate(last);
            text.push_str(&t);
        } else if !text.contains(&t) {
            text.push_str(": ");
            last = text.len();
            text.push_str(&t);
        }
        src = s.source();
    }
    text
}

/// Resolves on SIGINT or SIGTERM with the signal's name; never if the
/// handlers cannot be installed (the plugin then ends with its connection).
async fn terminated() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        tracing::warn!("cannot install signal handlers");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] Middle);

    #[derive(Debug, thiserror::Error)]
    #[error("middle: {0}")]
    struct Middle(#[source] std::io::Error);

    #[test]
    fn causes_are_joined_once() {
        let e = Outer(Middle(std::io::Error::other("root")));
        assert_eq!(error_chain(&e), "outer: middle: root");
    }

    #[derive(Debug, thiserror::Error)]
    #[error("invalid index {0:?}")]
    struct Index(String, #[source] Detail);

    #[derive(Debug, thiserror::Error)]
    #[error("invalid index {0:?}: must be two digits")]
    struct Detail(String);

    #[test]
    fn a_cause_repeating_its_error_replaces_it() {
        let e = Index("x".into(), Detail("x".into()));
        assert_eq!(error_chain(&e), "invalid index \"x\": must be two digits");
        let e = Outer(Middle(std::io::Error::other("outer")));
        assert_eq!(error_chain(&e), "outer: middle: outer");
    }

    #[test]
    fn exit_status_is_zero_only_for_a_requested_stop() {
        let code = |r| format!("{:?}", exit_status(r));
        assert_eq!(code(Ok(())), format!("{:?}", ExitCode::SUCCESS));
        assert_eq!(
            code(Err(Error::ShutDownByRuntime)),
            format!("{:?}", ExitCode::FAILURE)
        );
    }
}
