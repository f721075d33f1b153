//! One partition's log: a run of sealed segments and one active segment, the log start offset,
//! the high watermark, the recovery point and the producer state (idempotence and
//! transactions; markers, aborted transactions and the last stable offset are in `txn`,
//! reads in `read`, flushes, the recovery point and producer snapshots in `flush`).
//!
//! Durability of [`Log::append`]: the batch is in the page cache (readable by fetches up to the
//! high watermark) on return; it is on disk once the log is flushed, which happens inside
//! `append` when `flush.messages` is reached, on `flush.ms` through [`Log::flush`], and for
//! sealed segments through [`Log::pending_flush`]. With [`Flush::Owed`] an append leaves the
//! `flush.messages` flush to its caller, outside the lock ([`Log::owed_flush`]); until it is
//! done, the high watermark stays below what it covers. A process crash loses nothing that was
//! written (the page cache survives it); a power cut loses what was not flushed. Recovery
//! rescans everything after the recovery point (the last flushed offset).

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::batch::{self, BatchHeader, BatchIter, ValidBatch};
use crate::config::{LogConfig, TargetCompression};
use crate::epochs::EpochCache;
use crate::error::{LogError, Result};
use crate::producer_state::{ProducerState, SeqCheck};
use crate::recompress::recompress;
use crate::segment::{self, ActiveSegment, SealedSegment, SegmentSettings, scan_log};

mod flush;
pub use flush::{Flush, PlannedFlush, flush_stats, record_flush};
mod read;
mod txn;

pub use read::{FileSlice, ReadPlan, ReadStart};

/// How a log is opened.
#[derive(Debug, Clone, Copy)]
pub struct OpenOptions {
    /// The broker shut down cleanly: trust indexes and the producer snapshot at the log end.
    pub clean_shutdown: bool,
    /// Checkpointed recovery point: everything below it was flushed.
    pub recovery_point: i64,
    /// Checkpointed log start offset (after DeleteRecords or retention), if any.
    pub log_start_offset: Option<i64>,
    /// Checkpointed high watermark (Kafka's `replication-offset-checkpoint`), if any; without
    /// one the log end is taken.
    pub high_watermark: Option<i64>,
    pub now_ms: i64,
}

/// What happened while opening a log.
#[derive(Debug, Default, Clone)]
pub struct RecoveryReport {
    pub segments: usize,
    pub segments_recovered: usize,
    /// Bytes cut from torn or corrupt tails, with the reason.
    pub truncated: Vec<(PathBuf, String)>,
    pub producers_loaded: usize,
}

/// The outcome of an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendResult {
    pub base_offset: i64,
    pub last_offset: i64,
    /// The broker's time if the topic uses LogAppendTime, else -1.
    pub log_append_time: i64,
    pub log_start_offset: i64,
    /// A retry of batches already in the log: nothing was written.
    pub duplicate: bool,
    pub records: i64,
    pub bytes: usize,
    /// A flush is owed ([`Flush::Owed`]): by this append, or by one before it whose flush is
    /// not done yet (a duplicate's original, say). The caller flushes before it answers.
    pub flush_owed: bool,
}

pub struct Log {
    dir: PathBuf,
    /// Shared by the partitions of a topic.
    config: Arc<LogConfig>,
    sealed: BTreeMap<i64, SealedSegment>,
    active: ActiveSegment,
    log_start_offset: i64,
    high_watermark: i64,
    /// Everything below it is on disk (moved by flushes).
    recovery_point: i64,
    /// The last two recovery points handed to the checkpoint writer, older first: the
    /// checkpoint file holds one of them (see `Log::recovery_point`).
    checkpointed: parking_lot::Mutex<[i64; 2]>,
    producers: ProducerState,
    unflushed_messages: i64,
    last_flush_ms: i64,
    /// Set when an append reached `flush.messages` and left the flush to its caller: the first
    /// offset that flush must cover before the high watermark may pass it.
    owed_from: Option<i64>,
    /// When the owed flush began, or last moved on (a flush covered part of it).
    owed_since_ms: i64,
    /// Everything below it was synced by the last flush (or was there at open).
    flushed_end: i64,
    /// Counts truncations: a flush planned before one no longer describes the log.
    truncations: u64,
    /// The log cleaner's first dirty offset (compacted topics).
    cleaner_offset: i64,
    /// Leader epochs and where each starts (replication).
    epochs: EpochCache,
}

