//! Segments: a `.log` file of record batches plus its two sparse indexes and its transaction
//! index ([`crate::txn_index`]), named by the segment's base offset as 20 zero-padded digits.
//!
//! [`ActiveSegment`] is the only writable type. [`SealedSegment`] is what a segment becomes when
//! the log rolls: its indexes are trimmed and reopened read-only. Writes to the active segment
//! (its log and its transaction index) are plain `pwrite`s into the page cache: readable on
//! return, durable after [`ActiveSegment::sync`] or, once sealed, after the flusher syncs the
//! sealed segment's files outside the log's lock (`Log::pending_flush`).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::batch::{BatchHeader, BatchIter, HEADER_LEN, Stop};
use crate::error::{LogError, Result};
use crate::index::{IndexReader, IndexView, IndexWriter, OffsetEntry, TimeEntry};
use crate::txn_index::{AbortedTxn, TxnIndex};

/// Chunk size for sequential scans during recovery.
const SCAN_CHUNK: usize = 1 << 20;

pub fn file_name(base_offset: i64, ext: &str) -> String {
    format!("{base_offset:020}.{ext}")
}

/// Reads exactly `len` bytes at `pos`.
pub(crate) fn read_at(file: &File, path: &Path, pos: u64, len: usize) -> Result<Vec<u8>> {
    crate::mmap::read_exact_at(file, pos, len).map_err(LogError::io(path))
}

/// What every segment shares: the log file and what is known about its contents.
pub struct SegmentCore {
    pub base_offset: i64,
    /// Offset after the last batch (== base offset when empty).
    pub next_offset: i64,
    /// Bytes of complete batches in the file.
    pub size: u64,
    /// Largest batch max timestamp, -1 if none, and the last offset of the batch that holds it
    /// (Kafka's "shallow" offset of the max timestamp).
    pub max_timestamp: i64,
    pub offset_of_max_timestamp: i64,
    pub file: Arc<File>,
    /// The segment's `.log` file; its directory holds the segment's other files.
    pub log_path: PathBuf,
    /// Aborted transactions whose marker is in this segment.
    pub(crate) txn_index: TxnIndex,
    /// The transaction index must be rebuilt from a replay of the log: the segment was rescanned
    /// (its tail may have been cut) or the index failed its check.
    pub(crate) txn_rebuild: bool,
}

impl SegmentCore {
    /// The directory holding the segment's files (derived, not stored: every path a partition
    /// keeps is a heap allocation, and at 10,000 partitions each costs about a megabyte).
    fn dir(&self) -> &Path {
        self.log_path.parent().unwrap_or(Path::new(""))
    }
    fn index_path(&self) -> PathBuf {
        self.dir().join(file_name(self.base_offset, "index"))
    }
    fn time_index_path(&self) -> PathBuf {
        self.dir().join(file_name(self.base_offset, "timeindex"))
    }

    pub fn txn_index(&self) -> &TxnIndex {
        &self.txn_index
    }

    /// Position of the first batch whose last offset is >= `offset`, scanning forward from
    /// `start` (an index hint). `None` if no such batch is in the segment.
    pub fn find_batch(&self, offset: i64, start: u64) -> Result<Option<(u64, BatchHeader)>> {
        self.scan_headers(start, |h| h.last_offset() >= offset)
    }

    /// The first batch whose max timestamp is >= `ts`, scanning forward from `start`.
    pub fn find_batch_by_time(&self, ts: i64, start: u64) -> Result<Option<(u64, BatchHeader)>> {
        self.scan_headers(start, |h| h.max_timestamp >= ts)
    }

    /// Reads batch headers from `start` until `stop` accepts one.
    fn scan_headers(&self, start: u64, stop: impl Fn(&BatchHeader) -> bool) -> Result<Option<(u64, BatchHeader)>> {
        let mut pos = start;
        while pos + HEADER_LEN as u64 <= self.size {
            let hdr = read_at(&self.file, &self.log_path, pos, HEADER_LEN)?;
            let h = BatchHeader::parse_checked(&hdr).map_err(|why| self.corrupt(pos, why))?;
            if stop(&h) {
                return Ok(Some((pos, h)));
            }
            pos += h.total_size() as u64;
        }
        Ok(None)
    }

    /// Reads the whole batch at `pos`.
    pub fn read_batch(&self, pos: u64, h: &BatchHeader) -> Result<Vec<u8>> {
        read_at(&self.file, &self.log_path, pos, h.total_size())
    }

