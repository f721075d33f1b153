//! The quorum runtime: starts openraft on the RocksDB store, serves the controller gRPC
//! service, routes commands to the active controller, runs the controller's timers, and
//! publishes the metadata image to the broker.
//!
//! A node with the controller role is a Raft voter and applies the committed log itself. A
//! broker-only node has no Raft state: it follows the image by long-polling a controller's
//! `Fetch` (the role of KRaft's metadata fetch), so it never sees uncommitted metadata.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, ServerState, SnapshotPolicy};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use crate::controller::{Command, Controller, Refusal, Reply, done_before};
use crate::image::MetadataImage;
use crate::network::{Contacts, NetworkFactory, Redirects, channel_via, check_target, decode, encode, set_target};
use crate::raft::{LogStore, Published, Raft, RecordBatch, StateMachine, TypeConfig, open_db};
use crate::records::NodeId;
use crate::rpc::Payload;
use crate::rpc::quorum_client::QuorumClient;
use crate::rpc::quorum_server::{Quorum as QuorumRpc, QuorumServer};

/// How a node takes part in the metadata quorum.
#[derive(Debug, Clone)]
pub struct QuorumConfig {
    pub node_id: NodeId,
    /// Voters and their CONTROLLER listener addresses (`controller.quorum.voters`); empty for
    /// a dynamic quorum, whose voters live in the metadata log.
    pub voters: BTreeMap<NodeId, String>,
    /// `controller.quorum.bootstrap.servers`: controllers to ask for the active one when no
    /// voter is known yet (KIP-853 dynamic quorum).
    pub bootstrap: Vec<String>,
    /// Ask the active controller to make this controller a voter, once per start.
    pub auto_join: bool,
    /// Where other controllers reach this node's CONTROLLER listener (AddRaftVoter).
    pub advertised: Option<String>,
    /// This node is a voter (has the controller role).
    pub controller: bool,
    /// Where this node's controller service listens (`None` for a single-node quorum, which
    /// needs no controller traffic, and for broker-only nodes).
    pub controller_listener: Option<SocketAddr>,
    /// Source address of this node's outgoing quorum connections (its own address).
    pub local_ip: Option<IpAddr>,
    /// Directory of the metadata store (`metadata.log.dir`).
    pub dir: PathBuf,
    pub session_timeout_ms: u64,
    pub unclean_leader_election: bool,
    /// Bytes of records between snapshots (`metadata.log.max.record.bytes.between.snapshots`).
    pub snapshot_bytes: u64,
    pub election_timeout_ms: u64,
    /// TLS on the CONTROLLER listener and on every connection to one.
    pub tls: Option<crate::network::ControllerTls>,
    /// How long the active controller keeps a learner (an observer controller: a voter being
    /// added, or one removed that still runs) that does not answer it, before it leaves the
    /// membership: a controller removed from the voters and then shut down for good is not
    /// replicated to, nor listed as an observer, forever. Kafka drops a silent observer after
    /// five minutes too ([`OBSERVER_SESSION_TIMEOUT`]). A dropped node that comes back follows
    /// the metadata like a broker, and AddRaftVoter makes it a voter again.
    pub observer_session_timeout: Duration,
}

/// Kafka's observer session timeout (`LeaderState.OBSERVER_SESSION_TIMEOUT_MS`).
pub const OBSERVER_SESSION_TIMEOUT: Duration = Duration::from_secs(300);

/// Errors that stop the quorum from starting.
#[derive(Debug, thiserror::Error)]
pub enum QuorumError {
    #[error("metadata store {path}: {source}")]
    Store { path: PathBuf, source: rocksdb::Error },
    #[error("metadata store: {0}")]
    Storage(String),
    #[error("raft: {0}")]
    Raft(String),
    #[error("cannot bind the controller listener {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("controller listener TLS: {0}")]
    Tls(String),
}

/// Why a command did not take effect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
pub enum CommandError {
    #[error(transparent)]
    Refused(Refusal),
    #[error("node {node} is not the active controller (leader: {leader:?})")]
    NotController {
        node: NodeId,
        leader: Option<NodeId>,
        /// The leader's CONTROLLER address, if known (a node found through a bootstrap server
        /// may not know it yet).
        #[serde(default)]
        leader_addr: Option<String>,
    },
    #[error("the metadata quorum is unavailable: {0}")]
    Unavailable(String),
    /// The controller could not decode the command: it runs an older version that does not
    /// have it (a rolling upgrade in progress). Not retried. Never sent over the wire: only
    /// the node that called the controller makes it.
    #[error("the active controller does not know this request (an older version?): {0}")]
    Unsupported(String),
}

/// A command's result: the image version that holds its effect, and its reply.
pub type CommandResult = Result<(u64, Reply), CommandError>;

/// What [`Quorum::route`] carries to the leader.
enum Routed {
    Command(Command),
    Admin(QuorumAdmin),
}

enum RoutedReply {
    Command(u64, Reply),
    Admin(Result<AdminReply, AdminRefusal>),
}

#[derive(Serialize, Deserialize)]
struct FetchRequest {
    after_version: u64,
}

#[derive(Serialize, Deserialize)]
struct FetchReply {
    leader: Option<NodeId>,
    #[serde(default)]
    leader_addr: Option<String>,
    image: Option<MetadataImage>,
}

/// One voter's replication state as the leader sees it (DescribeQuorum).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VoterState {
    pub node_id: NodeId,
    /// Index of the last entry known to be on that voter (-1: unknown).
    pub log_end_offset: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuorumState {
    pub leader: Option<NodeId>,
    pub term: u64,
    pub high_watermark: i64,
    pub voters: Vec<VoterState>,
    /// Learners (controllers being added), as DescribeQuorum's observers.
    pub learners: Vec<VoterState>,
    /// CONTROLLER listener address of every voter and learner.
    pub endpoints: BTreeMap<NodeId, String>,
}

/// Changes to the quorum itself (KIP-853) and its description; run by the leader.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum QuorumAdmin {
    /// Adds `node_id` (listening at `addr`) as a learner, waits until it has caught up, then
    /// makes it a voter.
    AddVoter {
        node_id: NodeId,
        addr: String,
    },
    RemoveVoter {
        node_id: NodeId,
    },
    Describe,
    /// A restarted controller's word that it listens on `port` at the address this request
    /// comes from ([`crate::network::Redirects`]); sent to every other voter, not routed.
    Announce {
        node_id: NodeId,
        port: u16,
    },
}

