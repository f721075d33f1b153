//! The operator's HTTP endpoint (`--http-listener`, default `0.0.0.0:8080`; the chart's probes
//! and metrics Service use it):
//! - `GET /livez`: 200 while the process serves HTTP at all (a wedged runtime fails it).
//! - `GET /readyz`: 200 once the Kubernetes API server has answered, whether this replica leads
//!   or stands by (a standby is healthy: it takes over when the leader's Lease lapses); 503
//!   before that and from the moment a shutdown begins.
//! - `GET /metrics`: reconcile, event and leadership metrics in the Prometheus text format, the
//!   same counts the OTLP exporter sends ([`crate::telemetry::Metrics::prometheus`]).
//!
//! The listener is bound before leader election, so a standby replica passes its probes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;

use crate::telemetry::Metrics;

/// What the handlers read; the operator's main loop moves it along.
pub struct Health {
    pub metrics: Metrics,
    ready: AtomicBool,
}

impl Health {
    pub fn new(metrics: Metrics) -> Self {
        Health { metrics, ready: AtomicBool::new(false) }
    }

    /// Ready (the API server answered) or not (starting, stopping).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }
}

/// Binds `addr` and serves until the runtime stops. A bind failure is returned: a port taken
/// or not allowed is a configuration error the operator stops on.
pub async fn serve(addr: SocketAddr, health: Arc<Health>) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let app = Router::new()
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(health);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "the HTTP endpoint stopped");
        }
    });
    Ok(local)
}

async fn readyz(State(h): State<Arc<Health>>) -> (StatusCode, &'static str) {
    if h.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

async fn metrics(State(h): State<Arc<Health>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], h.metrics.prometheus())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn probes_follow_readiness_and_metrics_are_prometheus_text() {
        let health = Arc::new(Health::new(Metrics::default()));
        let addr = serve("127.0.0.1:0".parse().unwrap(), health.clone()).await.unwrap();
        assert!(get(addr, "/livez").await.starts_with("HTTP/1.1 200"));
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 503"));
        health.set_ready(true);
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 200"));
        health.metrics.record("cluster", 0.5, true);
        let m = get(addr, "/metrics").await;
        assert!(m.starts_with("HTTP/1.1 200"), "{m}");
        assert!(m.contains("content-type: text/plain; version=0.0.4"), "{m}");
        assert!(m.contains("oxbow_operator_reconciles_total{controller=\"cluster\",result=\"success\"} 1"), "{m}");
        assert!(get(addr, "/nope").await.starts_with("HTTP/1.1 404"));
    }
}
