//! HTTP health endpoints for orchestrators (`oxbow.http.listener`):
//! - `GET /livez`: 200 while the process serves HTTP at all (a wedged runtime fails it).
//! - `GET /readyz`: 200 once the log is recovered and the Kafka listener accepts connections;
//!   503 while starting (recovery can take a while after an unclean stop) and from the moment a
//!   shutdown begins, so load balancers stop sending clients before the listener closes.
//!
//! - `GET /quorum`: the metadata quorum as the active controller reports it (JSON: leader, term,
//!   high watermark, voters with their log end offsets, learners, endpoints); 503 while no
//!   controller answers. For operators, scripts and tests that need the real controller.
//! - `GET /metadata`: this node's own metadata image (version, brokers, topics with partition
//!   leaders, epochs, replicas and ISR) as JSON, answered locally: what this node would tell
//!   clients, even when it is cut off from the quorum; `raft` is its own Raft role, the leader
//!   it follows and its term, also as it sees them alone.
//!
//! - `GET /metrics`: the broker's metrics ([`crate::metrics`]) in Prometheus' text format, for a
//!   Prometheus that scrapes brokers directly (the same catalogue goes out over OTLP when an
//!   endpoint is set). 503 until the broker has opened its log. A controller-only node serves
//!   the quorum's families only (active controller, offline partitions, term).
//!
//! On a controller-only node (`process.roles=controller`) `/readyz` answers 200 once it serves
//! and knows the active controller (itself or another voter).
//!
//! The listener is bound before the log is opened, so a liveness or startup probe passes during
//! recovery while readiness does not.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Where the broker is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    Starting = 0,
    Serving = 1,
    ShuttingDown = 2,
}

/// Shared between the server (which moves it through the phases) and the HTTP handlers.
#[derive(Default)]
pub struct Health {
    phase: AtomicU8,
    quorum: OnceLock<oxbow_meta::Quorum>,
    /// The broker, once its log is open (`/metrics` reads it); weak, so that this endpoint
    /// never keeps a stopped broker alive.
    broker: OnceLock<Weak<crate::broker::Broker>>,
    /// A controller-only node: ready while serving and it knows the active controller.
    controller_only: std::sync::atomic::AtomicBool,
}

impl Health {
    pub fn set(&self, phase: Phase) {
        self.phase.store(phase as u8, Ordering::Release);
    }

    /// Attaches the quorum once it has started.
    pub fn set_quorum(&self, q: oxbow_meta::Quorum) {
        let _ = self.quorum.set(q);
    }

    /// Attaches the broker once its log is open.
    pub fn set_broker(&self, broker: &Arc<crate::broker::Broker>) {
        let _ = self.broker.set(Arc::downgrade(broker));
    }

    pub fn set_controller_only(&self) {
        self.controller_only.store(true, Ordering::Release);
    }

    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Acquire) {
            0 => Phase::Starting,
            1 => Phase::Serving,
            _ => Phase::ShuttingDown,
        }
    }
}

async fn livez() -> &'static str {
    "ok\n"
}

async fn readyz(State(health): State<Arc<Health>>) -> (StatusCode, &'static str) {
    match health.phase() {
        Phase::Serving if health.controller_only.load(Ordering::Acquire) => {
            match health.quorum.get().and_then(|q| q.leader()) {
                Some(_) => (StatusCode::OK, "ready\n"),
                None => (StatusCode::SERVICE_UNAVAILABLE, "no active controller known\n"),
            }
        }
        Phase::Serving => (StatusCode::OK, "ready\n"),
        Phase::Starting => (StatusCode::SERVICE_UNAVAILABLE, "starting: recovering the log\n"),
        Phase::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n"),
    }
}

