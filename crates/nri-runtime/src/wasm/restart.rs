//! The supervision of a WebAssembly plugin: when a call had to discard
//! its instance (a timeout, a trap, an exit, an answer breaking the ABI),
//! the plugin is closed like a disconnected one, then re-instantiated
//! from its compiled module after a backoff, configured and synchronized
//! again like a plugin that reconnects, under the strike limit: its
//! consecutive timeouts carry over to the new instance, and the plugin
//! is closed for good when they reach the limit.
//!
//! The backoff starts at `WasmLimits::restart_backoff` and doubles after
//! each instance that lived less than [`HEALTHY`] (or failed to start),
//! up to `WasmLimits::max_restart_backoff`.

use std::sync::Arc;
use std::time::Duration;

use super::WasmLimits;
use super::conn::{Discard, Origin};
use crate::adaptation::Shared;
use crate::error::Error;
use crate::plugin::{Conn, Plugin};

/// An instance that lived this long resets the backoff.
pub(crate) const HEALTHY: Duration = Duration::from_secs(60);

/// The wait before the `n`th consecutive re-instantiation (from 1).
pub(crate) fn backoff(limits: &WasmLimits, n: u32) -> Duration {
    let factor = 1u32 << n.saturating_sub(1).min(20);
    limits
        .restart_backoff
        .saturating_mul(factor)
        .min(limits.max_restart_backoff)
}

/// Whether `strikes` reached the plugin's limit (0: never).
fn struck_out(plugin: &Plugin, strikes: u32) -> bool {
    let limit = plugin.info().strike_limit;
    limit > 0 && strikes >= limit
}

impl Shared {
    /// Supervises the WebAssembly plugin `plugin` (active) until it is
    /// closed for good or the runtime stops.
    pub(crate) async fn supervise_wasm(self: Arc<Self>, mut plugin: Arc<Plugin>) {
        let Conn::Wasm(conn) = &plugin.conn else {
            return;
        };
        let origin = conn.origin().clone();
        let name = plugin.name.clone();
        let mut failures = 0u32;
        loop {
            plugin.wait_closed().await;
            let _ = self.registry.remove(&plugin);
            plugin.close("connection closed");
            if self.stopping.is_cancelled() {
                return;
            }
            let Conn::Wasm(conn) = &plugin.conn else {
                return;
            };
            let Some(discard) = conn.discarded() else {
                tracing::warn!(plugin = %name, "WebAssembly NRI plugin closed");
                return;
            };
            // A timeout nobody was waiting for (its call went on after the
            // event's deadline cut it short) is counted here.
            let uncounted = discard == Discard::Timeout { counted: false };
            let mut strikes = plugin.strikes() + u32::from(uncounted);
            if struck_out(&plugin, strikes) {
                tracing::error!(plugin = %name, strikes, "WebAssembly NRI plugin reached its strike limit; closed for good");
                return;
            }
            failures = if conn.age() >= HEALTHY {
                1
            } else {
                failures + 1
            };
            loop {
                let wait = backoff(&self.config.wasm, failures);
                tracing::warn!(plugin = %name, reason = ?discard, strikes, wait_ms = wait.as_millis() as u64, "re-instantiating WebAssembly NRI plugin");
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = self.stopping.cancelled() => return,
                }
                // The runtime stopping drops the attempt at once (its
                // instance is closed with it) rather than after stop's
                // grace for its tasks.
                let attempt = tokio::select! {
                    r = self.clone().restart_wasm(&origin, strikes) => r,
                    () = self.stopping.cancelled() => return,
                };
                match attempt {
                    Ok(p) => {
                        plugin = p;
                        break;
                    }
                    Err((e, s)) => {
                        strikes = s;
                        tracing::warn!(plugin = %name, error = %e, strikes, "re-instantiating WebAssembly NRI plugin failed");
                        if self.stopping.is_cancelled() {
                            return;
                        }
                        if s > 0 && self.strike_limit_reached(&origin, s) {
                            tracing::error!(plugin = %name, strikes, "WebAssembly NRI plugin reached its strike limit; closed for good");
                            return;
                        }
                        failures += 1;
                    }
                }
            }
        }
    }

    /// Whether `strikes` reach the strike limit the configuration gives
    /// `origin`'s plugin (for an attempt that failed before the plugin
    /// existed, its declared policy unknown).
    fn strike_limit_reached(&self, origin: &Origin, strikes: u32) -> bool {
        let limit = self.strike_limit_for(&origin.plugin.id, None);
        limit > 0 && strikes >= limit
    }

    /// One re-instantiation of `origin`: a new instance, Configure,
    /// Synchronize, starting with `strikes`. On failure, the error and
    /// the strikes after it (a Synchronize that timed out adds one).
    async fn restart_wasm(
        self: Arc<Self>,
        origin: &Arc<Origin>,
        strikes: u32,
    ) -> Result<Arc<Plugin>, (Error, u32)> {
        let full = origin.plugin.id.to_string();
        self.reserve_wasm(&full).map_err(|e| (e, strikes))?;
        let guest = match self.instantiate_wasm(origin).await {
            Ok(g) => g,
            Err(e) => {
                self.registry.release(&full);
                return Err((e, strikes));
            }
        };
        let mut undo = Undo {
            shared: &self,
            name: &full,
            armed: true,
        };
        let res = self
            .clone()
            .admit_wasm(origin.clone(), guest, strikes)
            .await;
        undo.armed = false;
        match res {
            Ok(p) if self.stopping.is_cancelled() => {
                let _ = self.registry.remove(&p);
                p.close("runtime shutting down");
                Err((Error::InvalidState { state: "stopped" }, strikes))
            }
            Ok(p) => {
                tracing::info!(plugin = %full, strikes, "WebAssembly NRI plugin re-instantiated");
                Ok(p)
            }
            // The attempt's own timeouts (its Synchronize, a delivery
            // before its activation) add to the strikes it carried.
            Err((e, after)) => Err((e, after)),
        }
    }
}

/// Releases the plugin's name if a re-instantiation is dropped half-way
/// (the runtime stopping aborts its supervisor): the plugin it was making
/// is then closed with the connection it never got to keep.
struct Undo<'a> {
    shared: &'a Shared,
    name: &'a str,
    armed: bool,
}

impl Drop for Undo<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.shared.registry.release(self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_up_to_its_cap() {
        let l = WasmLimits::default()
            .with_restart_backoff(Duration::from_millis(100), Duration::from_secs(1));
        let waits: Vec<_> = (1..=6).map(|n| backoff(&l, n).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(backoff(&l, u32::MAX), Duration::from_secs(1));
    }
}
