//! Everything one partition of `__transaction_state` coordinates: the transactional ids that
//! hash to it, as Kafka's `TransactionCoordinator` and `TransactionStateManager` run them.
//!
//! The shard is a state machine. Requests, timer ticks and completions go in, each with the
//! current time; [`Command`]s come out, and the runtime executes them in order:
//!
//! - [`Command::Append`]: append the record to the partition, wait until the high watermark
//!   passes it, then call [`TxnShard::appended`] with `Ok(())` (or the append's error, see
//!   [`TxnError::from_append_error`]). A state change takes effect, and its request is answered,
//!   only then; meanwhile other requests for the same id are told CONCURRENT_TRANSACTIONS.
//! - [`Command::Answer`]: send the answer to the request holding that [`Ticket`].
//! - [`Command::SendMarkers`]: send WriteTxnMarkers to the partitions' leaders and call
//!   [`TxnShard::marker_written`] for each partition whose marker is written (or whose topic is
//!   gone). After the last one the shard asks to append the completion record.
//!
//! On becoming the partition's leader the runtime builds a shard, [`TxnShard::replay`]s the
//! partition from its start, and executes what [`TxnShard::finish_load`] returns (markers of
//! transactions the previous coordinator decided but did not complete). [`TxnShard::tick`]
//! aborts timed-out transactions and expires idle transactional ids.

mod end;
mod init;
mod partitions;

#[cfg(test)]
mod end_tests;
#[cfg(test)]
mod init_tests;
#[cfg(test)]
mod test_support;

use std::collections::BTreeMap;

use bytes::Bytes;

pub use end::EndTxn;
pub use init::InitProducerId;
pub use partitions::{AddOffsets, AddPartitions};

use crate::error::TxnError;
use crate::metadata::{ProducerIdAndEpoch, TopicPartition, Transit, TxnMetadata};
use crate::records::{RecordError, TxnValue, decode_record, encode_key};
use crate::state::TxnState;

/// The internal topic this coordinator stores transactions in.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";
/// The topic AddOffsetsToTxn adds a partition of.
pub const GROUP_METADATA_TOPIC: &str = "__consumer_offsets";

/// The broker settings the coordinator follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnConfig {
    /// `transaction.max.timeout.ms`
    pub max_timeout_ms: i32,
    /// `transactional.id.expiration.ms`
    pub transactional_id_expiration_ms: i64,
    /// The finalized `transaction.version` feature level: 1 or more stores flexible (v1)
    /// values, and the coordinator's own aborts follow its rules.
    pub transaction_version: i16,
}

impl Default for TxnConfig {
    fn default() -> Self {
        TxnConfig {
            max_timeout_ms: 900_000,
            transactional_id_expiration_ms: 7 * 24 * 3600 * 1000,
            transaction_version: 2,
        }
    }
}

impl TxnConfig {
    /// The `TransactionLogValue` version records are written in.
    pub fn value_version(&self) -> i16 {
        if self.transaction_version >= 1 { 1 } else { 0 }
    }
}

/// The transaction version a client of EndTxn `api_version` follows: v5 and later bump the
/// epoch on every commit and abort (2), earlier ones do not (0), whatever the cluster
/// finalized (Kafka's `TransactionVersion.transactionVersionForEndTxn`).
pub fn client_version_for_end_txn(api_version: i16) -> i16 {
    if api_version > 4 { 2 } else { 0 }
}

/// The transaction version of an AddPartitionsToTxn `api_version` (v4 and later come from
/// brokers acting for version 2 clients).
pub fn client_version_for_add_partitions(api_version: i16) -> i16 {
    if api_version > 3 { 2 } else { 0 }
}

/// The `__transaction_state` partition that coordinates `transactional_id`: Kafka's
/// `Utils.abs(transactionalId.hashCode) % partitions`, with Java's `String.hashCode` over UTF-16.
pub fn partition_for(transactional_id: &str, partitions: i32) -> i32 {
    oxbow_protocol::schema::coordinator_partition(transactional_id, partitions)
}

/// A request waiting for its answer; the runtime maps tickets to its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket(pub u64);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnResult {
    Commit,
    Abort,
}

/// Where new producer ids come from (a block the controller hands out, in the runtime). Only
/// called when a producer id is needed: a new transactional id, or an exhausted epoch.
pub trait ProducerIds {
    fn next_producer_id(&mut self) -> Result<i64, TxnError>;
}