/// Why a quorum change was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum AdminRefusal {
    #[error("node {0} is already a voter")]
    DuplicateVoter(NodeId),
    #[error("node {0} is not a voter")]
    VoterNotFound(NodeId),
    #[error("{0}")]
    Invalid(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum AdminReply {
    Done,
    State(QuorumState),
}

/// A quorum admin request's result.
pub type AdminResult = Result<Result<AdminReply, AdminRefusal>, CommandError>;

struct Inner {
    cfg: QuorumConfig,
    raft: Option<Raft>,
    image: watch::Receiver<Arc<MetadataImage>>,
    published: Arc<Published>,
    controller: tokio::sync::Mutex<Controller>,
    /// Per node: the announced address its client connects to (if any), and the client.
    clients: Mutex<BTreeMap<NodeId, ViaClient>>,
    /// Addresses restarted controllers announced (shared with openraft's network).
    redirects: Redirects,
    /// CONTROLLER addresses of the quorum's members: configured voters, then what the
    /// membership log and fetch replies tell.
    addrs: Mutex<BTreeMap<NodeId, String>>,
    /// Leader as last heard (broker-only nodes learn it from fetch replies).
    leader_hint: AtomicU64,
    /// Signalled by every AppendEntries or snapshot a leader sends (see `hold_candidacy`).
    heard_from_leader: tokio::sync::Notify,
    /// When each node last answered this node's Raft RPCs (shared with openraft's network).
    contacts: Contacts,
    /// Metadata writes this node committed as the active controller, and their total time (µs).
    commits: AtomicU64,
    commit_micros: AtomicU64,
}

/// A handle on this node's view of the metadata quorum.
#[derive(Clone)]
pub struct Quorum {
    inner: Arc<Inner>,
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

const NO_LEADER: u64 = u64::MAX;

/// A client of a node, with the announced address it connects to (`None`: the node's name).
type ViaClient = (Option<String>, QuorumClient<Channel>);

impl Quorum {
    /// Starts this node's part of the quorum; its tasks run in `tasks` until `shutdown`.
    pub async fn start(
        cfg: QuorumConfig,
        tasks: &mut JoinSet<()>,
        shutdown: CancellationToken,
    ) -> Result<Quorum, QuorumError> {
        let (tx, rx) = watch::channel(Arc::new(MetadataImage::default()));
        let published = Arc::new(Published { image: tx, bytes_since_snapshot: AtomicU64::new(0) });
        let redirects = Redirects::default();
        let contacts = Contacts::default();
        let (raft, restarted) = if cfg.controller {
            let (raft, restarted) = start_raft(&cfg, published.clone(), redirects.clone(), contacts.clone()).await?;
            (Some(raft), restarted)
        } else {
            (None, false)
        };
        // Bootstrap servers have no known node id: they are kept under negative ids (never a
        // real node's) and asked like any voter until the real ones are known.
        let mut addrs = cfg.voters.clone();
        // This node's own address is left out: asking itself who leads tells it nothing.
        let own = |a: &String| {
            Some(a) == cfg.advertised.as_ref() || cfg.controller_listener.is_some_and(|l| a == &l.to_string())
        };
        for (i, a) in cfg.bootstrap.iter().enumerate().filter(|(_, a)| !own(a)) {
            addrs.insert(-(i as NodeId) - 1, a.clone());
        }
        let inner = Arc::new(Inner {
            controller: tokio::sync::Mutex::new(Controller::new(cfg.session_timeout_ms, cfg.unclean_leader_election)),
            addrs: Mutex::new(addrs),
            cfg,
            raft,
            image: rx,
            published,
            clients: Mutex::new(BTreeMap::new()),
            redirects,
            leader_hint: AtomicU64::new(NO_LEADER),
            heard_from_leader: tokio::sync::Notify::new(),
            contacts,
            commits: AtomicU64::new(0),
            commit_micros: AtomicU64::new(0),
        });
        let q = Quorum { inner };
        if restarted && q.voter_count() > 1 {
            q.hold_candidacy(tasks, shutdown.clone());
        }
        if q.inner.cfg.auto_join && q.inner.raft.is_some() {
            let q2 = q.clone();
            let stop = shutdown.clone();
            tasks.spawn(async move { q2.auto_join(stop).await });
        }
        if let Some(addr) = q.inner.cfg.controller_listener {
            let listener =
                tokio::net::TcpListener::bind(addr).await.map_err(|source| QuorumError::Bind { addr, source })?;
            let service = QuorumServer::new(Service { q: q.clone() }).max_decoding_message_size(256 << 20);
            let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
            let stop = shutdown.clone();
            let mut server = tonic::transport::Server::builder();
            if let Some(tls) = &q.inner.cfg.tls {
                server = server.tls_config(tls.server()).map_err(|e| QuorumError::Tls(e.to_string()))?;
            }
            tasks.spawn(async move {
                let r =
                    server.add_service(service).serve_with_incoming_shutdown(incoming, stop.cancelled_owned()).await;
                if let Err(e) = r {
                    tracing::error!(error = %e, "controller listener failed");
                }
            });
            tracing::info!(%addr, voters = ?q.inner.cfg.voters, "controller listener started");
        }
        if q.inner.raft.is_some() {
            let q2 = q.clone();
            let stop = shutdown.clone();
            tasks.spawn(async move { q2.controller_loop(stop).await });
        }
        // Broker-only nodes, and controllers that are not (or no longer) members of the
        // quorum, follow the image from the voters.
        let q2 = q.clone();
        let stop = shutdown.clone();
        tasks.spawn(async move { q2.follow_loop(stop).await });
        Ok(q)
    }

    pub fn node_id(&self) -> NodeId {
        self.inner.cfg.node_id
    }

    /// Voters in the membership this node holds (0 for a node outside the quorum).
    fn voter_count(&self) -> usize {
        self.inner.raft.as_ref().map_or(0, |r| r.metrics().borrow().membership_config.membership().voter_ids().count())
    }

    fn is_voter(&self) -> bool {
        let me = self.node_id() as u64;
        self.inner
            .raft
            .as_ref()
            .is_some_and(|r| r.metrics().borrow().membership_config.membership().voter_ids().any(|v| v == me))
    }

    /// `controller.quorum.auto.join.enable`: once per start, a controller that is not a voter
    /// asks the active controller to add it (as AddRaftVoter: a learner first, a voter once
    /// caught up). A refusal is final for this run, as in Kafka.
    async fn auto_join(self, stop: CancellationToken) {
        let Some(addr) = self.inner.cfg.advertised.clone() else { return };
        loop {
            if self.is_voter() {
                tracing::info!("auto-join: this controller is a voter");
                return;
            }
            if self.leader().is_some() {
                let req = QuorumAdmin::AddVoter { node_id: self.node_id(), addr: addr.clone() };
                let r = tokio::select! {
                    _ = stop.cancelled() => return,
                    r = self.admin(req, Duration::from_secs(120)) => r,
                };
                match r {
                    Ok(Ok(_)) | Ok(Err(AdminRefusal::DuplicateVoter(_))) => {
                        tracing::info!(%addr, "auto-join: added to the quorum as a voter");
                        return;
                    }
                    Ok(Err(refusal)) => {
                        tracing::warn!(%refusal, "auto-join: the active controller refused to add this node");
                        return;
                    }
                    Err(e) => tracing::warn!(error = %e, "auto-join: retrying"),
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        }
    }

    /// A voter restarting into a quorum of several does not start an election until it has
    /// heard from a leader, for at most eight election timeouts (3 to 15 s): its peers may not
    /// reach it at once (in Kubernetes a restarted pod's new address reaches cluster DNS a few
    /// seconds late), and an election it started would only move leadership away from a
    /// healthy leader. It still answers vote requests, so a quorum that lost its leader elects
    /// one among the others meanwhile.
    fn hold_candidacy(&self, tasks: &mut JoinSet<()>, shutdown: CancellationToken) {
        let Some(raft) = &self.inner.raft else { return };
        let hold = Duration::from_millis(self.inner.cfg.election_timeout_ms.saturating_mul(8).clamp(3_000, 15_000));
        raft.runtime_config().elect(false);
        let q = self.clone();
        tasks.spawn(async move {
            let heard = tokio::select! {
                _ = q.inner.heard_from_leader.notified() => true,
                _ = tokio::time::sleep(hold) => false,
                _ = q.announce_until_heard() => false,
                _ = shutdown.cancelled() => return,
            };
            if let Some(r) = &q.inner.raft {
                r.runtime_config().elect(true);
            }
            tracing::info!(heard_from_leader = heard, "restarted voter may start elections again");
        });
    }

    /// Tells every other voter, once a second, the address this node listens at (as the
    /// connection's source address shows it), so the leader reaches it before cluster DNS has
    /// its new address ([`Redirects`]). Never returns; the caller stops it.
    async fn announce_until_heard(&self) {
        let Some(port) = self.inner.cfg.controller_listener.map(|l| l.port()) else {
            return std::future::pending().await;
        };
        let req = Routed::Admin(QuorumAdmin::Announce { node_id: self.node_id(), port });
        loop {
            let others: Vec<NodeId> =
                self.inner.addrs.lock().keys().copied().filter(|n| *n >= 0 && *n != self.node_id()).collect();
            for n in others {
                if let Err(e) = self.run_remote(n, &req, Duration::from_secs(1), false).await {
                    tracing::debug!(node = n, error = %e, "could not announce this controller's address");
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    pub fn is_controller(&self) -> bool {
        self.inner.raft.is_some()
    }

    /// The latest image this node holds.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.inner.image.borrow().clone()
    }

    pub fn subscribe(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.inner.image.clone()
    }

    /// Waits until this node's image is at `version` or newer; false on timeout.
    pub async fn wait_for_version(&self, version: u64, timeout: Duration) -> bool {
        let mut rx = self.inner.image.clone();
        tokio::time::timeout(timeout, rx.wait_for(|i| i.version >= version)).await.is_ok_and(|r| r.is_ok())
    }

    /// The active controller as this node knows it.
    pub fn leader(&self) -> Option<NodeId> {
        match &self.inner.raft {
            // A member knows from Raft; a controller outside the quorum (an observer waiting
            // to be added) hears of the leader as brokers do, from its fetch replies.
            Some(raft) if self.is_member() => raft.metrics().borrow().current_leader.map(|l| l as NodeId),
            // Never this node itself: outside the membership it cannot lead, whatever a peer
            // that had not heard of its removal yet said (a removed leader that took such a
            // hint would follow the image from itself, and stop moving).
            _ => match self.inner.leader_hint.load(Ordering::Relaxed) {
                NO_LEADER => None,
                l if l == self.node_id() as u64 => None,
                l => Some(l as NodeId),
            },
        }
    }

    /// Whether this node is a voter or learner in the membership it knows.
    fn is_member(&self) -> bool {
        let Some(raft) = &self.inner.raft else { return false };
        let m = raft.metrics().borrow().clone();
        let me = self.node_id() as u64;
        m.membership_config.membership().get_node(&me).is_some()
    }

    /// This node's own Raft view, without asking anyone: its role (`Leader`, `Candidate`,
    /// `Follower`, `Learner`, or `Observer` for a node outside the quorum), the leader it
    /// follows, and its term.
    pub fn local_view(&self) -> (String, Option<NodeId>, u64) {
        match &self.inner.raft {
            Some(raft) if self.is_member() => {
                let m = raft.metrics().borrow().clone();
                (format!("{:?}", m.state), m.current_leader.map(|l| l as NodeId), m.current_term)
            }
            _ => ("Observer".into(), self.leader(), 0),
        }
    }

    /// Metadata writes this node committed as the active controller, and their total time in
    /// microseconds, from the proposal to its commit and apply on this node (Kafka's
    /// commit-latency of the raft metrics, with the apply).
    pub fn commit_stats(&self) -> (u64, u64) {
        (self.inner.commits.load(Ordering::Relaxed), self.inner.commit_micros.load(Ordering::Relaxed))
    }

    /// On the active controller: each other voter's lag, the metadata log entries it does not
    /// have yet (the leader's last index - the voter's matched index, all of them while its
    /// match is unknown). Empty on every other node.
    pub fn follower_lag(&self) -> Vec<(NodeId, u64)> {
        let Some(raft) = &self.inner.raft else { return Vec::new() };
        let m = raft.metrics().borrow().clone();
        if m.state != ServerState::Leader {
            return Vec::new();
        }
        let end = m.last_log_index.map_or(0, |i| i + 1);
        let replication = m.replication.clone().unwrap_or_default();
        m.membership_config
            .membership()
            .voter_ids()
            .filter(|id| Some(*id) != m.current_leader)
            .map(|id| {
                let have = replication.get(&id).copied().flatten().map_or(0, |l| l.index + 1);
                (id as NodeId, end.saturating_sub(have))
            })
            .collect()
    }

    /// The quorum as this node sees it (complete on the leader).
    pub fn state(&self) -> Option<QuorumState> {
        let raft = self.inner.raft.as_ref()?;
        let m = raft.metrics().borrow().clone();
        let membership = m.membership_config.membership();
        let replication = m.replication.clone().unwrap_or_default();
        let voters = membership
            .voter_ids()
            .map(|id| VoterState {
                node_id: id as NodeId,
                log_end_offset: if Some(id) == m.current_leader {
                    m.last_log_index.map_or(-1, |i| i as i64)
                } else {
                    replication.get(&id).and_then(|l| l.map(|l| l.index as i64)).unwrap_or(-1)
                },
            })
            .collect();
        let learners = membership
            .learner_ids()
            .map(|id| VoterState {
                node_id: id as NodeId,
                log_end_offset: replication.get(&id).and_then(|l| l.map(|l| l.index as i64)).unwrap_or(-1),
            })
            .collect();
        let endpoints = membership.nodes().map(|(id, n)| (*id as NodeId, n.addr.clone())).collect();
        Some(QuorumState {
            leader: m.current_leader.map(|l| l as NodeId),
            term: m.current_term,
            high_watermark: m.last_applied.map_or(-1, |l| l.index as i64),
            voters,
            learners,
            endpoints,
        })
    }

    /// Runs `cmd` on the active controller, wherever it is; retries while there is no leader
    /// or it moves, until `timeout`.
    pub async fn execute(&self, cmd: Command, timeout: Duration) -> CommandResult {
        match self.route(Routed::Command(cmd), timeout).await? {
            RoutedReply::Command(version, reply) => Ok((version, reply)),
            RoutedReply::Admin(_) => Err(CommandError::Unavailable("mismatched reply".into())),
        }
    }

    /// Runs a quorum admin request on the leader, wherever it is.
    pub async fn admin(&self, req: QuorumAdmin, timeout: Duration) -> AdminResult {
        match self.route(Routed::Admin(req), timeout).await? {
            RoutedReply::Admin(r) => Ok(r),
            RoutedReply::Command(..) => Err(CommandError::Unavailable("mismatched reply".into())),
        }
    }

    /// The one routing loop: to the leader as known, else any voter; on NOT_CONTROLLER follow
    /// the hint, on an unreachable node try another, until `timeout`.
    async fn route(&self, req: Routed, timeout: Duration) -> Result<RoutedReply, CommandError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut last;
        let mut tried = None;
        // Set after the first failed attempt: it may have been committed all the same.
        let mut retry = false;
        loop {
            let target = self.leader().filter(|l| Some(*l) != tried).or_else(|| self.any_voter(&tried));
            let result = match target {
                Some(t) if t == self.node_id() && self.is_controller() => {
                    // Bounded like a remote attempt: a node that restarts believing it still
                    // leads (its stored vote) must not hold the caller while it finds out.
                    let bound = self.attempt_timeout(&req, timeout).max(Duration::from_secs(5));
                    match tokio::time::timeout(bound, self.run_local(&req, retry)).await {
                        Ok(r) => r,
                        Err(_) => Err(CommandError::Unavailable("this controller did not commit in time".into())),
                    }
                }
                Some(t) => self.run_remote(t, &req, timeout, retry).await,
                None => Err(CommandError::Unavailable("no controller is known".into())),
            };
            if let Err(e) = &result {
                tracing::debug!(target_node = ?target, error = %e, "quorum request attempt failed");
            }
            match result {
                Err(CommandError::NotController { leader, leader_addr, .. }) => {
                    if let Some(l) = leader {
                        self.inner.leader_hint.store(l as u64, Ordering::Relaxed);
                        if let Some(a) = leader_addr {
                            self.inner.addrs.lock().entry(l).or_insert(a);
                        }
                    }
                    tried = target;
                    retry = true;
                    last = CommandError::Unavailable("the active controller moved".into());
                }
                Err(CommandError::Unavailable(e)) => {
                    tried = target;
                    retry = true;
                    last = CommandError::Unavailable(e);
                }
                other => return other,
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(last);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// How long one attempt at one controller may take. Commands are bounded per attempt, so a
    /// caller stuck on a leader that was cut off moves on to the new one well within a broker
    /// session (heartbeats above all). Admin requests may take long (a new voter catches up
    /// first).
    fn attempt_timeout(&self, req: &Routed, timeout: Duration) -> Duration {
        match req {
            Routed::Command(Command::Heartbeat { .. }) => {
                Duration::from_millis((self.inner.cfg.session_timeout_ms / 3).max(200))
            }
            Routed::Command(_) => Duration::from_secs(5),
            Routed::Admin(_) => timeout,
        }
    }

    async fn run_local(&self, req: &Routed, retry: bool) -> Result<RoutedReply, CommandError> {
        match req {
            Routed::Command(c) => self.execute_local(c, retry).await.map(|(v, r)| RoutedReply::Command(v, r)),
            Routed::Admin(a) => self.admin_local(a).await.map(RoutedReply::Admin),
        }
    }

    async fn run_remote(
        &self,
        node: NodeId,
        req: &Routed,
        timeout: Duration,
        retry: bool,
    ) -> Result<RoutedReply, CommandError> {
        let Some(mut client) = self.client(node) else {
            return Err(CommandError::Unavailable(format!("no address for controller {node}")));
        };
        let unavailable = |e: &dyn std::fmt::Display| CommandError::Unavailable(format!("controller {node}: {e}"));
        let attempt = self.attempt_timeout(req, timeout);
        match req {
            Routed::Command(c) => {
                let mut r = Request::new(encode(c));
                r.set_timeout(attempt);
                if node >= 0 {
                    set_target(&mut r, node as u64);
                }
                if retry {
                    r.metadata_mut().insert(RETRY_HEADER, tonic::metadata::MetadataValue::from_static("1"));
                }
                let reply = client.command(r).await.map_err(|s| remote_error(node, &s))?;
                let (v, r) = decode::<CommandResult>(reply.get_ref()).map_err(|e| unavailable(&e))??;
                Ok(RoutedReply::Command(v, r))
            }
            Routed::Admin(a) => {
                let mut r = Request::new(encode(a));
                r.set_timeout(attempt);
                if node >= 0 {
                    set_target(&mut r, node as u64);
                }
                let reply = client.quorum_admin(r).await.map_err(|s| unavailable(&s.message()))?;
                Ok(RoutedReply::Admin(decode::<AdminResult>(reply.get_ref()).map_err(|e| unavailable(&e))??))
            }
        }
    }

    async fn admin_local(&self, req: &QuorumAdmin) -> AdminResult {
        let Some(raft) = &self.inner.raft else { return Err(self.not_controller()) };
        if !leader_ready(raft).await {
            return Err(self.not_controller());
        }
        let state = self.state().ok_or_else(|| self.not_controller())?;
        let is_voter = |id: NodeId| state.voters.iter().any(|v| v.node_id == id);
        let unavailable = |e: &dyn std::fmt::Display| CommandError::Unavailable(e.to_string());
        match req {
            QuorumAdmin::Describe => Ok(Ok(AdminReply::State(state))),
            // Answered by the receiving node itself (`quorum_admin`), never routed here.
            QuorumAdmin::Announce { .. } => Ok(Ok(AdminReply::Done)),
            QuorumAdmin::AddVoter { node_id, addr } => {
                if is_voter(*node_id) {
                    return Ok(Err(AdminRefusal::DuplicateVoter(*node_id)));
                }
                tracing::info!(node = node_id, %addr, "adding a voter: as a learner first, until it has caught up");
                raft.add_learner(*node_id as u64, BasicNode { addr: addr.clone() }, true)
                    .await
                    .map_err(|e| unavailable(&e))?;
                let ids: std::collections::BTreeSet<u64> = [*node_id as u64].into();
                raft.change_membership(openraft::ChangeMembers::AddVoterIds(ids), false)
                    .await
                    .map_err(|e| unavailable(&e))?;
                tracing::info!(node = node_id, "voter added");
                Ok(Ok(AdminReply::Done))
            }
            QuorumAdmin::RemoveVoter { node_id } => {
                if !is_voter(*node_id) {
                    return Ok(Err(AdminRefusal::VoterNotFound(*node_id)));
                }
                if state.voters.len() == 1 {
                    return Ok(Err(AdminRefusal::Invalid("cannot remove the last voter".into())));
                }
                // The removed voter stays a learner (an observer, as in KIP-853): while it runs
                // it keeps receiving the metadata log, so its broker side stays current. The
                // active controller removing itself leaves the membership entirely instead:
                // openraft keeps a leader that is still a learner leading, but one outside the
                // membership steps down once the change is committed and applied, and the
                // remaining voters elect a leader among themselves (Kafka's removed leader
                // resigns too). It then follows the image from the voters like a broker.
                let retain = Some(*node_id) != state.leader;
                let ids: std::collections::BTreeSet<u64> = [*node_id as u64].into();
                raft.change_membership(openraft::ChangeMembers::RemoveVoters(ids), retain)
                    .await
                    .map_err(|e| unavailable(&e))?;
                tracing::info!(node = node_id, "voter removed");
                Ok(Ok(AdminReply::Done))
            }
        }
    }

    /// A controller to try, other than `not` (and other than this node, unless it is a member).
    fn any_voter(&self, not: &Option<NodeId>) -> Option<NodeId> {
        let me = (!self.is_member()).then(|| self.node_id());
        let voters: Vec<NodeId> =
            self.inner.addrs.lock().keys().copied().filter(|v| Some(*v) != *not && Some(*v) != me).collect();
        if voters.is_empty() {
            return None;
        }
        Some(voters[(now_ms() as usize / 100) % voters.len()])
    }

    fn client(&self, node: NodeId) -> Option<QuorumClient<Channel>> {
        let via = if node >= 0 { self.inner.redirects.get(node as u64) } else { None };
        let mut clients = self.inner.clients.lock();
        if let Some((v, c)) = clients.get(&node)
            && *v == via
        {
            return Some(c.clone());
        }
        let addr = self.inner.addrs.lock().get(&node)?.clone();
        let channel = channel_via(&addr, via.as_deref(), self.inner.cfg.local_ip, self.inner.cfg.tls.as_ref()).ok()?;
        let c = QuorumClient::new(channel).max_decoding_message_size(256 << 20);
        clients.insert(node, (via, c.clone()));
        Some(c)
    }

    fn not_controller(&self) -> CommandError {
        let leader = self.leader();
        let leader_addr = leader.and_then(|l| self.inner.addrs.lock().get(&l).cloned());
        CommandError::NotController { node: self.node_id(), leader, leader_addr }
    }

    /// Decides and writes `cmd` here, if this node is the active controller. One command at a
    /// time, each against the image with every record committed before it.
    ///
    /// `retry`: an earlier attempt of this command failed without an answer and may have been
    /// committed; a refusal that only says so is answered as success (`done_before`).
    async fn execute_local(&self, cmd: &Command, retry: bool) -> CommandResult {
        let Some(raft) = &self.inner.raft else { return Err(self.not_controller()) };
        if !leader_ready(raft).await {
            return Err(self.not_controller());
        }
        // A heartbeat is the broker's proof that it is still part of the cluster: answer it
        // only with a majority's confirmation that this node still leads, so a leader cut off
        // from the quorum cannot keep its own broker believing it is unfenced. (Writes need no
        // such check: they commit through the quorum or not at all.) A barrier, too: a deposed
        // leader that does not know it yet would answer with a version from before the new
        // leader's commits.
        if matches!(cmd, Command::Heartbeat { .. } | Command::Barrier) && raft.ensure_linearizable().await.is_err() {
            return Err(self.not_controller());
        }
        let mut controller = self.inner.controller.lock().await;
        let image = self.image();
        let decision = match controller.decide(&image, cmd, now_ms()) {
            Ok(d) => d,
            Err(r) if retry && done_before(&image, cmd, &r) => {
                tracing::info!(command = ?cmd, "a retried command had taken effect already");
                return Ok((image.version, Reply::Done));
            }
            Err(r) => return Err(CommandError::Refused(r)),
        };
        if decision.records.is_empty() {
            return Ok((image.version, decision.reply));
        }
        let version = self.write(raft, decision.records).await?;
        Ok((version, decision.reply))
    }

    async fn write(&self, raft: &Raft, records: Vec<crate::records::Record>) -> Result<u64, CommandError> {
        let started = std::time::Instant::now();
        match raft.client_write(RecordBatch { records }).await {
            Ok(r) => {
                self.inner.commits.fetch_add(1, Ordering::Relaxed);
                let took = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
                self.inner.commit_micros.fetch_add(took, Ordering::Relaxed);
                Ok(r.data.version)
            }
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_))) => Err(self.not_controller()),
            Err(e) => Err(CommandError::Unavailable(e.to_string())),
        }
    }

    /// The active controller's timers: broker sessions; every controller's snapshots.
    async fn controller_loop(self, stop: CancellationToken) {
        let Some(raft) = self.inner.raft.clone() else { return };
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut was_leader = false;
        // Since when this node leads: a learner it never heard from is silent since then.
        let mut leading_since = std::time::Instant::now();
        let mut last_expiry = None::<std::time::Instant>;
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => {}
            }
            let leader = {
                let m = raft.metrics().borrow().clone();
                let mut addrs = self.inner.addrs.lock();
                for (id, n) in m.membership_config.membership().nodes() {
                    addrs.insert(*id as NodeId, n.addr.clone());
                }
                m.state == ServerState::Leader
            };
            if leader {
                let mut controller = self.inner.controller.lock().await;
                if !was_leader {
                    leading_since = std::time::Instant::now();
                    tracing::info!(node = self.node_id(), "became the active controller");
                    *controller =
                        Controller::new(self.inner.cfg.session_timeout_ms, self.inner.cfg.unclean_leader_election);
                }
                let records = controller.expire_sessions(&self.image(), now_ms());
                if !records.is_empty() {
                    let fenced: Vec<_> = records
                        .iter()
                        .filter_map(|r| match r {
                            crate::records::Record::FenceBroker { node_id, .. } => Some(*node_id),
                            _ => None,
                        })
                        .collect();
                    tracing::warn!(brokers = ?fenced, "fencing brokers whose session expired");
                    // A leader cut off from its quorum never commits this: shutting down must
                    // not wait for it.
                    let written = tokio::select! {
                        _ = stop.cancelled() => break,
                        r = self.write(&raft, records) => r,
                    };
                    if let Err(e) = written {
                        tracing::warn!(error = %e, "could not fence brokers");
                    }
                }
            }
            was_leader = leader;
            // Silent learners leave, at most one attempt every ten seconds (a membership
            // change in flight, such as an AddRaftVoter, refuses another meanwhile).
            if leader && last_expiry.is_none_or(|t: std::time::Instant| t.elapsed() >= Duration::from_secs(10)) {
                let silent = self.silent_learners(leading_since);
                if !silent.is_empty() {
                    last_expiry = Some(std::time::Instant::now());
                    tracing::warn!(nodes = ?silent, timeout = ?self.inner.cfg.observer_session_timeout,
                        "learners that stopped answering leave the quorum's membership");
                    let change = raft.change_membership(openraft::ChangeMembers::RemoveNodes(silent), false);
                    let r = tokio::select! {
                        _ = stop.cancelled() => break,
                        r = change => r,
                    };
                    if let Err(e) = r {
                        tracing::info!(error = %e, "could not remove silent learners yet");
                    }
                }
            }
            if self.inner.published.bytes_since_snapshot.load(Ordering::Relaxed) >= self.inner.cfg.snapshot_bytes {
                self.inner.published.bytes_since_snapshot.store(0, Ordering::Relaxed);
                let _ = raft.trigger().snapshot().await;
            }
        }
        let _ = raft.shutdown().await;
    }

    /// Learners (not voters) of the membership that have not answered this leader's RPCs for
    /// the observer session timeout, counted from `leading_since` at the latest.
    fn silent_learners(&self, leading_since: std::time::Instant) -> std::collections::BTreeSet<u64> {
        let Some(raft) = &self.inner.raft else { return Default::default() };
        let m = raft.metrics().borrow().clone();
        let membership = m.membership_config.membership();
        let timeout = self.inner.cfg.observer_session_timeout;
        membership
            .learner_ids()
            .filter(|id| {
                let heard = self.inner.contacts.last(*id).map_or(leading_since, |t| t.max(leading_since));
                heard.elapsed() >= timeout
            })
            .collect()
    }

    /// Broker-only nodes: follow the committed image by long-polling controllers.
    async fn follow_loop(self, stop: CancellationToken) {
        let mut tried = None;
        loop {
            if self.is_member() {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(500)) => continue,
                }
            }
            // Another controller than the one that just failed, if there is one; the same one
            // again if it is the only one (a single-voter quorum that is not up yet).
            let next = self.leader().filter(|l| Some(*l) != tried).or_else(|| self.any_voter(&tried));
            let Some(node) = next.or_else(|| self.any_voter(&None)) else {
                if self.is_controller() {
                    // A controller with no other voter to follow: its own quorum is forming (a
                    // single voter is a member once initialised), so there is nothing to follow
                    // yet and nothing wrong.
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_millis(500)) => continue,
                    }
                }
                tracing::error!(
                    "no controller known: set controller.quorum.voters or controller.quorum.bootstrap.servers"
                );
                return;
            };
            let after = self.image().version;
            let fetched = async {
                let mut client = self.client(node)?;
                let mut req = Request::new(encode(&FetchRequest { after_version: after }));
                req.set_timeout(Duration::from_secs(10));
                let reply = client.fetch(req).await.ok()?;
                decode::<FetchReply>(reply.get_ref()).ok()
            };
            let reply = tokio::select! {
                _ = stop.cancelled() => return,
                r = fetched => r,
            };
            match reply {
                Some(r) => {
                    tried = None;
                    self.inner.leader_hint.store(r.leader.map_or(NO_LEADER, |l| l as u64), Ordering::Relaxed);
                    if let (Some(l), Some(addr)) = (r.leader, r.leader_addr) {
                        self.inner.addrs.lock().entry(l).or_insert(addr);
                    }
                    if let Some(mut image) = r.image
                        && image.version > after
                    {
                        image.reindex();
                        let image = Arc::new(image);
                        self.inner.published.image.send_if_modified(|cur| {
                            let newer = image.version > cur.version;
                            if newer {
                                *cur = image.clone();
                            }
                            newer
                        });
                    }
                }
                None => {
                    tried = Some(node);
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                    }
                }
            }
        }
    }
}