fn settings(c: &LogConfig) -> SegmentSettings {
    SegmentSettings { index_interval_bytes: c.index_interval_bytes, max_index_bytes: c.segment_index_bytes }
}

pub(crate) fn snapshot_path(dir: &Path, offset: i64) -> PathBuf {
    dir.join(segment::file_name(offset, "snapshot"))
}

/// Base offsets of files with extension `ext` in `dir`, sorted.
pub(crate) fn list_offsets(dir: &Path, ext: &str) -> Result<Vec<i64>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(LogError::io(dir))? {
        let entry = entry.map_err(LogError::io(dir))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if let Some(stem) = name.strip_suffix(&format!(".{ext}"))
            && stem.len() == 20
            && let Ok(o) = stem.parse::<i64>()
        {
            out.push(o);
        }
    }
    out.sort_unstable();
    Ok(out)
}

impl Log {
    /// Opens (or creates) the log in `dir`, recovering it if needed.
    pub fn open(dir: &Path, config: impl Into<Arc<LogConfig>>, opts: OpenOptions) -> Result<(Self, RecoveryReport)> {
        let config = config.into();
        std::fs::create_dir_all(dir).map_err(LogError::io(dir))?;
        let mut report = RecoveryReport::default();
        crate::cleaner::recover_swaps(dir)?;
        // Leftovers of interrupted operations.
        for entry in std::fs::read_dir(dir).map_err(LogError::io(dir))?.flatten() {
            let p = entry.path();
            let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
            if matches!(ext, "tmp" | "deleted" | "cleaned" | "swap") {
                let _ = std::fs::remove_file(&p);
            }
        }
        let bases = list_offsets(dir, "log")?;
        // Orphan index files (their log is gone) are removed.
        for ext in ["index", "timeindex", "txnindex"] {
            for o in list_offsets(dir, ext)? {
                if bases.binary_search(&o).is_err() {
                    let _ = std::fs::remove_file(dir.join(segment::file_name(o, ext)));
                }
            }
        }
        let s = settings(&config);
        let mut sealed = BTreeMap::new();
        let mut active = None;
        let mut cut_after: Option<i64> = None;
        for (i, &base) in bases.iter().enumerate() {
            if cut_after.is_some() {
                // Everything after a corrupt segment is dropped, as Kafka does.
                for ext in ["log", "index", "timeindex", "txnindex"] {
                    let _ = std::fs::remove_file(dir.join(segment::file_name(base, ext)));
                }
                continue;
            }
            let next = bases.get(i + 1).copied();
            // A sealed segment that ends at or below the recovery point was fsynced (its log and
            // transaction index) before the point moved past it: trusted after any shutdown,
            // as Kafka recovers only from the recovery point. Its indexes still pass the
            // sanity check or are rebuilt.
            let trusted = next.is_some_and(|n| n <= opts.recovery_point);
            match next {
                Some(n) => {
                    let (seg, truncated) = SealedSegment::open(dir, base, n, trusted, s)?;
                    if !trusted {
                        report.segments_recovered += 1;
                    }
                    if let Some(why) = truncated {
                        report.truncated.push((seg.core.log_path.clone(), why));
                        cut_after = Some(seg.core.next_offset);
                    }
                    sealed.insert(base, seg);
                }
                None => {
                    let trusted = opts.clean_shutdown && base <= opts.recovery_point;
                    let (seg, truncated) = ActiveSegment::open(dir, base, s, trusted, opts.now_ms)?;
                    if !trusted {
                        report.segments_recovered += 1;
                    }
                    if let Some(why) = truncated {
                        report.truncated.push((seg.core.log_path.clone(), why));
                    }
                    active = Some(seg);
                }
            }
        }
        report.segments = bases.len();
        // If the log was cut inside a sealed segment, that segment becomes the active one.
        let active = match active {
            Some(a) => a,
            None => {
                let start = match sealed.last_key_value() {
                    Some((_, last)) => last.core.next_offset,
                    None => opts.log_start_offset.unwrap_or(0),
                };
                let a = ActiveSegment::create(dir, start, s, opts.now_ms)?;
                if let Some(last) = sealed.last_key_value().map(|(k, _)| *k)
                    && sealed.get(&last).is_some_and(|seg| seg.core.size == 0)
                    && let Some(seg) = sealed.remove(&last)
                {
                    seg.delete();
                }
                a
            }
        };
        let first_base = sealed.keys().next().copied().unwrap_or(active.core.base_offset);
        let leo = active.core.next_offset;
        let log_start_offset = opts.log_start_offset.unwrap_or(first_base).max(first_base).min(leo);
        let mut log = Self {
            dir: dir.into(),
            config,
            sealed,
            active,
            log_start_offset,
            // A replica comes back knowing only what was committed when it last checkpointed:
            // records past that may never have reached the ISR, and stay invisible until the
            // leader's high watermark (or, leading, its ISR) passes them.
            high_watermark: opts.high_watermark.map_or(leo, |hw| hw.clamp(log_start_offset, leo)),
            // After a crash, recovered data is not known to be on disk until the flusher syncs it.
            recovery_point: if opts.clean_shutdown { leo } else { opts.recovery_point.min(leo) },
            checkpointed: parking_lot::Mutex::new([opts.recovery_point; 2]),
            producers: ProducerState::default(),
            unflushed_messages: 0,
            last_flush_ms: opts.now_ms,
            owed_from: None,
            owed_since_ms: opts.now_ms,
            flushed_end: leo,
            truncations: 0,
            cleaner_offset: crate::cleaner::read_checkpoint(dir).unwrap_or(0),
            epochs: EpochCache::default(),
        };
        log.epochs = log.load_epochs()?;
        let replayed = log.load_producer_state(opts.clean_shutdown, true)?;
        report.producers_loaded = log.producers.len();
        if !opts.clean_shutdown || replayed {
            log.write_producer_snapshot(leo)?;
        }
        if log.config.flush_messages != i64::MAX && log.recovery_point < leo {
            // After a crash the tail past the recovery point may be in the page cache only
            // (appends whose flush was owed when the process died): a log that flushes per
            // `flush.messages` syncs it before anything can be read from it.
            log.flush(opts.now_ms)?;
        }
        Ok((log, report))
    }

