//! The controller client: how this broker has the active controller change the metadata. A
//! command goes to the quorum (forwarded to its leader wherever that is), and the answer comes
//! back once this broker has applied the committed result, so a handler that creates a topic
//! finds it in the metadata view right after (a running broker's heartbeat excepted, see
//! `Broker::heartbeat`; and a command whose answer does not read the view is answered once
//! committed even if this broker applies it late, see [`ControllerClient::execute_committed`]).
//! Also this broker's registration epoch and the block of producer ids it hands out.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use oxbow_meta::{Command, MetadataImage, Quorum, Reply};
use tokio::sync::watch;

use crate::errors::BrokerError;

/// How long an admin operation waits for the active controller, then for this broker to apply
/// the result.
pub const CONTROLLER_TIMEOUT: Duration = Duration::from_secs(30);

pub struct ControllerClient {
    node_id: i32,
    quorum: OnceLock<Quorum>,
    /// The metadata version this broker has applied (from the metadata view).
    applied: watch::Receiver<u64>,
    /// This broker's registration epoch (-1: not registered yet).
    epoch: AtomicI64,
    /// The producer id block being handed out: next id, end (exclusive).
    producer_ids: parking_lot::Mutex<(i64, i64)>,
    /// Held while a new block is asked for.
    refilling: tokio::sync::Mutex<()>,
}

impl ControllerClient {
    pub fn new(node_id: i32, applied: watch::Receiver<u64>) -> Self {
        Self {
            node_id,
            quorum: OnceLock::new(),
            applied,
            epoch: AtomicI64::new(-1),
            producer_ids: parking_lot::Mutex::new((0, 0)),
            refilling: tokio::sync::Mutex::new(()),
        }
    }

    /// Attaches the metadata quorum (once, at startup).
    pub fn set_quorum(&self, q: Quorum) {
        let _ = self.quorum.set(q);
    }

    pub fn quorum(&self) -> Option<&Quorum> {
        self.quorum.get()
    }

    /// The quorum, or NOT_CONTROLLER (which clients retry) before it is attached.
    pub fn started_quorum(&self) -> Result<&Quorum, BrokerError> {
        self.quorum().ok_or_else(|| BrokerError::NotController("metadata quorum not started".into()))
    }

    /// The active controller as clients should see it: the quorum leader when it is an active
    /// broker clients can reach; else (no leader known, or it is fenced) any active broker, as
    /// Kafka's KRaft brokers answer, so that admin requests go somewhere that forwards them.
    pub fn controller_id(&self, image: &MetadataImage) -> i32 {
        match self.quorum().and_then(Quorum::leader) {
            Some(l) if image.is_active(l) => l,
            _ => image.active_brokers().next().map_or(-1, |b| b.node_id),
        }
    }

    pub fn broker_epoch(&self) -> i64 {
        self.epoch.load(Ordering::Relaxed)
    }

    pub(crate) fn set_broker_epoch(&self, epoch: i64) {
        self.epoch.store(epoch, Ordering::Relaxed);
    }

    /// Runs `cmd` on the active controller and waits until this broker has applied its result.
    pub async fn execute(&self, cmd: Command) -> Result<Reply, BrokerError> {
        let (version, reply) = self.commit(cmd).await?;
        self.applied_or_timeout(version).await?;
        Ok(reply)
    }

    /// Runs `cmd` on the active controller and answers once it is committed, as Kafka's
    /// controller does: for commands whose answer does not read this broker's image. This
    /// broker's own apply is waited for up to `wait` (at most [`CONTROLLER_TIMEOUT`]) first, so
    /// that a client asking this broker next sees the change; but a committed change is not
    /// answered as failed because this broker applies it late. (Opening 5,000 new partitions on
    /// a loaded node once took longer than that: the client got REQUEST_TIMED_OUT for a change
    /// that had been made, and its retry would have got INVALID_PARTITIONS.)
    pub async fn execute_committed(&self, cmd: Command, wait: Duration) -> Result<Reply, BrokerError> {
        let (version, reply) = self.commit(cmd).await?;
        if !self.wait_applied(version, wait.min(CONTROLLER_TIMEOUT)).await {
            tracing::info!(version, "answering for a committed change this broker has not applied yet");
        }
        Ok(reply)
    }

    /// Runs `cmd` on the active controller; returns the metadata version holding its result,
    /// which this broker may not have applied yet (see [`Self::applied_or_timeout`]).
    pub async fn commit(&self, cmd: Command) -> Result<(u64, Reply), BrokerError> {
        let q = self.started_quorum()?;
        // The whole exchange is bounded: a leader cut off from its quorum never commits.
        tokio::time::timeout(CONTROLLER_TIMEOUT, q.execute(cmd, CONTROLLER_TIMEOUT))
            .await
            .map_err(|_| BrokerError::TimedOut("the metadata quorum did not commit in time".into()))?
            .map_err(BrokerError::from)
    }

