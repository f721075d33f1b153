//! How a shard's changes reach its `__consumer_offsets` partition and come back, after Kafka's
//! `CoordinatorRuntime`: appends are made under the shard's lock and the wait for the ISR
//! without it; offset writes are applied in log order once the high watermark passes them
//! (what a non-stable OffsetFetch reads); every other answer waits until the high watermark
//! covers the shard's last write (`SlotState::last_written`), so nothing is answered from a
//! state the ISR could still lose; a load replays the whole log, the part above the high
//! watermark as pending writes.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use oxbow_group::{GroupError, Shard, Write};
use oxbow_log::batch::{BatchIter, BatchProducer, encode_plain, encode_transactional, validate_produce};
use oxbow_log::{Flush, ReadStart};
use oxbow_protocol::records::{Compression, RecordBatchDecoder};
use tokio::sync::OwnedMutexGuard;

use super::{Coordinator, OFFSETS_TOPIC, Pending, Settle, Slot, SlotState};
use crate::clock::now_ms;
use crate::errors::BrokerError;
use crate::metadata_view::MetadataView;
use crate::partition::{Partition, TxnWrite};

impl Coordinator {
    /// Applies the pending offset writes the high watermark has passed, in log order.
    pub(super) fn settle(slot: &Slot, st: &mut SlotState) {
        let Some(&(first, _)) = st.pending.front() else { return };
        let Ok(hw) = slot.partition.offsets().map(|o| o.high_watermark) else { return };
        // A high watermark of another leader epoch says nothing about this shard's writes.
        if first > hw || slot.partition.leader_epoch().ok() != Some(slot.leader_epoch) {
            return;
        }
        while let Some((end, settle)) = st.pending.pop_front() {
            if end > hw {
                st.pending.push_front((end, settle));
                break;
            }
            match settle {
                Settle::Offsets(writes) => st.shard.apply(&writes),
                Settle::TxnEnd { producer_id, commit } => st.shard.end_txn(producer_id, commit),
            }
        }
    }

    /// The shard locked with none of `group`'s offset writes pending: for operations that derive
    /// their writes from the group's offsets (OffsetDelete, DeleteGroups).
    pub(super) async fn drained(
        &self,
        slot: &Arc<Slot>,
        mut st: OwnedMutexGuard<SlotState>,
        group: &str,
    ) -> Result<OwnedMutexGuard<SlotState>, GroupError> {
        loop {
            Self::settle(slot, &mut st);
            let last = st.pending.iter().rev().find(|(_, s)| s.touches(group));
            let Some(&(end, _)) = last else { return Ok(st) };
            let (again, r) = self.replicated_unlocked(slot, st, end).await;
            r?;
            st = again;
            if !st.alive {
                return Err(GroupError::NotCoordinator);
            }
        }
    }

    /// Releases the shard while the ISR acknowledges its log up to `end`, then locks it again.
    /// The result is the wait's: a write the high watermark passed is safe even if the shard
    /// was dropped meanwhile (its next incarnation replays it); callers that go on with the
    /// shard check `alive`.
    pub(super) async fn replicated_unlocked(
        &self,
        slot: &Arc<Slot>,
        st: OwnedMutexGuard<SlotState>,
        end: i64,
    ) -> (OwnedMutexGuard<SlotState>, Result<(), GroupError>) {
        drop(st);
        let r = self.replicated(slot, end).await;
        let mut st = slot.state.clone().lock_owned().await;
        if st.alive {
            Self::settle(slot, &mut st);
        }
        (st, r)
    }

    /// Releases the shard and waits until the ISR has everything it wrote so far: what an
    /// answer that writes nothing waits for (Kafka defers it to the shard's last written offset).
    pub(super) async fn caught_up(&self, slot: &Slot, st: OwnedMutexGuard<SlotState>) -> Result<(), GroupError> {
        let end = st.last_written;
        drop(st);
        self.replicated(slot, end).await
    }