    /// The leader epoch checkpoint, without epochs past the log end; rebuilt from the batch
    /// headers if a non-empty log has none (data written before it existed).
    fn load_epochs(&self) -> Result<EpochCache> {
        let leo = self.log_end_offset();
        if let Some(mut c) = EpochCache::read(&self.dir)? {
            c.truncate_from(leo + 1, &self.dir)?;
            return Ok(c);
        }
        if leo == self.first_segment_base() {
            return Ok(EpochCache::default());
        }
        let mut headers = Vec::new();
        for (file, path, base) in
            self.sealed.values().map(|s| (s.core.file.clone(), s.core.log_path.clone(), s.core.base_offset)).chain(
                std::iter::once((
                    self.active.core.file.clone(),
                    self.active.core.log_path.clone(),
                    self.active.core.base_offset,
                )),
            )
        {
            scan_log(&file, &path, 0, base, |_, h| headers.push((h.leader_epoch, h.base_offset)))?;
        }
        EpochCache::rebuild(headers, &self.dir)
    }

    /// A new leader epoch starts at the log end (this replica became its leader): recorded at
    /// once, as Kafka does, so OffsetsForLeaderEpoch answers for it before its first write.
    pub fn assign_epoch(&mut self, epoch: i32) -> Result<()> {
        let leo = self.log_end_offset();
        self.epochs.assign(epoch, leo, &self.dir)
    }

