//! Log compaction (`cleanup.policy=compact`): keep the latest record of every key.
//!
//! A pass has three steps so that the partition lock is held only for the first and last:
//! 1. [`Log::plan_clean`] (under the lock) picks the sealed segments to clean: everything from
//!    the log start up to the end of the cleanable range (below the last stable offset, so
//!    every transaction in it is decided, older than `min.compaction.lag.ms`, never the active
//!    segment), if the dirty part (after the last pass) is at least `min.cleanable.dirty.ratio`
//!    of it, or older than `max.compaction.lag.ms`. It reads no file: it takes readers of the
//!    transaction indexes from the first planned segment on (the entries written so far; an
//!    index only grows, and a rebuild renames a new file over it) and the segments' files.
//!    Sealed segments never change, so they can be read unlocked.
//! 2. [`clean`] (no lock) maps each key of the dirty part to its latest offset, then rewrites
//!    every planned segment into `.cleaning/`, keeping a record if it is the latest for its
//!    key, dropping records without a key and tombstones older than `delete.retention.ms`.
//!    Batches of aborted transactions are dropped and never count as a key's latest value, as
//!    Kafka's cleaner does: the aborted transactions of the range are read from the indexes
//!    and walked in offset order with the batches ([`txn::CleanedTxns`], Kafka's
//!    `CleanedTransactionMetadata`). Control batches (markers) are all kept, so a cleaned
//!    segment keeps its `.txnindex` as it was.
//!    Untouched batches are copied byte for byte; others are re-encoded with their original
//!    offsets, compression, producer fields and timestamp type. Each output is fsynced and
//!    indexed there.
//! 3. [`Log::install_cleaned`] (under the lock) swaps each cleaned segment in, if the segment it
//!    replaces is still the same file. The swap is crash-safe: the new log first becomes
//!    `NNN.log.swap` (the commit point), the old indexes are removed, the swap file replaces
//!    the log, and the new indexes move in. [`Log::open`] finishes an interrupted swap (the
//!    indexes are rebuilt) and drops `.cleaning/`. Fetches that planned a read of an old
//!    segment keep reading its (unlinked) file; later ones see the cleaned one.
//!
//! A segment left empty is deleted (except the first). Not yet like Kafka: markers are kept
//! forever (Kafka drops one after `delete.retention.ms` once its transaction has no data left);
//! small segments are not merged; a re-encoded batch starts at its first kept record and a batch
//! left empty goes (Kafka keeps the original base offset and last offset delta, and an empty
//! batch, which preserve an idempotent producer's last sequence); the key map is not bounded by
//! `log.cleaner.dedupe.buffer.size`; tombstone age is the record's timestamp (the append time for
//! LogAppendTime batches) rather than a delete horizon written into the batch.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

use crate::batch::{BatchHeader, HEADER_LEN, compute_crc};
use crate::checkpoint::write_atomic;
use crate::error::{LogError, Result};
use crate::log::Log;
use crate::segment::{self, SealedSegment, SegmentSettings, read_at};
use crate::txn_index::TxnIndexReader;

mod txn;

use txn::{CleanedTxns, ControlKind};

/// Where cleaned segments are built, inside the partition directory.
pub const CLEANING_DIR: &str = ".cleaning";
/// The first offset not yet cleaned, persisted per partition.
pub const CLEANER_CHECKPOINT: &str = "cleaner-offset-checkpoint";

/// A sealed segment as the cleaner reads it.
#[derive(Clone)]
pub struct SegmentRef {
    pub base: i64,
    pub next: i64,
    pub size: u64,
    file: Arc<File>,
    path: PathBuf,
}

/// What one pass cleans, chosen under the log's lock.
pub struct CleanPlan {
    dir: PathBuf,
    settings: SegmentSettings,
    segments: Vec<SegmentRef>,
    /// Records at or after this offset are dirty (not seen by an earlier pass).
    pub first_dirty: i64,
    /// End (exclusive) of what this pass covers.
    pub end: i64,
    delete_retention_ms: i64,
    /// The non-empty transaction indexes from the first planned segment on (the active
    /// segment's included): aborted transactions of the range may end after it.
    txn_indexes: Vec<TxnIndexReader>,
}

/// One rewritten segment, ready to be swapped in.
pub struct CleanedSegment {
    base: i64,
    /// The file it replaces (installing is refused if the log no longer has it).
    replaces: Arc<File>,
    segment: SealedSegment,
}

