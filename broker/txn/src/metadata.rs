//! What the coordinator knows of one transactional id ([`TxnMetadata`]) and the transitions it
//! may make ([`Transit`]), as Kafka's `TransactionMetadata` prepares them: a transition is
//! computed first, written to `__transaction_state`, and applied only once the write is
//! committed; while it is in flight the id has a pending transition and other requests for it
//! are told CONCURRENT_TRANSACTIONS.

use std::collections::BTreeSet;

use crate::error::TxnError;
use crate::records::{TopicPartitions, TxnValue};
use crate::state::TxnState;

/// Kafka's `RecordBatch.NO_PRODUCER_ID`.
pub const NO_PRODUCER_ID: i64 = -1;
/// Kafka's `RecordBatch.NO_PRODUCER_EPOCH`.
pub const NO_PRODUCER_EPOCH: i16 = -1;

/// A topic partition in a transaction.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition { topic: topic.into(), partition }
    }
}

/// A producer id and epoch, as InitProducerId and EndTxn (v5+) answer them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProducerIdAndEpoch {
    pub producer_id: i64,
    pub epoch: i16,
}

impl ProducerIdAndEpoch {
    /// What an answer without a producer carries (-1, -1).
    pub const NONE: ProducerIdAndEpoch = ProducerIdAndEpoch { producer_id: NO_PRODUCER_ID, epoch: NO_PRODUCER_EPOCH };

    pub fn new(producer_id: i64, epoch: i16) -> Self {
        ProducerIdAndEpoch { producer_id, epoch }
    }

    /// The producer an InitProducerId request (v3+) expects to resume (KIP-360): none when both
    /// fields are -1, INVALID_REQUEST when only one is.
    pub fn expected(producer_id: i64, epoch: i16) -> Result<Option<ProducerIdAndEpoch>, TxnError> {
        match (producer_id == NO_PRODUCER_ID, epoch == NO_PRODUCER_EPOCH) {
            (true, true) => Ok(None),
            (false, false) => Ok(Some(ProducerIdAndEpoch { producer_id, epoch })),
            _ => Err(TxnError::InvalidRequest),
        }
    }
}

/// Whether no further epoch may be handed out for a producer id: the coordinator keeps
/// `i16::MAX` for itself, to be able to fence the last producer.
pub fn is_epoch_exhausted(epoch: i16) -> bool {
    epoch >= i16::MAX - 1
}

/// The state of one transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMetadata {
    pub producer_id: i64,
    /// The producer id before the last transition (the one a rotation replaced).
    pub prev_producer_id: i64,
    /// The producer id an exhausted producer moves to when its transaction completes
    /// (transaction version 2).
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    /// The epoch before the last bump, to answer a retried InitProducerId or EndTxn; not
    /// stored, so -1 after loading.
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<TopicPartition>,
    /// When the transaction started (its first partition was added); -1 without one.
    pub start_timestamp: i64,
    pub last_update_timestamp: i64,
    /// The `transaction.version` of the client's last transition (0, 1 or 2).
    pub client_transaction_version: i16,
    /// An epoch fence (transaction version 1) failed to be written: the bumped epoch is in
    /// memory only, so the next fence does not bump again.
    pub(crate) has_failed_epoch_fence: bool,
}

/// A prepared transition: the whole state after it (Kafka's `TxnTransitMetadata`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transit {
    pub producer_id: i64,
    pub prev_producer_id: i64,
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<TopicPartition>,
    pub start_timestamp: i64,
    pub last_update_timestamp: i64,
    pub client_transaction_version: i16,
}