async fn metrics(State(health): State<Arc<Health>>) -> (StatusCode, [(&'static str, &'static str); 1], String) {
    const TEXT: [(&str, &str); 1] = [("content-type", "text/plain; version=0.0.4; charset=utf-8")];
    if health.controller_only.load(Ordering::Acquire) {
        // The quorum's families only (active controller, offline partitions, term).
        return match health.quorum.get() {
            Some(q) => (StatusCode::OK, TEXT, crate::metrics::prometheus_text(crate::metrics::Node::Controller(q))),
            None => (StatusCode::SERVICE_UNAVAILABLE, TEXT, "starting: not in the quorum yet\n".into()),
        };
    }
    match health.broker.get().and_then(Weak::upgrade) {
        // The families walk the hosted partitions: off the async workers.
        Some(b) => {
            match tokio::task::spawn_blocking(move || crate::metrics::prometheus_text(crate::metrics::Node::Broker(&b)))
                .await
            {
                Ok(text) => (StatusCode::OK, TEXT, text),
                Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, TEXT, format!("{e}\n")),
            }
        }
        None => (StatusCode::SERVICE_UNAVAILABLE, TEXT, "starting: recovering the log\n".into()),
    }
}

async fn quorum(State(health): State<Arc<Health>>) -> (StatusCode, String) {
    let Some(q) = health.quorum.get() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "starting: not in the quorum yet\n".into());
    };
    match q.admin(oxbow_meta::QuorumAdmin::Describe, std::time::Duration::from_secs(5)).await {
        Ok(Ok(oxbow_meta::AdminReply::State(state))) => {
            let body = serde_json::json!({
                "node_id": q.node_id(),
                "image_version": q.image().version,
                "leader": state.leader,
                "term": state.term,
                "high_watermark": state.high_watermark,
                "voters": state.voters,
                "learners": state.learners,
                "endpoints": state.endpoints,
            });
            (StatusCode::OK, format!("{body}\n"))
        }
        Ok(other) => (StatusCode::INTERNAL_SERVER_ERROR, format!("unexpected reply: {other:?}\n")),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")),
    }
}

async fn metadata(State(health): State<Arc<Health>>) -> (StatusCode, String) {
    let Some(q) = health.quorum.get() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "starting: not in the quorum yet\n".into());
    };
    let image = q.image();
    let (role, leader, term) = q.local_view();
    let body = serde_json::json!({
        "node_id": q.node_id(),
        "raft": { "role": role, "leader": leader, "term": term },
        "version": image.version,
        "brokers": image.brokers,
        "topics": image.topics.values().map(|t| (t.name.clone(), serde_json::json!({
            "id": t.id,
            "partitions": t.partitions,
        }))).collect::<serde_json::Map<_, _>>(),
    });
    (StatusCode::OK, format!("{body}\n"))
}

/// Binds `addr` and serves the endpoints on a task until it is aborted.
pub async fn spawn(addr: SocketAddr, health: Arc<Health>) -> anyhow::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr} (oxbow.http.listener): {e}"))?;
    let local = listener.local_addr()?;
    let app = Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/quorum", get(quorum))
        .route("/metadata", get(metadata))
        .route("/metrics", get(metrics))
        .with_state(health);
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "health endpoint stopped");
        }
    });
    Ok((local, task))
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap_or_else(|e| panic!("connect: {e}"));
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap_or_else(|e| panic!("write: {e}"));
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap_or_else(|e| panic!("read: {e}"));
        out
    }

    #[tokio::test]
    async fn readiness_follows_the_phase_and_liveness_always_answers() {
        let health = Arc::new(Health::default());
        let (addr, task) = spawn("127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}")), health.clone())
            .await
            .unwrap_or_else(|e| panic!("spawn: {e}"));
        for (phase, ready) in [(Phase::Starting, false), (Phase::Serving, true), (Phase::ShuttingDown, false)] {
            health.set(phase);
            let r = get(addr, "/readyz").await;
            assert_eq!(r.starts_with("HTTP/1.1 200"), ready, "{phase:?}: {r}");
            assert!(r.starts_with("HTTP/1.1 503") != ready, "{phase:?}: {r}");
            let l = get(addr, "/livez").await;
            assert!(l.starts_with("HTTP/1.1 200") && l.ends_with("ok\n"), "{l}");
        }
        assert!(get(addr, "/nope").await.starts_with("HTTP/1.1 404"));
        task.abort();
    }
}
