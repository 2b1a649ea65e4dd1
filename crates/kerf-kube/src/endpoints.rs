//! The HTTP endpoints of `kerf controller`: `/metrics` (Prometheus text format) and `/healthz`,
//! `/readyz` (ready once every watch has listed its kind, as leader or standby).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use std::convert::Infallible;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, watch};

/// What the probes report.
#[derive(Debug, Default)]
pub struct Health {
    /// Every watch has delivered its first list.
    pub synced: AtomicBool,
    /// This process holds the lease (or runs without leader election).
    pub leader: AtomicBool,
}

impl Health {
    pub fn set_synced(&self, v: bool) {
        self.synced.store(v, Ordering::SeqCst);
    }

    pub fn set_leader(&self, v: bool) {
        self.leader.store(v, Ordering::SeqCst);
    }
}

pub fn metrics_routes(registry: Arc<Registry>) -> Router {
    Router::new().route(
        "/metrics",
        get(move || {
            let registry = Arc::clone(&registry);
            async move {
                (
                    [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
                    stream_metrics(registry),
                )
            }
        }),
    )
}

/// How much of the metrics' text is sent at a time.
const CHUNK: usize = 64 * 1024;

/// The registry in Prometheus's text format, sent as it is written: a big cluster's metrics
/// (`karpenter_pods_state` has a series per pod) are megabytes of text, never held whole.
fn stream_metrics(registry: Arc<Registry>) -> Body {
    let (tx, rx) = mpsc::channel::<Bytes>(2);
    tokio::task::spawn_blocking(move || {
        let mut out = Chunks { buf: String::with_capacity(CHUNK), tx };
        let written = prometheus_client::encoding::text::encode(&mut out, &registry).and_then(|()| out.send());
        if written.is_err() && !out.tx.is_closed() {
            tracing::error!("cannot encode metrics");
        }
    });
    Body::from_stream(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (Ok::<_, Infallible>(chunk), rx))
    }))
}

/// Text written in chunks to the response (a scraper that hung up stops the writing).
struct Chunks {
    buf: String,
    tx: mpsc::Sender<Bytes>,
}

impl Chunks {
    fn send(&mut self) -> std::fmt::Result {
        let chunk = std::mem::replace(&mut self.buf, String::with_capacity(CHUNK));
        self.tx.blocking_send(Bytes::from(chunk)).map_err(|_| std::fmt::Error)
    }
}

impl std::fmt::Write for Chunks {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.buf.push_str(s);
        if self.buf.len() >= CHUNK { self.send() } else { Ok(()) }
    }
}

pub fn health_routes(health: Arc<Health>) -> Router {
    let ready = Arc::clone(&health);
    Router::new().route("/healthz", get(|| async { "ok" })).route(
        "/readyz",
        get(move || {
            let health = Arc::clone(&ready);
            async move {
                if !health.synced.load(Ordering::SeqCst) {
                    return (StatusCode::SERVICE_UNAVAILABLE, "caches not synced yet").into_response();
                }
                let role = if health.leader.load(Ordering::SeqCst) { "ok: leader" } else { "ok: standby" };
                (StatusCode::OK, role).into_response()
            }
        }),
    )
}

/// Serves `routes` on `listener` until `stop` turns true.
pub async fn serve(
    listener: tokio::net::TcpListener,
    routes: Router,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    axum::serve(listener, routes)
        .with_graceful_shutdown(async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::tests::{node_n1, pods_state_registry};

    #[tokio::test]
    async fn metrics_bigger_than_a_chunk_arrive_whole_and_in_order() {
        let pods: Vec<kerf_api::SlimPod> = (0..2_000)
            .map(|i| {
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("web-{i:05}"), "namespace": "shop"},
                    "spec": {"nodeName": "n1", "containers": [{"name": "app"}]}
                }))
                .expect("pod")
            })
            .collect();
        let registry = Arc::new(pods_state_registry(&pods, &node_n1()));
        let whole = crate::metrics::encode(&registry);
        assert!(whole.len() > 3 * CHUNK, "{} bytes", whole.len());
        let body = axum::body::to_bytes(stream_metrics(Arc::clone(&registry)), usize::MAX).await.expect("body");
        assert_eq!(String::from_utf8_lossy(&body), whole);
        assert!(whole.ends_with("# EOF\n"));
    }
}
