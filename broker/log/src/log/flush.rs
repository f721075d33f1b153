//! Durability of a partition log: `flush.ms`/`flush.messages` flushes, the background flush
//! of sealed segments outside the lock, the recovery point, and the producer snapshots recovery
//! may need.

use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::checkpoint::write_atomic;
use crate::error::Result;
use crate::log::{Log, list_offsets, snapshot_path, txn};
use crate::segment::SealedSegment;

/// Every log flush of this process (Kafka's LogFlushStats, a process-wide timer too): how many,
/// and their total time in microseconds.
static FLUSHES: AtomicU64 = AtomicU64::new(0);
static FLUSH_MICROS: AtomicU64 = AtomicU64::new(0);

/// Counts a flush that took `took`: [`Log::flush`] counts its own; a caller that syncs the
/// files of [`Log::pending_flush`] counts that sync.
pub fn record_flush(took: Duration) {
    FLUSHES.fetch_add(1, Ordering::Relaxed);
    FLUSH_MICROS.fetch_add(u64::try_from(took.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
}

/// (flushes, their total time in microseconds) since the process started.
pub fn flush_stats() -> (u64, u64) {
    (FLUSHES.load(Ordering::Relaxed), FLUSH_MICROS.load(Ordering::Relaxed))
}

impl Log {
    /// Whether `flush.ms` says the log is due for a flush.
    pub fn flush_due(&self, now_ms: i64) -> bool {
        self.unflushed_messages > 0
            && self.config.flush_ms != i64::MAX
            && now_ms - self.last_flush_ms >= self.config.flush_ms
    }

    /// fsyncs everything written so far and moves the recovery point to the log end (or to the
    /// first segment whose transaction index awaits a rebuild, see `Log::txn_rebuild_floor`).
    pub fn flush(&mut self, now_ms: i64) -> Result<()> {
        let started = Instant::now();
        for s in self.sealed.values_mut().filter(|s| !s.flushed) {
            s.sync()?;
            s.flushed = true;
        }
        self.active.sync()?;
        record_flush(started.elapsed());
        self.unflushed_messages = 0;
        self.last_flush_ms = now_ms;
        self.recovery_point = self.log_end_offset().min(self.txn_rebuild_floor());
        Ok(())
    }

    /// The base offset of the first segment whose transaction index must be rebuilt from the
    /// log (an index write failed after its marker was written), `i64::MAX` if none. The
    /// recovery point stays at or below it, so that a crash rescans that segment and rebuilds
    /// its index; [`Log::close`] rebuilds it before a clean shutdown.
    pub(super) fn txn_rebuild_floor(&self) -> i64 {
        txn::segment_cores(&self.sealed, &self.active)
            .filter(|c| c.txn_rebuild)
            .map(|c| c.base_offset)
            .min()
            .unwrap_or(i64::MAX)
    }

    /// Files of sealed segments written but not yet synced (each log file, and its transaction
    /// index if it holds unsynced entries), and the offset those segments end at: the caller
    /// syncs them without holding the log and then calls [`Log::mark_flushed`]. As Kafka flushes
    /// a rolled segment's transaction index with the segment, in the background.
    pub fn pending_flush(&self) -> Option<(Vec<Arc<File>>, i64)> {
        let pending: Vec<&SealedSegment> = self.sealed.values().filter(|s| !s.flushed).collect();
        let upto = pending.last()?.core.next_offset;
        Some((pending.iter().flat_map(|s| s.unsynced_files()).collect(), upto))
    }

    /// Records that every sealed segment below `upto` is on disk (the files
    /// [`Log::pending_flush`] returned were synced).
    pub fn mark_flushed(&mut self, upto: i64) {
        for s in self.sealed.values_mut().filter(|s| s.core.next_offset <= upto) {
            s.mark_flushed();
        }
        if self.sealed.values().all(|s| s.flushed) {
            self.recovery_point = self.recovery_point.max(upto);
        }
        self.recovery_point = self.recovery_point.min(self.txn_rebuild_floor());
    }

    /// The recovery point to checkpoint: everything below it is on disk. Each call is taken to
    /// be a hand-off to the checkpoint writer (the broker's `recovery-point-offset-checkpoint`,
    /// the only caller it has), which writes the value after releasing the log; see
    /// `Log::write_producer_snapshot`.
    pub fn recovery_point(&self) -> i64 {
        let mut handed = self.checkpointed.lock();
        *handed = [handed[1], self.recovery_point];
        self.recovery_point
    }

    /// The lowest recovery point the checkpoint file may hold: the value handed to the writer
    /// last once its write completes, the one before while that write is in flight (checkpoint
    /// rounds do not overlap, so the write of the one before has completed); until two values
    /// were handed out, the one read from the file at open. Never above the current recovery
    /// point (a truncation lowers it).
    fn checkpointed_recovery_point(&self) -> i64 {
        let handed = self.checkpointed.lock();
        handed[0].min(handed[1]).min(self.recovery_point)
    }

    /// Writes the producer snapshot at `offset` and deletes those recovery can no longer need.
    ///
    /// After a crash, recovery rescans from the first segment not wholly below the checkpointed
    /// recovery point and replays producer state from the newest snapshot at or below that
    /// segment's base (`Log::load_producer_state`); without one it replays the whole log. So
    /// that snapshot and every later one are kept, with the two newest. The recovery point that
    /// counts is the one in the checkpoint file, not the in-memory one, which every flush moves
    /// ahead of it; the log cannot see the file, so it keeps the lowest value the file may
    /// hold ([`Log::recovery_point`] hands values to the writer).
    pub(super) fn write_producer_snapshot(&self, offset: i64) -> Result<()> {
        write_atomic(&snapshot_path(&self.dir, offset), &self.producers.to_snapshot())?;
        let checkpointed = self.checkpointed_recovery_point();
        // Sealed segments ending at or below it are trusted; the active one is always rescanned.
        let rescan_from = self
            .sealed
            .values()
            .find(|s| s.core.next_offset > checkpointed)
            .map_or(self.active.core.base_offset, |s| s.core.base_offset);
        let snaps = list_offsets(&self.dir, "snapshot")?;
        let needed = snaps.iter().rev().find(|&&o| o <= rescan_from).copied().unwrap_or(i64::MIN);
        if snaps.len() > 2 {
            for o in snaps[..snaps.len() - 2].iter().filter(|o| **o < needed) {
                let _ = std::fs::remove_file(snapshot_path(&self.dir, *o));
            }
        }
        Ok(())
    }
}
