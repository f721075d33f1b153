//! Consumer group coordination for Oxbow, without I/O.
//!
//! - [`classic`]: one group under the classic rebalance protocol (JoinGroup, SyncGroup,
//!   Heartbeat, LeaveGroup) as a state machine: events and the time in, answers and writes out.
//! - [`consumer`]: one group under the consumer group protocol (KIP-848): ConsumerGroupHeartbeat,
//!   member epochs, incremental assignment; [`assignor`]: its server-side assignors.
//! - [`shard`]: all groups and committed offsets of one `__consumer_offsets` partition, rebuilt
//!   from its records; the coordinator partition of a group ([`shard::partition_for`]).
//! - [`txn_offsets`]: offsets committed by open transactions (TxnOffsetCommit), until their
//!   COMMIT or ABORT marker.
//! - [`records`]: the key and value formats of `__consumer_offsets` (Apache Kafka's schemas).
//!
//! The broker's runtime (`oxbow-server`) owns sockets, timers and the log; everything here is
//! tested with plain values and a clock the test controls.

pub mod assignor;
pub mod classic;
pub mod consumer;
pub mod error;
pub mod records;
pub mod shard;
pub mod txn_offsets;

pub use classic::{ClassicGroup, GroupConfig, GroupState, Out, Ticket};
pub use error::{Answer, GroupError, answer_code, code_of};
pub use shard::{OffsetConfig, Shard, Write, partition_for};
