//! Sparse indexes, in Kafka's on-disk layout (big-endian fixed-size entries):
//! - `.index`: relative offset (u32) -> byte position in the `.log` (u32), one entry every
//!   `index.interval.bytes`: the last offset of a batch and the position where that batch starts;
//! - `.timeindex`: max timestamp so far (i64) -> relative last offset (u32) of the batch where that
//!   timestamp was first reached.
//!
//! Both are Kafka's semantics too, so Kafka's `DumpLogSegments` verifies them.
//!
//! [`IndexWriter`] (active segment: preallocated, memory-mapped, appendable) and
//! [`IndexReader`] (sealed segment: trimmed, read-only) are different types; only the active
//! segment can write. Writes are visible on return and durable only after the file is synced or
//! rebuilt; recovery rebuilds any index it does not trust, so the index is never the source of
//! truth.

use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use crate::error::{LogError, Result};
use crate::mmap::{MmapFile, MmapMutFile};

/// A fixed-size index entry.
pub trait Entry: Copy + std::fmt::Debug {
    const SIZE: usize;
    fn read(b: &[u8]) -> Self;
    fn write(&self, b: &mut [u8]);
    /// The search key (relative offset or timestamp).
    fn key(&self) -> i64;
    fn rel_offset(&self) -> u32;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetEntry {
    pub rel_offset: u32,
    pub position: u32,
}

impl Entry for OffsetEntry {
    const SIZE: usize = 8;
    fn read(b: &[u8]) -> Self {
        Self {
            rel_offset: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            position: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
        }
    }
    fn write(&self, b: &mut [u8]) {
        b[0..4].copy_from_slice(&self.rel_offset.to_be_bytes());
        b[4..8].copy_from_slice(&self.position.to_be_bytes());
    }
    fn key(&self) -> i64 {
        i64::from(self.rel_offset)
    }
    fn rel_offset(&self) -> u32 {
        self.rel_offset
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeEntry {
    pub timestamp: i64,
    pub rel_offset: u32,
}

impl Entry for TimeEntry {
    const SIZE: usize = 12;
    fn read(b: &[u8]) -> Self {
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&b[0..8]);
        Self { timestamp: i64::from_be_bytes(ts), rel_offset: u32::from_be_bytes([b[8], b[9], b[10], b[11]]) }
    }
    fn write(&self, b: &mut [u8]) {
        b[0..8].copy_from_slice(&self.timestamp.to_be_bytes());
        b[8..12].copy_from_slice(&self.rel_offset.to_be_bytes());
    }
    fn key(&self) -> i64 {
        self.timestamp
    }
    fn rel_offset(&self) -> u32 {
        self.rel_offset
    }
}

fn entry_at<E: Entry>(bytes: &[u8], i: usize) -> E {
    E::read(&bytes[i * E::SIZE..(i + 1) * E::SIZE])
}

/// Largest entry whose key is <= `key` among the first `n` entries.
fn floor<E: Entry>(bytes: &[u8], n: usize, key: i64) -> Option<E> {
    floor_by(bytes, n, key, |e: &E| e.key())
}

/// Largest offset-index entry whose position is <= `position`: positions grow with offsets, so
/// the same binary search works by position (where a read of so many bytes may end).
pub fn floor_by_position(oi: &impl IndexView<OffsetEntry>, position: u64) -> Option<OffsetEntry> {
    floor_by(oi.bytes(), oi.len(), position, |e: &OffsetEntry| u64::from(e.position))
}

/// Largest of the first `n` entries whose `by` is <= `target`, for any `by` that grows with the
/// entries.
fn floor_by<E: Entry, K: Ord>(bytes: &[u8], n: usize, target: K, by: impl Fn(&E) -> K) -> Option<E> {
    let (mut lo, mut hi) = (0usize, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if by(&entry_at::<E>(bytes, mid)) <= target {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    (lo > 0).then(|| entry_at(bytes, lo - 1))
}

/// Checks that keys and offsets only grow and that positions (for the offset index) stay inside
/// the log file. Any violation means the file is not trusted and gets rebuilt.
fn sanity_check<E: Entry>(bytes: &[u8], n: usize, max_position: Option<u64>) -> std::result::Result<(), String> {
    let mut prev: Option<E> = None;
    for i in 0..n {
        let e: E = entry_at(bytes, i);
        if let Some(p) = prev {
            let strictly_after = if E::SIZE == OffsetEntry::SIZE { e.key() > p.key() } else { e.key() >= p.key() };
            if !strictly_after || e.rel_offset() < p.rel_offset() {
                return Err(format!("entry {i} ({e:?}) does not follow {p:?}"));
            }
        }
        if let Some(max) = max_position {
            let pos = OffsetEntry::read(&bytes[i * E::SIZE..]).position;
            if u64::from(pos) >= max {
                return Err(format!("entry {i} points at {pos}, past the log's {max} bytes"));
            }
        }
        prev = Some(e);
    }
    Ok(())
}

/// Lookups shared by both index kinds.
pub trait IndexView<E: Entry> {
    fn bytes(&self) -> &[u8];
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Largest entry whose key is <= `key`.
    fn lookup(&self, key: i64) -> Option<E> {
        floor(self.bytes(), self.len(), key)
    }
    fn last(&self) -> Option<E> {
        let n = self.len();
        (n > 0).then(|| entry_at(self.bytes(), n - 1))
    }
}

/// A sealed, read-only index.
pub struct IndexReader<E: Entry> {
    map: MmapFile,
    entries: usize,
    path: PathBuf,
    _e: PhantomData<E>,
}

impl<E: Entry> IndexReader<E> {
    /// Opens a trimmed index. `log_size` bounds positions for the offset index.
    pub fn open(path: &Path, log_size: Option<u64>) -> Result<Self> {
        let map = MmapFile::open(path).map_err(LogError::io(path))?;
        let len = map.bytes().len();
        if len % E::SIZE != 0 {
            return Err(LogError::Corrupt {
                path: path.into(),
                reason: format!("index size {len} is not a multiple of {}", E::SIZE),
            });
        }
        let entries = len / E::SIZE;
        sanity_check::<E>(map.bytes(), entries, log_size)
            .map_err(|reason| LogError::Corrupt { path: path.into(), reason })?;
        Ok(Self { map, entries, path: path.into(), _e: PhantomData })
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl<E: Entry> IndexView<E> for IndexReader<E> {
    fn bytes(&self) -> &[u8] {
        self.map.bytes()
    }
    fn len(&self) -> usize {
        self.entries
    }
}

impl<E: Entry> IndexView<E> for IndexWriter<E> {
    fn bytes(&self) -> &[u8] {
        self.map.bytes()
    }
    fn len(&self) -> usize {
        self.entries
    }
}

/// The active segment's index: preallocated to `capacity` bytes and appended through a map.
pub struct IndexWriter<E: Entry> {
    map: MmapMutFile,
    entries: usize,
    capacity: usize,
    _e: PhantomData<E>,
}

impl<E: Entry> IndexWriter<E> {
    /// Creates an empty index (truncating any file at `path`).
    pub fn create(path: &Path, capacity_bytes: u64) -> Result<Self> {
        let _ = std::fs::remove_file(path);
        Self::open_existing(path, capacity_bytes, None)
    }

    /// Opens an index that was trimmed at a clean shutdown and makes it appendable again.
    pub fn open_existing(path: &Path, capacity_bytes: u64, log_size: Option<u64>) -> Result<Self> {
        let capacity_bytes = capacity_bytes.max(E::SIZE as u64);
        let (map, old_len) = MmapMutFile::open(path, capacity_bytes).map_err(LogError::io(path))?;
        let capacity = map.bytes().len() / E::SIZE;
        let entries = usize::try_from(old_len).unwrap_or(usize::MAX) / E::SIZE;
        if old_len % E::SIZE as u64 != 0 || entries > capacity {
            return Err(LogError::Corrupt { path: path.into(), reason: format!("index size {old_len}") });
        }
        sanity_check::<E>(map.bytes(), entries, log_size)
            .map_err(|reason| LogError::Corrupt { path: path.into(), reason })?;
        Ok(Self { map, entries, capacity, _e: PhantomData })
    }

    pub fn is_full(&self) -> bool {
        self.entries >= self.capacity
    }

    /// Appends an entry; returns false (and writes nothing) if the index is full.
    pub fn append(&mut self, e: E) -> bool {
        if self.is_full() {
            return false;
        }
        let at = self.entries * E::SIZE;
        e.write(&mut self.map.bytes_mut()[at..at + E::SIZE]);
        self.entries += 1;
        true
    }

    /// Drops entries at or after `key` (used when the log is truncated).
    pub fn truncate_to_key(&mut self, key: i64) {
        while let Some(last) = self.last() {
            if last.key() < key {
                break;
            }
            self.entries -= 1;
        }
    }

    /// Trims the file, at `path` (where it was opened), to its entries and reopens it read-only.
    pub fn seal(self, path: &Path) -> Result<IndexReader<E>> {
        self.close(path)?;
        IndexReader::open(path, None)
    }

    /// Trims the file, at `path` (where it was opened), without reopening it (clean shutdown).
    pub fn close(self, path: &Path) -> Result<()> {
        let len = (self.entries * E::SIZE) as u64;
        self.map.trim(path, len).map_err(LogError::io(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_lookup_seal_reader() -> Result<()> {
        let dir = tempfile::tempdir().map_err(LogError::io("tmp"))?;
        let p = dir.path().join("0.index");
        let mut w = IndexWriter::<OffsetEntry>::create(&p, 64)?;
        for i in 0..8u32 {
            assert!(w.append(OffsetEntry { rel_offset: i * 10, position: i * 100 }));
        }
        assert!(w.is_full());
        assert!(!w.append(OffsetEntry { rel_offset: 90, position: 900 }));
        assert_eq!(w.lookup(25).map(|e| e.position), Some(200));
        assert_eq!(w.lookup(-1), None);
        let r = w.seal(&p)?;
        assert_eq!(r.len(), 8);
        assert_eq!(r.lookup(70).map(|e| e.position), Some(700));
        assert_eq!(std::fs::metadata(&p).map_err(LogError::io(&p))?.len(), 64);
        Ok(())
    }

    #[test]
    fn garbage_is_detected() -> Result<()> {
        let dir = tempfile::tempdir().map_err(LogError::io("tmp"))?;
        let p = dir.path().join("0.index");
        let mut w = IndexWriter::<OffsetEntry>::create(&p, 80)?;
        for i in 0..4u32 {
            w.append(OffsetEntry { rel_offset: i * 10, position: i * 100 });
        }
        w.close(&p)?;
        let mut bytes = std::fs::read(&p).map_err(LogError::io(&p))?;
        bytes[9..13].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        std::fs::write(&p, &bytes).map_err(LogError::io(&p))?;
        assert!(IndexReader::<OffsetEntry>::open(&p, Some(1000)).is_err());
        Ok(())
    }
}
