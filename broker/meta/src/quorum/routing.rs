//! Commands and admin requests to the active controller: run here when this node leads, else
//! sent to the leader as known (any voter when none is), following NOT_CONTROLLER answers until
//! the caller's timeout; a retry of an attempt that got no answer says so, so the controller can
//! tell a command that already took effect (`done_before`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, ServerState};
use tonic::Request;
use tonic::transport::Channel;

use super::service::remote_error;
use super::{
    AdminRefusal, AdminReply, AdminResult, CommandError, CommandResult, Quorum, QuorumAdmin, Routed, RoutedReply,
    now_ms,
};
use crate::controller::{Command, Reply, done_before};
use crate::network::{channel_via, decode, encode, set_target};
use crate::raft::{Raft, RecordBatch};
use crate::records::NodeId;
use crate::rpc::quorum_client::QuorumClient;

impl Quorum {
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
    pub(super) async fn route(&self, req: Routed, timeout: Duration) -> Result<RoutedReply, CommandError> {
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
    pub(super) fn attempt_timeout(&self, req: &Routed, timeout: Duration) -> Duration {
        match req {
            Routed::Command(Command::Heartbeat { .. }) => {
                Duration::from_millis((self.inner.cfg.session_timeout_ms / 3).max(200))
            }
            Routed::Command(_) => Duration::from_secs(5),
            Routed::Admin(_) => timeout,
        }
    }

    pub(super) async fn run_local(&self, req: &Routed, retry: bool) -> Result<RoutedReply, CommandError> {
        match req {
            Routed::Command(c) => self.execute_local(c, retry).await.map(|(v, r)| RoutedReply::Command(v, r)),
            Routed::Admin(a) => self.admin_local(a).await.map(RoutedReply::Admin),
        }
    }

    pub(super) async fn run_remote(
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

    pub(super) async fn admin_local(&self, req: &QuorumAdmin) -> AdminResult {
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
    pub(super) fn any_voter(&self, not: &Option<NodeId>) -> Option<NodeId> {
        let me = (!self.is_member()).then(|| self.node_id());
        let voters: Vec<NodeId> =
            self.inner.addrs.lock().keys().copied().filter(|v| Some(*v) != *not && Some(*v) != me).collect();
        if voters.is_empty() {
            return None;
        }
        Some(voters[(now_ms() as usize / 100) % voters.len()])
    }

    pub(super) fn client(&self, node: NodeId) -> Option<QuorumClient<Channel>> {
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

    pub(super) fn not_controller(&self) -> CommandError {
        let leader = self.leader();
        let leader_addr = leader.and_then(|l| self.inner.addrs.lock().get(&l).cloned());
        CommandError::NotController { node: self.node_id(), leader, leader_addr }
    }

    /// Decides and writes `cmd` here, if this node is the active controller. One command at a
    /// time, each against the image with every record committed before it.
    ///
    /// `retry`: an earlier attempt of this command failed without an answer and may have been
    /// committed; a refusal that only says so is answered as success (`done_before`).
    pub(super) async fn execute_local(&self, cmd: &Command, retry: bool) -> CommandResult {
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

    pub(super) async fn write(&self, raft: &Raft, records: Vec<crate::records::Record>) -> Result<u64, CommandError> {
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
}

/// gRPC metadata on a command that is a retry of an attempt that failed without an answer.
pub(super) const RETRY_HEADER: &str = "oxbow-retry";

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
