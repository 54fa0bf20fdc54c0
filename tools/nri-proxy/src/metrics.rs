//! Prometheus metrics over plain HTTP: `GET /metrics` in the text format,
//! anything else 404. One short-lived task per connection, all owned by the
//! server and ended with it.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Largest request head read.
const MAX_REQUEST: usize = 8 * 1024;
/// Time a client has to send its request and take the answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// The proxy's own metrics (prefix `nri_proxy`), beside the plugin side's
/// (prefix `nri`).
#[derive(Debug, Clone, Default)]
pub(crate) struct ProxyMetrics {
    /// Upstream events waiting for their turn: earlier events of their
    /// pod, or a resynchronization's, to reach the plugins first.
    pub(crate) held: Gauge,
    /// Upstream events answered without the plugins because their turn
    /// had not come at the deadline (they reach the plugins afterwards).
    pub(crate) late: Counter,
    /// Creations refused because the plugins were too far behind the
    /// runtime.
    pub(crate) backlog_refusals: Counter,
    /// Resynchronizations that found differences.
    pub(crate) resyncs: Counter,
    /// Events delivered for resynchronizations.
    pub(crate) replayed: Counter,
    /// Creations whose merged adjustment used a capability the runtime
    /// does not apply, by capability.
    unapplied: Family<CapabilityLabel, Counter>,
}

/// The label of [`ProxyMetrics::unapplied`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CapabilityLabel {
    capability: &'static str,
}

impl ProxyMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let m = ProxyMetrics::default();
        let r = registry.sub_registry_with_prefix("nri_proxy");
        r.register(
            "events_held",
            "Runtime events waiting for earlier events (of their pod, or of a resynchronization) to reach the plugins",
            m.held.clone(),
        );
        r.register(
            "late_events",
            "Runtime events answered without the plugins, delivered in their turn afterwards",
            m.late.clone(),
        );
        r.register(
            "backlog_refusals",
            "Creations refused because the plugins were too many events behind the runtime",
            m.backlog_refusals.clone(),
        );
        r.register(
            "resyncs",
            "Resynchronizations with the runtime that found differences",
            m.resyncs.clone(),
        );
        r.register(
            "unapplied_adjustments",
            "Creations whose merged adjustment used a capability the runtime does not apply (it drops that part), by capability",
            m.unapplied.clone(),
        );
        r.register(
            "resync_events",
            "Events delivered to the plugins for resynchronizations",
            m.replayed.clone(),
        );
        m
    }

    /// The counter of creations with an unapplied `capability`.
    pub(crate) fn unapplied(&self, capability: &'static str) -> Counter {
        self.unapplied
            .get_or_create(&CapabilityLabel { capability })
            .clone()
    }
}

/// Serves `registry` on `listener` until `stop`.
pub(crate) async fn serve(listener: TcpListener, registry: Arc<Registry>, stop: CancellationToken) {
    let mut conns = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => break,
            a = listener.accept() => a,
        };
        while conns.try_join_next().is_some() {}
        match accepted {
            Ok((stream, peer)) => {
                let registry = registry.clone();
                conns.spawn(async move {
                    let r = tokio::time::timeout(CLIENT_TIMEOUT, answer(stream, &registry)).await;
                    if !matches!(r, Ok(Ok(()))) {
                        tracing::debug!(%peer, "metrics client failed or timed out");
                    }
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "metrics: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    conns.shutdown().await;
}

async fn answer(mut stream: TcpStream, registry: &Registry) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let mut parts = line.split(|b| *b == b' ');
    let (method, path) = (parts.next(), parts.next());
    let (status, body) = if method == Some(&b"GET"[..]) && path == Some(&b"/metrics"[..]) {
        let mut text = String::new();
        match prometheus_client::encoding::text::encode(&mut text, registry) {
            Ok(()) => ("200 OK", text),
            Err(e) => ("500 Internal Server Error", format!("{e}\n")),
        }
    } else {
        ("404 Not Found", "not found: GET /metrics\n".to_owned())
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(reply.as_bytes()).await?;
    stream.shutdown().await
}