impl<F: FnMut() -> Result<i64, TxnError>> ProducerIds for F {
    fn next_producer_id(&mut self) -> Result<i64, TxnError> {
        self()
    }
}

/// One record to append to the shard's partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub transactional_id: String,
    /// `None`: a tombstone.
    pub value: Option<TxnValue>,
    /// The value version to encode (see [`TxnConfig::value_version`]).
    pub version: i16,
}

impl Write {
    pub fn key(&self) -> Bytes {
        encode_key(&self.transactional_id)
    }

    pub fn value(&self) -> Option<Bytes> {
        self.value.as_ref().map(|v| v.encode_version(self.version))
    }
}

/// The WriteTxnMarkers to send for one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Markers {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub result: TxnResult,
    pub coordinator_epoch: i32,
    pub partitions: Vec<TopicPartition>,
}

/// An answer to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    InitProducerId(Result<ProducerIdAndEpoch, TxnError>),
    /// AddPartitionsToTxn (the same for every partition of the transaction) and AddOffsetsToTxn.
    AddPartitions(Result<(), TxnError>),
    /// The producer id and epoch to continue with: EndTxn v5+ carry them; for a version 0 or 1
    /// client they are -1 ([`ProducerIdAndEpoch::NONE`]).
    EndTxn(Result<ProducerIdAndEpoch, TxnError>),
}

/// What the runtime must do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Append(Write),
    Answer(Ticket, Answer),
    SendMarkers(Markers),
}

/// What a written transition leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Then {
    InitProducerId(Ticket),
    AddPartitions(Ticket),
    /// A commit or abort decided: answer, then send its markers.
    Prepare {
        reply: Reply,
        /// Transaction version 1's fence bumped the epoch in memory: if the write fails, the
        /// next fence must not bump again.
        failed_fence_sticks: bool,
    },
    /// The completion record, computed when the markers went out; `appending` once it is
    /// asked to be written.
    Complete {
        appending: bool,
    },
    Expire,
}

/// Who waits for a commit or abort.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reply {
    /// The coordinator's own abort of a timed-out transaction.
    Nobody,
    EndTxn {
        ticket: Ticket,
        /// A version 2 client learns the producer id and epoch to continue with.
        with_producer: bool,
    },
    /// InitProducerId found an ongoing transaction: it is told CONCURRENT_TRANSACTIONS once the
    /// abort is decided, and retries.
    InitProducerId(Ticket),
}

impl Reply {
    fn done(self, next: ProducerIdAndEpoch) -> Vec<Command> {
        match self {
            Reply::Nobody => Vec::new(),
            Reply::EndTxn { ticket, with_producer } => {
                let pe = if with_producer { next } else { ProducerIdAndEpoch::NONE };
                vec![Command::Answer(ticket, Answer::EndTxn(Ok(pe)))]
            }
            Reply::InitProducerId(t) => {
                vec![Command::Answer(t, Answer::InitProducerId(Err(TxnError::ConcurrentTransactions)))]
            }
        }
    }

    fn failed(self, e: TxnError) -> Vec<Command> {
        match self {
            Reply::Nobody => Vec::new(),
            Reply::EndTxn { ticket, .. } => vec![Command::Answer(ticket, Answer::EndTxn(Err(e)))],
            Reply::InitProducerId(t) => vec![Command::Answer(t, Answer::InitProducerId(Err(e)))],
        }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    meta: TxnMetadata,
    /// The transition being written (Kafka's pending state) and what follows it.
    pending: Option<(Transit, Then)>,
}

/// The transactional ids of one `__transaction_state` partition.
#[derive(Debug, Clone)]
pub struct TxnShard {
    cfg: TxnConfig,
    /// The partition's leader epoch, which markers carry so leaders can refuse a deposed
    /// coordinator.
    coordinator_epoch: i32,
    txns: BTreeMap<String, Entry>,
}

impl TxnShard {
    pub fn new(cfg: TxnConfig, coordinator_epoch: i32) -> Self {
        TxnShard { cfg, coordinator_epoch, txns: BTreeMap::new() }
    }

    pub fn config(&self) -> &TxnConfig {
        &self.cfg
    }

    /// The state of a transactional id (DescribeTransactions).
    pub fn get(&self, transactional_id: &str) -> Option<&TxnMetadata> {
        self.txns.get(transactional_id).map(|e| &e.meta)
    }

