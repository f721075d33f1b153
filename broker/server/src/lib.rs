//! The Oxbow broker: a Kafka-compatible server over the `oxbow-log` storage layer.
//!
//! - [`config`]: `server.properties` keys, defaults and validation (one table, also `--help`
//!   and docs/configuration.md); [`topic_config`]: topic-level keys.
//! - [`broker`]: shared state (topics, partitions, metadata store) and admin operations;
//!   [`metadata`]: the single-node metadata store (cluster id, topics, producer ids).
//! - [`partition`]: one led partition (log + [`replica`] state + high watermark channel).
//! - [`network`]: TCP server, framing, in-order pipelining and global limits.
//! - [`handlers`]: one module per Kafka API; [`errors`]: the single error-code mapping.
//! - [`tasks`]: retention, flush and checkpoint jobs.
//!
//! [`Server::bind`] opens storage and binds the listener; [`Server::run`] serves until the
//! shutdown future resolves, then shuts down cleanly (drain, flush, checkpoint, marker).

pub mod broker;
pub mod config;
pub mod errors;
pub mod handlers;
pub mod health;
pub mod metadata;
pub mod network;
pub mod partition;
pub mod replica;
pub mod tasks;
pub mod topic_config;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use broker::{Broker, StartupError};
pub use config::{BrokerConfig, ConfigError};

/// A broker with its storage open and its listener bound.
pub struct Server {
    broker: Arc<Broker>,
    listener: TcpListener,
    health: Arc<health::Health>,
    health_task: Option<(SocketAddr, tokio::task::JoinHandle<()>)>,
}

impl Server {
    /// Opens (and if needed recovers) storage, then binds the listener.
    pub async fn bind(config: BrokerConfig) -> anyhow::Result<Self> {
        let l = config.listeners[0].clone();
        // Health first: liveness answers while the log recovers; readiness waits for `run`.
        let health = Arc::new(health::Health::default());
        let health_task = match config.http_listener {
            Some(addr) => Some(health::spawn(addr, health.clone()).await?),
            None => None,
        };
        let broker = tokio::task::spawn_blocking(move || Broker::open(config)).await??;
        let host = if l.host.is_empty() { "0.0.0.0".to_string() } else { l.host.clone() };
        let listener = TcpListener::bind((host.as_str(), l.port))
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {}:{} (listeners): {e}", host, l.port))?;
        let port = listener.local_addr()?.port();
        broker.set_bound_port(port);
        Ok(Self { broker, listener, health, health_task })
    }

    /// Where the health endpoints listen, if `oxbow.http.listener` is set.
    pub fn health_addr(&self) -> Option<SocketAddr> {
        self.health_task.as_ref().map(|(a, _)| *a)
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// Serves until `shutdown` resolves; then stops accepting, finishes in-flight requests,
    /// stops background jobs and closes the logs cleanly.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let token = CancellationToken::new();
        let mut jobs = JoinSet::new();
        tasks::spawn_all(&mut jobs, self.broker.clone(), token.clone());
        self.health.set(health::Phase::Serving);
        let health = self.health.clone();
        let shutdown = async move {
            shutdown.await;
            health.set(health::Phase::ShuttingDown);
        };
        network::run(self.listener, self.broker.clone(), shutdown).await;
        tracing::info!("shutting down: listener closed, requests drained");
        token.cancel();
        while jobs.join_next().await.is_some() {}
        let b = self.broker.clone();
        tokio::task::spawn_blocking(move || b.close_logs()).await?;
        if let Some((_, task)) = self.health_task {
            task.abort();
        }
        Ok(())
    }
}