    fn corrupt(&self, pos: u64, why: &str) -> LogError {
        LogError::Corrupt { path: self.log_path.clone(), reason: format!("at byte {pos}: {why}") }
    }

    fn delete_files(&self) {
        for p in [self.log_path.clone(), self.index_path(), self.time_index_path()] {
            if let Err(e) = std::fs::remove_file(&p)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(path = %p.display(), error = %e, "could not delete segment file");
            }
        }
        self.txn_index.delete();
    }
}

/// A segment that no longer takes writes.
pub struct SealedSegment {
    pub core: SegmentCore,
    offset_index: IndexReader<OffsetEntry>,
    time_index: IndexReader<TimeEntry>,
    /// Whether the log file and the transaction index have been fsynced since it was sealed.
    pub flushed: bool,
}

/// The segment that takes appends.
pub struct ActiveSegment {
    pub core: SegmentCore,
    offset_index: IndexWriter<OffsetEntry>,
    time_index: IndexWriter<TimeEntry>,
    bytes_since_index: u64,
    index_interval: u64,
    /// Wall clock time the segment was created (or opened), for `segment.ms`.
    pub created_ms: i64,
}

/// Result of scanning a segment's log file.
pub struct ScanResult {
    pub valid_bytes: u64,
    pub next_offset: i64,
    /// Set when the scan stopped at bytes that are not a valid batch (torn or corrupt tail).
    pub truncated: Option<String>,
}

/// Scans a log file from `start` batch by batch (verifying CRCs), calling `on_batch` with each
/// valid batch's position and header. Stops at the first torn or corrupt batch, or at a batch
/// whose offsets go backwards.
pub fn scan_log(
    file: &File,
    path: &Path,
    start: u64,
    mut expected_next: i64,
    mut on_batch: impl FnMut(u64, &BatchHeader),
) -> Result<ScanResult> {
    let len = file.metadata().map_err(LogError::io(path))?.len();
    let mut pos = start;
    let mut truncated = None;
    let mut want = SCAN_CHUNK;
    while pos < len {
        let n = usize::try_from((len - pos).min(want as u64)).unwrap_or(want);
        let buf = read_at(file, path, pos, n)?;
        let mut it = BatchIter::new(&buf).verify_crc();
        let mut bad_order = None;
        for (at, h) in it.by_ref() {
            if h.base_offset < expected_next {
                bad_order = Some((at, format!("batch at offset {} after offset {}", h.base_offset, expected_next - 1)));
                break;
            }
            on_batch(pos + at as u64, &h);
            expected_next = h.next_offset();
        }
        if let Some((at, why)) = bad_order {
            pos += at as u64;
            truncated = Some(why);
            break;
        }
        pos += it.position() as u64;
        match it.stopped {
            None => want = SCAN_CHUNK,
            Some(Stop::Incomplete { needed }) => {
                if pos + needed as u64 > len {
                    truncated = Some(format!("torn batch: {} bytes at the end, the batch needs {needed}", len - pos));
                    break;
                }
                want = needed.max(SCAN_CHUNK);
            }
            Some(Stop::Corrupt(why)) => {
                truncated = Some(why);
                break;
            }
        }
    }
    Ok(ScanResult { valid_bytes: pos, next_offset: expected_next, truncated })
}

fn open_log_file(path: &Path) -> Result<File> {
    OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).map_err(LogError::io(path))
}

/// Position of a batch at or before the one holding `offset` (0 without an index entry).
fn position_of(base: i64, oi: &impl IndexView<OffsetEntry>, offset: i64) -> u64 {
    oi.lookup(offset - base).map_or(0, |e| u64::from(e.position))
}

/// Where a read starting at the batch at `from` can begin looking for its end, from the offset
/// index alone: a batch start at or after `from` such that every batch between them ends by
/// `limit` (bytes) and lies below `max_offset`. `from` when the index knows nothing closer.
fn end_hint(core: &SegmentCore, oi: &impl IndexView<OffsetEntry>, from: u64, limit: u64, max_offset: i64) -> u64 {
    // An entry is the position where a batch starts, keyed by that batch's last offset.
    let by_position = crate::index::floor_by_position(oi, limit).map_or(from, |e| u64::from(e.position));
    let by_offset = if max_offset >= core.next_offset {
        u64::MAX
    } else {
        oi.lookup(max_offset - 1 - core.base_offset).map_or(from, |e| u64::from(e.position))
    };
    by_position.min(by_offset).max(from)
}