impl Transit {
    /// The record value that stores this state.
    pub fn value(&self) -> TxnValue {
        let mut partitions: Vec<TopicPartitions> = Vec::new();
        for tp in &self.partitions {
            match partitions.last_mut() {
                Some(last) if last.topic == tp.topic => last.partitions.push(tp.partition),
                _ => partitions.push(TopicPartitions { topic: tp.topic.clone(), partitions: vec![tp.partition] }),
            }
        }
        TxnValue {
            producer_id: self.producer_id,
            previous_producer_id: self.prev_producer_id,
            next_producer_id: self.next_producer_id,
            producer_epoch: self.producer_epoch,
            timeout_ms: self.timeout_ms,
            state: self.state,
            partitions,
            last_update_timestamp: self.last_update_timestamp,
            start_timestamp: self.start_timestamp,
            client_transaction_version: self.client_transaction_version,
        }
    }
}

impl TxnMetadata {
    /// A transactional id seen for the first time, with a fresh producer id and no epoch yet.
    pub fn new(producer_id: i64, timeout_ms: i32, now: i64) -> Self {
        TxnMetadata {
            producer_id,
            prev_producer_id: NO_PRODUCER_ID,
            next_producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            start_timestamp: -1,
            last_update_timestamp: now,
            client_transaction_version: 0,
            has_failed_epoch_fence: false,
        }
    }

    /// The metadata a stored value restores (partitions only outside Empty, as Kafka reads
    /// them; the last epoch is not stored).
    pub fn from_value(v: &TxnValue) -> Self {
        let partitions = if v.state == TxnState::Empty {
            BTreeSet::new()
        } else {
            v.partitions
                .iter()
                .flat_map(|tp| tp.partitions.iter().map(|p| TopicPartition::new(tp.topic.clone(), *p)))
                .collect()
        };
        TxnMetadata {
            producer_id: v.producer_id,
            prev_producer_id: v.previous_producer_id,
            next_producer_id: v.next_producer_id,
            producer_epoch: v.producer_epoch,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            timeout_ms: v.timeout_ms,
            state: v.state,
            partitions,
            start_timestamp: v.start_timestamp,
            last_update_timestamp: v.last_update_timestamp,
            client_transaction_version: v.client_transaction_version,
            has_failed_epoch_fence: false,
        }
    }

    pub fn is_epoch_exhausted(&self) -> bool {
        is_epoch_exhausted(self.producer_epoch)
    }

    /// Applies a transition whose record is committed.
    pub(crate) fn complete(&mut self, t: Transit) {
        self.producer_id = t.producer_id;
        self.prev_producer_id = t.prev_producer_id;
        self.next_producer_id = t.next_producer_id;
        self.producer_epoch = t.producer_epoch;
        self.last_producer_epoch = t.last_producer_epoch;
        self.timeout_ms = t.timeout_ms;
        self.state = t.state;
        self.partitions = t.partitions;
        self.start_timestamp = t.start_timestamp;
        self.last_update_timestamp = t.last_update_timestamp;
        self.client_transaction_version = t.client_transaction_version;
    }

    /// The current state as a transition to `state`, for the prepare methods to change.
    fn next(&self, state: TxnState) -> Transit {
        Transit {
            producer_id: self.producer_id,
            prev_producer_id: self.producer_id,
            next_producer_id: self.next_producer_id,
            producer_epoch: self.producer_epoch,
            last_producer_epoch: self.last_producer_epoch,
            timeout_ms: self.timeout_ms,
            state,
            partitions: self.partitions.clone(),
            start_timestamp: self.start_timestamp,
            last_update_timestamp: self.last_update_timestamp,
            client_transaction_version: self.client_transaction_version,
        }
    }

    /// Checks a prepared transition as Kafka's `prepareTransitionTo` does; a failure is a
    /// coordinator bug, answered UNKNOWN_SERVER_ERROR.
    fn check(&self, t: Transit) -> Result<Transit, TxnError> {
        let epoch_ok = t.state == TxnState::Dead || t.producer_epoch >= 0;
        if t.producer_id < 0 || !epoch_ok || !t.state.may_follow(self.state) {
            return Err(TxnError::UnknownServerError);
        }
        Ok(t)
    }

