//! Committed offsets: OffsetCommit, TxnOffsetCommit and the transaction markers that settle
//! it, OffsetFetch, OffsetDelete.

use std::collections::BTreeMap;
use std::sync::Arc;

use oxbow_group::records::OffsetValue;
use oxbow_group::{Answer, GroupError, Write, partition_for};

use super::{Coordinator, OFFSETS_TOPIC, Settle};
use crate::clock::now_ms;
use crate::errors::BrokerError;
use crate::metadata_view::MetadataView;
use crate::partition::{Marker, Partition, TxnWrite};

/// One partition OffsetFetch asked for: its committed offset (`None`: none), or its error.
pub type FetchedOffset = (i32, Result<Option<OffsetValue>, GroupError>);

/// One partition of an OffsetCommit.
pub struct CommitEntry {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
}

/// Who sends a TxnOffsetCommit: the group member (checked as for OffsetCommit) and the
/// transactional producer whose transaction the offsets join.
pub struct TxnCommitter {
    pub member: String,
    pub instance: Option<String>,
    pub generation: i32,
    pub txn: TxnWrite,
}

/// Who sends an OffsetCommit: checked against the group before anything is written.
pub struct Committer {
    pub member: String,
    pub instance: Option<String>,
    /// The generation (classic) or member epoch (consumer protocol); -1 for admin commits.
    pub generation: i32,
    /// The OffsetCommit version (consumer protocol members must use v9+).
    pub api_version: i16,
}

impl Coordinator {
    /// OffsetCommit of checked entries, all or none: the error is every entry's.
    pub async fn commit(&self, view: &MetadataView, group: &str, by: &Committer, entries: Vec<CommitEntry>) -> Answer {
        let (slot, mut st) = self.locked(view, group).await?;
        let now = now_ms();
        st.shard.validate_commit(group, &by.member, by.instance.as_deref(), by.generation, by.api_version, now)?;
        let writes = offset_writes(group, entries, now);
        let Some(end) = self.write_offsets(view, &slot, &mut st, writes)? else { return Ok(()) };
        // Other groups of the partition go on while this commit waits for the ISR; the next
        // request to lock the shard applies it.
        drop(st);
        self.replicated(&slot, end).await
    }

    /// TxnOffsetCommit of checked entries (the producer's transaction has verified or added
    /// the group's partition): written as the producer's transactional batch, all or none, and
    /// the group's offsets once the transaction's COMMIT marker is under the high watermark
    /// ([`Self::end_txn`]). Answered once the ISR has the batch.
    pub async fn txn_commit(
        &self,
        view: &MetadataView,
        group: &str,
        by: &TxnCommitter,
        entries: Vec<CommitEntry>,
    ) -> Answer {
        let (slot, mut st) = self.locked(view, group).await?;
        let now = now_ms();
        st.shard.validate_txn_commit(group, &by.member, by.instance.as_deref(), by.generation, now)?;
        let writes = offset_writes(group, entries, now);
        let Some(end) = self.write_as(view, &slot, &mut st, &writes, Some(by.txn))? else { return Ok(()) };
        st.shard.stage_txn(by.txn.producer_id, end - writes.len() as i64, &writes);
        drop(st);
        self.replicated(&slot, end).await
    }

    /// The group coordinator partition of `group` if this broker leads it, to verify a
    /// transactional commit against before [`Self::txn_commit`].
    pub fn partition_of(&self, view: &MetadataView, group: &str) -> Result<Arc<Partition>, GroupError> {
        let topic = view.topic(OFFSETS_TOPIC).ok_or(GroupError::CoordinatorNotAvailable)?;
        let index = partition_for(group, topic.meta.partitions);
        topic.led(index).cloned().map_err(|_| GroupError::NotCoordinator)
    }