    /// The state a transactional id is moving to, while its record is being written.
    pub fn pending_state(&self, transactional_id: &str) -> Option<TxnState> {
        self.txns.get(transactional_id)?.pending.as_ref().map(|(t, _)| t.state)
    }

    /// Every transactional id, in order (ListTransactions).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &TxnMetadata)> {
        self.txns.iter().map(|(id, e)| (id.as_str(), &e.meta))
    }

    /// Replays one record of the partition while loading: a value replaces the id's state, a
    /// tombstone removes it. Unknown key versions are skipped; a malformed record is an error
    /// the caller logs and skips.
    pub fn replay(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), RecordError> {
        match decode_record(key, value)? {
            None => {}
            Some((id, None)) => {
                self.txns.remove(&id);
            }
            Some((id, Some(v))) => {
                self.txns.insert(id, Entry { meta: TxnMetadata::from_value(&v), pending: None });
            }
        }
        Ok(())
    }

    /// Ends loading: transactions left in PrepareCommit or PrepareAbort have their markers
    /// (re)sent, or their completion written when they have no partition left.
    pub fn finish_load(&mut self, now: i64) -> Vec<Command> {
        let prepared: Vec<String> = self
            .txns
            .iter()
            .filter(|(_, e)| e.meta.state.is_prepare() && e.pending.is_none())
            .map(|(id, _)| id.clone())
            .collect();
        prepared.iter().flat_map(|id| self.begin_completion(id, now).map(|(_, c)| c).unwrap_or_default()).collect()
    }

    /// A record this shard asked for is committed (`Ok`) or failed to be appended.
    pub fn appended(&mut self, transactional_id: &str, result: Result<(), TxnError>, now: i64) -> Vec<Command> {
        let version = self.cfg.value_version();
        let Some(e) = self.txns.get_mut(transactional_id) else { return Vec::new() };
        let Some((t, then)) = e.pending.take() else { return Vec::new() };
        let answer = |ticket, a| vec![Command::Answer(ticket, a)];
        match (then, result) {
            (Then::InitProducerId(ticket), Ok(())) => {
                let pe = ProducerIdAndEpoch::new(t.producer_id, t.producer_epoch);
                e.meta.complete(t);
                answer(ticket, Answer::InitProducerId(Ok(pe)))
            }
            (Then::InitProducerId(ticket), Err(err)) => answer(ticket, Answer::InitProducerId(Err(err))),
            (Then::AddPartitions(ticket), Ok(())) => {
                e.meta.complete(t);
                answer(ticket, Answer::AddPartitions(Ok(())))
            }
            (Then::AddPartitions(ticket), Err(err)) => answer(ticket, Answer::AddPartitions(Err(err))),
            (Then::Prepare { reply, .. }, Ok(())) => {
                e.meta.complete(t);
                match self.begin_completion(transactional_id, now) {
                    Ok((next, markers)) => reply.done(next).into_iter().chain(markers).collect(),
                    Err(err) => reply.failed(err),
                }
            }
            (Then::Prepare { reply, failed_fence_sticks }, Err(err)) => {
                e.meta.has_failed_epoch_fence |= failed_fence_sticks;
                reply.failed(err)
            }
            (Then::Complete { appending: false }, _) => {
                // Not asked for yet: a stray completion.
                e.pending = Some((t, Then::Complete { appending: false }));
                Vec::new()
            }
            (Then::Complete { .. }, Ok(())) => {
                e.meta.complete(t);
                Vec::new()
            }
            (Then::Complete { .. }, Err(TxnError::CoordinatorNotAvailable)) => {
                // Kafka retries the completion until the log takes it.
                let w = Write { transactional_id: transactional_id.to_string(), value: Some(t.value()), version };
                e.pending = Some((t, Then::Complete { appending: true }));
                vec![Command::Append(w)]
            }
            // No longer the coordinator (or worse): whoever loads the partition next completes
            // the transaction from its Prepare record.
            (Then::Complete { .. }, Err(_)) => Vec::new(),
            (Then::Expire, Ok(())) => {
                self.txns.remove(transactional_id);
                Vec::new()
            }
            (Then::Expire, Err(_)) => Vec::new(),
        }
    }