    /// The epoch that fences the current producer before the coordinator aborts its
    /// transaction: one more, unless a previous fence failed to be written (its bump was
    /// never answered to anyone) or the epoch is at its maximum.
    pub(crate) fn fence_epoch(&self) -> i16 {
        if self.has_failed_epoch_fence || self.producer_epoch == i16::MAX {
            self.producer_epoch
        } else {
            self.producer_epoch + 1
        }
    }

    /// InitProducerId on an idle id: the next epoch; with KIP-360's expected epoch, the same
    /// epoch again for a retry of a call that succeeded, PRODUCER_FENCED for a stale one.
    pub(crate) fn prepare_increment_epoch(
        &self,
        timeout_ms: i32,
        expected_epoch: Option<i16>,
        now: i64,
    ) -> Result<Transit, TxnError> {
        if self.is_epoch_exhausted() {
            return Err(TxnError::UnknownServerError);
        }
        let mut t = self.next(TxnState::Empty);
        let bumped = self.producer_epoch + 1;
        match expected_epoch {
            None => (t.producer_epoch, t.last_producer_epoch) = (bumped, NO_PRODUCER_EPOCH),
            Some(e) if self.producer_epoch == NO_PRODUCER_EPOCH || e == self.producer_epoch => {
                (t.producer_epoch, t.last_producer_epoch) = (bumped, self.producer_epoch)
            }
            Some(e) if e == self.last_producer_epoch => {}
            Some(_) => return Err(TxnError::ProducerFenced),
        }
        t.timeout_ms = timeout_ms;
        t.partitions.clear();
        t.start_timestamp = -1;
        t.last_update_timestamp = now;
        self.check(t)
    }

    /// InitProducerId when the epoch is exhausted: a new producer id at epoch 0.
    pub(crate) fn prepare_rotation(
        &self,
        producer_id: i64,
        timeout_ms: i32,
        now: i64,
        record_last_epoch: bool,
    ) -> Result<Transit, TxnError> {
        let mut t = self.next(TxnState::Empty);
        t.producer_id = producer_id;
        t.producer_epoch = 0;
        t.last_producer_epoch = if record_last_epoch { self.producer_epoch } else { NO_PRODUCER_EPOCH };
        t.timeout_ms = timeout_ms;
        t.partitions.clear();
        t.start_timestamp = -1;
        t.last_update_timestamp = now;
        self.check(t)
    }

    /// AddPartitionsToTxn: the transaction starts now unless it is already open.
    pub(crate) fn prepare_add_partitions(
        &self,
        added: &[TopicPartition],
        now: i64,
        client_version: i16,
    ) -> Result<Transit, TxnError> {
        let mut t = self.next(TxnState::Ongoing);
        if matches!(self.state, TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort) {
            t.start_timestamp = now;
        }
        t.partitions.extend(added.iter().cloned());
        t.last_update_timestamp = now;
        t.client_transaction_version = client_version;
        self.check(t)
    }

    /// EndTxn's decision. With transaction version 2 the epoch is bumped (so markers and the
    /// producer's next transaction carry a new one) and `next_producer_id` is where an
    /// exhausted producer goes once the transaction completes.
    pub(crate) fn prepare_abort_or_commit(
        &self,
        state: TxnState,
        client_version: i16,
        next_producer_id: i64,
        now: i64,
        no_partition_added: bool,
    ) -> Result<Transit, TxnError> {
        let mut t = self.next(state);
        if client_version >= 2 {
            // Never past i16::MAX: an abort at the maximum goes through unbumped.
            t.producer_epoch = self.producer_epoch.saturating_add(1);
            t.last_producer_epoch = self.producer_epoch;
        }
        // A version 2 client may abort with no partition added: the abort starts now.
        if no_partition_added {
            t.start_timestamp = now;
        }
        t.next_producer_id = next_producer_id;
        t.last_update_timestamp = now;
        t.client_transaction_version = client_version;
        self.check(t)
    }

