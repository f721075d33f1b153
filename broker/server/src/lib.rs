//! The Oxbow broker: a Kafka-compatible server over the `oxbow-log` storage layer.
//!
//! - [`config`]: `server.properties` keys, defaults and validation (one table, also `--help`
//!   and docs/configuration.md); [`topic_config`]: topic-level keys.
//! - [`broker`]: shared state (the metadata image it serves, the partitions it hosts) and
//!   admin operations, which go to the active controller of the metadata quorum
//!   (`oxbow-meta`); [`startup`]: registration, heartbeats, controlled shutdown;
//!   [`metadata`]: `meta.properties` and the import of pre-quorum single-node metadata.
//! - [`partition`]: one hosted partition (log + [`replica`] state + high watermark channel);
//!   [`replication`]: followers fetching from leaders, ISR shrinking; [`isr`]: the one queue
//!   and task that send ISR changes to the controller; [`quota`]: the replication throttles
//!   both apply; [`fetch_session`]: leaders' incremental fetch sessions for their followers.
//! - [`network`]: TCP server, framing, in-order pipelining and global limits.
//! - [`handlers`]: one module per Kafka API; [`errors`]: the single error-code mapping.
//! - [`coordinator`]: the consumer group coordinator (groups and committed offsets in
//!   `__consumer_offsets`, state machines from `oxbow-group`).
//! - [`txn_coordinator`]: the transaction coordinator (transactional ids in
//!   `__transaction_state`, the state machine from `oxbow-txn`, markers sent through
//!   [`peers`], this broker's client connections to the others).
//! - [`tasks`]: retention, flush and checkpoint jobs; [`malloc`]: the allocator's settings.
//! - [`format`]: `oxbow-broker format` (Kafka's `kafka-storage format`), and
//!   [`ControllerNode`] for `process.roles=controller`.
//!
//! [`Server::bind`] opens storage, binds the listener, joins the quorum and registers;
//! [`Server::run`] serves until the shutdown future resolves, then shuts down cleanly (drain,
//! controlled shutdown, flush, checkpoint, marker).

pub mod broker;
pub mod clock;
pub mod config;
pub mod controller_client;
pub mod coordinator;
pub mod docs;
pub mod errors;
pub mod fd_limit;
pub mod fetch_session;
pub mod format;
pub mod handlers;
pub mod health;
pub mod isr;
pub mod lag;
#[cfg(test)]
mod layout;
pub mod log_manager;
pub mod malloc;
pub mod metadata;
pub mod metadata_view;
pub mod metrics;
pub mod network;
pub mod partition;
pub mod peers;
pub mod quota;
pub mod replica;
pub mod replication;
pub mod security;
pub mod startup;
pub mod stats;
pub mod tasks;
pub mod telemetry;
pub mod topic_config;
pub mod trace;
pub mod txn_coordinator;
pub mod verification;
pub mod zero_copy;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use oxbow_meta::{Quorum, QuorumConfig};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// What ends [`Server::run`] and [`ControllerNode::run`], boxed so that their bodies are not generic.
type Shutdown<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

pub use broker::Broker;
pub use config::{BrokerConfig, ConfigError};
pub use log_manager::StartupError;

/// The metadata quorum's own thread, as Kafka runs its Raft client and controller on threads of
/// their own. On the threads that serve clients, a busy node (2 cores, 10,000 partitions of RF 3
/// under produce) queued the Raft RPCs, heartbeats and leadership checks behind client requests
/// until they timed out: voters elected again and again, and brokers whose heartbeats went
/// unanswered fenced themselves. Dropped last (the quorum's tasks have stopped by then). The
/// runtime is an `Option` only so that `drop` can take it out and shut it down without blocking.
struct QuorumThread(Option<tokio::runtime::Runtime>);

/// The quorum starting, with its tasks.
type Starting = Pin<Box<dyn Future<Output = Result<(Quorum, JoinSet<()>), oxbow_meta::QuorumError>> + Send>>;

