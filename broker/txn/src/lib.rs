//! Transaction coordination for Oxbow, without I/O: Apache Kafka 4.1's transaction
//! coordinator as a state machine.
//!
//! - [`shard`]: all transactional ids of one `__transaction_state` partition
//!   ([`TxnShard`]): InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn (transaction
//!   versions 0 to 2), the coordinator's aborts of timed-out transactions, expiry of idle ids,
//!   and loading from the partition's records; requests and the time go in, [`Command`]s
//!   (records to append, answers, WriteTxnMarkers to send) come out. Also the coordinator
//!   partition of an id ([`partition_for`]).
//! - [`metadata`]: one transactional id's state and the transitions it may make.
//! - [`state`]: the transaction states, with Kafka's ids, names and allowed transitions.
//! - [`records`]: the key and value formats of `__transaction_state` (Kafka's schemas).
//! - [`error`]: the Kafka errors the coordinator answers with, and their codes.
//!
//! The broker's runtime (`oxbow-server`) appends records, waits for the high watermark, sends
//! markers and delivers answers; everything here is tested with plain values and a clock the
//! test controls.

pub mod error;
pub mod metadata;
pub mod records;
pub mod shard;
pub mod state;

pub use error::{TxnApi, TxnError, code_of};
pub use metadata::{ProducerIdAndEpoch, TopicPartition, TxnMetadata};
pub use records::{RecordError, TxnValue};
pub use shard::{
    AddOffsets, AddPartitions, Answer, Command, EndTxn, InitProducerId, Markers, ProducerIds, Ticket, TxnConfig,
    TxnResult, TxnShard, Write, partition_for,
};
pub use state::TxnState;