    /// The Complete state after every marker is written; the producer moves to its next
    /// producer id (epoch 0) if one was allocated.
    pub(crate) fn prepare_complete(&self, now: i64) -> Result<Transit, TxnError> {
        let state =
            if self.state == TxnState::PrepareCommit { TxnState::CompleteCommit } else { TxnState::CompleteAbort };
        let mut t = self.next(state);
        if self.client_transaction_version >= 2 && self.next_producer_id != NO_PRODUCER_ID {
            t.producer_id = self.next_producer_id;
            t.producer_epoch = 0;
        }
        t.next_producer_id = NO_PRODUCER_ID;
        t.partitions.clear();
        t.last_update_timestamp = now;
        self.check(t)
    }

    /// Expiry: the id is removed once its tombstone is written.
    pub(crate) fn prepare_dead(&self) -> Result<Transit, TxnError> {
        let mut t = self.next(TxnState::Dead);
        t.partitions.clear();
        self.check(t)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn meta(state: TxnState, epoch: i16) -> TxnMetadata {
        TxnMetadata { state, producer_epoch: epoch, ..TxnMetadata::new(7, 1000, 0) }
    }

    #[test]
    fn expected_producer_needs_both_fields_or_neither() {
        assert_eq!(ProducerIdAndEpoch::expected(-1, -1), Ok(None));
        assert_eq!(ProducerIdAndEpoch::expected(5, 2), Ok(Some(ProducerIdAndEpoch::new(5, 2))));
        assert_eq!(ProducerIdAndEpoch::expected(5, -1), Err(TxnError::InvalidRequest));
        assert_eq!(ProducerIdAndEpoch::expected(-1, 0), Err(TxnError::InvalidRequest));
    }

    #[test]
    fn epochs_from_max_minus_one_are_exhausted() {
        assert!(!is_epoch_exhausted(i16::MAX - 2));
        assert!(is_epoch_exhausted(i16::MAX - 1));
        assert!(is_epoch_exhausted(i16::MAX));
    }

    #[test]
    fn transit_value_groups_partitions_by_topic() {
        let mut m = meta(TxnState::Ongoing, 3);
        m.partitions = [TopicPartition::new("b", 1), TopicPartition::new("a", 2), TopicPartition::new("a", 0)].into();
        let v = m.next(TxnState::Ongoing).value();
        assert_eq!(
            v.partitions,
            vec![
                TopicPartitions { topic: "a".into(), partitions: vec![0, 2] },
                TopicPartitions { topic: "b".into(), partitions: vec![1] },
            ]
        );
        assert_eq!(TxnMetadata::from_value(&v).partitions, m.partitions);
    }

    #[test]
    fn invalid_transitions_are_refused_not_applied() {
        // CompleteCommit only follows PrepareCommit; Dead never follows Ongoing.
        assert_eq!(meta(TxnState::Ongoing, 1).prepare_dead(), Err(TxnError::UnknownServerError));
        assert_eq!(
            meta(TxnState::Empty, 1).prepare_abort_or_commit(TxnState::PrepareCommit, 2, -1, 5, true),
            Err(TxnError::UnknownServerError)
        );
        // A new id has no epoch; only the Dead transition may keep it.
        assert!(meta(TxnState::Empty, -1).prepare_dead().is_ok());
    }

    #[test]
    fn version_two_end_bumps_the_epoch_and_never_overflows() {
        let t = meta(TxnState::Ongoing, 4).prepare_abort_or_commit(TxnState::PrepareCommit, 2, -1, 9, false).unwrap();
        assert_eq!((t.producer_epoch, t.last_producer_epoch, t.client_transaction_version), (5, 4, 2));
        let t = meta(TxnState::Ongoing, 4).prepare_abort_or_commit(TxnState::PrepareCommit, 0, -1, 9, false).unwrap();
        assert_eq!((t.producer_epoch, t.last_producer_epoch), (4, -1));
        let t =
            meta(TxnState::Ongoing, i16::MAX).prepare_abort_or_commit(TxnState::PrepareAbort, 2, -1, 9, false).unwrap();
        assert_eq!(t.producer_epoch, i16::MAX);
    }
}