/// Position to start scanning for the first record with timestamp >= `ts`.
fn position_for_time(base: i64, oi: &impl IndexView<OffsetEntry>, ti: &impl IndexView<TimeEntry>, ts: i64) -> u64 {
    ti.lookup(ts).map_or(0, |t| position_of(base, oi, base + i64::from(t.rel_offset)))
}

/// Settings a segment needs from the topic config.
#[derive(Debug, Clone, Copy)]
pub struct SegmentSettings {
    pub index_interval_bytes: u64,
    pub max_index_bytes: u64,
}

impl ActiveSegment {
    /// Creates a new, empty segment at `base_offset` (replacing any files of that name).
    pub fn create(dir: &Path, base_offset: i64, s: SegmentSettings, now_ms: i64) -> Result<Self> {
        let (mut core, _) = Self::new_core(dir, base_offset)?;
        core.file.set_len(0).map_err(LogError::io(&core.log_path))?;
        core.txn_index.reset()?;
        core.txn_rebuild = false;
        Self::with_fresh_indexes(core, s, now_ms)
    }

    /// A segment around `core` with new, empty indexes.
    fn with_fresh_indexes(core: SegmentCore, s: SegmentSettings, now_ms: i64) -> Result<Self> {
        let offset_index = IndexWriter::create(&core.index_path(), s.max_index_bytes)?;
        let time_index = IndexWriter::create(&core.time_index_path(), s.max_index_bytes)?;
        Ok(Self {
            core,
            offset_index,
            time_index,
            bytes_since_index: 0,
            index_interval: s.index_interval_bytes,
            created_ms: now_ms,
        })
    }

    /// Opens the last segment of a log.
    ///
    /// `trusted`: the segment was closed cleanly, so its indexes are used if they pass the sanity
    /// check and only the bytes after the last index entry are scanned. Otherwise (or if that
    /// fails) the whole file is scanned, the indexes rebuilt, and a torn or corrupt tail cut off;
    /// the reason for the cut is returned.
    pub fn open(
        dir: &Path,
        base_offset: i64,
        s: SegmentSettings,
        trusted: bool,
        now_ms: i64,
    ) -> Result<(Self, Option<String>)> {
        if trusted {
            match Self::open_trusted(dir, base_offset, s, now_ms)? {
                Ok(seg) => return Ok((seg, None)),
                Err(why) => {
                    tracing::warn!(dir = %dir.display(), base_offset, reason = %why, "active segment not usable as closed; recovering it");
                }
            }
        }
        Self::recover(dir, base_offset, s, now_ms)
    }

    fn new_core(dir: &Path, base_offset: i64) -> Result<(SegmentCore, u64)> {
        let log_path = dir.join(file_name(base_offset, "log"));
        let file = open_log_file(&log_path)?;
        let file_len = file.metadata().map_err(LogError::io(&log_path))?.len();
        let txn_path = dir.join(file_name(base_offset, "txnindex"));
        let (txn_index, problem) = TxnIndex::open(&txn_path, base_offset)?;
        if let Some(why) = &problem {
            tracing::warn!(path = %txn_path.display(), reason = %why, "transaction index failed its check; rebuilding it");
        }
        let core = SegmentCore {
            base_offset,
            next_offset: base_offset,
            size: 0,
            max_timestamp: -1,
            offset_of_max_timestamp: base_offset,
            file: Arc::new(file),
            log_path,
            txn_index,
            txn_rebuild: problem.is_some(),
        };
        Ok((core, file_len))
    }