/// gRPC metadata on a command that is a retry of an attempt that failed without an answer.
const RETRY_HEADER: &str = "oxbow-retry";

/// Whether this node leads and its state machine has applied an entry of its own term (the
/// blank entry a new leader commits first), so its image holds everything committed before.
/// Waits briefly for a new leader to get there. Cheap: no round trip to the quorum (a deposed
/// leader that does not know it yet decides on a stale image, but cannot commit the result).
async fn leader_ready(raft: &Raft) -> bool {
    let mut rx = raft.metrics();
    let ready = |m: &openraft::RaftMetrics<u64, BasicNode>| {
        m.state == ServerState::Leader && m.last_applied.is_some_and(|l| l.leader_id.term == m.current_term)
    };
    if ready(&rx.borrow()) {
        return true;
    }
    let wait = rx.wait_for(|m| ready(m) || m.state != ServerState::Leader);
    match tokio::time::timeout(Duration::from_secs(3), wait).await {
        Ok(Ok(m)) => ready(&m),
        _ => false,
    }
}

/// Where `oxbow-broker format` leaves a dynamic quorum's initial voters, in `metadata.log.dir`.
pub const INITIAL_VOTERS_FILE: &str = "__cluster_metadata-initial-voters.json";

/// Records the initial voters of a dynamic quorum (`format --standalone` or
/// `--initial-controllers`); the first start of each of them proposes this membership.
pub fn write_initial_voters(dir: &std::path::Path, voters: &BTreeMap<NodeId, String>) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(INITIAL_VOTERS_FILE);
    let tmp = dir.join(format!("{INITIAL_VOTERS_FILE}.tmp"));
    let text = serde_json::to_vec_pretty(voters).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, text)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    std::fs::File::open(dir)?.sync_all()
}

