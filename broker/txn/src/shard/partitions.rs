//! AddPartitionsToTxn and AddOffsetsToTxn: partitions join the open transaction (opening it),
//! and the verification a partition leader asks for before it accepts a transactional batch
//! (AddPartitionsToTxn v4+ with `VerifyOnly`, KIP-890 part 1).

use std::collections::BTreeSet;

use super::{Answer, Command, GROUP_METADATA_TOPIC, Then, Ticket, TxnShard};
use crate::error::TxnError;
use crate::metadata::TopicPartition;
use crate::state::TxnState;

/// One transaction of an AddPartitionsToTxn request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddPartitions {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub partitions: Vec<TopicPartition>,
    /// From [`super::client_version_for_add_partitions`].
    pub client_transaction_version: i16,
}

/// An AddOffsetsToTxn request, with the `__consumer_offsets` partition of its group (the group
/// coordinator's `partition_for`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddOffsets {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub offsets_partition: i32,
}

impl TxnShard {
    /// AddPartitionsToTxn for one transaction. Partitions already in an Ongoing transaction are
    /// answered at once; others are stored first.
    pub fn add_partitions(&mut self, ticket: Ticket, req: &AddPartitions, now: i64) -> Vec<Command> {
        self.try_add(ticket, req, now).unwrap_or_else(|e| vec![Command::Answer(ticket, Answer::AddPartitions(Err(e)))])
    }

    /// AddOffsetsToTxn: the group's offsets partition joins the transaction. Kafka handles it
    /// as a transaction version 0 AddPartitionsToTxn whatever the client speaks.
    pub fn add_offsets(&mut self, ticket: Ticket, req: &AddOffsets, now: i64) -> Vec<Command> {
        let add = AddPartitions {
            transactional_id: req.transactional_id.clone(),
            producer_id: req.producer_id,
            producer_epoch: req.producer_epoch,
            partitions: vec![TopicPartition::new(GROUP_METADATA_TOPIC, req.offsets_partition)],
            client_transaction_version: 0,
        };
        self.add_partitions(ticket, &add, now)
    }

    fn try_add(&mut self, ticket: Ticket, req: &AddPartitions, now: i64) -> Result<Vec<Command>, TxnError> {
        let id = req.transactional_id.as_str();
        if id.is_empty() {
            return Err(TxnError::InvalidRequest);
        }
        let e = self.txns.get(id).ok_or(TxnError::InvalidProducerIdMapping)?;
        let m = &e.meta;
        // Checked first: while a version 2 completion moves the producer to a new producer id,
        // the producer may already use the id that is only pending here.
        if e.pending.is_some() {
            return Err(TxnError::ConcurrentTransactions);
        }
        if m.producer_id != req.producer_id {
            return Err(TxnError::InvalidProducerIdMapping);
        }
        if m.producer_epoch != req.producer_epoch {
            return Err(TxnError::ProducerFenced);
        }
        if m.state.is_prepare() {
            return Err(TxnError::ConcurrentTransactions);
        }
        if m.state == TxnState::Ongoing && req.partitions.iter().all(|p| m.partitions.contains(p)) {
            return Ok(vec![Command::Answer(ticket, Answer::AddPartitions(Ok(())))]);
        }
        let t = m.prepare_add_partitions(&req.partitions, now, req.client_transaction_version)?;
        Ok(self.begin(id, t, Then::AddPartitions(ticket)))
    }

    /// Whether each partition is in the producer's open transaction (the verification of
    /// AddPartitionsToTxn v4+): TRANSACTION_ABORTABLE for one that is not. Reads only: a
    /// pending transition does not matter, the append that follows is checked again.
    pub fn verify_partitions(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[TopicPartition],
    ) -> Vec<Result<(), TxnError>> {
        match self.open_partitions(transactional_id, producer_id, producer_epoch) {
            Err(e) => vec![Err(e); partitions.len()],
            Ok(held) => partitions
                .iter()
                .map(|p| if held.contains(p) { Ok(()) } else { Err(TxnError::TransactionAbortable) })
                .collect(),
        }
    }

    fn open_partitions(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
    ) -> Result<&BTreeSet<TopicPartition>, TxnError> {
        if transactional_id.is_empty() {
            return Err(TxnError::InvalidRequest);
        }
        let m = self.get(transactional_id).ok_or(TxnError::InvalidProducerIdMapping)?;
        if m.producer_id != producer_id {
            Err(TxnError::InvalidProducerIdMapping)
        } else if m.producer_epoch != producer_epoch {
            Err(TxnError::ProducerFenced)
        } else if m.state.is_prepare() {
            Err(TxnError::ConcurrentTransactions)
        } else {
            Ok(&m.partitions)
        }
    }
}