    fn open_trusted(
        dir: &Path,
        base_offset: i64,
        s: SegmentSettings,
        now_ms: i64,
    ) -> Result<std::result::Result<Self, String>> {
        let (mut core, file_len) = Self::new_core(dir, base_offset)?;
        let oi = match IndexWriter::<OffsetEntry>::open_existing(&core.index_path(), s.max_index_bytes, Some(file_len))
        {
            Ok(i) => i,
            Err(e) => return Ok(Err(e.to_string())),
        };
        let ti = match IndexWriter::<TimeEntry>::open_existing(&core.time_index_path(), s.max_index_bytes, None) {
            Ok(i) => i,
            Err(e) => return Ok(Err(e.to_string())),
        };
        // The last entry points at a batch start; offsets only need to stay above the segment base.
        let (start_pos, start_offset) = (oi.last().map_or(0, |e| u64::from(e.position)), base_offset);
        if let Some(t) = ti.last() {
            core.max_timestamp = t.timestamp;
            core.offset_of_max_timestamp = base_offset + i64::from(t.rel_offset);
        }
        let mut seg = Self {
            core,
            offset_index: oi,
            time_index: ti,
            bytes_since_index: 0,
            index_interval: s.index_interval_bytes,
            created_ms: now_ms,
        };
        let mut tail = Vec::new();
        let r = scan_log(&seg.core.file, &seg.core.log_path, start_pos, start_offset, |pos, h| tail.push((pos, *h)))?;
        if let Some(why) = r.truncated {
            return Ok(Err(why));
        }
        for (pos, h) in &tail {
            seg.track(*pos, h, false);
        }
        seg.core.size = r.valid_bytes;
        seg.core.next_offset = r.next_offset;
        Ok(Ok(seg))
    }

    pub(crate) fn recover(
        dir: &Path,
        base_offset: i64,
        s: SegmentSettings,
        now_ms: i64,
    ) -> Result<(Self, Option<String>)> {
        let (core, file_len) = Self::new_core(dir, base_offset)?;
        let mut seg = Self::with_fresh_indexes(core, s, now_ms)?;
        let mut batches = Vec::new();
        let r = scan_log(&seg.core.file, &seg.core.log_path, 0, base_offset, |pos, h| batches.push((pos, *h)))?;
        for (pos, h) in &batches {
            seg.track(*pos, h, true);
        }
        seg.core.size = r.valid_bytes;
        seg.core.next_offset = r.next_offset;
        seg.core.txn_rebuild = true;
        if r.valid_bytes < file_len {
            seg.core.file.set_len(r.valid_bytes).map_err(LogError::io(&seg.core.log_path))?;
        }
        // No fsync here: the recovery point stays where it was, and the flusher syncs recovered
        // segments in the background (an fsync of gigabytes of dirty pages would hold startup).
        Ok((seg, r.truncated))
    }

    /// Records index and timestamp information for a batch written at `pos`.
    fn track(&mut self, pos: u64, h: &BatchHeader, index: bool) {
        if h.max_timestamp > self.core.max_timestamp {
            self.core.max_timestamp = h.max_timestamp;
            self.core.offset_of_max_timestamp = h.last_offset();
        }
        // As Kafka: an entry maps the batch's last offset to the batch's position.
        if index && (self.bytes_since_index >= self.index_interval || self.offset_index.is_empty()) {
            let rel = (h.last_offset() - self.core.base_offset) as u32;
            self.offset_index.append(OffsetEntry { rel_offset: rel, position: pos as u32 });
            self.append_time_entry();
            self.bytes_since_index = 0;
        }
        self.bytes_since_index += h.total_size() as u64;
    }

    fn append_time_entry(&mut self) {
        if self.core.max_timestamp < 0 {
            return;
        }
        if self.time_index.last().is_none_or(|t| self.core.max_timestamp > t.timestamp) {
            let rel = (self.core.offset_of_max_timestamp - self.core.base_offset) as u32;
            self.time_index.append(TimeEntry { timestamp: self.core.max_timestamp, rel_offset: rel });
        }
    }

    /// Whether appending `bytes` more (ending at `last_offset`) requires a new segment first.
    pub fn needs_roll(&self, bytes: u64, last_offset: i64, segment_bytes: u64, segment_ms: i64, now_ms: i64) -> bool {
        if self.core.size == 0 {
            return false;
        }
        self.core.size + bytes > segment_bytes
            || self.offset_index.is_full()
            || self.time_index.is_full()
            || (segment_ms > 0 && now_ms - self.created_ms >= segment_ms)
            || last_offset - self.core.base_offset > i64::from(u32::MAX)
            || self.core.size + bytes > u64::from(u32::MAX) / 2
    }

    /// Appends fully validated batches whose offsets are already assigned. `batches` gives each
    /// batch's byte range in `buf` and its header. Readable on return; durable after sync.
    pub fn append(&mut self, buf: &[u8], batches: &[(std::ops::Range<usize>, BatchHeader)]) -> Result<()> {
        self.core.file.write_all_at(buf, self.core.size).map_err(LogError::io(&self.core.log_path))?;
        let start = self.core.size;
        for (range, h) in batches {
            self.track(start + range.start as u64, h, true);
            self.core.next_offset = h.next_offset();
        }
        self.core.size += buf.len() as u64;
        Ok(())
    }

