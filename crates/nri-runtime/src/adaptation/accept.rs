//! External plugins: the accept loop (peer checks, pending-connection
//! limit) and the supervision of launched plugins.

use std::sync::Arc;

use super::Shared;
use crate::connect::Pending;
use crate::plugin::{Plugin, PluginOrigin};

impl Shared {
    pub(super) async fn accept_loop(self: Arc<Self>, listener: tokio::net::UnixListener) {
        loop {
            let accepted = tokio::select! {
                () = self.stopping.cancelled() => return,
                a = listener.accept() => a,
            };
            let stream = match accepted {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting NRI connection failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let creds = match nri_mux::peer_credentials(&stream) {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read NRI peer credentials; rejecting connection");
                    continue;
                }
            };
            let cfg = &self.config;
            let origin = PluginOrigin::External {
                uid: creds.uid,
                gid: creds.gid,
                pid: creds.pid,
            };
            let peer = format!("uid={} pid={:?}", creds.uid, creds.pid);
            if !crate::listener::peer_allowed(
                creds.uid,
                creds.gid,
                &cfg.allowed_uids,
                &cfg.allowed_gids,
            ) {
                let reason = format!(
                    "connection from uid {} (gid {}): not in the allowed peer list",
                    creds.uid, creds.gid
                );
                self.peers.refuse_unregistered(
                    &peer,
                    origin,
                    "connection",
                    crate::error::RefusalKind::PeerNotAllowed,
                    reason,
                );
                continue;
            }
            let Some(slot) = self.peers.pending_slot() else {
                // Dropping the stream closes it.
                self.peers.refuse_connection(
                    &peer,
                    origin,
                    self.config.peer_limits.max_pending_connections,
                );
                continue;
            };
            let pending = Pending {
                captured: crate::identity::Captured::socket_peer(&creds),
                origin,
                launched_id: None,
                config: String::new(),
                child: None,
                peer,
                pending_slot: Some(slot),
            };
            let shared = self.clone();
            self.spawn(async move { shared.run_connection(stream, pending).await });
        }
    }

    /// Waits until a launched plugin's connection closes, then forgets it
    /// (a WebAssembly plugin is re-instantiated, see `wasm/restart.rs`).
    pub(super) async fn supervise(self: Arc<Self>, plugin: Arc<Plugin>) {
        #[cfg(feature = "wasm")]
        if matches!(plugin.conn, crate::plugin::Conn::Wasm(_)) {
            let id = plugin.id.to_string();
            self.clone().supervise_wasm(plugin).await;
            // Closed for good, or the runtime stops.
            self.gone_if_last(&id);
            return;
        }
        plugin.wait_closed().await;
        let _ = self.registry.remove(&plugin);
        self.gone_if_last(plugin.id.as_str());
        plugin.close("connection closed");
        if !self.stopping.is_cancelled() {
            tracing::warn!(plugin = %plugin.id, "NRI plugin disconnected");
        }
        crate::connect::reap(&plugin).await;
    }
}
