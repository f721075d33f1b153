//! A partition this broker leads: its log and replica state behind one lock, and a watch
//! channel carrying the high watermark to waiting producers (acks=all) and fetchers (long poll).
//!
//! The lock is held for in-memory work and page-cache writes; fetch reads are planned under it
//! and executed outside it.

use std::sync::Arc;

use oxbow_log::batch::ValidBatch;
use oxbow_log::{AppendResult, Log, LogConfig, ReadStart};
use oxbow_protocol::ResponseError;
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::errors::ApiError;
use crate::replica::ReplicaState;

struct Inner {
    log: Log,
    replica: ReplicaState,
}

impl Inner {
    fn offsets(&self) -> Offsets {
        Offsets {
            log_start: self.log.log_start_offset(),
            high_watermark: self.log.high_watermark(),
            log_end: self.log.log_end_offset(),
            leader_epoch: self.replica.leader_epoch,
        }
    }
}

pub struct Partition {
    pub topic: Arc<str>,
    pub index: i32,
    /// Index into `log.dirs` of the directory holding this partition.
    pub root: usize,
    inner: Mutex<Option<Inner>>,
    hw: watch::Sender<i64>,
}

/// Offsets of a partition at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offsets {
    pub log_start: i64,
    pub high_watermark: i64,
    pub log_end: i64,
    pub leader_epoch: i32,
}

fn gone() -> ApiError {
    ApiError::new(ResponseError::UnknownTopicOrPartition, "partition was deleted")
}

impl Partition {
    pub fn new(topic: Arc<str>, index: i32, root: usize, log: Log, replica: ReplicaState) -> Self {
        let (hw, _) = watch::channel(log.high_watermark());
        Self { topic, index, root, inner: Mutex::new(Some(Inner { log, replica })), hw }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> Result<R, ApiError>) -> Result<R, ApiError> {
        let mut g = self.inner.lock();
        let inner = g.as_mut().ok_or_else(gone)?;
        f(inner)
    }

    /// Runs `f` on the log (for admin operations and background jobs).
    pub fn with_log<R>(&self, f: impl FnOnce(&mut Log) -> R) -> Result<R, ApiError> {
        self.with(|i| Ok(f(&mut i.log)))
    }

    pub fn offsets(&self) -> Result<Offsets, ApiError> {
        self.with(|i| Ok(i.offsets()))
    }

    pub fn leader_epoch(&self) -> Result<i32, ApiError> {
        self.with(|i| Ok(i.replica.leader_epoch))
    }

    pub fn replica(&self) -> Result<ReplicaState, ApiError> {
        self.with(|i| Ok(i.replica.clone()))
    }

    /// Checks a client's `current_leader_epoch` (-1: not given).
    pub fn check_leader_epoch(&self, client_epoch: i32) -> Result<(), ApiError> {
        let ours = self.leader_epoch()?;
        if client_epoch < 0 || client_epoch == ours {
            Ok(())
        } else if client_epoch < ours {
            Err(ApiError::new(
                ResponseError::FencedLeaderEpoch,
                format!("leader epoch {client_epoch} is older than {ours}"),
            ))
        } else {
            Err(ApiError::new(
                ResponseError::UnknownLeaderEpoch,
                format!("leader epoch {client_epoch} is newer than {ours}"),
            ))
        }
    }

    /// Appends validated batches. `min_insync`: for acks=all, the ISR must be at least this big.
    pub fn append(
        &self,
        records: &[u8],
        batches: &[ValidBatch],
        min_insync: Option<i32>,
        now_ms: i64,
    ) -> Result<AppendResult, ApiError> {
        let (result, hw) = self.with(|i| {
            if let Some(m) = min_insync
                && !i.replica.enough_in_sync(m)
            {
                return Err(ApiError::new(
                    ResponseError::NotEnoughReplicas,
                    format!("{} in-sync replicas, min.insync.replicas={m}", i.replica.isr.len()),
                ));
            }
            let epoch = i.replica.leader_epoch;
            let r = i.log.append(records, batches, epoch, now_ms)?;
            let hw = i.replica.high_watermark(i.log.log_end_offset());
            i.log.set_high_watermark(hw);
            Ok((r, i.log.high_watermark()))
        })?;
        self.hw.send_if_modified(|v| {
            let changed = *v != hw;
            *v = hw;
            changed
        });
        Ok(result)
    }

    /// Waits until the high watermark reaches `offset` (acks=all). Returns false on timeout.
    pub async fn wait_for_hw(&self, offset: i64, timeout: std::time::Duration) -> bool {
        let mut rx = self.hw.subscribe();
        let wait = rx.wait_for(|hw| *hw >= offset);
        matches!(tokio::time::timeout(timeout, wait).await, Ok(Ok(_)))
    }

    pub fn subscribe(&self) -> watch::Receiver<i64> {
        self.hw.subscribe()
    }

    /// Plans a fetch read; also returns the offsets at that instant.
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        min_one: bool,
    ) -> Result<(ReadStart, Offsets), (ApiError, Option<Offsets>)> {
        let g = self.inner.lock();
        let Some(i) = g.as_ref() else { return Err((gone(), None)) };
        let offsets = i.offsets();
        match i.log.read(offset, max_bytes, offsets.high_watermark, min_one) {
            Ok(r) => Ok((r, offsets)),
            Err(e) => Err((e.into(), Some(offsets))),
        }
    }

    /// Takes the leader, leader epoch, replicas and ISR the metadata image gives.
    pub fn set_replica(&self, next: ReplicaState) {
        let _ = self.with(|i| {
            i.replica.update(next);
            Ok(())
        });
    }

    pub fn set_config(&self, config: LogConfig) {
        let _ = self.with(|i| {
            i.log.set_config(config);
            Ok(())
        });
    }

    /// Takes the log out (topic deletion or shutdown); later calls answer UNKNOWN_TOPIC_OR_PARTITION.
    pub fn take_log(&self) -> Option<Log> {
        self.inner.lock().take().map(|i| i.log)
    }
}