    /// The marker of `partition` is written for the transaction of this producer (or the
    /// partition is gone). Acknowledgements that do not match the transaction being completed
    /// are ignored.
    pub fn marker_written(
        &mut self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partition: &TopicPartition,
    ) -> Vec<Command> {
        let version = self.cfg.value_version();
        let Some(e) = self.txns.get_mut(transactional_id) else { return Vec::new() };
        let Some((t, then @ Then::Complete { appending: false })) = &mut e.pending else { return Vec::new() };
        let m = &mut e.meta;
        if !m.state.is_prepare() || m.producer_id != producer_id || m.producer_epoch != producer_epoch {
            return Vec::new();
        }
        if !m.partitions.remove(partition) || !m.partitions.is_empty() {
            return Vec::new();
        }
        *then = Then::Complete { appending: true };
        vec![Command::Append(Write { transactional_id: transactional_id.to_string(), value: Some(t.value()), version })]
    }

    /// The periodic work: [`TxnShard::abort_timed_out`], then [`TxnShard::remove_expired`].
    /// Kafka runs them every 10 s and every hour
    /// (`transaction.abort.timed.out.transaction.cleanup.interval.ms`,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms`).
    pub fn tick(&mut self, now: i64) -> Vec<Command> {
        let mut out = self.abort_timed_out(now);
        out.extend(self.remove_expired(now));
        out
    }

    /// Aborts every Ongoing transaction open for longer than its timeout, fencing its producer
    /// first (nobody is answered).
    pub fn abort_timed_out(&mut self, now: i64) -> Vec<Command> {
        let timed_out: Vec<String> = self
            .txns
            .iter()
            .filter(|(_, e)| {
                e.pending.is_none()
                    && e.meta.state == TxnState::Ongoing
                    && e.meta.start_timestamp.saturating_add(i64::from(e.meta.timeout_ms)) < now
            })
            .map(|(id, _)| id.clone())
            .collect();
        timed_out.iter().flat_map(|id| self.fence_and_abort(id, now, Reply::Nobody)).collect()
    }

    /// Writes tombstones for transactional ids idle (Empty or Complete) for longer than
    /// `transactional.id.expiration.ms`; each is removed once its tombstone is committed.
    pub fn remove_expired(&mut self, now: i64) -> Vec<Command> {
        let (version, expiry) = (self.cfg.value_version(), self.cfg.transactional_id_expiration_ms);
        let mut out = Vec::new();
        for (id, e) in &mut self.txns {
            let idle = e.meta.state.expiration_allowed() && e.meta.last_update_timestamp <= now.saturating_sub(expiry);
            if e.pending.is_some() || !idle {
                continue;
            }
            if let Ok(t) = e.meta.prepare_dead() {
                e.pending = Some((t, Then::Expire));
                out.push(Command::Append(Write { transactional_id: id.clone(), value: None, version }));
            }
        }
        out
    }

    /// Sets the pending transition and asks for its record.
    fn begin(&mut self, id: &str, t: Transit, then: Then) -> Vec<Command> {
        let version = self.cfg.value_version();
        let Some(e) = self.txns.get_mut(id) else { return Vec::new() };
        let w = Write { transactional_id: id.to_string(), value: Some(t.value()), version };
        e.pending = Some((t, then));
        vec![Command::Append(w)]
    }

    /// A Prepare state is written: compute the completion, and send the markers (or write the
    /// completion at once when there is no partition). Returns the producer the client
    /// continues with.
    fn begin_completion(&mut self, id: &str, now: i64) -> Result<(ProducerIdAndEpoch, Vec<Command>), TxnError> {
        let (version, coordinator_epoch) = (self.cfg.value_version(), self.coordinator_epoch);
        let e = self.txns.get_mut(id).ok_or(TxnError::UnknownServerError)?;
        e.meta.has_failed_epoch_fence = false;
        let t = e.meta.prepare_complete(now)?;
        let next = ProducerIdAndEpoch::new(t.producer_id, t.producer_epoch);
        let m = &e.meta;
        let cmd = if m.partitions.is_empty() {
            let w = Write { transactional_id: id.to_string(), value: Some(t.value()), version };
            e.pending = Some((t, Then::Complete { appending: true }));
            Command::Append(w)
        } else {
            let markers = Markers {
                transactional_id: id.to_string(),
                producer_id: m.producer_id,
                producer_epoch: m.producer_epoch,
                result: if m.state == TxnState::PrepareCommit { TxnResult::Commit } else { TxnResult::Abort },
                coordinator_epoch,
                partitions: m.partitions.iter().cloned().collect(),
            };
            e.pending = Some((t, Then::Complete { appending: false }));
            Command::SendMarkers(markers)
        };
        Ok((next, vec![cmd]))
    }
}
