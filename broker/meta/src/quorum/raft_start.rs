//! Starting this node's Raft: the RocksDB store (log and state machine), openraft's settings,
//! resigning a leadership stored before a restart, and the first membership of a new quorum
//! (static voters, or the initial voters `oxbow-broker format` wrote for a dynamic one).

use std::collections::BTreeMap;
use std::sync::Arc;

use openraft::{BasicNode, SnapshotPolicy};

use super::{QuorumConfig, QuorumError};
use crate::network::{Contacts, NetworkFactory, Redirects};
use crate::raft::{LogStore, Published, Raft, StateMachine, open_db};
use crate::records::NodeId;

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
pub(super) async fn start_raft(
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
        // openraft also bounds each AppendEntries (heartbeats, entries, leadership checks) by
        // this interval. A tenth of the election timeout (100 ms) failed RPCs on a loaded
        // 2-core node (10,000 partitions of RF 3 under produce): the leader backed off, voters
        // elected again and again, and brokers' heartbeats went unanswered until they fenced
        // themselves. A quarter still sends several heartbeats per election timeout.
        heartbeat_interval: (t / 4).max(25),
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