    /// fsyncs the log file and the transaction index (not the sparse indexes, which recovery
    /// rebuilds).
    pub fn sync(&mut self) -> Result<()> {
        self.core.file.sync_data().map_err(LogError::io(&self.core.log_path))?;
        self.core.txn_index.sync()
    }

    /// Indexes an aborted transaction whose marker was just appended to this segment. Readable
    /// on return, durable after [`ActiveSegment::sync`] or the flush of the sealed segment. If
    /// the write fails the
    /// index is marked for a rebuild from the log (the marker is in the log already).
    pub fn append_aborted_txn(&mut self, txn: &AbortedTxn) -> Result<()> {
        let r = self.core.txn_index.append(txn);
        if r.is_err() {
            self.core.txn_rebuild = true;
        }
        r
    }

    /// Replaces the transaction index with what recovery's replay found.
    pub(crate) fn rebuild_txn_index(&mut self, entries: &[AbortedTxn]) -> Result<()> {
        self.core.txn_index.rewrite(entries)?;
        self.core.txn_rebuild = false;
        Ok(())
    }

    pub fn lookup_position(&self, offset: i64) -> u64 {
        position_of(self.core.base_offset, &self.offset_index, offset)
    }

    pub fn lookup_time(&self, ts: i64) -> u64 {
        position_for_time(self.core.base_offset, &self.offset_index, &self.time_index, ts)
    }

    /// See [`end_hint`].
    pub fn end_hint(&self, from: u64, limit: u64, max_offset: i64) -> u64 {
        end_hint(&self.core, &self.offset_index, from, limit, max_offset)
    }

    /// Seals the segment: final time index entry, indexes trimmed and reopened read-only. No
    /// fsync (the partition lock is held): the log file and transaction index are synced with
    /// the sealed segment ([`SealedSegment::sync`], or by the flusher through `Log::pending_flush`)
    /// before the recovery point passes it, since recovery trusts the indexes below it.
    pub fn seal(mut self) -> Result<SealedSegment> {
        self.append_time_entry();
        let offset_index = self.offset_index.seal(&self.core.index_path())?;
        let time_index = self.time_index.seal(&self.core.time_index_path())?;
        Ok(SealedSegment { core: self.core, offset_index, time_index, flushed: false })
    }

    /// Clean shutdown: sync the log, trim the indexes.
    pub fn close(mut self) -> Result<()> {
        self.append_time_entry();
        self.sync()?;
        self.offset_index.close(&self.core.index_path())?;
        self.time_index.close(&self.core.time_index_path())
    }

    /// Drops everything at or after `offset` (the batch containing `offset` must start there).
    pub fn truncate_to(&mut self, offset: i64) -> Result<()> {
        let found = self.core.find_batch(offset, self.lookup_position(offset))?;
        let pos = match found {
            Some((pos, _)) => pos,
            None => return Ok(()),
        };
        self.core.file.set_len(pos).map_err(LogError::io(&self.core.log_path))?;
        self.core.size = pos;
        self.core.next_offset = offset.max(self.core.base_offset);
        self.offset_index.truncate_to_key(offset - self.core.base_offset);
        self.core.txn_index.truncate_to(offset)?;
        // Time index entries may refer to truncated batches; rebuild max timestamp by rescanning.
        self.time_index.truncate_to_key(i64::MIN);
        self.core.max_timestamp = -1;
        let mut hs = Vec::new();
        scan_log(&self.core.file, &self.core.log_path, 0, self.core.base_offset, |p, h| hs.push((p, *h)))?;
        for (_, h) in &hs {
            if h.max_timestamp > self.core.max_timestamp {
                self.core.max_timestamp = h.max_timestamp;
                self.core.offset_of_max_timestamp = h.last_offset();
            }
        }
        self.append_time_entry();
        Ok(())
    }

    pub fn delete(self) {
        self.core.delete_files();
    }
}

