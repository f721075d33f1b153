//! Log compaction (`cleanup.policy=compact`): keep the latest record of every key.
//!
//! A pass has three steps so that the partition lock is held only for the first and last:
//! 1. [`Log::plan_clean`] (under the lock) picks the sealed segments to clean: everything from
//!    the log start up to the end of the cleanable range (below the last stable offset, so
//!    every transaction in it is decided, older than `min.compaction.lag.ms`, never the active
//!    segment), if the dirty part (after the last pass) is at least `min.cleanable.dirty.ratio`
//!    of it, or older than `max.compaction.lag.ms`. It reads no file: it takes readers of the
//!    transaction indexes from the first planned segment on (the entries written so far; an
//!    index only grows, and a rebuild renames a new file over it), the segments' files and
//!    what must stay of each producer (its last batch, from producer state). Sealed segments
//!    never change, so they can be read unlocked.
//! 2. [`clean`] (no lock) maps each key of the dirty part to its latest offset, then rewrites
//!    every planned segment into `.cleaning/` with the retention rules of Kafka's cleaner
//!    (`Pass::filter`): a record stays if it is the latest for its key (records without a key
//!    go, tombstones once older than `delete.retention.ms`); batches of aborted transactions
//!    lose their records and never count as a key's latest value; a marker goes once its
//!    transaction has no batch left and the delete horizon the cleaner wrote into it
//!    (`delete.retention.ms` after that) has passed; the batch holding each producer's last
//!    sequence (or its last marker, with no data of its epoch) and the pass's last batch stay,
//!    empty if no record does. The aborted transactions are read from the indexes and walked in
//!    offset order with the batches (`txn::CleanedTxns`, Kafka's `CleanedTransactionMetadata`),
//!    which also yields each rewritten segment's `.txnindex`: the aborts whose marker stays
//!    because batches of theirs were still there. Untouched batches are copied byte for byte;
//!    others keep their base offset, last offset delta, producer fields, codec and timestamp
//!    type, with the kept records copied as they were (`batches`). A segment nothing changed
//!    in is not rewritten. Each output is fsynced and indexed there.
//! 3. [`Log::install_cleaned`] (under the lock) swaps each cleaned segment in, if the segment it
//!    replaces is still the same file. The swap is crash-safe: the new log first becomes
//!    `NNN.log.swap` (the commit point), the old indexes are removed, the swap file replaces
//!    the log, and the new indexes move in. [`Log::open`] finishes an interrupted swap (the
//!    indexes are rebuilt, the transaction index from a replay) and drops `.cleaning/`. Fetches
//!    that planned a read of an old segment keep reading its (unlinked) file; later ones see
//!    the cleaned one.
//!
//! A segment left empty is deleted (except the first). Not yet like Kafka: small segments are
//! not merged; the key map is not bounded by `log.cleaner.dedupe.buffer.size`; tombstone age is
//! the record's timestamp (the append time for LogAppendTime batches) rather than a delete
//! horizon written into the batch (markers do get one).

use std::collections::HashMap;
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;

use crate::batch::{BatchHeader, HEADER_LEN};
use crate::checkpoint::write_atomic;
use crate::error::{LogError, Result};
use crate::log::Log;
use crate::producer_state::LastRecord;
use crate::segment::{self, SealedSegment, SegmentSettings, read_at};
use crate::txn_index::TxnIndexReader;

mod batches;
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
    /// What must stay of each producer the log knows.
    producers: HashMap<i64, LastRecord>,
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
        let h = BatchHeader::parse_checked(&head).map_err(|why| corrupt(seg, pos, why))?;
        let total = h.total_size();
        if pos + total as u64 > seg.size {
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

/// Kafka's `BatchRetention`: what may happen to a batch as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retention {
    /// The batch goes.
    Delete,
    /// The batch goes if no record of it stays.
    DeleteEmpty,
    /// The batch stays, empty if no record of it does.
    RetainEmpty,
}