    /// The newest leader epoch in the log and the offset it starts at.
    pub fn latest_epoch(&self) -> Option<(i32, i64)> {
        self.epochs.latest()
    }

    /// OffsetsForLeaderEpoch: the largest epoch at most `epoch` and the offset where it ends.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        self.epochs.end_offset_for(epoch, self.log_end_offset())
    }

    /// Appends batches a follower fetched from its leader: offsets and leader epochs stay as the
    /// leader wrote them; the first batch must start at the log end. An incomplete batch at the
    /// end of `records` (a fetch cut at its byte limit) is left for the next fetch.
    ///
    /// A first batch that straddles this log's start (the leader's log start, which this
    /// replica took, falls inside a batch, and the leader sends whole batches) empties the log
    /// and starts it at the batch, as Kafka's follower does on `UnexpectedAppendOffsetException`;
    /// the caller then moves the log start back up to the leader's.
    pub fn append_as_follower(&mut self, records: &[u8], now_ms: i64) -> Result<AppendResult> {
        if let Some(h) = BatchHeader::parse(records)
            && h.base_offset < self.log_start_offset
            && h.last_offset() >= self.log_start_offset
        {
            self.truncate_fully_and_start_at(h.base_offset, now_ms)?;
        }
        let leo = self.log_end_offset();
        let mut placed: Vec<(Range<usize>, BatchHeader)> = Vec::new();
        let mut it = BatchIter::new(records).verify_crc();
        let mut next = leo;
        for (at, h) in it.by_ref() {
            if h.base_offset != next {
                return Err(crate::error::BatchError::Corrupt(format!(
                    "replicated batch at offset {} where the log expects {next}",
                    h.base_offset
                ))
                .into());
            }
            placed.push((at..at + h.total_size(), h));
            next = h.next_offset();
        }
        if let Some(batch::Stop::Corrupt(why)) = it.stopped {
            return Err(crate::error::BatchError::Corrupt(why).into());
        }
        let end = it.position();
        Self::check_control_batches(records, &placed)?;
        let (Some(first), Some(last)) = (placed.first().map(|p| p.1), placed.last().map(|p| p.1)) else {
            return Ok(AppendResult {
                base_offset: leo,
                last_offset: leo - 1,
                log_append_time: -1,
                log_start_offset: self.log_start_offset,
                duplicate: false,
                records: 0,
                bytes: 0,
                flush_owed: false,
            });
        };
        for (_, h) in &placed {
            self.epochs.assign(h.leader_epoch, h.base_offset, &self.dir)?;
        }
        if self.active.needs_roll(
            end as u64,
            last.last_offset(),
            self.config.segment_bytes,
            self.config.segment_ms,
            now_ms,
        ) {
            self.roll(now_ms)?;
        }
        self.active.append(&records[..end], &placed)?;
        let records_n = self.appended(&records[..end], &placed, now_ms, Flush::Now)?;
        Ok(AppendResult {
            base_offset: first.base_offset,
            last_offset: last.last_offset(),
            log_append_time: -1,
            log_start_offset: self.log_start_offset,
            duplicate: false,
            records: records_n,
            bytes: end,
            flush_owed: false,
        })
    }

    /// After batches (`placed` in `bytes`) were written: producer state and transactions, and
    /// a flush once `flush.messages` is reached (now, or owed by the caller). Returns the number
    /// of records written.
    fn appended(
        &mut self,
        bytes: &[u8],
        placed: &[(Range<usize>, BatchHeader)],
        now_ms: i64,
        flush: Flush,
    ) -> Result<i64> {
        // Every batch is in the log now: producer state follows all of them even if one
        // transaction index write fails, and the first failure is returned.
        let mut failed = None;
        for (range, h) in placed {
            if let Err(e) = self.record_batch(h, &bytes[range.clone()]) {
                failed.get_or_insert(e);
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        let records_n = match (placed.first(), placed.last()) {
            (Some((_, first)), Some((_, last))) => last.next_offset() - first.base_offset,
            _ => 0,
        };
        self.unflushed_messages += records_n;
        if self.unflushed_messages >= self.config.flush_messages {
            match (flush, placed.first()) {
                (Flush::Owed, Some((_, first))) => {
                    if self.owed_from.is_none() {
                        self.owed_from = Some(first.base_offset);
                        self.owed_since_ms = now_ms;
                    }
                }
                _ => self.flush(now_ms)?,
            }
        }
        Ok(records_n)
    }

    /// Drops every batch from the one holding `offset` on (a follower whose log diverged from its
    /// leader's); returns the new log end. Producer state, leader epochs, the high watermark and
    /// the recovery point follow.
    pub fn truncate_to(&mut self, offset: i64, now_ms: i64) -> Result<i64> {
        let offset = offset.max(self.log_start_offset);
        if offset >= self.log_end_offset() {
            // No data to drop; epochs recorded at the log end without a write (a leadership
            // that wrote nothing) go, so the latest epoch is one the log holds.
            self.epochs.truncate_from(offset, &self.dir)?;
            return Ok(self.log_end_offset());
        }
        let s = settings(&self.config);
        if self.active.core.base_offset > offset {
            // The cut is in a sealed segment: it becomes the active one again; later ones go.
            let holder = self.sealed.range(..=offset).next_back().map(|(b, _)| *b);
            let Some(holder) = holder else {
                return Err(LogError::OffsetOutOfRange {
                    offset,
                    start: self.log_start_offset,
                    end: self.log_end_offset(),
                });
            };
            let later: Vec<i64> = self.sealed.range(holder + 1..).map(|(b, _)| *b).collect();
            for b in later {
                if let Some(seg) = self.sealed.remove(&b) {
                    seg.delete();
                }
            }
            drop(self.sealed.remove(&holder));
            let (reopened, _) = ActiveSegment::recover(&self.dir, holder, s, now_ms)?;
            std::mem::replace(&mut self.active, reopened).delete();
        }
        let cut = match self.active.core.find_batch(offset, self.active.lookup_position(offset))? {
            Some((_, h)) => h.base_offset.min(offset),
            None => offset,
        };
        self.active.truncate_to(cut)?;
        self.truncations += 1;
        let leo = self.log_end_offset();
        self.flushed_end = self.flushed_end.min(leo);
        self.epochs.truncate_from(leo, &self.dir)?;
        self.high_watermark = self.high_watermark.min(leo);
        self.recovery_point = self.recovery_point.min(leo);
        self.cleaner_offset = self.cleaner_offset.min(leo);
        // A segment reopened for the cut is marked for a transaction index rebuild: the replay
        // that reloads producer state does it.
        self.load_producer_state(false, true)?;
        if self.owed_from.is_some() {
            // What is left of an owed flush is synced now: its caller's report no longer fits.
            self.flush(now_ms)?;
        }
        Ok(leo)
    }

    /// Drops every segment and starts the log empty at `offset`, as Kafka's
    /// `truncateFullyAndStartAt`: for a follower whose whole log lies below the leader's log
    /// start (it was away while the leader's retention or DeleteRecords passed its end), or
    /// whose start falls inside the leader's next batch. Epochs and producer state go too; the
    /// new segment's name carries the new start across a crash.
    pub fn truncate_fully_and_start_at(&mut self, offset: i64, now_ms: i64) -> Result<()> {
        let leo = self.log_end_offset();
        for (_, s) in std::mem::take(&mut self.sealed) {
            s.delete();
        }
        if offset == self.active.core.base_offset {
            self.active.truncate_to(offset)?;
        } else {
            let fresh = ActiveSegment::create(&self.dir, offset, settings(&self.config), now_ms)?;
            std::mem::replace(&mut self.active, fresh).delete();
        }
        for o in list_offsets(&self.dir, "snapshot")? {
            let _ = std::fs::remove_file(snapshot_path(&self.dir, o));
        }
        self.epochs.truncate_from(i64::MIN, &self.dir)?;
        self.producers = ProducerState::default();
        self.log_start_offset = offset;
        self.high_watermark = offset;
        self.recovery_point = offset;
        self.cleaner_offset = self.cleaner_offset.min(offset);
        self.unflushed_messages = 0;
        self.owed_from = None;
        self.flushed_end = offset;
        self.truncations += 1;
        tracing::info!(dir = %self.dir.display(), from = leo, to = offset, "log emptied to start again at the leader's");
        Ok(())
    }

    fn first_segment_base(&self) -> i64 {
        self.sealed.keys().next().copied().unwrap_or(self.active.core.base_offset)
    }

    pub(crate) fn sealed_segments(&self) -> impl Iterator<Item = &SealedSegment> {
        self.sealed.values()
    }

    pub(crate) fn sealed_segment(&self, base: i64) -> Option<&SealedSegment> {
        self.sealed.get(&base)
    }

    pub(crate) fn remove_sealed(&mut self, base: i64) -> Option<SealedSegment> {
        self.sealed.remove(&base)
    }

    /// Puts `seg` in place of the sealed segment at `base` (the cleaner's swap).
    pub(crate) fn replace_sealed(&mut self, base: i64, seg: SealedSegment) -> Option<SealedSegment> {
        self.sealed.insert(base, seg)
    }

    /// The log cleaner's first dirty offset.
    pub fn cleaner_offset(&self) -> i64 {
        self.cleaner_offset
    }

    pub(crate) fn set_cleaner_offset(&mut self, offset: i64) {
        self.cleaner_offset = offset;
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn config(&self) -> &LogConfig {
        &self.config
    }
    pub fn set_config(&mut self, config: impl Into<Arc<LogConfig>>) {
        self.config = config.into();
    }
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }
    pub fn log_end_offset(&self) -> i64 {
        self.active.core.next_offset
    }
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }
    pub fn producer_state(&self) -> &ProducerState {
        &self.producers
    }
    /// Total bytes in all segments.
    pub fn size_bytes(&self) -> u64 {
        self.sealed.values().map(|s| s.core.size).sum::<u64>() + self.active.core.size
    }
    pub fn segment_count(&self) -> usize {
        self.sealed.len() + 1
    }
    pub fn segment_base_offsets(&self) -> Vec<i64> {
        self.sealed.keys().copied().chain(std::iter::once(self.active.core.base_offset)).collect()
    }

    /// Moves the high watermark (the replication layer decides where). Here it never goes
    /// backwards, nor past the log end or an owed flush ([`Flush::Owed`]).
    pub fn set_high_watermark(&mut self, hw: i64) {
        let end = self.owed_from.unwrap_or_else(|| self.log_end_offset());
        self.high_watermark = hw.clamp(self.high_watermark.min(end), end);
        self.producers.on_high_watermark(self.high_watermark);
    }

    /// Appends validated producer batches from `records` (the produce request's record set),
    /// assigning offsets from the log end and stamping `leader_epoch`. `flush`: what to do when
    /// `flush.messages` calls for a flush ([`Flush`]).
    pub fn append(
        &mut self,
        records: &[u8],
        batches: &[ValidBatch],
        leader_epoch: i32,
        now_ms: i64,
        flush: Flush,
    ) -> Result<AppendResult> {
        if !self.config.log_append_time {
            for b in batches {
                self.check_timestamps(&b.header, now_ms)?;
            }
        }
        // Idempotence first: a retry of batches already written is answered, not appended.
        for b in batches {
            match self.producers.check(&b.header)? {
                SeqCheck::Append => {}
                SeqCheck::Duplicate(meta) => {
                    return Ok(AppendResult {
                        base_offset: meta.first_offset,
                        last_offset: meta.last_offset,
                        log_append_time: -1,
                        log_start_offset: self.log_start_offset,
                        duplicate: true,
                        records: 0,
                        bytes: 0,
                        flush_owed: flush == Flush::Owed && self.owed_from.is_some(),
                    });
                }
            }
        }
        // Build the bytes to write: recompressed if the topic says so, offsets and epoch patched.
        let mut buf: Vec<u8> = Vec::with_capacity(records.len());
        let mut placed: Vec<(Range<usize>, BatchHeader)> = Vec::with_capacity(batches.len());
        let mut next = self.log_end_offset();
        let append_time = if self.config.log_append_time { now_ms } else { -1 };
        for b in batches {
            let raw = &records[b.start..b.end];
            let start = buf.len();
            match recompress(raw, &b.header, self.config.compression, self.config.max_message_bytes)? {
                Some(re) => buf.extend_from_slice(&re),
                None => buf.extend_from_slice(raw),
            }
            let bytes = &mut buf[start..];
            if self.config.log_append_time {
                batch::set_log_append_time(bytes, now_ms);
            }
            batch::patch_offset_and_epoch(bytes, next, leader_epoch);
            let h = BatchHeader::parse(bytes)
                .ok_or_else(|| LogError::Batch(crate::error::BatchError::Corrupt("short batch".into())))?;
            if buf.len() - start > self.config.max_message_bytes {
                return Err(crate::error::BatchError::TooLarge {
                    size: buf.len() - start,
                    max: self.config.max_message_bytes,
                }
                .into());
            }
            next = h.next_offset();
            placed.push((start..buf.len(), h));
        }
        let (Some(first), Some(last)) = (placed.first().map(|p| p.1), placed.last().map(|p| p.1)) else {
            return Err(crate::error::BatchError::InvalidRecord("no batches".into()).into());
        };
        if self.active.needs_roll(
            buf.len() as u64,
            last.last_offset(),
            self.config.segment_bytes,
            self.config.segment_ms,
            now_ms,
        ) {
            self.roll(now_ms)?;
        }
        self.epochs.assign(leader_epoch, first.base_offset, &self.dir)?;
        self.active.append(&buf, &placed)?;
        let records_n = self.appended(&buf, &placed, now_ms, flush)?;
        Ok(AppendResult {
            base_offset: first.base_offset,
            last_offset: last.last_offset(),
            log_append_time: append_time,
            log_start_offset: self.log_start_offset,
            duplicate: false,
            records: records_n,
            bytes: buf.len(),
            flush_owed: flush == Flush::Owed && self.owed_from.is_some(),
        })
    }

    /// `message.timestamp.after.max.ms` against the batch's newest timestamp and
    /// `message.timestamp.before.max.ms` against its first (the header carries no minimum).
    fn check_timestamps(&self, h: &BatchHeader, now_ms: i64) -> Result<()> {
        let c = &self.config;
        if h.max_timestamp > now_ms.saturating_add(c.timestamp_after_max_ms) {
            let reason =
                format!("more than message.timestamp.after.max.ms={} ahead of the broker", c.timestamp_after_max_ms);
            return Err(crate::error::BatchError::InvalidTimestamp { timestamp: h.max_timestamp, reason }.into());
        }
        if h.base_timestamp >= 0 && h.base_timestamp < now_ms.saturating_sub(c.timestamp_before_max_ms) {
            let reason =
                format!("more than message.timestamp.before.max.ms={} behind the broker", c.timestamp_before_max_ms);
            return Err(crate::error::BatchError::InvalidTimestamp { timestamp: h.base_timestamp, reason }.into());
        }
        Ok(())
    }

    /// Seals the active segment and starts a new one at the log end.
    pub fn roll(&mut self, now_ms: i64) -> Result<()> {
        let leo = self.log_end_offset();
        let new = ActiveSegment::create(&self.dir, leo, settings(&self.config), now_ms)?;
        let old = std::mem::replace(&mut self.active, new);
        let sealed = old.seal()?;
        self.sealed.insert(sealed.core.base_offset, sealed);
        self.write_producer_snapshot(leo)?;
        tracing::debug!(dir = %self.dir.display(), base_offset = leo, "rolled segment");
        Ok(())
    }

    /// Advances the log start offset (DeleteRecords) and deletes segments wholly below it.
    pub fn delete_records_before(&mut self, offset: i64) -> Result<i64> {
        if offset > self.high_watermark || offset < 0 {
            return Err(LogError::OffsetOutOfRange { offset, start: self.log_start_offset, end: self.high_watermark });
        }
        self.log_start_offset = self.log_start_offset.max(offset);
        self.delete_segments_below_start();
        Ok(self.log_start_offset)
    }

    fn delete_segments_below_start(&mut self) {
        let dead: Vec<i64> = self
            .sealed
            .values()
            .filter(|s| s.core.next_offset <= self.log_start_offset)
            .map(|s| s.core.base_offset)
            .collect();
        for b in dead {
            if let Some(s) = self.sealed.remove(&b) {
                s.delete();
            }
        }
    }

    /// Applies `retention.ms` and `retention.bytes`, deleting whole sealed segments from the
    /// oldest; never the active one. Returns how many segments were deleted.
    pub fn apply_retention(&mut self, now_ms: i64) -> Result<usize> {
        if !self.config.cleanup_delete {
            return Ok(0);
        }
        let mut deleted = 0;
        let mut size = self.size_bytes() as i64;
        while let Some((&base, oldest)) = self.sealed.iter().next() {
            let by_time = self.config.retention_ms >= 0
                && oldest.core.max_timestamp >= 0
                && now_ms - oldest.core.max_timestamp > self.config.retention_ms;
            let by_time =
                by_time || (self.config.retention_ms >= 0 && oldest.core.max_timestamp < 0 && oldest.core.size == 0);
            let by_size =
                self.config.retention_bytes >= 0 && size - oldest.core.size as i64 >= self.config.retention_bytes;
            // Segments must also end below the high watermark: nothing unreplicated is deleted.
            if !(by_time || by_size) || oldest.core.next_offset > self.high_watermark {
                break;
            }
            let Some(seg) = self.sealed.remove(&base) else { break };
            size -= seg.core.size as i64;
            let next_start = self.sealed.keys().next().copied().unwrap_or(self.active.core.base_offset);
            self.log_start_offset = self.log_start_offset.max(next_start);
            tracing::info!(dir = %self.dir.display(), base_offset = base, by_time, by_size, "deleting segment (retention)");
            seg.delete();
            deleted += 1;
        }
        Ok(deleted)
    }

    /// Forgets producers idle for longer than `producer.id.expiration.ms` (Kafka's rule: their
    /// retries can no longer be recognised after that).
    pub fn expire_producers(&mut self, now_ms: i64) {
        self.producers.expire(now_ms, self.config.producer_id_expiration_ms);
    }

    /// Rolls the active segment if `segment.ms` has passed (checked periodically so that idle
    /// partitions roll too and retention can reach their data).
    pub fn roll_if_expired(&mut self, now_ms: i64) -> Result<bool> {
        if self.active.core.size > 0
            && self.config.segment_ms > 0
            && now_ms - self.active.created_ms >= self.config.segment_ms
        {
            self.roll(now_ms)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Clean shutdown: sync everything, trim indexes, snapshot producer state at the log end.
    /// Returns the recovery point to checkpoint (the log end).
    pub fn close(mut self, now_ms: i64) -> Result<i64> {
        if self.txn_rebuild_floor() != i64::MAX {
            // A transaction index write failed while the log ran: rebuild it (and producer
            // state) from the log now, so the clean shutdown leaves it complete.
            self.load_producer_state(false, true)?;
        }
        self.flush(now_ms)?;
        let leo = self.log_end_offset();
        self.write_producer_snapshot(leo)?;
        self.active.close()?;
        Ok(leo)
    }

    /// Deletes the log's directory and everything in it.
    pub fn delete(self) -> Result<()> {
        let dir = self.dir.clone();
        drop(self);
        std::fs::remove_dir_all(&dir).map_err(LogError::io(dir))
    }

    pub fn compression(&self) -> TargetCompression {
        self.config.compression
    }
}
