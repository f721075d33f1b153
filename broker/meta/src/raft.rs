//! openraft's type configuration and the RocksDB storage of the metadata quorum.
//!
//! One RocksDB under `metadata.log.dir/__cluster_metadata-raft`: column family `log` holds the
//! Raft log (key: index, big endian; value: the entry as JSON), `meta` holds the vote, the
//! committed log id, the last purged log id and the latest snapshot. Every write is synced
//! before openraft is told it is done: an entry acknowledged to the leader survives `kill -9`.
//!
//! The state machine is the in-memory [`MetadataImage`]; it is rebuilt at start from the latest
//! snapshot, and openraft re-applies the committed entries after it.

// openraft's storage traits fix the error type (`StorageError`, large); the helpers return it
// too rather than converting at every call.
#![allow(clippy::result_large_err)]

use std::fmt::Debug;
use std::io::Cursor;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftLogReader, RaftSnapshotBuilder, SnapshotMeta,
    StorageError, StorageIOError, StoredMembership, Vote,
};
use rocksdb::{ColumnFamilyDescriptor, DB, Direction, IteratorMode, Options, WriteBatch, WriteOptions};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::image::MetadataImage;
use crate::records::Record;

/// A batch of records one controller decision wrote: the unit of a Raft entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordBatch {
    pub records: Vec<Record>,
}

/// What applying an entry returns: the image version that contains it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    pub version: u64,
}