    /// WriteTxnMarkers for `__consumer_offsets` partition `index`: appends the marker through
    /// the partition's shard (loading it first if needed), which applies it once the high
    /// watermark passes it. Returns the partition and the offset after the marker, for the
    /// caller to wait on.
    pub async fn end_txn(
        &self,
        view: &MetadataView,
        index: i32,
        marker: Marker,
    ) -> Result<(Arc<Partition>, i64), BrokerError> {
        let topic = view.topic(OFFSETS_TOPIC).ok_or_else(|| BrokerError::unknown_topic(false))?;
        let moved = |e: GroupError| BrokerError::NotLeader(format!("not the group coordinator ({e:?})"));
        let slot = self.slot_for(&topic, index).await.map_err(moved)?;
        let mut st = slot.state.clone().lock_owned().await;
        if !st.alive {
            return Err(moved(GroupError::NotCoordinator));
        }
        Self::settle(&slot, &mut st);
        let r = slot.partition.append_marker(marker, Some(topic.min_insync), now_ms())?;
        let end = r.last_offset + 1;
        st.last_written = st.last_written.max(end);
        st.pending.push_back((end, Settle::TxnEnd { producer_id: marker.producer_id, commit: marker.commit }));
        Ok((slot.partition.clone(), end))
    }

    /// Whether `metadata` fits `offset.metadata.max.bytes`.
    pub fn metadata_fits(&self, metadata: &str) -> bool {
        metadata.len() <= self.settings.offsets.metadata_max_bytes
    }

    /// Committed offsets of `group`: of the named partitions, or of all (`None`).
    /// Each is (topic, partition, offset, leader epoch, metadata); -1 where none is committed.
    /// Read at the high watermark; `stable` (OffsetFetch `require_stable`) first waits until the
    /// ISR has every write the shard made, so commits still in flight are shown, as Kafka does,
    /// and a partition an open transaction commits an offset of is UNSTABLE_OFFSET_COMMIT.
    pub async fn fetch_offsets(
        &self,
        view: &MetadataView,
        group: &str,
        wanted: Option<Vec<(String, Vec<i32>)>>,
        member: Option<(Option<&str>, i32)>,
        stable: bool,
    ) -> Result<Vec<(String, Vec<FetchedOffset>)>, GroupError> {
        let (slot, mut st) = self.locked(view, group).await?;
        if stable && !st.pending.is_empty() {
            let end = st.last_written;
            let (again, r) = self.replicated_unlocked(&slot, st, end).await;
            r?;
            st = again;
            if !st.alive {
                return Err(GroupError::NotCoordinator);
            }
        }
        if let Some((member, epoch)) = member {
            st.shard.validate_fetch(group, member, epoch)?;
        }
        let shard = &st.shard;
        let read = |t: &str, p: i32, v: Option<&OffsetValue>| {
            if stable && shard.has_pending_txn_offset(group, t, p) {
                (p, Err(GroupError::UnstableOffsetCommit))
            } else {
                (p, Ok(v.cloned()))
            }
        };
        Ok(match wanted {
            Some(topics) => topics
                .into_iter()
                .map(|(t, ps)| {
                    let parts = ps.into_iter().map(|p| read(&t, p, shard.offset(group, &t, p))).collect();
                    (t, parts)
                })
                .collect(),
            None => {
                let mut by_topic: BTreeMap<String, Vec<FetchedOffset>> = BTreeMap::new();
                for ((t, p), v) in shard.offsets(group) {
                    by_topic.entry(t.clone()).or_default().push(read(t, *p, Some(v)));
                }
                by_topic.into_iter().collect()
            }
        })
    }

    /// OffsetDelete: each partition's error.
    pub async fn delete_offsets(
        &self,
        view: &MetadataView,
        group: &str,
        partitions: &[(String, i32)],
    ) -> Result<Vec<Answer>, GroupError> {
        let (slot, st) = self.locked(view, group).await?;
        let mut st = self.drained(&slot, st, group).await?;
        let (errors, writes) = st.shard.delete_offsets(group, partitions)?;
        if let Some(end) = self.write_offsets(view, &slot, &mut st, writes)? {
            self.replicated_unlocked(&slot, st, end).await.1?;
        }
        Ok(errors)
    }
}

/// The records of an offset commit at `now`.
fn offset_writes(group: &str, entries: Vec<CommitEntry>, now: i64) -> Vec<Write> {
    entries
        .into_iter()
        .map(|e| Write::Offset {
            group: group.to_string(),
            topic: e.topic,
            partition: e.partition,
            value: Some(OffsetValue {
                offset: e.offset,
                leader_epoch: e.leader_epoch,
                metadata: e.metadata,
                commit_timestamp: now,
                expire_timestamp: None,
            }),
        })
        .collect()
}