fn read_initial_voters(dir: &std::path::Path) -> Result<Option<BTreeMap<NodeId, String>>, QuorumError> {
    let path = dir.join(INITIAL_VOTERS_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| QuorumError::Storage(format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(QuorumError::Storage(format!("{}: {e}", path.display()))),
    }
}

/// Starts the Raft node; also says whether it was a quorum member before (a restart).
async fn start_raft(
    cfg: &QuorumConfig,
    published: Arc<Published>,
    redirects: Redirects,
    contacts: Contacts,
) -> Result<(Raft, bool), QuorumError> {
    let path = cfg.dir.join("__cluster_metadata-raft");
    std::fs::create_dir_all(&path)
        .map_err(|e| QuorumError::Storage(format!("cannot create {}: {e}", path.display())))?;
    let db = open_db(&path).map_err(|source| QuorumError::Store { path: path.clone(), source })?;
    if crate::raft::resign_stored_leadership(&db, cfg.node_id as u64)
        .map_err(|e| QuorumError::Storage(e.to_string()))?
    {
        tracing::info!(
            "this node led the metadata quorum when it stopped: it resigned, the other voters elect a leader"
        );
    }
    let log = LogStore::new(db.clone());
    let sm = StateMachine::open(db, published).map_err(|e| QuorumError::Storage(e.to_string()))?;
    let t = cfg.election_timeout_ms.max(100);
    let config = openraft::Config {
        cluster_name: "oxbow".into(),
        // openraft waits a leader lease (the max) plus a random timeout in [min, max) before
        // it elects: with these, a follower starts an election 1.5t to 2t after it last heard
        // from the leader.
        heartbeat_interval: (t / 10).max(20),
        election_timeout_min: t / 2,
        election_timeout_max: t,
        install_snapshot_timeout: 10_000,
        // Snapshots are triggered by bytes of records (controller_loop), as Kafka's
        // metadata.log.max.record.bytes.between.snapshots.
        snapshot_policy: SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: 100,
        ..Default::default()
    };
    let config = Arc::new(config.validate().map_err(|e| QuorumError::Raft(e.to_string()))?);
    let id = cfg.node_id as u64;
    let network = NetworkFactory { local_ip: cfg.local_ip, tls: cfg.tls.clone(), redirects, contacts };
    let raft = Raft::new(id, config, network, log, sm).await.map_err(|e| QuorumError::Raft(e.to_string()))?;
    let initialized = raft.is_initialized().await.map_err(|e| QuorumError::Raft(e.to_string()))?;
    // Static voters, or the initial voters `oxbow-broker format` wrote for a dynamic quorum.
    let initial = if cfg.voters.is_empty() { read_initial_voters(&cfg.dir)? } else { Some(cfg.voters.clone()) };
    if !initialized && let Some(voters) = initial.filter(|v| v.contains_key(&cfg.node_id)) {
        // Every initial voter proposes the same membership; openraft accepts it once (the same
        // log id everywhere) and the others learn it by replication.
        let members: BTreeMap<u64, BasicNode> =
            voters.iter().map(|(id, addr)| (*id as u64, BasicNode { addr: addr.clone() })).collect();
        if let Err(e) = raft.initialize(members).await {
            tracing::debug!(error = %e, "quorum already initialized");
        }
    }
    Ok((raft, initialized))
}

struct Service {
    q: Quorum,
}

/// A controller's refusal of a command call: one it could not decode (`bad_request`) is
/// [`CommandError::Unsupported`], anything else (a timeout, a lost connection) is worth trying
/// again elsewhere.
fn remote_error(node: NodeId, s: &Status) -> CommandError {
    match s.code() {
        tonic::Code::InvalidArgument => CommandError::Unsupported(format!("controller {node}: {}", s.message())),
        _ => CommandError::Unavailable(format!("controller {node}: {}", s.message())),
    }
}

fn bad_request(e: serde_json::Error) -> Status {
    Status::invalid_argument(format!("cannot decode the request: {e}"))
}

impl Service {
    fn raft(&self) -> Result<&Raft, Status> {
        self.q.inner.raft.as_ref().ok_or_else(|| Status::unavailable("not a controller"))
    }
}

#[tonic::async_trait]
impl QuorumRpc for Service {
    async fn append_entries(&self, req: Request<Payload>) -> Result<Response<Payload>, Status> {
        check_target(&req, self.q.node_id() as u64)?;
        let rpc = decode(req.get_ref()).map_err(bad_request)?;
        self.q.inner.heard_from_leader.notify_one();
        Ok(Response::new(encode(&self.raft()?.append_entries(rpc).await)))
    }

    async fn vote(&self, req: Request<Payload>) -> Result<Response<Payload>, Status> {
        check_target(&req, self.q.node_id() as u64)?;
        let rpc = decode(req.get_ref()).map_err(bad_request)?;
        Ok(Response::new(encode(&self.raft()?.vote(rpc).await)))
    }

    async fn install_snapshot(&self, req: Request<Payload>) -> Result<Response<Payload>, Status> {
        check_target(&req, self.q.node_id() as u64)?;
        let rpc: openraft::raft::InstallSnapshotRequest<TypeConfig> = decode(req.get_ref()).map_err(bad_request)?;
        self.q.inner.heard_from_leader.notify_one();
        Ok(Response::new(encode(&self.raft()?.install_snapshot(rpc).await)))
    }

    async fn command(&self, req: Request<Payload>) -> Result<Response<Payload>, Status> {
        check_target(&req, self.q.node_id() as u64)?;
        let cmd: Command = decode(req.get_ref()).map_err(bad_request)?;
        let retry = req.metadata().contains_key(RETRY_HEADER);
        let result = self.q.execute_local(&cmd, retry).await;
        Ok(Response::new(encode(&result)))
    }

    async fn fetch(&self, req: Request<Payload>) -> Result<Response<Payload>, Status> {
        check_target(&req, self.q.node_id() as u64)?;
        let f: FetchRequest = decode(req.get_ref()).map_err(bad_request)?;
        let mut rx = self.q.subscribe();
        let _ = tokio::time::timeout(Duration::from_secs(5), rx.wait_for(|i| i.version > f.after_version)).await;
        let image = self.q.image();
        let image = (image.version > f.after_version).then(|| (*image).clone());
        let leader = self.q.leader();
        let leader_addr = leader.and_then(|l| self.q.inner.addrs.lock().get(&l).cloned());
        Ok(Response::new(encode(&FetchReply { leader, leader_addr, image })))
    }

    async fn quorum_admin(&self, req: Request<Payload>) -> Result<Response<Payload>, Status> {
        check_target(&req, self.q.node_id() as u64)?;
        let a: QuorumAdmin = decode(req.get_ref()).map_err(bad_request)?;
        if let QuorumAdmin::Announce { node_id, port } = a {
            // Only another voter this node knows, from an address that can be it.
            let known = node_id >= 0 && node_id != self.q.node_id() && self.q.inner.addrs.lock().contains_key(&node_id);
            if !known {
                return Err(Status::invalid_argument(format!("node {node_id} is not another voter this node knows")));
            }
            let Some(peer) = req.remote_addr().filter(|p| !p.ip().is_loopback() && !p.ip().is_unspecified()) else {
                return Err(Status::failed_precondition("the announcing node's address is unknown or local"));
            };
            let addr = SocketAddr::new(peer.ip(), port).to_string();
            tracing::info!(node = node_id, %addr, "a restarted controller announced its address");
            self.q.inner.redirects.set(node_id as u64, addr);
            let done: AdminResult = Ok(Ok(AdminReply::Done));
            return Ok(Response::new(encode(&done)));
        }
        Ok(Response::new(encode(&self.q.admin_local(&a).await)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::Refusal;
    use crate::records::Configs;
    use uuid::Uuid;

    /// Three controllers in this process, on loopback ports of their own.
    async fn three(
        dir: &std::path::Path,
        tasks: &mut JoinSet<()>,
        stop: &CancellationToken,
    ) -> anyhow::Result<Vec<Quorum>> {
        Ok(three_with(dir, tasks, stop, OBSERVER_SESSION_TIMEOUT).await?.into_iter().map(|(q, _)| q).collect())
    }

    /// [`three`], with an observer session timeout, and a token that stops each node alone.
    /// The ports are found free and then bound by each node, so another process (or test) can
    /// take one in between: the three start again on new ports, in a new directory, when a
    /// listener cannot be bound.
    async fn three_with(
        dir: &std::path::Path,
        tasks: &mut JoinSet<()>,
        stop: &CancellationToken,
        observer_session_timeout: Duration,
    ) -> anyhow::Result<Vec<(Quorum, CancellationToken)>> {
        let mut attempt = 0;
        loop {
            let tried = dir.join(format!("attempt-{attempt}"));
            match start_three(&tried, tasks, stop, observer_session_timeout).await {
                Err(QuorumError::Bind { addr, source }) if attempt < 4 => {
                    eprintln!("port {addr} was taken before the node bound it ({source}); starting the three again");
                    attempt += 1;
                }
                r => return Ok(r?),
            }
        }
    }

    async fn start_three(
        dir: &std::path::Path,
        tasks: &mut JoinSet<()>,
        stop: &CancellationToken,
        observer_session_timeout: Duration,
    ) -> Result<Vec<(Quorum, CancellationToken)>, QuorumError> {
        let mut listeners = BTreeMap::new();
        for id in 1..=3 {
            let local = "127.0.0.1:0".parse().map_err(|e| QuorumError::Storage(format!("{e}")))?;
            let bind = |source| QuorumError::Bind { addr: local, source };
            let l = std::net::TcpListener::bind(local).map_err(bind)?;
            listeners.insert(id as NodeId, l.local_addr().map_err(bind)?);
        }
        let voters: BTreeMap<NodeId, String> = listeners.iter().map(|(id, a)| (*id, a.to_string())).collect();
        let mut nodes = Vec::new();
        for (id, addr) in &listeners {
            let cfg = QuorumConfig {
                node_id: *id,
                voters: voters.clone(),
                bootstrap: Vec::new(),
                auto_join: false,
                advertised: Some(addr.to_string()),
                controller: true,
                controller_listener: Some(*addr),
                local_ip: None,
                dir: dir.join(format!("node-{id}")),
                session_timeout_ms: 60_000,
                unclean_leader_election: false,
                snapshot_bytes: 1 << 30,
                election_timeout_ms: 1_000,
                tls: None,
                observer_session_timeout,
            };
            let own = stop.child_token();
            match Quorum::start(cfg, tasks, own.clone()).await {
                Ok(q) => nodes.push((q, own)),
                Err(e) => {
                    // The nodes started so far stop: the caller may start three others.
                    own.cancel();
                    nodes.iter().for_each(|(_, t)| t.cancel());
                    return Err(e);
                }
            }
        }
        Ok(nodes)
    }

    async fn leader_of(nodes: &[Quorum]) -> anyhow::Result<NodeId> {
        for _ in 0..300 {
            if let Some(n) = nodes
                .iter()
                .find(|n| n.inner.raft.as_ref().is_some_and(|r| r.metrics().borrow().state == ServerState::Leader))
            {
                return Ok(n.node_id());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::bail!("no leader elected in 30 s")
    }

    /// Three controllers with an elected leader, for tests that talk to it from a follower.
    struct Elected {
        _dir: tempfile::TempDir,
        tasks: JoinSet<()>,
        stop: CancellationToken,
        nodes: Vec<Quorum>,
        leader: NodeId,
    }

    impl Elected {
        async fn start() -> anyhow::Result<Self> {
            let dir = tempfile::tempdir()?;
            let mut tasks = JoinSet::new();
            let stop = CancellationToken::new();
            let nodes = three(dir.path(), &mut tasks, &stop).await?;
            let leader = leader_of(&nodes).await?;
            Ok(Self { _dir: dir, tasks, stop, nodes, leader })
        }

        fn follower(&self) -> anyhow::Result<&Quorum> {
            self.nodes.iter().find(|n| n.node_id() != self.leader).ok_or_else(|| anyhow::anyhow!("no follower"))
        }

        async fn stop(mut self) {
            self.stop.cancel();
            while self.tasks.join_next().await.is_some() {}
        }
    }

    /// A command whose first answer was lost and that is sent again: a creation finds the
    /// topic its own id made, a deletion finds the topic gone, and both answer success; the
    /// same refusal to a first attempt stays a refusal. Sent from a follower, so the retry mark
    /// crosses the wire.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_retry_of_a_committed_command_succeeds() -> anyhow::Result<()> {
        let elected = Elected::start().await?;
        let (nodes, leader, follower) = (&elected.nodes, elected.leader, elected.follower()?);
        let send = |cmd: Command, retry: bool| async move {
            match follower.run_remote(leader, &Routed::Command(cmd), Duration::from_secs(10), retry).await {
                Ok(RoutedReply::Command(_, reply)) => Ok(reply),
                Ok(RoutedReply::Admin(_)) => Err(CommandError::Unavailable("mismatched reply".into())),
                Err(e) => Err(e),
            }
        };
        let reg =
            Command::RegisterBroker { node_id: 1, incarnation_id: Uuid::new_v4(), listeners: Vec::new(), rack: None };
        send(reg, false).await?;
        let leader_node = nodes.iter().find(|n| n.node_id() == leader).ok_or_else(|| anyhow::anyhow!("no leader"))?;
        let epoch =
            leader_node.image().brokers.get(&1).map(|b| b.epoch).ok_or_else(|| anyhow::anyhow!("not registered"))?;
        // The first heartbeat may come before the new leader can confirm its lead (as a
        // broker's would, it tries again).
        let mut beats = 0;
        while let Err(e) = send(Command::Heartbeat { node_id: 1, epoch, shutting_down: false }, false).await {
            beats += 1;
            anyhow::ensure!(beats < 100, "heartbeat: {e}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }

        let create = Command::CreateTopic {
            name: "t".into(),
            partitions: 2,
            replication_factor: 1,
            assignments: None,
            configs: Configs::new(),
            topic_id: Some(crate::controller::random_topic_id()),
            validate_only: false,
        };
        let first = send(create.clone(), false).await?;
        let Reply::TopicCreated { id, .. } = &first else { anyhow::bail!("{first:?}") };
        assert_eq!(send(create.clone(), true).await?, first);
        // Not a retry of the same request (another id): refused as ever.
        let mut other = create.clone();
        if let Command::CreateTopic { topic_id, .. } = &mut other {
            *topic_id = Some(crate::controller::random_topic_id());
        }
        assert!(matches!(send(other, true).await, Err(CommandError::Refused(Refusal::TopicAlreadyExists(_)))));

        let delete = Command::DeleteTopic { name: "t".into() };
        assert_eq!(send(delete.clone(), false).await?, Reply::Done);
        assert!(matches!(send(delete.clone(), false).await, Err(CommandError::Refused(Refusal::UnknownTopic(_)))));
        assert_eq!(send(delete, true).await?, Reply::Done);
        let image = leader_node.image();
        assert!(image.topic("t").is_none() && image.topic_by_id(*id).is_none());

        elected.stop().await;
        Ok(())
    }

    /// A command the controller cannot decode (one added in a newer version, sent to a
    /// controller not yet upgraded) is refused at once as unsupported, not retried as an
    /// unreachable controller would be; the barrier itself is known and answered.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_command_the_controller_cannot_decode_is_unsupported() -> anyhow::Result<()> {
        let elected = Elected::start().await?;
        let (leader, follower) = (elected.leader, elected.follower()?);
        let mut client = follower.client(leader).ok_or_else(|| anyhow::anyhow!("no client"))?;
        let mut r = Request::new(encode(&serde_json::json!({"CommandOfANewerVersion": {"x": 1}})));
        set_target(&mut r, leader as u64);
        let status = client.command(r).await.err().ok_or_else(|| anyhow::anyhow!("an unknown command was decoded"))?;
        let e = remote_error(leader, &status);
        assert!(matches!(e, CommandError::Unsupported(_)), "{e:?}");
        let unreachable = remote_error(leader, &Status::unavailable("connection refused"));
        assert!(matches!(unreachable, CommandError::Unavailable(_)), "{unreachable:?}");
        // The barrier, through the routing loop from a follower: answered with no records.
        let mut tries = 0;
        loop {
            match follower.execute(Command::Barrier, Duration::from_secs(10)).await {
                Ok((_, reply)) => {
                    assert_eq!(reply, Reply::Done);
                    break;
                }
                // A leader that has not yet confirmed its lead answers after it has.
                Err(e) if tries < 50 => {
                    tries += 1;
                    eprintln!("barrier: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => anyhow::bail!("barrier: {e}"),
            }
        }
        elected.stop().await;
        Ok(())
    }

    /// A voter removed with RemoveRaftVoter stays a learner (an observer) while it answers,
    /// and leaves the membership once it has been silent for the observer session timeout:
    /// a controller removed and then shut down for good is not replicated to forever.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_removed_voter_that_stops_answering_leaves_the_membership() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let mut tasks = JoinSet::new();
        let stop = CancellationToken::new();
        let timeout = Duration::from_secs(2);
        let nodes = three_with(dir.path(), &mut tasks, &stop, timeout).await?;
        let quorums: Vec<Quorum> = nodes.iter().map(|(q, _)| q.clone()).collect();
        let leader = leader_of(&quorums).await?;
        let leader_node = quorums.iter().find(|n| n.node_id() == leader).ok_or_else(|| anyhow::anyhow!("no leader"))?;
        let (removed, removed_stop) =
            nodes.iter().find(|(n, _)| n.node_id() != leader).ok_or_else(|| anyhow::anyhow!("no follower"))?;
        let id = removed.node_id();
        let reply = leader_node.admin(QuorumAdmin::RemoveVoter { node_id: id }, Duration::from_secs(10)).await?;
        anyhow::ensure!(matches!(reply, Ok(AdminReply::Done)), "{reply:?}");
        let learners = |q: &Quorum| -> Vec<NodeId> {
            q.state().map(|s| s.learners.iter().map(|l| l.node_id).collect()).unwrap_or_default()
        };
        assert_eq!(learners(leader_node), vec![id]);
        // Running and answering, it stays an observer past the timeout.
        tokio::time::sleep(timeout * 3).await;
        assert_eq!(learners(leader_node), vec![id], "a learner that answers is kept");

        removed_stop.cancel();
        let mut waited = 0;
        while !learners(leader_node).is_empty() {
            waited += 1;
            anyhow::ensure!(waited < 600, "the silent learner {id} is still a member: {:?}", leader_node.state());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let state = leader_node.state().ok_or_else(|| anyhow::anyhow!("no state"))?;
        assert_eq!(state.voters.len(), 2);
        assert!(!state.endpoints.contains_key(&id), "{state:?}");

        stop.cancel();
        while tasks.join_next().await.is_some() {}
        Ok(())
    }
}