openraft::declare_raft_types!(
    pub TypeConfig:
        D = RecordBatch,
        R = Applied,
        NodeId = u64,
        Node = BasicNode,
        Entry = Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type Raft = openraft::Raft<TypeConfig>;
type StorageResult<T> = Result<T, StorageError<u64>>;

const CF_LOG: &str = "log";
const CF_META: &str = "meta";
const KEY_VOTE: &[u8] = b"vote";
const KEY_COMMITTED: &[u8] = b"committed";
const KEY_PURGED: &[u8] = b"last_purged";
const KEY_SNAPSHOT: &[u8] = b"snapshot";

fn read_err(e: impl std::error::Error + 'static) -> StorageError<u64> {
    StorageIOError::read(&e).into()
}

fn write_err(e: impl std::error::Error + 'static) -> StorageError<u64> {
    StorageIOError::write(&e).into()
}

/// Opens (or creates) the metadata store in `dir`.
pub fn open_db(dir: &Path) -> Result<Arc<DB>, rocksdb::Error> {
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    // Small and rarely written: keep RocksDB's memory to a few MB.
    opts.set_write_buffer_size(4 << 20);
    opts.set_max_write_buffer_number(2);
    opts.set_max_background_jobs(1);
    opts.set_keep_log_file_num(3);
    let cfs = [CF_LOG, CF_META].map(|n| ColumnFamilyDescriptor::new(n, Options::default()));
    Ok(Arc::new(DB::open_cf_descriptors(&opts, dir, cfs)?))
}

fn synced() -> WriteOptions {
    let mut w = WriteOptions::default();
    w.set_sync(true);
    w
}

fn get_json<T: for<'a> Deserialize<'a>>(db: &DB, key: &[u8]) -> StorageResult<Option<T>> {
    let cf = db.cf_handle(CF_META).ok_or_else(|| read_err(std::io::Error::other("no meta column family")))?;
    match db.get_cf(&cf, key).map_err(read_err)? {
        None => Ok(None),
        Some(v) => serde_json::from_slice(&v).map(Some).map_err(read_err),
    }
}

fn put_json<T: Serialize>(db: &DB, key: &[u8], value: &T) -> StorageResult<()> {
    let cf = db.cf_handle(CF_META).ok_or_else(|| write_err(std::io::Error::other("no meta column family")))?;
    let v = serde_json::to_vec(value).map_err(write_err)?;
    db.put_cf_opt(&cf, key, v, &synced()).map_err(write_err)
}

/// KRaft's rule for a controller that was the leader when it stopped (Kafka starts it in the
/// Resigned state): it does not take leadership back on its own. openraft restarts a node whose
/// stored vote is a committed vote for itself straight into leadership, without an election;
/// the other voters may not reach a restarted pod at its new address for several seconds
/// (cluster DNS), miss their heartbeats to it and be fenced, which leaves partitions without a
/// leader. So when the latest membership this node stored has other voters, its vote goes back
/// to uncommitted (the same term: it still votes for no one else in it) and the others elect a
/// leader among themselves. A single voter keeps its leadership. Returns whether it resigned.
pub fn resign_stored_leadership(db: &DB, node_id: u64) -> StorageResult<bool> {
    let Some(mut vote) = get_json::<Vote<u64>>(db, KEY_VOTE)? else { return Ok(false) };
    if !vote.is_committed() || vote.leader_id().voted_for() != Some(node_id) {
        return Ok(false);
    }
    let others = last_membership(db)?.is_some_and(|m| m.voter_ids().any(|v| v != node_id));
    if !others {
        return Ok(false);
    }
    vote.committed = false;
    put_json(db, KEY_VOTE, &vote)?;
    Ok(true)
}

/// The latest membership in the log (newest entry first), else the stored snapshot's.
fn last_membership(db: &DB) -> StorageResult<Option<openraft::Membership<u64, BasicNode>>> {
    let cf = db.cf_handle(CF_LOG).ok_or_else(|| read_err(std::io::Error::other("no log column family")))?;
    for kv in db.iterator_cf(&cf, IteratorMode::End) {
        let (_, v) = kv.map_err(read_err)?;
        let e: Entry<TypeConfig> = serde_json::from_slice(&v).map_err(read_err)?;
        if let openraft::EntryPayload::Membership(m) = e.payload {
            return Ok(Some(m));
        }
    }
    Ok(get_json::<StoredSnapshot>(db, KEY_SNAPSHOT)?.map(|s| s.meta.last_membership.membership().clone()))
}

/// The Raft log in RocksDB.
#[derive(Clone)]
pub struct LogStore {
    db: Arc<DB>,
}

impl LogStore {
    pub fn new(db: Arc<DB>) -> Self {
        Self { db }
    }

    /// Deletes entries `from..to`, synced.
    fn delete_range(&self, from: u64, to: u64) -> StorageResult<()> {
        let cf = self.db.cf_handle(CF_LOG).ok_or_else(|| write_err(std::io::Error::other("no log column family")))?;
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(&cf, from.to_be_bytes(), to.to_be_bytes());
        if to == u64::MAX {
            batch.delete_cf(&cf, u64::MAX.to_be_bytes());
        }
        self.db.write_opt(batch, &synced()).map_err(write_err)
    }

    fn last_entry(&self) -> StorageResult<Option<LogId<u64>>> {
        let cf = self.db.cf_handle(CF_LOG).ok_or_else(|| read_err(std::io::Error::other("no log column family")))?;
        match self.db.iterator_cf(&cf, IteratorMode::End).next() {
            None => Ok(None),
            Some(kv) => {
                let (_, v) = kv.map_err(read_err)?;
                let e: Entry<TypeConfig> = serde_json::from_slice(&v).map_err(read_err)?;
                Ok(Some(e.log_id))
            }
        }
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry<TypeConfig>>> {
        use std::ops::Bound;
        let start = match range.start_bound() {
            Bound::Included(i) => *i,
            Bound::Excluded(i) => *i + 1,
            Bound::Unbounded => 0,
        };
        let cf = self.db.cf_handle(CF_LOG).ok_or_else(|| read_err(std::io::Error::other("no log column family")))?;
        let mut out = Vec::new();
        let from = start.to_be_bytes();
        for kv in self.db.iterator_cf(&cf, IteratorMode::From(&from, Direction::Forward)) {
            let (k, v) = kv.map_err(read_err)?;
            let idx =
                u64::from_be_bytes(k.as_ref().try_into().map_err(|_| read_err(std::io::Error::other("bad log key")))?);
            if !range.contains(&idx) {
                break;
            }
            out.push(serde_json::from_slice(&v).map_err(read_err)?);
        }
        Ok(out)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        let last_purged: Option<LogId<u64>> = get_json(&self.db, KEY_PURGED)?;
        let last = self.last_entry()?.or(last_purged);
        Ok(LogState { last_purged_log_id: last_purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> StorageResult<()> {
        put_json(&self.db, KEY_VOTE, vote)
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<u64>>> {
        get_json(&self.db, KEY_VOTE)
    }

    async fn save_committed(&mut self, committed: Option<LogId<u64>>) -> StorageResult<()> {
        put_json(&self.db, KEY_COMMITTED, &committed)
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId<u64>>> {
        Ok(get_json::<Option<LogId<u64>>>(&self.db, KEY_COMMITTED)?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
    {
        let cf = self.db.cf_handle(CF_LOG).ok_or_else(|| write_err(std::io::Error::other("no log column family")))?;
        let mut batch = WriteBatch::default();
        for e in entries {
            let v = serde_json::to_vec(&e).map_err(write_err)?;
            batch.put_cf(&cf, e.log_id.index.to_be_bytes(), v);
        }
        let res = self.db.write_opt(batch, &synced());
        callback.log_io_completed(res.as_ref().map(|_| ()).map_err(|e| std::io::Error::other(e.to_string())));
        res.map_err(write_err)
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> StorageResult<()> {
        self.delete_range(log_id.index, u64::MAX)
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> StorageResult<()> {
        put_json(&self.db, KEY_PURGED, &log_id)?;
        self.delete_range(0, log_id.index + 1)
    }
}

#[derive(Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<u64, BasicNode>,
    data: Vec<u8>,
}

/// Shared between the state machine and the quorum runtime: the latest image and how many
/// bytes of records were applied since the last snapshot.
pub struct Published {
    pub image: watch::Sender<Arc<MetadataImage>>,
    pub bytes_since_snapshot: AtomicU64,
}

/// The state machine: the metadata image, published to readers after every apply.
pub struct StateMachine {
    db: Arc<DB>,
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, BasicNode>,
    image: Arc<MetadataImage>,
    published: Arc<Published>,
    snapshot_seq: u64,
}

impl StateMachine {
    /// The state machine as of the latest stored snapshot.
    pub fn open(db: Arc<DB>, published: Arc<Published>) -> StorageResult<Self> {
        let mut sm = Self {
            db,
            last_applied: None,
            membership: StoredMembership::default(),
            image: Arc::new(MetadataImage::default()),
            published,
            snapshot_seq: 0,
        };
        if let Some(s) = get_json::<StoredSnapshot>(&sm.db, KEY_SNAPSHOT)? {
            sm.load(&s)?;
            tracing::info!(last = ?s.meta.last_log_id, bytes = s.data.len(), "metadata state machine loaded from the stored snapshot");
        }
        Ok(sm)
    }

    fn load(&mut self, s: &StoredSnapshot) -> StorageResult<()> {
        let mut image: MetadataImage = serde_json::from_slice(&s.data).map_err(read_err)?;
        image.reindex();
        self.last_applied = s.meta.last_log_id;
        self.membership = s.meta.last_membership.clone();
        self.image = Arc::new(image);
        self.publish();
        Ok(())
    }
}

impl StateMachine {
    /// Publishes the image unless readers already have a newer one (a node that followed the
    /// image by fetching before it joined the quorum).
    fn publish(&self) {
        let image = self.image.clone();
        self.published.image.send_if_modified(|cur| {
            let newer = image.version >= cur.version;
            if newer {
                *cur = image.clone();
            }
            newer
        });
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot<TypeConfig>> {
        let data = serde_json::to_vec(&*self.image).map_err(read_err)?;
        self.snapshot_seq += 1;
        let snapshot_id = match self.last_applied {
            Some(l) => format!("{}-{}-{}", l.leader_id, l.index, self.snapshot_seq),
            None => format!("--{}", self.snapshot_seq),
        };
        let meta =
            SnapshotMeta { last_log_id: self.last_applied, last_membership: self.membership.clone(), snapshot_id };
        put_json(&self.db, KEY_SNAPSHOT, &StoredSnapshot { meta: meta.clone(), data: data.clone() })?;
        self.published.bytes_since_snapshot.store(0, Ordering::Relaxed);
        tracing::info!(last = ?self.last_applied, bytes = data.len(), "metadata snapshot written");
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(data)) })
    }
}

/// Snapshots are built from a copy of the image taken when openraft asks for a builder.
impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(&mut self) -> StorageResult<(Option<LogId<u64>>, StoredMembership<u64, BasicNode>)> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> StorageResult<Vec<Applied>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
    {
        let mut out = Vec::new();
        let image = Arc::make_mut(&mut self.image);
        let mut bytes = 0u64;
        for e in entries {
            self.last_applied = Some(e.log_id);
            let index = e.log_id.index;
            match e.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(batch) => {
                    for r in &batch.records {
                        image.apply(index, r);
                    }
                    bytes += serde_json::to_vec(&batch).map_or(0, |v| v.len() as u64);
                }
                EntryPayload::Membership(m) => self.membership = StoredMembership::new(Some(e.log_id), m),
            }
            image.version = image.version.max(index);
            out.push(Applied { version: image.version });
        }
        self.published.bytes_since_snapshot.fetch_add(bytes, Ordering::Relaxed);
        self.publish();
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        StateMachine {
            db: self.db.clone(),
            last_applied: self.last_applied,
            membership: self.membership.clone(),
            image: self.image.clone(),
            published: self.published.clone(),
            snapshot_seq: self.snapshot_seq + 1,
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> StorageResult<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> StorageResult<()> {
        let s = StoredSnapshot { meta: meta.clone(), data: snapshot.into_inner() };
        self.load(&s)?;
        put_json(&self.db, KEY_SNAPSHOT, &s)?;
        tracing::info!(last = ?meta.last_log_id, "installed metadata snapshot from the leader");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot<TypeConfig>>> {
        Ok(get_json::<StoredSnapshot>(&self.db, KEY_SNAPSHOT)?
            .map(|s| Snapshot { meta: s.meta, snapshot: Box::new(Cursor::new(s.data)) }))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use openraft::{CommittedLeaderId, EntryPayload, Membership};

    use super::*;

    fn with_membership(dir: &Path, voters: &[u64]) -> anyhow::Result<Arc<DB>> {
        let db = open_db(dir)?;
        let nodes: BTreeMap<u64, BasicNode> =
            voters.iter().map(|v| (*v, BasicNode { addr: format!("127.0.0.1:{}", 9000 + v) })).collect();
        let ids: BTreeSet<u64> = voters.iter().copied().collect();
        let entry: Entry<TypeConfig> = Entry {
            log_id: LogId::new(CommittedLeaderId::new(3, 2), 7),
            payload: EntryPayload::Membership(Membership::new(vec![ids], nodes)),
        };
        let cf = db.cf_handle(CF_LOG).ok_or_else(|| anyhow::anyhow!("no log cf"))?;
        db.put_cf(&cf, 7u64.to_be_bytes(), serde_json::to_vec(&entry)?)?;
        Ok(db)
    }

    #[test]
    fn a_restarted_leader_of_several_voters_resigns_and_a_single_voter_does_not() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let db = with_membership(&dir.path().join("three"), &[1, 2, 3])?;
        put_json(&db, KEY_VOTE, &Vote::new_committed(3, 2))?;
        // Another node's vote, or one not committed, is left alone.
        assert!(!resign_stored_leadership(&db, 1)?);
        assert!(resign_stored_leadership(&db, 2)?);
        assert_eq!(get_json::<Vote<u64>>(&db, KEY_VOTE)?, Some(Vote::new(3, 2)));
        assert!(!resign_stored_leadership(&db, 2)?);

        let single = with_membership(&dir.path().join("one"), &[2])?;
        put_json(&single, KEY_VOTE, &Vote::new_committed(3, 2))?;
        assert!(!resign_stored_leadership(&single, 2)?);
        assert_eq!(get_json::<Vote<u64>>(&single, KEY_VOTE)?, Some(Vote::new_committed(3, 2)));
        Ok(())
    }
}