/// What a pass does with one batch.
enum Outcome {
    Keep,
    Replace(Vec<u8>),
    Drop,
}

/// The state of step 2 while it rewrites the planned segments in order.
struct Pass<'a> {
    plan: &'a CleanPlan,
    /// Latest offset of every key in the dirty part.
    latest: HashMap<Bytes, i64>,
    walk: CleanedTxns,
    now_ms: i64,
}

impl Pass<'_> {
    /// One batch through the retention rules of Kafka's cleaner (`Cleaner.cleanInto`'s filter
    /// and `MemoryRecords.filterTo`). Returns what happens to it and how many records stay.
    ///
    /// - A data batch of an aborted transaction loses all its records; a control batch may
    ///   go once its transaction has no batch left in the range ([`CleanedTxns`]) and its
    ///   delete horizon has passed. The first pass that finds a marker removable writes that
    ///   horizon into it (`now + delete.retention.ms`, attributes bit 6), so consumers that
    ///   read the transaction's data before it went still meet the marker for that long.
    /// - The batch holding a producer's last sequence (or, with no data batch of its epoch,
    ///   its last marker) stays, empty if no record does, so sequences and epochs survive a
    ///   replay of the log; so does the last batch of the pass, which keeps the end offset.
    /// - Other records stay if they are the latest of their key (tombstones until they are
    ///   older than `delete.retention.ms`); a batch left with none goes.
    fn filter(&mut self, seg: &SegmentRef, h: &BatchHeader, bytes: &[u8]) -> Result<(Outcome, u64)> {
        let plan = self.plan;
        let bad = |why: String| corrupt(seg, 0, &why);
        let can_discard =
            if h.is_control() { self.walk.on_control(h, ControlKind::of(h, bytes)) } else { self.walk.on_data(h) };
        let horizon = batches::delete_horizon(h);
        let discard_records =
            if h.is_control() { can_discard && horizon.is_some_and(|t| t <= self.now_ms) } else { can_discard };
        let last_of_producer = h.has_producer_id()
            && plan.producers.get(&h.producer_id).is_some_and(|last| match last.last_data_offset {
                Some(o) => h.last_offset() == o,
                None => h.is_control() && h.producer_epoch == last.producer_epoch,
            });
        let retention = if last_of_producer || h.next_offset() == plan.end {
            Retention::RetainEmpty
        } else if discard_records {
            Retention::Delete
        } else {
            Retention::DeleteEmpty
        };
        if retention == Retention::Delete {
            return Ok((Outcome::Drop, 0));
        }
        if h.record_count == 0 {
            let outcome = if retention == Retention::RetainEmpty { Outcome::Keep } else { Outcome::Drop };
            return Ok((outcome, 0));
        }
        let payload = batches::records_payload(bytes, h).map_err(bad)?;
        let records = batches::parse_records(&payload, h).map_err(bad)?;
        let total = records.len();
        let kept: Vec<_> = if discard_records {
            Vec::new()
        } else if h.is_control() {
            records
        } else {
            records.into_iter().filter(|r| self.retain_record(h, r)).collect()
        };
        if kept.is_empty() {
            return Ok(match retention {
                Retention::RetainEmpty => (Outcome::Replace(batches::empty(h).map_err(bad)?), 0),
                _ => (Outcome::Drop, 0),
            });
        }
        let n = kept.len() as u64;
        let new_horizon = (h.is_control() && can_discard && horizon.is_none())
            .then(|| self.now_ms.saturating_add(plan.delete_retention_ms));
        if kept.len() == total && new_horizon.is_none() {
            return Ok((Outcome::Keep, n));
        }
        Ok((Outcome::Replace(batches::rebuild(h, &kept, new_horizon).map_err(bad)?), n))
    }

    /// Whether a record of a data batch stays: it has a key and is its latest value; a
    /// tombstone also outlives the pass that first sees it (it is in the dirty part): that pass
    /// removes the values it deletes, and a reader part-way through the log must still meet the
    /// delete. Later passes drop it once older than `delete.retention.ms` (by its timestamp,
    /// the append time for LogAppendTime batches).
    fn retain_record(&self, h: &BatchHeader, r: &batches::RawRecord<'_>) -> bool {
        let Some(key) = r.key else { return false };
        let newest = self.latest.get(key).is_none_or(|l| r.offset >= *l);
        let age = if h.is_log_append_time() { h.max_timestamp } else { r.timestamp };
        let tombstone_horizon = self.now_ms.saturating_sub(self.plan.delete_retention_ms);
        newest && (r.has_value || r.offset >= self.plan.first_dirty || age > tombstone_horizon)
    }
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
            if walk.on_data(h) || h.last_offset() < plan.first_dirty || h.record_count == 0 {
                return Ok(());
            }
            let payload = batches::records_payload(&bytes, h).map_err(|e| corrupt(seg, 0, &e))?;
            for r in batches::parse_records(&payload, h).map_err(|e| corrupt(seg, 0, &e))? {
                if let Some(k) = r.key
                    && r.offset >= plan.first_dirty
                    && r.offset < plan.end
                {
                    latest.insert(payload.slice_ref(k), r.offset);
                }
            }
            Ok(())
        })?;
    }
    let mut pass = Pass { plan, latest, walk: CleanedTxns::new(aborted), now_ms };
    let mut stats = CleanStats::default();
    let mut out = Vec::new();
    for seg in &plan.segments {
        let mut buf: Vec<u8> = Vec::with_capacity(usize::try_from(seg.size).unwrap_or(0));
        let mut changed = false;
        for_each_batch(seg, |h, bytes| {
            let total = u64::try_from(h.record_count).unwrap_or(0);
            let (outcome, kept) = pass.filter(seg, h, &bytes)?;
            stats.records_read += total;
            stats.records_removed += total.saturating_sub(kept);
            match outcome {
                Outcome::Keep => buf.extend_from_slice(&bytes),
                Outcome::Replace(b) => {
                    buf.extend_from_slice(&b);
                    changed = true;
                }
                Outcome::Drop => changed = true,
            }
            Ok(())
        })?;
        // The aborted transactions whose marker this segment keeps for their batches.
        let txn_entries = pass.walk.take_retained();
        stats.bytes_before += seg.size;
        stats.bytes_after += buf.len() as u64;
        if !changed {
            // Untouched, its transaction index included: every marker in it stays, and those of
            // transactions with no batch left are harmless to a reader (none follows them).
            continue;
        }
        let path = work.join(segment::file_name(seg.base, "log"));
        let mut f = File::create(&path).map_err(LogError::io(&path))?;
        f.write_all(&buf).map_err(LogError::io(&path))?;
        f.sync_all().map_err(LogError::io(&path))?;
        drop(f);
        let mut built = SealedSegment::build(&work, seg.base, plan.settings)?;
        built.rebuild_txn_index(&txn_entries)?;
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
            // The swap was committed: the new log wins, its indexes are rebuilt on open (the
            // missing offset index makes the segment rescanned, which rebuilds its
            // transaction index from a replay).
            for ext in ["index", "timeindex", "txnindex"] {
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
        let producers = self.producer_state().last_records();
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
            producers,
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
            for ext in ["index", "timeindex", "txnindex"] {
                let _ = std::fs::remove_file(dir.join(name(ext)));
            }
            let log = dir.join(name("log"));
            std::fs::rename(&swap, &log).map_err(LogError::io(&log))?;
            for ext in ["index", "timeindex", "txnindex"] {
                let (from, to) = (work.join(name(ext)), dir.join(name(ext)));
                // A cleaned segment with no aborted transaction to index has no `.txnindex`.
                if ext != "txnindex" || from.exists() {
                    std::fs::rename(&from, &to).map_err(LogError::io(&to))?;
                }
            }
            sync_dir(&dir)?;
            c.segment.relocate(&dir);
            // The old segment's files are already replaced: drop it without deleting by name.
            drop(self.remove_sealed(c.base));
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