impl SealedSegment {
    /// Opens a segment that is not the last one. `trusted`: it ends at or below the recovery
    /// point (its log and transaction index fsynced; the sparse indexes are checked), so a sane index is used as is. Otherwise (or when an index fails its sanity
    /// check) the segment is scanned; the scan's [`ScanResult::truncated`] tells the caller
    /// whether the log must be cut here.
    pub fn open(
        dir: &Path,
        base_offset: i64,
        next_offset_hint: i64,
        trusted: bool,
        s: SegmentSettings,
    ) -> Result<(Self, Option<String>)> {
        if trusted {
            let (mut core, file_len) = ActiveSegment::new_core(dir, base_offset)?;
            core.size = file_len;
            core.next_offset = next_offset_hint;
            let oi = IndexReader::<OffsetEntry>::open(&core.index_path(), Some(file_len.max(1)));
            let ti = IndexReader::<TimeEntry>::open(&core.time_index_path(), None);
            match (oi, ti) {
                (Ok(offset_index), Ok(time_index)) if file_len == 0 || !offset_index.is_empty() => {
                    if let Some(t) = time_index.last() {
                        core.max_timestamp = t.timestamp;
                        core.offset_of_max_timestamp = base_offset + i64::from(t.rel_offset);
                    }
                    return Ok((Self { core, offset_index, time_index, flushed: true }, None));
                }
                (oi, ti) => {
                    let why = oi
                        .err()
                        .or(ti.err())
                        .map_or_else(|| "empty index for a non-empty segment".to_string(), |e| e.to_string());
                    tracing::warn!(segment = %core.log_path.display(), reason = %why, "index failed its sanity check; rebuilding");
                }
            }
        }
        let (active, truncated) = ActiveSegment::recover(dir, base_offset, s, 0)?;
        // Not yet synced: the background flusher does it and then moves the recovery point.
        let sealed = active.seal()?;
        Ok((sealed, truncated))
    }

    /// A sealed segment from a complete log file in `dir`, its indexes built by a scan (the
    /// log cleaner's output). A torn or corrupt batch is an error, not a cut.
    pub(crate) fn build(dir: &Path, base_offset: i64, s: SegmentSettings) -> Result<SealedSegment> {
        let (seg, truncated) = ActiveSegment::recover(dir, base_offset, s, 0)?;
        if let Some(reason) = truncated {
            return Err(LogError::Corrupt { path: seg.core.log_path.clone(), reason });
        }
        let mut sealed = seg.seal()?;
        sealed.flushed = true;
        Ok(sealed)
    }

    /// Points the segment at `dir` after its files were renamed there (open handles and maps
    /// follow the files).
    pub(crate) fn relocate(&mut self, dir: &Path) {
        self.core.log_path = dir.join(file_name(self.core.base_offset, "log"));
        self.core.txn_index.relocate(dir.join(file_name(self.core.base_offset, "txnindex")));
    }

    pub(crate) fn dir(&self) -> &Path {
        self.core.dir()
    }

    pub fn lookup_position(&self, offset: i64) -> u64 {
        position_of(self.core.base_offset, &self.offset_index, offset)
    }

    pub fn lookup_time(&self, ts: i64) -> u64 {
        position_for_time(self.core.base_offset, &self.offset_index, &self.time_index, ts)
    }

    /// See [`end_hint`].
    pub fn end_hint(&self, from: u64, limit: u64, max_offset: i64) -> u64 {
        end_hint(&self.core, &self.offset_index, from, limit, max_offset)
    }

    /// fsyncs the log file and the transaction index.
    pub fn sync(&mut self) -> Result<()> {
        self.core.file.sync_data().map_err(LogError::io(&self.core.log_path))?;
        self.core.txn_index.sync()
    }

    /// The files a flush must sync: the log file, and the transaction index if it was written
    /// since its last sync.
    pub fn unsynced_files(&self) -> impl Iterator<Item = Arc<File>> {
        std::iter::once(self.core.file.clone()).chain(self.core.txn_index.unsynced_file())
    }

    /// The files [`SealedSegment::unsynced_files`] returned were synced.
    pub(crate) fn mark_flushed(&mut self) {
        self.flushed = true;
        self.core.txn_index.mark_synced();
    }

    /// Replaces the transaction index with what recovery's replay (or the cleaner) found,
    /// durably.
    pub(crate) fn rebuild_txn_index(&mut self, entries: &[AbortedTxn]) -> Result<()> {
        self.core.txn_index.rewrite(entries)?;
        self.core.txn_rebuild = false;
        Ok(())
    }

    pub fn delete(self) {
        self.core.delete_files();
    }
}