/// The output of [`clean`].
pub struct Cleaned {
    pub end: i64,
    segments: Vec<CleanedSegment>,
    pub stats: CleanStats,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CleanStats {
    pub records_read: u64,
    pub records_removed: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub segments_rewritten: usize,
}

/// Calls `f` with every batch of a segment file: its position, header and bytes.
fn for_each_batch(seg: &SegmentRef, mut f: impl FnMut(&BatchHeader, Vec<u8>) -> Result<()>) -> Result<()> {
    let mut pos = 0u64;
    while pos + HEADER_LEN as u64 <= seg.size {
        let head = read_at(&seg.file, &seg.path, pos, HEADER_LEN)?;
        let h = BatchHeader::parse(&head).ok_or_else(|| corrupt(seg, pos, "short header"))?;
        let total = h.total_size();
        if total < HEADER_LEN || pos + total as u64 > seg.size {
            return Err(corrupt(seg, pos, "bad batch length"));
        }
        f(&h, read_at(&seg.file, &seg.path, pos, total)?)?;
        pos += total as u64;
    }
    Ok(())
}

fn corrupt(seg: &SegmentRef, pos: u64, why: &str) -> LogError {
    LogError::Corrupt { path: seg.path.clone(), reason: format!("at byte {pos}: {why}") }
}

fn decode(seg: &SegmentRef, h: &BatchHeader, bytes: Vec<u8>) -> Result<kafka_protocol::records::RecordSet> {
    let mut b = Bytes::from(bytes);
    RecordBatchDecoder::decode(&mut b).map_err(|e| corrupt(seg, 0, &format!("batch at offset {}: {e}", h.base_offset)))
}

/// Step 2 of a pass (no lock held): builds the cleaned segments in `.cleaning/`.
pub fn clean(plan: &CleanPlan, now_ms: i64) -> Result<Cleaned> {
    let work = plan.dir.join(CLEANING_DIR);
    let _ = std::fs::remove_dir_all(&work);
    // Not create_dir_all: a log deleted meanwhile must not get its directory back.
    std::fs::create_dir(&work).map_err(LogError::io(&work))?;
    let start = plan.segments.first().map_or(plan.end, |s| s.base);
    let aborted = txn::collect_aborted(&plan.txn_indexes, start, plan.end)?;
    // Latest offset of every key in the dirty part, aborted batches left out (their own walk
    // over the aborted transactions that end in the dirty part, as Kafka's buildOffsetMap).
    let mut latest: HashMap<Bytes, i64> = HashMap::new();
    let mut walk = CleanedTxns::new(aborted.iter().filter(|t| t.last_offset >= plan.first_dirty).copied().collect());
    for seg in plan.segments.iter().filter(|s| s.next > plan.first_dirty) {
        for_each_batch(seg, |h, bytes| {
            if h.is_control() {
                walk.on_control(h, ControlKind::of(h, &bytes));
                return Ok(());
            }
            if walk.on_data(h) || h.last_offset() < plan.first_dirty {
                return Ok(());
            }
            for r in decode(seg, h, bytes)?.records {
                if let Some(k) = r.key
                    && r.offset >= plan.first_dirty
                    && r.offset < plan.end
                {
                    latest.insert(k, r.offset);
                }
            }
            Ok(())
        })?;
    }
    let horizon = now_ms.saturating_sub(plan.delete_retention_ms);
    let mut walk = CleanedTxns::new(aborted);
    let mut stats = CleanStats::default();
    let mut out = Vec::new();
    for seg in &plan.segments {
        let mut buf: Vec<u8> = Vec::with_capacity(usize::try_from(seg.size).unwrap_or(0));
        let mut removed_here = 0u64;
        for_each_batch(seg, |h, bytes| {
            if h.is_control() {
                walk.on_control(h, ControlKind::of(h, &bytes));
                buf.extend_from_slice(&bytes);
                return Ok(());
            }
            if walk.on_data(h) {
                let n = u64::try_from(h.record_count).unwrap_or(0);
                stats.records_read += n;
                removed_here += n;
                return Ok(());
            }
            let log_append_time = h.is_log_append_time();
            // LogAppendTime: the broker's time is the batch's max timestamp, not the records'.
            let age = |ts: i64| if log_append_time { h.max_timestamp } else { ts };
            let set = decode(seg, h, bytes.clone())?;
            let total = set.records.len();
            stats.records_read += total as u64;
            let mut kept: Vec<_> = set
                .records
                .into_iter()
                .filter(|r| match &r.key {
                    None => false,
                    Some(k) => {
                        let newest = latest.get(k).is_none_or(|l| r.offset >= *l);
                        // A tombstone outlives the pass that first sees it (it is in the dirty
                        // part): that pass removes the values it deletes, and a reader part-way
                        // through the log must still meet the delete. Later passes drop it once
                        // older than delete.retention.ms.
                        newest && (r.value.is_some() || r.offset >= plan.first_dirty || age(r.timestamp) > horizon)
                    }
                })
                .collect();
            removed_here += (total - kept.len()) as u64;
            if kept.len() == total {
                buf.extend_from_slice(&bytes);
            } else if !kept.is_empty() {
                if h.producer_id < 0 {
                    // Keep offset - sequence constant so the records stay one batch.
                    let first = kept[0].offset;
                    for r in &mut kept {
                        r.sequence = (r.offset - first) as i32 - 1;
                    }
                }
                for r in &mut kept {
                    r.timestamp_type = TimestampType::Creation;
                }
                let mut enc = BytesMut::new();
                RecordBatchEncoder::encode(
                    &mut enc,
                    &kept,
                    &RecordEncodeOptions { version: 2, compression: set.compression },
                )
                .map_err(|e| corrupt(seg, 0, &format!("re-encoding batch at offset {}: {e}", h.base_offset)))?;
                if log_append_time {
                    // Attributes bit 3 and the append time as max timestamp (bytes 35..43),
                    // then the CRC over attributes onward (offset 21).
                    enc[22] |= 0x08;
                    enc[35..43].copy_from_slice(&h.max_timestamp.to_be_bytes());
                    let crc = compute_crc(&enc);
                    enc[17..21].copy_from_slice(&crc.to_be_bytes());
                }
                buf.extend_from_slice(&enc);
            }
            Ok(())
        })?;
        stats.bytes_before += seg.size;
        stats.bytes_after += buf.len() as u64;
        stats.records_removed += removed_here;
        if removed_here == 0 {
            continue;
        }
        let path = work.join(segment::file_name(seg.base, "log"));
        let mut f = File::create(&path).map_err(LogError::io(&path))?;
        f.write_all(&buf).map_err(LogError::io(&path))?;
        f.sync_all().map_err(LogError::io(&path))?;
        drop(f);
        let built = SealedSegment::build(&work, seg.base, plan.settings)?;
        out.push(CleanedSegment { base: seg.base, replaces: seg.file.clone(), segment: built });
        stats.segments_rewritten += 1;
    }
    Ok(Cleaned { end: plan.end, segments: out, stats })
}

/// A compacted topic takes only records with keys (Kafka's rule): checks produced batches.
pub fn check_keys(records: &[u8]) -> std::result::Result<(), crate::BatchError> {
    let mut b = Bytes::copy_from_slice(records);
    let sets = RecordBatchDecoder::decode_all(&mut b).map_err(|e| crate::BatchError::Corrupt(e.to_string()))?;
    if sets.iter().flat_map(|s| s.records.iter()).any(|r| r.key.is_none()) {
        return Err(crate::BatchError::InvalidRecord("Compacted topic cannot accept message without key".to_string()));
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(LogError::io(dir))
}

/// Finishes swaps a crash interrupted and drops unfinished cleaning output (called by
/// [`Log::open`] before segments are listed).
pub(crate) fn recover_swaps(dir: &Path) -> Result<()> {
    let _ = std::fs::remove_dir_all(dir.join(CLEANING_DIR));
    for entry in std::fs::read_dir(dir).map_err(LogError::io(dir))?.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if let Some(stem) = name.strip_suffix(".log.swap") {
            // The swap was committed: the new log wins, its indexes are rebuilt on open.
            for ext in ["index", "timeindex"] {
                let _ = std::fs::remove_file(dir.join(format!("{stem}.{ext}")));
            }
            let to = dir.join(format!("{stem}.log"));
            std::fs::rename(entry.path(), &to).map_err(LogError::io(&to))?;
            tracing::info!(segment = %to.display(), "finished an interrupted compaction swap");
        }
    }
    sync_dir(dir)
}

/// The persisted first dirty offset, if any.
pub(crate) fn read_checkpoint(dir: &Path) -> Option<i64> {
    std::fs::read_to_string(dir.join(CLEANER_CHECKPOINT)).ok()?.trim().parse().ok()
}

impl Log {
    /// Step 1 of a compaction pass (under the lock): `None` when there is nothing worth
    /// cleaning now.
    pub fn plan_clean(&self, now_ms: i64) -> Option<CleanPlan> {
        let c = self.config();
        if !c.cleanup_compact {
            return None;
        }
        let lag_limit = now_ms.saturating_sub(c.min_compaction_lag_ms);
        let stable = self.last_stable_offset();
        let mut segments = Vec::new();
        for s in self.sealed_segments() {
            let core = &s.core;
            if core.next_offset > stable || core.max_timestamp > lag_limit {
                break;
            }
            segments.push((
                SegmentRef {
                    base: core.base_offset,
                    next: core.next_offset,
                    size: core.size,
                    file: core.file.clone(),
                    path: core.log_path.clone(),
                },
                core.max_timestamp,
            ));
        }
        let end = segments.last().map(|(s, _)| s.next)?;
        let first_dirty = self.cleaner_offset().max(self.log_start_offset());
        if end <= first_dirty {
            return None;
        }
        let (mut dirty, mut total) = (0u64, 0u64);
        let mut oldest_dirty = i64::MAX;
        for (s, max_ts) in &segments {
            total += s.size;
            if s.next > first_dirty {
                dirty += s.size;
                oldest_dirty = oldest_dirty.min(*max_ts);
            }
        }
        let ratio = if total == 0 { 0.0 } else { dirty as f64 / total as f64 };
        let overdue = c.max_compaction_lag_ms != i64::MAX
            && oldest_dirty >= 0
            && oldest_dirty < now_ms.saturating_sub(c.max_compaction_lag_ms);
        if ratio < c.min_cleanable_dirty_ratio && !overdue {
            return None;
        }
        let start = segments.first().map_or(end, |(s, _)| s.base);
        let txn_indexes = self.txn_index_readers_from(start);
        Some(CleanPlan {
            dir: self.dir().to_path_buf(),
            settings: SegmentSettings {
                index_interval_bytes: c.index_interval_bytes,
                max_index_bytes: c.segment_index_bytes,
            },
            segments: segments.into_iter().map(|(s, _)| s).collect(),
            first_dirty,
            end,
            delete_retention_ms: c.delete_retention_ms,
            txn_indexes,
        })
    }