impl QuorumThread {
    fn new() -> anyhow::Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("oxbow-quorum")
            .enable_all()
            .build()
            .map_err(|e| anyhow::anyhow!("cannot start the metadata quorum's thread: {e}"))?;
        Ok(Self(Some(rt)))
    }

    /// Starts this node's part of the quorum there; `tasks` gets one task that ends when the
    /// quorum's tasks have (after `stop`).
    async fn start(
        &self,
        cfg: QuorumConfig,
        tasks: &mut JoinSet<()>,
        stop: CancellationToken,
    ) -> anyhow::Result<Quorum> {
        let Some(rt) = &self.0 else { unreachable!("the runtime is taken out only by drop") };
        // Boxed: its type stays out of every caller's future (their layouts nest deep enough).
        let starting: Starting = Box::pin(async move {
            let mut own = JoinSet::new();
            Quorum::start(cfg, &mut own, stop).await.map(|q| (q, own))
        });
        let (quorum, mut own) = rt.spawn(starting).await??;
        tasks.spawn(async move { while own.join_next().await.is_some() {} });
        Ok(quorum)
    }
}

impl Drop for QuorumThread {
    fn drop(&mut self) {
        // Without blocking: this may run inside the main runtime.
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// A broker with its storage open, its listener bound, and its place in the metadata quorum.
pub struct Server {
    broker: Arc<Broker>,
    /// Every client listener, bound (the first is `local_addr`).
    listeners: Vec<network::Bound>,
    health: Arc<health::Health>,
    health_task: Option<(SocketAddr, tokio::task::JoinHandle<()>)>,
    /// The quorum, image follower and heartbeat tasks, stopped after the listener drained.
    meta_tasks: JoinSet<()>,
    meta_stop: CancellationToken,
    quorum_thread: QuorumThread,
}

/// Resolves a listener's `host:port` to a socket address to bind.
async fn resolve(l: &config::Listener) -> anyhow::Result<SocketAddr> {
    let host = if l.host.is_empty() { "0.0.0.0" } else { l.host.as_str() };
    tokio::net::lookup_host((host, l.port))
        .await?
        .next()
        .ok_or_else(|| anyhow::anyhow!("{}://{}:{} does not resolve", l.name, l.host, l.port))
}

async fn quorum_config(c: &BrokerConfig) -> anyhow::Result<QuorumConfig> {
    let controller_listener = match (&c.controller_listener, c.controller_role) {
        (Some(l), true) => Some(resolve(l).await?),
        _ => None,
    };
    let voters = if c.quorum_voters.is_empty() && c.quorum_bootstrap.is_empty() {
        // A single-node quorum: this node alone, never dialed.
        [(c.node_id, "127.0.0.1:0".to_string())].into_iter().collect()
    } else {
        c.quorum_voters.clone()
    };
    Ok(QuorumConfig {
        node_id: c.node_id,
        voters,
        bootstrap: c.quorum_bootstrap.clone(),
        auto_join: c.auto_join,
        advertised: c.controller_advertised.clone(),
        controller: c.controller_role,
        controller_listener,
        local_ip: controller_listener
            .map(|a| a.ip())
            .or_else(|| c.listeners.first().and_then(|l| l.host.parse().ok()))
            .filter(|ip: &std::net::IpAddr| !ip.is_unspecified()),
        dir: c.metadata_log_dir.clone(),
        session_timeout_ms: c.session_timeout_ms,
        unclean_leader_election: c.unclean_leader_election,
        snapshot_bytes: c.snapshot_bytes,
        election_timeout_ms: c.election_timeout_ms,
        tls: c
            .security
            .controller_tls
            .as_ref()
            .map(security::tls::controller_tls)
            .transpose()
            .map_err(|e| anyhow::anyhow!("{e}"))?,
        observer_session_timeout: oxbow_meta::quorum::OBSERVER_SESSION_TIMEOUT,
    })
}

impl Server {
    /// Opens storage, binds the listener, joins the metadata quorum, registers with the active
    /// controller and waits until this broker is unfenced and has applied the current metadata
    /// (so the first client request sees it). Clients that connect meanwhile wait in the
    /// listen backlog.
    pub async fn bind(config: BrokerConfig) -> anyhow::Result<Self> {
        // Certificates load before anything else starts: a bad one stops startup naming its key.
        let mut secured = Vec::new();
        for l in &config.listeners {
            let sec = config.security.listeners.get(&l.name).ok_or_else(|| {
                anyhow::anyhow!("listener {}: no security settings (listener.security.protocol.map)", l.name)
            })?;
            let runtime = security::ListenerRuntime::new(&l.name, sec).map_err(|e| anyhow::anyhow!("{e}"))?;
            secured.push((l.clone(), Arc::new(runtime)));
        }
        if let Some(c) = &config.security.inter_broker_client {
            security::tls::inter_broker_security(c).map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        // Health first: liveness answers while the log recovers; readiness waits for `run`.
        let health = Arc::new(health::Health::default());
        let health_task = match config.http_listener {
            Some(addr) => Some(health::spawn(addr, health.clone()).await?),
            None => None,
        };
        let qcfg = quorum_config(&config).await?;
        let broker = tokio::task::spawn_blocking(move || Broker::open(config)).await??;
        let mut listeners = Vec::new();
        for (l, security) in secured {
            let host = if l.host.is_empty() { "0.0.0.0".to_string() } else { l.host.clone() };
            let tcp = TcpListener::bind((host.as_str(), l.port))
                .await
                .map_err(|e| anyhow::anyhow!("cannot listen on {}:{} (listeners, {}): {e}", host, l.port, l.name))?;
            broker.set_bound_port(&l.name, tcp.local_addr()?.port());
            listeners.push(network::Bound { tcp, security });
        }

        let meta_stop = CancellationToken::new();
        let mut meta_tasks = JoinSet::new();
        let quorum_thread = QuorumThread::new()?;
        let quorum = quorum_thread.start(qcfg, &mut meta_tasks, meta_stop.clone()).await?;
        broker.controller.set_quorum(quorum.clone());
        health.set_quorum(quorum.clone());
        health.set_broker(&broker);
        meta_tasks.spawn(follow_image(broker.clone(), quorum.clone(), meta_stop.clone()));
        let legacy =
            if broker.config.controller_role { metadata::read_legacy(&broker.config.log_dirs[0])? } else { None };
        if legacy.is_some() {
            broker.logs.hold_strays(true);
        }
        startup::join_cluster(&broker).await;
        let (q, dir, s) = (quorum.clone(), broker.config.metadata_log_dir.clone(), meta_stop.clone());
        meta_tasks.spawn(async move { format::apply_bootstrap_scram(&dir, &q, s).await });
        if let Some(legacy) = legacy {
            startup::import_legacy(&broker, legacy).await?;
            broker.logs.hold_strays(false);
        }
        let version = quorum.image().version;
        broker.controller.wait_applied(version, std::time::Duration::from_secs(600)).await;
        broker.remove_strays();
        tracing::info!(
            topics = broker.all_topics().len(),
            partitions = broker.all_partitions().len(),
            recovered_partitions = broker.logs.recovered_partitions.load(std::sync::atomic::Ordering::Relaxed),
            cluster_id = %broker.cluster_id,
            "storage loaded"
        );
        Ok(Self { broker, listeners, health, health_task, meta_tasks, meta_stop, quorum_thread })
    }

    /// Where the health endpoints listen, if `oxbow.http.listener` is set.
    pub fn health_addr(&self) -> Option<SocketAddr> {
        self.health_task.as_ref().map(|(a, _)| *a)
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        match self.listeners.first() {
            Some(l) => l.tcp.local_addr(),
            None => Err(std::io::Error::other("no client listener")),
        }
    }

    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// Serves until `shutdown` resolves; then stops accepting, finishes in-flight requests,
    /// tells the controller it is shutting down, stops background jobs and closes the logs
    /// cleanly.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> anyhow::Result<()> {
        self.serve(Box::pin(shutdown)).await
    }

    /// [`Server::run`]'s body. It is not generic, so it is compiled once, here, and not again in
    /// every binary and test that calls `run`.
    async fn serve(mut self, shutdown: Shutdown<'_>) -> anyhow::Result<()> {
        let token = CancellationToken::new();
        let mut jobs = JoinSet::new();
        tasks::spawn_all(&mut jobs, self.broker.clone(), token.clone());
        jobs.spawn(self.broker.groups.clone().run_timers(self.broker.view.clone(), token.child_token()));
        jobs.spawn(self.broker.txns.clone().run_timers(token.child_token()));
        jobs.spawn(replication::run(self.broker.clone(), token.child_token()));
        jobs.spawn(lag::run(self.broker.clone(), token.child_token()));
        let (b, stop) = (self.broker.clone(), token.child_token());
        jobs.spawn(async move { isr::run(&b.isr_changes, &b.controller, b.node_id(), stop).await });
        // Ordinary heartbeats stop before the controlled shutdown's own take over.
        let heartbeats_stop = self.meta_stop.child_token();
        self.meta_tasks.spawn(startup::heartbeats(self.broker.clone(), heartbeats_stop.clone()));
        self.health.set(health::Phase::Serving);
        let health = self.health.clone();
        let shutdown = async move {
            shutdown.await;
            health.set(health::Phase::ShuttingDown);
        };
        network::run(self.listeners, self.broker.clone(), shutdown).await;
        tracing::info!("shutting down: listener closed, requests drained");
        heartbeats_stop.cancel();
        startup::controlled_shutdown(&self.broker).await;
        self.broker.groups.shutdown().await;
        self.broker.txns.shutdown().await;
        token.cancel();
        while jobs.join_next().await.is_some() {}
        self.meta_stop.cancel();
        while self.meta_tasks.join_next().await.is_some() {}
        drop(self.quorum_thread);
        let b = self.broker.clone();
        tokio::task::spawn_blocking(move || b.close_logs()).await?;
        if let Some((_, task)) = self.health_task {
            task.abort();
        }
        Ok(())
    }
}

/// A controller-only node (`process.roles=controller`): a voter of the metadata quorum with
/// no client listener. It never registers as a broker, so it leads no partition; it serves the
/// health endpoints (ready once it knows the active controller) and the quorum's gRPC service.
pub struct ControllerNode {
    quorum: Quorum,
    health: Arc<health::Health>,
    health_task: Option<(SocketAddr, tokio::task::JoinHandle<()>)>,
    tasks: JoinSet<()>,
    stop: CancellationToken,
    pub cluster_id: String,
    quorum_thread: QuorumThread,
}

impl ControllerNode {
    /// Checks the storage's cluster id and joins the quorum.
    pub async fn bind(config: BrokerConfig) -> anyhow::Result<Self> {
        let health = Arc::new(health::Health::default());
        health.set_controller_only();
        let health_task = match config.http_listener {
            Some(addr) => Some(health::spawn(addr, health.clone()).await?),
            None => None,
        };
        let mut dirs = config.log_dirs.clone();
        if !dirs.contains(&config.metadata_log_dir) {
            dirs.push(config.metadata_log_dir.clone());
        }
        let cluster_id = metadata::init_log_dirs(
            &dirs,
            config.node_id,
            config.cluster_id.as_deref(),
            config.quorum_bootstrap.is_empty(),
        )?;
        let qcfg = quorum_config(&config).await?;
        let stop = CancellationToken::new();
        let mut tasks = JoinSet::new();
        let quorum_thread = QuorumThread::new()?;
        let quorum = quorum_thread.start(qcfg, &mut tasks, stop.clone()).await?;
        health.set_quorum(quorum.clone());
        let (q, dir, s) = (quorum.clone(), config.metadata_log_dir.clone(), stop.clone());
        tasks.spawn(async move { format::apply_bootstrap_scram(&dir, &q, s).await });
        Ok(Self { quorum, health, health_task, tasks, stop, cluster_id, quorum_thread })
    }

    pub fn quorum(&self) -> &Quorum {
        &self.quorum
    }

    pub fn health_addr(&self) -> Option<SocketAddr> {
        self.health_task.as_ref().map(|(a, _)| *a)
    }

    /// Takes part in the quorum until `shutdown` resolves, then stops Raft cleanly.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> anyhow::Result<()> {
        self.serve(Box::pin(shutdown)).await
    }

    /// [`ControllerNode::run`]'s body, not generic (see [`Server::serve`]).
    async fn serve(mut self, shutdown: Shutdown<'_>) -> anyhow::Result<()> {
        self.health.set(health::Phase::Serving);
        shutdown.await;
        self.health.set(health::Phase::ShuttingDown);
        tracing::info!("shutting down: leaving the quorum's work to the other voters");
        self.stop.cancel();
        while self.tasks.join_next().await.is_some() {}
        drop(self.quorum_thread);
        if let Some((_, task)) = self.health_task {
            task.abort();
        }
        Ok(())
    }
}

/// Applies every new committed image to the broker, in order.
async fn follow_image(broker: Arc<Broker>, quorum: Quorum, stop: CancellationToken) {
    let mut rx = quorum.subscribe();
    loop {
        let image = rx.borrow_and_update().clone();
        if image.version > broker.image().version || broker.image().version == 0 {
            let b = broker.clone();
            if tokio::task::spawn_blocking(move || b.apply_image(&image)).await.is_err() {
                tracing::error!("applying the metadata image panicked");
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            r = rx.changed() => if r.is_err() { return },
        }
    }
}
