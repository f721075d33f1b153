//! The quorum runtime: starts openraft on the RocksDB store, serves the controller gRPC
//! service, routes commands to the active controller, runs the controller's timers, and
//! publishes the metadata image to the broker.
//!
//! A node with the controller role is a Raft voter and applies the committed log itself. A
//! broker-only node has no Raft state: it follows the image by long-polling a controller's
//! `Fetch` (the role of KRaft's metadata fetch), so it never sees uncommitted metadata.
//!
//! [`routing`] carries commands to the active controller; [`service`] is the gRPC service
//! that answers them (and Raft's RPCs) on each controller; [`raft_start`] opens the store and
//! starts openraft with its settings.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use openraft::ServerState;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tonic::Request;
use tonic::transport::Channel;

use crate::controller::{Command, Controller, Refusal, Reply};
use crate::image::MetadataImage;
use crate::network::{Contacts, Redirects, decode, encode};
use crate::raft::{Published, Raft};
use crate::records::NodeId;
use crate::rpc::quorum_client::QuorumClient;
use crate::rpc::quorum_server::QuorumServer;

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

mod raft_start;
use raft_start::start_raft;
pub use raft_start::{INITIAL_VOTERS_FILE, write_initial_voters};
mod routing;
mod service;
use service::Service;
#[cfg(test)]
mod tests;
