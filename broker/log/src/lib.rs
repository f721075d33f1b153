//! Oxbow's storage layer: partition logs on local disk, no network.
//!
//! - [`batch`]: v2 record batch headers, validation (CRC32C, sizes, counts) and in-place patching
//!   of base offset and leader epoch.
//! - [`segment`]: a `.log` file with its `.index`, `.timeindex` and `.txnindex`;
//!   [`segment::ActiveSegment`] is the only writable kind, [`segment::SealedSegment`] is read-only.
//! - [`index`]: the sparse indexes, memory-mapped through [`mmap`] (the crate's only `unsafe`).
//! - [`txn_index`]: the per-segment index of aborted transactions, in Kafka's format.
//! - [`log`]: one partition's log: append, read, roll, retention, recovery, flush, and (in
//!   `log/txn.rs`) transaction markers, aborted transactions and the last stable offset.
//! - [`cleaner`]: log compaction (plan under the lock, clean outside it, crash-safe swap).
//! - [`producer_state`]: idempotent producer sequences, open transactions and their snapshots;
//!   [`txn_state`] orders a partition's transactions for the first unstable offset.
//! - [`control`]: end-transaction markers (control batches) as Kafka writes them.
//! - [`checkpoint`]: Kafka-format checkpoint files written atomically.
//! - [`recompress`]: re-encoding for topics whose `compression.type` is not `producer`.

pub mod batch;
mod buffers;
pub mod checkpoint;
pub mod cleaner;
mod compression;
pub mod config;
pub mod control;
pub mod epochs;
pub mod error;
pub mod headers;
pub mod index;
pub mod log;
mod mmap;
pub mod producer_state;
pub mod recompress;
pub mod segment;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;
pub mod txn_index;
pub mod txn_state;

pub use config::{LogConfig, TargetCompression};
pub use error::{BatchError, LogError};
pub use log::{AppendResult, FileSlice, Flush, Log, OpenOptions, ReadPlan, ReadStart, RecoveryReport};
