//! Reads of a partition log: planned under the log's lock ([`Log::read`]) and executed
//! outside it ([`ReadPlan::execute`]), and the timestamp lookups of ListOffsets.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;

use crate::batch::{BatchHeader, BatchIter, HEADER_LEN};
use crate::error::{LogError, Result};
use crate::log::Log;
use crate::segment::{self, read_at};

/// A read decided under the log's lock and executed outside it.
#[derive(Debug, Clone)]
pub struct ReadPlan {
    file: Arc<File>,
    path: PathBuf,
    pos: u64,
    end: u64,
    max_bytes: usize,
    max_offset: i64,
    min_one: bool,
    /// From the segment's offset index: where [`ReadPlan::locate`] starts looking for the end.
    end_hint: u64,
    /// The segment's next offset when planned (the offset after the batch ending at `end`).
    next_offset: i64,
}

/// Whole batches of one segment file, located without reading their records: what a fetch
/// sends from the page cache to the socket (`sendfile`). The file is held open, so retention or
/// compaction deleting it does not change what the slice reads.
#[derive(Debug, Clone)]
pub struct FileSlice {
    pub file: Arc<File>,
    pub path: PathBuf,
    pub pos: u64,
    pub len: usize,
    /// The offset after the slice's last batch: the base offset of the batch that follows it, or
    /// the segment's next offset (an upper bound for the aborted transactions it may hold).
    pub next_offset: i64,
    /// The slice's bytes, when locating it read them all already (a few small batches, inside
    /// the window their headers were read through).
    pub held: Option<Bytes>,
}

impl FileSlice {
    /// The slice's bytes (a small slice, or a listener that cannot send from the file: TLS).
    pub fn read(&self) -> Result<Bytes> {
        match &self.held {
            Some(b) => Ok(b.clone()),
            None => read_at(&self.file, &self.path, self.pos, self.len).map(crate::buffers::into_bytes),
        }
    }
}

/// Bytes read per header lookup while locating a read's end: batch headers that follow one
/// another closely (small batches) come from one read.
const HEADER_WINDOW: usize = 8 * 1024;

/// Batch headers of a file, read through a small window.
struct Headers<'a> {
    plan: &'a ReadPlan,
    at: u64,
    buf: Vec<u8>,
}

impl Headers<'_> {
    /// The `len` bytes at `pos`, if the window holds them all.
    fn holding(self, pos: u64, len: usize) -> Option<Bytes> {
        let from = pos.checked_sub(self.at)? as usize;
        (len > 0 && from + len <= self.buf.len()).then(|| Bytes::from(self.buf).slice(from..from + len))
    }

    /// The header of the batch at `pos` (which lies below the plan's end).
    fn at(&mut self, pos: u64) -> Result<BatchHeader> {
        let have = pos >= self.at && pos + HEADER_LEN as u64 <= self.at + self.buf.len() as u64;
        if !have {
            let want = HEADER_WINDOW.min((self.plan.end - pos) as usize).max(HEADER_LEN);
            self.buf = read_at(&self.plan.file, &self.plan.path, pos, want)?;
            self.at = pos;
        }
        let from = (pos - self.at) as usize;
        BatchHeader::parse_checked(&self.buf[from..])
            .map_err(|why| LogError::Corrupt { path: self.plan.path.clone(), reason: format!("at byte {pos}: {why}") })
    }
}

impl ReadPlan {
    /// Reads whole batches starting at the planned position: at most `max_bytes`, never a batch
    /// at or past `max_offset` (the high watermark), and, with `min_one`, the first batch even
    /// if it alone is larger than `max_bytes` so that consumers always make progress.
    pub fn execute(&self) -> Result<Bytes> {
        let avail = self.end.saturating_sub(self.pos);
        let want = (self.max_bytes as u64).max(HEADER_LEN as u64).min(avail) as usize;
        if want == 0 {
            return Ok(Bytes::new());
        }
        let mut buf = read_at(&self.file, &self.path, self.pos, want)?;
        let mut end = 0;
        for (at, h) in BatchIter::new(&buf) {
            if h.base_offset >= self.max_offset || at + h.total_size() > self.max_bytes {
                break;
            }
            end = at + h.total_size();
        }
        if end == 0
            && self.min_one
            && let Some(h) = BatchHeader::parse(&buf)
            && h.base_offset < self.max_offset
            && h.total_size() >= HEADER_LEN
            && h.total_size() as u64 <= avail
        {
            if h.total_size() > buf.len() {
                buf = read_at(&self.file, &self.path, self.pos, h.total_size())?;
            }
            end = h.total_size();
        }
        buf.truncate(end);
        Ok(crate::buffers::into_bytes(buf))
    }

    /// The same batches [`ReadPlan::execute`] would read, located by their headers only: from
    /// the index's hint, headers are read until a batch would pass `max_bytes` or reach
    /// `max_offset`, so the records themselves stay in the page cache.
    pub fn locate(&self) -> Result<FileSlice> {
        let limit = self.end.min(self.pos.saturating_add(self.max_bytes as u64));
        let mut headers = Headers { plan: self, at: 0, buf: Vec::new() };
        let mut at = self.end_hint.clamp(self.pos, limit.max(self.pos));
        let mut next_offset = self.next_offset;
        while at + HEADER_LEN as u64 <= self.end {
            let h = headers.at(at)?;
            if h.base_offset >= self.max_offset || at + h.total_size() as u64 > limit {
                next_offset = h.base_offset;
                if at == self.pos
                    && self.min_one
                    && h.base_offset < self.max_offset
                    && at + h.total_size() as u64 <= self.end
                {
                    at += h.total_size() as u64;
                    next_offset = h.next_offset();
                }
                break;
            }
            at += h.total_size() as u64;
        }
        let len = (at - self.pos) as usize;
        Ok(FileSlice {
            file: self.file.clone(),
            path: self.path.clone(),
            pos: self.pos,
            len,
            next_offset,
            held: headers.holding(self.pos, len),
        })
    }
}

