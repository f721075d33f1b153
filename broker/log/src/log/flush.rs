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

/// Counts a flush that took `took`: [`Log::flush`] and [`PlannedFlush::sync`] count theirs.
pub fn record_flush(took: Duration) {
    FLUSHES.fetch_add(1, Ordering::Relaxed);
    FLUSH_MICROS.fetch_add(u64::try_from(took.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
}

/// (flushes, their total time in microseconds) since the process started.
pub fn flush_stats() -> (u64, u64) {
    (FLUSHES.load(Ordering::Relaxed), FLUSH_MICROS.load(Ordering::Relaxed))
}

/// What an append does when `flush.messages` calls for a flush.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flush {
    /// Flush inside the append, under the caller's lock (followers, markers, the coordinators'
    /// own writes).
    Now,
    /// Leave it to the caller (the produce path): it takes [`Log::owed_flush`], syncs the
    /// files without holding the log, and reports [`Log::flushed`]. Until then the high
    /// watermark stays below the append, so that no consumer reads what a power cut could take
    /// back (as when the append flushes itself); the appends of many partitions, and of
    /// requests in flight together, then sync side by side.
    Owed,
}

/// A flush planned under the log's lock and done without it: [`PlannedFlush::sync`] the
/// files, then report [`Log::flushed`]. Either the flush an append left to its caller
/// ([`Log::owed_flush`]) or the background sync of sealed segments ([`Log::pending_flush`]).
#[derive(Debug)]
pub struct PlannedFlush {
    pub files: Vec<Arc<File>>,
    /// The files hold everything below this offset once synced.
    pub upto: i64,
    truncations: u64,
    /// An owed flush (the high watermark waits for it), not only sealed segments.
    owed: bool,
}

impl PlannedFlush {
    /// Syncs the files (blocking; without the log's lock). Counted as one log flush.
    pub fn sync(&self) -> std::io::Result<()> {
        let started = Instant::now();
        for f in &self.files {
            f.sync_data()?;
        }
        record_flush(started.elapsed());
        Ok(())
    }
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
        self.flushed_end = self.log_end_offset();
        self.owed_from = None;
        Ok(())
    }

    /// Whether an append left a flush owed that has not moved on for `after_ms` (its
    /// caller's sync failed; one in flight is normally done well within that).
    pub fn owed_flush_stale(&self, now_ms: i64, after_ms: i64) -> bool {
        self.owed_from.is_some() && now_ms - self.owed_since_ms >= after_ms
    }

    /// The flush an append left owed ([`Flush::Owed`]), if one is: every file
    /// written since the last flush, and the log end it covers. The caller syncs the files
    /// without holding the log, then reports [`Log::flushed`]. The active segment's
    /// transaction index (written only by markers, which flush themselves) is synced here.
    pub fn owed_flush(&mut self) -> Result<Option<PlannedFlush>> {
        if self.owed_from.is_none() {
            return Ok(None);
        }
        self.active.core.txn_index.sync()?;
        let sealed = self.sealed.values().filter(|s| !s.flushed).flat_map(|s| s.unsynced_files());
        let files = sealed.chain(std::iter::once(self.active.core.file.clone())).collect();
        Ok(Some(PlannedFlush { files, upto: self.log_end_offset(), truncations: self.truncations, owed: true }))
    }

    /// The files of `done` were synced: everything below its end is on disk. After an owed
    /// flush the high watermark may pass it (the caller moves it). A flush planned before a
    /// truncation, or an owed one overtaken by a later one, changes nothing.
    pub fn flushed(&mut self, done: &PlannedFlush, now_ms: i64) {
        if done.truncations != self.truncations {
            return;
        }
        if !done.owed {
            self.mark_flushed(done.upto);
            return;
        }
        if done.upto <= self.flushed_end {
            return;
        }
        self.mark_flushed(done.upto);
        self.flushed_end = done.upto;
        self.last_flush_ms = now_ms;
        let leo = self.log_end_offset();
        self.unflushed_messages = (leo - done.upto).max(0);
        self.owed_from = match self.owed_from {
            // Appends after the plan owe the rest; each of their callers flushes it.
            Some(from) if leo > done.upto => Some(from.max(done.upto)),
            _ => None,
        };
        self.owed_since_ms = now_ms;
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

    /// The background sync of sealed segments written but not yet synced (each log file, and
    /// its transaction index if it holds unsynced entries), up to the offset those segments end
    /// at: the caller syncs them without holding the log, then reports [`Log::flushed`]. As
    /// Kafka flushes a rolled segment's transaction index with the segment, in the background.
    pub fn pending_flush(&self) -> Option<PlannedFlush> {
        let pending: Vec<&SealedSegment> = self.sealed.values().filter(|s| !s.flushed).collect();
        let upto = pending.last()?.core.next_offset;
        let files = pending.iter().flat_map(|s| s.unsynced_files()).collect();
        Some(PlannedFlush { files, upto, truncations: self.truncations, owed: false })
    }

    /// Records that every sealed segment below `upto` is on disk.
    pub(super) fn mark_flushed(&mut self, upto: i64) {
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