    /// Waits until this broker has applied every record the active controller had committed
    /// when asked ([`Command::Barrier`]). A controller of an older version, during a rolling
    /// upgrade, does not know the barrier: then this returns at once, and the caller works from
    /// its own image as brokers did before the barrier existed.
    pub async fn barrier(&self) -> Result<(), BrokerError> {
        let q = self.started_quorum()?;
        let asked = tokio::time::timeout(CONTROLLER_TIMEOUT, q.execute(Command::Barrier, CONTROLLER_TIMEOUT))
            .await
            .map_err(|_| BrokerError::TimedOut("the metadata quorum did not answer in time".into()))?;
        match asked {
            Ok((version, _)) => self.applied_or_timeout(version).await,
            Err(oxbow_meta::CommandError::Unsupported(e)) => {
                tracing::debug!(error = %e, "no metadata barrier: the controller predates it");
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Waits until this broker has applied metadata version `version`, up to
    /// [`CONTROLLER_TIMEOUT`].
    pub async fn applied_or_timeout(&self, version: u64) -> Result<(), BrokerError> {
        if self.wait_applied(version, CONTROLLER_TIMEOUT).await {
            return Ok(());
        }
        Err(BrokerError::TimedOut(format!(
            "the change was committed (metadata version {version}) but this broker has not applied it yet"
        )))
    }

    /// Waits until this broker reflects metadata version `version`; false on timeout.
    pub async fn wait_applied(&self, version: u64, timeout: Duration) -> bool {
        let mut rx = self.applied.clone();
        tokio::time::timeout(timeout, rx.wait_for(|v| *v >= version)).await.is_ok_and(|r| r.is_ok())
    }

    /// A producer id never handed out before in the cluster: from this broker's current block,
    /// or a new block from the active controller.
    pub async fn next_producer_id(&self) -> Result<i64, BrokerError> {
        loop {
            if let Some(id) = self.try_next_producer_id() {
                return Ok(id);
            }
            self.refill_producer_ids().await?;
        }
    }

    /// A producer id from the current block, if it has one left (no waiting): for callers that
    /// cannot wait at the point they need it, after [`Self::refill_producer_ids`].
    pub fn try_next_producer_id(&self) -> Option<i64> {
        let mut block = self.producer_ids.lock();
        (block.0 < block.1).then(|| {
            block.0 += 1;
            block.0 - 1
        })
    }

    /// Makes sure the current block has an id left, asking the active controller for a new
    /// block if not (one request at a time).
    pub async fn refill_producer_ids(&self) -> Result<(), BrokerError> {
        let _one = self.refilling.lock().await;
        let left = {
            let block = self.producer_ids.lock();
            block.0 < block.1
        };
        if left {
            return Ok(());
        }
        match self.execute(Command::AllocateProducerIds { node_id: self.node_id }).await? {
            Reply::ProducerIds { start, len } => *self.producer_ids.lock() = (start, start + len),
            other => return Err(BrokerError::unexpected_reply(&other)),
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use oxbow_meta::QuorumConfig;
    use tokio::task::JoinSet;
    use tokio_util::sync::CancellationToken;

    /// A committed change is answered as done though this broker has not applied it (here it
    /// applies nothing at all); `execute` would have answered REQUEST_TIMED_OUT after 30 s.
    #[tokio::test]
    async fn a_committed_change_is_answered_though_this_broker_has_not_applied_it() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = QuorumConfig {
            node_id: 1,
            voters: [(1, "127.0.0.1:0".to_string())].into_iter().collect(),
            bootstrap: Vec::new(),
            auto_join: false,
            advertised: None,
            controller: true,
            controller_listener: None,
            local_ip: None,
            dir: dir.path().to_path_buf(),
            session_timeout_ms: 9_000,
            unclean_leader_election: false,
            snapshot_bytes: 1 << 30,
            election_timeout_ms: 500,
            tls: None,
            observer_session_timeout: oxbow_meta::quorum::OBSERVER_SESSION_TIMEOUT,
        };
        let stop = CancellationToken::new();
        let mut tasks = JoinSet::new();
        let quorum = Quorum::start(cfg, &mut tasks, stop.clone()).await.unwrap();
        let (_never_applied, applied) = watch::channel(0);
        let client = ControllerClient::new(1, applied);
        client.set_quorum(quorum);

        let reply = client.execute_committed(Command::Barrier, Duration::from_millis(100)).await.unwrap();
        assert!(matches!(reply, Reply::Done), "{reply:?}");
        let (version, _) = client.commit(Command::Barrier).await.unwrap();
        assert!(version > 0, "the barrier was committed at a metadata version");
        assert!(!client.wait_applied(version, Duration::from_millis(10)).await, "this broker applied nothing");

        stop.cancel();
        while tasks.join_next().await.is_some() {}
    }
}