    /// Step 3 (under the lock): swaps the cleaned segments in. Segments that changed meanwhile
    /// (deleted by retention or DeleteRecords) are skipped. Returns how many were swapped.
    pub fn install_cleaned(&mut self, cleaned: Cleaned) -> Result<usize> {
        let dir = self.dir().to_path_buf();
        let work = dir.join(CLEANING_DIR);
        let mut swapped = 0;
        let mut complete = true;
        let first = self.sealed_segments().next().map(|s| s.core.base_offset);
        for mut c in cleaned.segments {
            let current = self.sealed_segment(c.base);
            if !current.is_some_and(|s| Arc::ptr_eq(&s.core.file, &c.replaces)) {
                complete = false;
                continue;
            }
            if c.segment.core.size == 0 && Some(c.base) != first {
                // Everything in it was superseded: the segment goes (the first one stays, it
                // marks the log start). Reads of offsets in the gap go on to the next segment.
                if let Some(old) = self.remove_sealed(c.base) {
                    old.delete();
                }
                swapped += 1;
                continue;
            }
            let name = |ext: &str| segment::file_name(c.base, ext);
            let swap = dir.join(format!("{}.swap", name("log")));
            std::fs::rename(c.segment.dir().join(name("log")), &swap).map_err(LogError::io(&swap))?;
            sync_dir(&dir)?;
            for ext in ["index", "timeindex"] {
                let _ = std::fs::remove_file(dir.join(name(ext)));
            }
            let log = dir.join(name("log"));
            std::fs::rename(&swap, &log).map_err(LogError::io(&log))?;
            for ext in ["index", "timeindex"] {
                let to = dir.join(name(ext));
                std::fs::rename(work.join(name(ext)), &to).map_err(LogError::io(&to))?;
            }
            sync_dir(&dir)?;
            c.segment.relocate(&dir);
            // The old segment's files are already replaced (its `.txnindex` stays, unchanged):
            // drop it without deleting by name.
            if let Some(old) = self.remove_sealed(c.base) {
                c.segment.adopt_txn_index(old);
            }
            drop(self.replace_sealed(c.base, c.segment));
            swapped += 1;
        }
        let _ = std::fs::remove_dir_all(&work);
        if complete {
            self.set_cleaner_offset(cleaned.end);
            write_atomic(&dir.join(CLEANER_CHECKPOINT), cleaned.end.to_string().as_bytes())?;
        }
        Ok(swapped)
    }
}
