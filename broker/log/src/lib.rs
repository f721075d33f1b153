//! Oxbow's storage layer: partition logs on local disk, no network.
//!
//! - [`batch`]: v2 record batch headers, validation (CRC32C, sizes, counts) and in-place patching
//!   of base offset and leader epoch.
//! - [`segment`]: a `.log` file with its `.index` and `.timeindex`; [`segment::ActiveSegment`]
//!   is the only writable kind, [`segment::SealedSegment`] is read-only.
//! - [`index`]: the sparse indexes, memory-mapped through [`mmap`] (the crate's only `unsafe`).
//! - [`log`]: one partition's log: append, read, roll, retention, recovery, flush.
//! - [`cleaner`]: log compaction (plan under the lock, clean outside it, crash-safe swap).
//! - [`producer_state`]: idempotent producer sequences and their snapshots.
//! - [`checkpoint`]: Kafka-format checkpoint files written atomically.
//! - [`recompress`]: re-encoding for topics whose `compression.type` is not `producer`.

pub mod batch;
pub mod checkpoint;
pub mod cleaner;
pub mod config;
pub mod epochs;
pub mod error;
pub mod index;
pub mod log;
mod mmap;
pub mod producer_state;
pub mod recompress;
pub mod segment;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;

pub use config::{LogConfig, TargetCompression};
pub use error::{BatchError, LogError};
pub use log::{AppendResult, Log, OpenOptions, ReadPlan, ReadStart, RecoveryReport};