/// Result of planning a read.
#[derive(Debug)]
pub enum ReadStart {
    /// Nothing to read at this offset yet (offset == high watermark).
    Empty,
    Plan(ReadPlan),
}

impl Log {
    /// Plans a read of whole batches starting with the batch that contains `offset`.
    pub fn read(&self, offset: i64, max_bytes: usize, max_offset: i64, min_one: bool) -> Result<ReadStart> {
        let leo = self.log_end_offset();
        if offset < self.log_start_offset || offset > leo {
            return Err(LogError::OffsetOutOfRange { offset, start: self.log_start_offset, end: leo });
        }
        let max_offset = max_offset.min(leo);
        if offset >= max_offset {
            return Ok(ReadStart::Empty);
        }
        let limit = |core: &segment::SegmentCore, pos: u64| core.size.min(pos.saturating_add(max_bytes as u64));
        let mut found = None;
        for seg in self
            .sealed
            .range(..=offset)
            .next_back()
            .into_iter()
            .map(|(_, s)| s)
            .chain(self.sealed.range(offset + 1..).map(|(_, s)| s))
        {
            if seg.core.next_offset <= offset {
                continue;
            }
            if let Some((pos, _)) = seg.core.find_batch(offset, seg.lookup_position(offset))? {
                let hint = seg.end_hint(pos, limit(&seg.core, pos), max_offset);
                found = Some((&seg.core, pos, hint));
                break;
            }
        }
        if found.is_none()
            && let Some((pos, _)) = self.active.core.find_batch(offset, self.active.lookup_position(offset))?
        {
            let hint = self.active.end_hint(pos, limit(&self.active.core, pos), max_offset);
            found = Some((&self.active.core, pos, hint));
        }
        let Some((core, pos, end_hint)) = found else { return Ok(ReadStart::Empty) };
        Ok(ReadStart::Plan(ReadPlan {
            file: core.file.clone(),
            path: core.log_path.clone(),
            pos,
            end: core.size,
            max_bytes,
            max_offset,
            min_one,
            end_hint,
            next_offset: core.next_offset,
        }))
    }

    /// The first offset whose record timestamp is >= `ts`, with that timestamp (ListOffsets).
    pub fn offset_for_timestamp(&self, ts: i64) -> Result<Option<(i64, i64)>> {
        let cores = self
            .sealed
            .values()
            .map(|s| (&s.core, s.lookup_time(ts)))
            .chain(std::iter::once((&self.active.core, self.active.lookup_time(ts))));
        for (core, hint) in cores {
            if core.max_timestamp < ts || core.next_offset <= self.log_start_offset {
                continue;
            }
            let mut pos = hint;
            while let Some((at, h)) = core.find_batch_by_time(ts, pos)? {
                pos = at + h.total_size() as u64;
                if h.last_offset() < self.log_start_offset || h.base_offset >= self.high_watermark {
                    if h.base_offset >= self.high_watermark {
                        return Ok(None);
                    }
                    continue;
                }
                let bytes = core.read_batch(at, &h)?;
                if let Some((o, t)) = first_record_at_or_after(&bytes, &h, ts)?
                    && o >= self.log_start_offset
                {
                    return Ok(Some((o, t)));
                }
            }
        }
        Ok(None)
    }

    /// The offset and timestamp of the record with the largest timestamp (ListOffsets -3).
    pub fn max_timestamp_offset(&self) -> Result<Option<(i64, i64)>> {
        let best = self
            .sealed
            .values()
            .map(|s| &s.core)
            .chain(std::iter::once(&self.active.core))
            .filter(|c| c.max_timestamp >= 0 && c.next_offset > self.log_start_offset)
            .fold(None::<&segment::SegmentCore>, |acc, c| match acc {
                Some(a) if a.max_timestamp >= c.max_timestamp => Some(a),
                _ => Some(c),
            });
        let Some(core) = best else { return Ok(None) };
        let mut pos = 0;
        while let Some((at, h)) = core.find_batch(core.offset_of_max_timestamp, pos)? {
            pos = at + h.total_size() as u64;
            if h.max_timestamp == core.max_timestamp {
                let bytes = core.read_batch(at, &h)?;
                return first_record_at_or_after(&bytes, &h, core.max_timestamp);
            }
        }
        Ok(None)
    }
}

/// Decodes one batch and returns the first record with timestamp >= `ts`.
fn first_record_at_or_after(bytes: &[u8], h: &BatchHeader, ts: i64) -> Result<Option<(i64, i64)>> {
    if h.record_count == 0 {
        // An empty batch the cleaner kept: no record to find in it.
        return Ok(None);
    }
    if h.is_log_append_time() {
        return Ok((h.max_timestamp >= ts).then_some((h.base_offset, h.max_timestamp)));
    }
    let mut b = Bytes::copy_from_slice(bytes);
    let set = RecordBatchDecoder::decode(&mut b).map_err(|e| LogError::Corrupt {
        path: PathBuf::new(),
        reason: format!("cannot decode batch at {}: {e}", h.base_offset),
    })?;
    Ok(set.records.iter().find(|r| r.timestamp >= ts).map(|r| (r.offset, r.timestamp)))
}