    /// Rebuilds a shard from its partition's records, to the log end: offset records above the
    /// high watermark become pending writes, as Kafka's loader replays the whole log and reads
    /// at the high watermark. Also returns the log end.
    pub(super) fn replay(&self, part: &Partition) -> Result<(Shard, Pending, i64), GroupError> {
        let mut shard =
            Shard::new(self.settings.group, self.settings.offsets).with_consumer_config(self.settings.consumer.clone());
        let at_load = part.offsets().map_err(|_| GroupError::NotCoordinator)?;
        let mut offset = at_load.log_start;
        let mut pending = VecDeque::new();
        let mut skipped = 0usize;
        loop {
            let (start, _) = part.read_for_follower(offset, 1 << 20).map_err(|(e, _)| {
                tracing::error!(partition = part.index, offset, error = %e, "cannot read the offsets partition");
                GroupError::CoordinatorLoadInProgress
            })?;
            let ReadStart::Plan(plan) = start else { break };
            let bytes = plan.execute().map_err(|e| {
                tracing::error!(partition = part.index, offset, error = %e, "cannot read the offsets partition");
                GroupError::CoordinatorLoadInProgress
            })?;
            let next = BatchIter::new(&bytes).last().map(|(_, h)| h.next_offset());
            let Some(next) = next.filter(|n| *n > offset) else { break };
            let mut buf = bytes.clone();
            match RecordBatchDecoder::decode_all(&mut buf) {
                Ok(sets) => {
                    for set in &sets {
                        let mut above = Vec::new();
                        let mut end = offset;
                        for r in &set.records {
                            if r.offset < offset {
                                continue;
                            }
                            end = end.max(r.offset + 1);
                            let Some(key) = &r.key else { continue };
                            let value = r.value.as_deref();
                            if r.control {
                                // A transaction's marker: settles its offsets at the high watermark.
                                let Some(commit) = marker_is_commit(key) else { continue };
                                let producer_id = r.producer_id;
                                if r.offset >= at_load.high_watermark {
                                    pending.push_back((r.offset + 1, Settle::TxnEnd { producer_id, commit }));
                                } else {
                                    shard.end_txn(producer_id, commit);
                                }
                                continue;
                            }
                            if r.transactional {
                                // Pending until its marker either way: nothing reads it before.
                                if shard.replay_txn(r.offset, r.producer_id, key, value).is_err() {
                                    skipped += 1;
                                }
                                continue;
                            }
                            if r.offset >= at_load.high_watermark {
                                match Shard::offset_write(key, value) {
                                    Ok(Some(w)) => {
                                        above.push((r.offset, w));
                                        continue;
                                    }
                                    Ok(None) => {}
                                    Err(_) => {
                                        skipped += 1;
                                        continue;
                                    }
                                }
                            }
                            if shard.replay(r.offset, key, value).is_err() {
                                skipped += 1;
                            }
                        }
                        if !above.is_empty() {
                            pending.push_back((end, Settle::Offsets(above)));
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(partition = part.index, offset, error = %e, "skipping undecodable batches in the offsets partition");
                }
            }
            offset = next;
        }
        if skipped > 0 {
            tracing::warn!(partition = part.index, skipped, "skipped malformed records in the offsets partition");
        }
        shard.finish_load(now_ms());
        let log_end = part.offsets().map_or(at_load.log_end, |o| o.log_end);
        Ok((shard, pending, log_end))
    }

    /// Appends `writes` to the slot's partition (the shard's lock is held): the offset after
    /// the last record, or `None` for no writes.
    pub(super) fn write(
        &self,
        view: &MetadataView,
        slot: &Slot,
        st: &mut SlotState,
        writes: &[Write],
    ) -> Result<Option<i64>, GroupError> {
        self.write_as(view, slot, st, writes, None)
    }

    /// [`Self::write`], as a batch of a transactional producer with `txn` (TxnOffsetCommit):
    /// its sequence follows the producer's last batch in the partition (the shard's lock keeps
    /// every other writer of the partition out meanwhile).
    pub(super) fn write_as(
        &self,
        view: &MetadataView,
        slot: &Slot,
        st: &mut SlotState,
        writes: &[Write],
        txn: Option<TxnWrite>,
    ) -> Result<Option<i64>, GroupError> {
        if writes.is_empty() {
            return Ok(None);
        }
        let now = now_ms();
        let records: Vec<_> = writes.iter().map(|w| (Some(w.key().encode()), w.value())).collect();
        // Only the incarnation that loaded this shard may write through it.
        if slot.partition.leader_epoch().ok() != Some(slot.leader_epoch) {
            return Err(GroupError::NotCoordinator);
        }
        let encoded = match txn {
            None => encode_plain(&records, now, Compression::None),
            Some(t) => {
                let base_sequence =
                    slot.partition.next_sequence(t.producer_id, t.epoch).map_err(|_| GroupError::NotCoordinator)?;
                let producer = BatchProducer { producer_id: t.producer_id, producer_epoch: t.epoch, base_sequence };
                encode_transactional(&records, now, producer)
            }
        };
        let bytes = encoded.map_err(|e| {
            tracing::error!(error = %e, "cannot encode offsets records");
            GroupError::UnknownServerError
        })?;
        let topic = view.topic(OFFSETS_TOPIC).ok_or(GroupError::NotCoordinator)?;
        let batches = validate_produce(&bytes, topic.log_config.max_message_bytes).map_err(|e| {
            tracing::warn!(error = %e, "offsets records refused");
            GroupError::InvalidCommitOffsetSize
        })?;
        let r = slot
            .partition
            .append(&bytes, &batches, Some(topic.min_insync), now, txn, Flush::Now)
            .map_err(|e| store_error(&e))?;
        st.last_written = st.last_written.max(r.last_offset + 1);
        Ok(Some(r.last_offset + 1))
    }

    /// Waits until the ISR has the slot's partition up to `end` (`offsets.commit.timeout.ms`).
    pub(super) async fn replicated(&self, slot: &Slot, end: i64) -> Result<(), GroupError> {
        let timeout = Duration::from_millis(self.settings.commit_timeout_ms);
        match slot.partition.wait_for_hw(end, timeout).await {
            Ok(()) => Ok(()),
            Err(crate::partition::HwWait::TimedOut) => Err(GroupError::CoordinatorNotAvailable),
            Err(crate::partition::HwWait::NotLeader) => Err(GroupError::NotCoordinator),
        }
    }

    /// Appends `writes` and waits, unlocked, until the ISR has them: the shard locked again.
    pub(super) async fn store(
        &self,
        view: &MetadataView,
        slot: &Arc<Slot>,
        mut st: OwnedMutexGuard<SlotState>,
        writes: &[Write],
    ) -> (OwnedMutexGuard<SlotState>, Result<(), Stored>) {
        match self.write(view, slot, &mut st, writes) {
            Ok(Some(end)) => {
                let (st, r) = self.replicated_unlocked(slot, st, end).await;
                (st, r.map_err(Stored::NotReplicated))
            }
            Ok(None) => (st, Ok(())),
            Err(e) => (st, Err(Stored::NotAppended(e))),
        }
    }

    /// Appends offset writes and queues them to be applied once replicated: the offset after
    /// the last record, or `None` for no writes.
    pub(super) fn write_offsets(
        &self,
        view: &MetadataView,
        slot: &Slot,
        st: &mut SlotState,
        writes: Vec<Write>,
    ) -> Result<Option<i64>, GroupError> {
        let end = self.write(view, slot, st, &writes)?;
        if let Some(end) = end {
            let first = end - writes.len() as i64;
            let at = writes.into_iter().enumerate().map(|(i, w)| (first + i as i64, w)).collect();
            st.pending.push_back((end, Settle::Offsets(at)));
        }
        Ok(end)
    }
}

/// Why a store failed.
#[derive(Debug, Clone, Copy)]
pub(super) enum Stored {
    /// Not in the log: the shard is ahead of it.
    NotAppended(GroupError),
    /// In the log, not acknowledged by the ISR in time (or the leadership moved).
    NotReplicated(GroupError),
}

impl Stored {
    pub(super) fn error(self) -> GroupError {
        match self {
            Stored::NotAppended(e) | Stored::NotReplicated(e) => e,
        }
    }
}

pub(super) fn group_of(w: &Write) -> &str {
    match w {
        Write::Offset { group, .. } | Write::Group { group, .. } | Write::Consumer { group, .. } => group,
    }
}

/// Whether a control record's key is a COMMIT marker's (`None`: not a transaction marker).
fn marker_is_commit(key: &[u8]) -> Option<bool> {
    match key.get(2..4) {
        Some([0, 0]) => Some(false),
        Some([0, 1]) => Some(true),
        _ => None,
    }
}

/// Kafka's coordinator errors for a failed append to `__consumer_offsets`.
fn store_error(e: &BrokerError) -> GroupError {
    match e {
        BrokerError::NotLeader(_) | BrokerError::SelfFenced(_) | BrokerError::Storage(_) => GroupError::NotCoordinator,
        BrokerError::MessageTooLarge(_) | BrokerError::RecordListTooLarge(_) => GroupError::InvalidCommitOffsetSize,
        // A transactional commit whose producer was fenced, or whose partition left the
        // transaction before it was written (Kafka answers the same).
        BrokerError::InvalidProducerEpoch(_) => GroupError::InvalidProducerEpoch,
        BrokerError::InvalidTxnState(_) => GroupError::InvalidTxnState,
        _ => GroupError::CoordinatorNotAvailable,
    }
}
