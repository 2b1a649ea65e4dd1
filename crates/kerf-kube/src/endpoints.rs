//! The HTTP endpoints of `kerf controller`: `/metrics` (Prometheus text format) and `/healthz`,
//! `/readyz` (ready once every watch has listed its kind, as leader or standby).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

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
                    crate::metrics::encode(&registry),
                )
            }
        }),
    )
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
