//! The partition leader's side of KIP-890 (Kafka's `AddPartitionsToTxnManager`): before a
//! transactional producer's first batch in a partition, the leader asks the producer's
//! transaction coordinator, wherever it runs, whether the partition is in the transaction
//! (AddPartitionsToTxn v5 with `VerifyOnly`), or, for transaction version 2 producers (Produce
//! v12+, TxnOffsetCommit v5), adds it (`VerifyOnly` false). A coordinator led by this broker is
//! asked directly.

use std::sync::Arc;
use std::time::Duration;

use oxbow_protocol::StrBytes;
use oxbow_protocol::messages::add_partitions_to_txn_request::{AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction};
use oxbow_protocol::messages::{AddPartitionsToTxnRequest, ProducerId, TopicName, TransactionalId};
use oxbow_txn::shard::TRANSACTION_STATE_TOPIC;
use oxbow_txn::{TopicPartition, TxnError, partition_for};

use super::TxnCoordinator;

/// The AddPartitionsToTxn version brokers send (Kafka 4.1 negotiates 4 to 5).
const VERSION: i16 = 5;
/// How long a coordinator on another broker has to answer.
const TIMEOUT: Duration = Duration::from_secs(30);

/// What the coordinator said of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The partition is in the transaction (added, for `add`).
    InTransaction,
    /// The coordinator's error code for it.
    Refused(i16),
    /// No answer: the coordinator is unknown, unreachable or did not answer in time.
    Unreachable,
}

/// An add that meets a transaction still completing is retried this often, for this long,
/// before CONCURRENT_TRANSACTIONS goes back to the producer (`add.partitions.to.txn.retry.
/// backoff.ms` and `.max.ms` in Kafka).
const ADD_RETRY_BACKOFF: Duration = Duration::from_millis(20);
const ADD_RETRY_MAX: Duration = Duration::from_millis(100);

impl TxnCoordinator {
    /// Verifies, or with `add` adds, `partitions` in `transactional_id`'s transaction at its
    /// coordinator: one verdict per partition, in order.
    pub async fn verify_at_coordinator(
        self: &Arc<Self>,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[TopicPartition],
        add: bool,
    ) -> Vec<Verdict> {
        let started = std::time::Instant::now();
        loop {
            let v = self.ask_coordinator(transactional_id, producer_id, producer_epoch, partitions, add).await;
            let concurrent = v.iter().any(|v| *v == Verdict::Refused(TxnError::ConcurrentTransactions.code()));
            if !(add && concurrent) || started.elapsed() >= ADD_RETRY_MAX {
                return v;
            }
            tokio::time::sleep(ADD_RETRY_BACKOFF).await;
        }
    }

    /// One round of [`Self::verify_at_coordinator`].
    async fn ask_coordinator(
        self: &Arc<Self>,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[TopicPartition],
        add: bool,
    ) -> Vec<Verdict> {
        let all = |v: Verdict| vec![v; partitions.len()];
        let Some(topic) = self.view.topic(TRANSACTION_STATE_TOPIC) else {
            return all(Verdict::Refused(TxnError::CoordinatorNotAvailable.code()));
        };
        let index = partition_for(transactional_id, topic.meta.partitions);
        let leader = usize::try_from(index).ok().and_then(|i| topic.states.get(i)).map_or(-1, |s| s.leader);
        if leader < 0 {
            return all(Verdict::Refused(TxnError::CoordinatorNotAvailable.code()));
        }
        if topic.led(index).is_ok() {
            return self.verify_here(transactional_id, producer_id, producer_epoch, partitions, add).await;
        }
        let mut txn = AddPartitionsToTxnTransaction::default();
        txn.transactional_id = TransactionalId(StrBytes::from_string(transactional_id.to_string()));
        txn.producer_id = ProducerId(producer_id);
        txn.producer_epoch = producer_epoch;
        txn.verify_only = !add;
        let mut by_topic: std::collections::BTreeMap<&str, Vec<i32>> = std::collections::BTreeMap::new();
        for tp in partitions {
            by_topic.entry(tp.topic.as_str()).or_default().push(tp.partition);
        }
        txn.topics = by_topic
            .into_iter()
            .map(|(name, ps)| {
                let mut t = AddPartitionsToTxnTopic::default();
                t.name = TopicName(StrBytes::from_string(name.to_string()));
                t.partitions = ps;
                t
            })
            .collect();
        let mut req = AddPartitionsToTxnRequest::default();
        req.transactions = vec![txn];
        let resp = match self.peers.send(leader, VERSION, &req, TIMEOUT).await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(coordinator = leader, error = %e, "transaction verification got no answer");
                return all(Verdict::Unreachable);
            }
        };
        if resp.error_code != 0 {
            return all(Verdict::Refused(resp.error_code));
        }
        let results = resp.results_by_transaction.iter().find(|r| r.transactional_id.as_str() == transactional_id);
        partitions
            .iter()
            .map(|tp| {
                let code = results
                    .into_iter()
                    .flat_map(|r| r.topic_results.iter())
                    .filter(|t| t.name.as_str() == tp.topic)
                    .flat_map(|t| t.results_by_partition.iter())
                    .find(|p| p.partition_index == tp.partition)
                    .map(|p| p.partition_error_code);
                match code {
                    Some(0) => Verdict::InTransaction,
                    Some(c) => Verdict::Refused(c),
                    None => Verdict::Refused(TxnError::UnknownServerError.code()),
                }
            })
            .collect()
    }

    /// [`Self::verify_at_coordinator`] when this broker is the coordinator.
    async fn verify_here(
        self: &Arc<Self>,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[TopicPartition],
        add: bool,
    ) -> Vec<Verdict> {
        let verdict = |r: &Result<(), TxnError>| match r {
            Ok(()) => Verdict::InTransaction,
            Err(e) => Verdict::Refused(e.code()),
        };
        if !add {
            let results = self.verify_partitions(transactional_id, producer_id, producer_epoch, partitions).await;
            return results.iter().map(verdict).collect();
        }
        let req = oxbow_txn::AddPartitions {
            transactional_id: transactional_id.to_string(),
            producer_id,
            producer_epoch,
            partitions: partitions.to_vec(),
            client_transaction_version: 2,
        };
        let this = self.clone();
        let r = self.detached(async move { this.add_partitions(req).await }).await;
        vec![verdict(&r); partitions.len()]
    }
}
