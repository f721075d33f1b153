//! The transaction index (`.txnindex`) of a segment, in Kafka's on-disk format: one 34-byte
//! big-endian entry per aborted transaction whose ABORT marker is in the segment,
//! ```text
//! version i16 (0) | producer id i64 | first offset i64 | last offset i64 | last stable offset i64
//! ```
//! in marker order (last offsets strictly increase). `last offset` is the marker's offset and
//! `last stable offset` the partition's LSO once the abort completed (the first offset of the
//! lowest other open transaction, else the marker's offset + 1), which lets a read_committed
//! fetch stop searching later segments. Kafka's `DumpLogSegments --transaction-index` reads it.
//!
//! The file is created with its first entry, as Kafka does, so most segments have none. Appends
//! are `pwrite`s (readable on return) and durable once the segment is synced; a rebuild replaces
//! the whole file atomically (`TxnIndex::rewrite`); recovery rebuilds the index of every
//! segment it rescans.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::batch::be_i64;
use crate::error::{LogError, Result};

/// Bytes of one entry.
pub const ENTRY_SIZE: usize = 34;
const VERSION: i16 = 0;

/// One aborted transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// Offset of the ABORT marker.
    pub last_offset: i64,
    pub last_stable_offset: i64,
}

impl AbortedTxn {
    pub fn to_bytes(&self) -> [u8; ENTRY_SIZE] {
        let mut b = [0u8; ENTRY_SIZE];
        b[0..2].copy_from_slice(&VERSION.to_be_bytes());
        b[2..10].copy_from_slice(&self.producer_id.to_be_bytes());
        b[10..18].copy_from_slice(&self.first_offset.to_be_bytes());
        b[18..26].copy_from_slice(&self.last_offset.to_be_bytes());
        b[26..34].copy_from_slice(&self.last_stable_offset.to_be_bytes());
        b
    }

    /// Parses an entry; `Err` with the version if it is not one this broker writes.
    fn parse(b: &[u8]) -> std::result::Result<Self, i16> {
        let version = i16::from_be_bytes([b[0], b[1]]);
        if version != VERSION {
            return Err(version);
        }
        Ok(Self {
            producer_id: be_i64(b, 2),
            first_offset: be_i64(b, 10),
            last_offset: be_i64(b, 18),
            last_stable_offset: be_i64(b, 26),
        })
    }
}

/// What [`TxnIndex::collect`] found in one segment.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TxnSearch {
    pub aborted: Vec<AbortedTxn>,
    /// An entry's last stable offset reached the upper bound: later segments cannot hold an
    /// aborted transaction that overlaps the range.
    pub complete: bool,
}

/// One segment's transaction index. Segments expose appends only on the active segment.
pub struct TxnIndex {
    path: PathBuf,
    /// Open once the file exists; shared with the flusher, which syncs it outside the log's
    /// lock ([`TxnIndex::unsynced_file`]).
    file: Option<Arc<File>>,
    /// Bytes of whole entries.
    len: u64,
    last_offset: Option<i64>,
    /// Written since the last sync.
    dirty: bool,
}

impl TxnIndex {
    /// Opens the index at `path` of the segment starting at `base_offset` (an absent file is an
    /// empty index). The second value says why the file cannot be trusted (a partial entry, an
    /// unknown version, offsets out of order or below the segment): the caller rebuilds it.
    pub fn open(path: &Path, base_offset: i64) -> Result<(Self, Option<String>)> {
        let mut idx = Self { path: path.into(), file: None, len: 0, last_offset: None, dirty: false };
        let file = match OpenOptions::new().read(true).write(true).open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((idx, None)),
            Err(e) => return Err(LogError::Io { path: path.into(), source: e }),
        };
        let file_len = file.metadata().map_err(LogError::io(path))?.len();
        idx.len = file_len - file_len % ENTRY_SIZE as u64;
        idx.file = Some(Arc::new(file));
        let mut problem = (file_len % ENTRY_SIZE as u64 != 0).then(|| format!("{file_len} bytes is not whole entries"));
        match idx.read_all() {
            Ok(entries) => {
                let mut prev: Option<i64> = None;
                for (i, e) in entries.iter().enumerate() {
                    let why = if e.last_offset < base_offset || e.first_offset > e.last_offset {
                        Some(format!("entry {i} ({e:?}) is outside the segment at {base_offset}"))
                    } else if prev.is_some_and(|l| l >= e.last_offset) {
                        Some(format!("entry {i} ({e:?}) does not follow offset {prev:?}"))
                    } else {
                        None
                    };
                    problem = problem.or(why);
                    prev = Some(e.last_offset);
                }
                idx.last_offset = prev;
            }
            Err(why) => problem = problem.or(Some(why)),
        }
        Ok((idx, problem))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        (self.len / ENTRY_SIZE as u64) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn read_all(&self) -> std::result::Result<Vec<AbortedTxn>, String> {
        self.reader().read_all()
    }

    /// Every entry, in marker order.
    pub fn entries(&self) -> Result<Vec<AbortedTxn>> {
        self.reader().entries()
    }

    /// The aborted transactions that overlap `[fetch_offset, upper_bound_offset)` (last offset
    /// at or after the start, first offset before the end), as Kafka's `collectAbortedTxns`.
    pub fn collect(&self, fetch_offset: i64, upper_bound_offset: i64) -> Result<TxnSearch> {
        self.reader().collect(fetch_offset, upper_bound_offset)
    }

    /// A reader of the entries written so far, usable without the log's lock (the cleaner's):
    /// appends go after them, and a rewrite replaces the file by a rename, which leaves the
    /// reader's file whole.
    pub fn reader(&self) -> TxnIndexReader {
        TxnIndexReader { file: self.file.clone(), path: self.path.clone(), len: self.len }
    }

    fn file_for_write(&mut self) -> Result<&File> {
        let f = match self.file.take() {
            Some(f) => f,
            None => OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&self.path)
                .map(Arc::new)
                .map_err(LogError::io(&self.path))?,
        };
        Ok(&**self.file.insert(f))
    }

    /// Appends an entry (creating the file if needed). Readable on return, durable after
    /// [`TxnIndex::sync`].
    pub(crate) fn append(&mut self, e: &AbortedTxn) -> Result<()> {
        if let Some(last) = self.last_offset
            && last >= e.last_offset
        {
            return Err(LogError::Corrupt {
                path: self.path.clone(),
                reason: format!("aborted transaction ending at {} after one ending at {last}", e.last_offset),
            });
        }
        let at = self.len;
        let path = self.path.clone();
        self.file_for_write()?.write_all_at(&e.to_bytes(), at).map_err(LogError::io(path))?;
        self.len += ENTRY_SIZE as u64;
        self.last_offset = Some(e.last_offset);
        self.dirty = true;
        Ok(())
    }

    /// Drops the entries whose marker is at or after `offset` (log truncation).
    pub(crate) fn truncate_to(&mut self, offset: i64) -> Result<()> {
        let entries = self.entries()?;
        let keep = entries.iter().take_while(|e| e.last_offset < offset).count();
        if keep == entries.len() {
            return Ok(());
        }
        self.set_len(keep)?;
        self.last_offset = keep.checked_sub(1).map(|i| entries[i].last_offset);
        Ok(())
    }

    fn set_len(&mut self, entries: usize) -> Result<()> {
        let len = (entries * ENTRY_SIZE) as u64;
        if let Some(f) = &self.file {
            f.set_len(len).map_err(LogError::io(&self.path))?;
            self.dirty = true;
        }
        self.len = len;
        Ok(())
    }

    /// Drops every entry.
    pub(crate) fn reset(&mut self) -> Result<()> {
        self.set_len(0)?;
        self.last_offset = None;
        Ok(())
    }

    /// Replaces every entry with `entries`, durably and atomically (recovery's rebuild and the
    /// cleaner's output: the segment may already be below the recovery point, which trusts its
    /// index from then on). The entries go to `NNN.txnindex.tmp`, which is fsynced and renamed
    /// over the index, then the directory is fsynced: a crash leaves the old index or the new
    /// one, never a mix (a leftover `.tmp` is removed when the log opens), and a reader holding
    /// the old file keeps reading it whole. No entries: the file is removed.
    pub(crate) fn rewrite(&mut self, entries: &[AbortedTxn]) -> Result<()> {
        if let Some(w) = entries.windows(2).find(|w| w[0].last_offset >= w[1].last_offset) {
            return Err(LogError::Corrupt {
                path: self.path.clone(),
                reason: format!(
                    "aborted transaction ending at {} after one ending at {}",
                    w[1].last_offset, w[0].last_offset
                ),
            });
        }
        let dir = self.path.parent().map(Path::to_path_buf).unwrap_or_default();
        if entries.is_empty() {
            if self.file.take().is_some() {
                match std::fs::remove_file(&self.path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(LogError::Io { path: self.path.clone(), source: e });
                    }
                    _ => sync_dir(&dir)?,
                }
            }
        } else {
            let mut tmp = self.path.clone().into_os_string();
            tmp.push(".tmp");
            let tmp = PathBuf::from(tmp);
            let bytes: Vec<u8> = entries.iter().flat_map(|e| e.to_bytes()).collect();
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&tmp)
                .map_err(LogError::io(&tmp))?;
            file.write_all_at(&bytes, 0).map_err(LogError::io(&tmp))?;
            file.sync_all().map_err(LogError::io(&tmp))?;
            std::fs::rename(&tmp, &self.path).map_err(LogError::io(&self.path))?;
            sync_dir(&dir)?;
            self.file = Some(Arc::new(file));
        }
        self.len = (entries.len() * ENTRY_SIZE) as u64;
        self.last_offset = entries.last().map(|e| e.last_offset);
        self.dirty = false;
        Ok(())
    }

    /// fsyncs the file if it was written since the last sync.
    pub fn sync(&mut self) -> Result<()> {
        if let (true, Some(f)) = (self.dirty, &self.file) {
            f.sync_data().map_err(LogError::io(&self.path))?;
        }
        self.dirty = false;
        Ok(())
    }

    /// The file, if it was written since the last sync: for a caller that syncs it without
    /// holding the log and then reports it with `TxnIndex::mark_synced`.
    pub fn unsynced_file(&self) -> Option<Arc<File>> {
        self.file.as_ref().filter(|_| self.dirty).cloned()
    }

    /// Records that the file handed out by [`TxnIndex::unsynced_file`] was synced. Only for an
    /// index that takes no appends in between (a sealed segment's).
    pub(crate) fn mark_synced(&mut self) {
        self.dirty = false;
    }

    /// The file was renamed to `path` (the cleaner's swap); the open handle follows it.
    pub(crate) fn relocate(&mut self, path: PathBuf) {
        self.path = path;
    }

    /// Removes the file (the segment is deleted).
    pub(crate) fn delete(&self) {
        if let Err(e) = std::fs::remove_file(&self.path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %self.path.display(), error = %e, "could not delete transaction index");
        }
    }
}

/// The entries of a [`TxnIndex`] as they were when [`TxnIndex::reader`] was called.
#[derive(Clone)]
pub struct TxnIndexReader {
    file: Option<Arc<File>>,
    path: PathBuf,
    /// Bytes of whole entries.
    len: u64,
}

impl TxnIndexReader {
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn read_all(&self) -> std::result::Result<Vec<AbortedTxn>, String> {
        let Some(file) = &self.file else { return Ok(Vec::new()) };
        let len = usize::try_from(self.len).map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; len];
        file.read_exact_at(&mut buf, 0).map_err(|e| format!("cannot read {}: {e}", self.path.display()))?;
        buf.chunks_exact(ENTRY_SIZE).map(|c| AbortedTxn::parse(c).map_err(|v| format!("entry version {v}"))).collect()
    }

    /// Every entry, in marker order.
    pub fn entries(&self) -> Result<Vec<AbortedTxn>> {
        self.read_all().map_err(|reason| LogError::Corrupt { path: self.path.clone(), reason })
    }

    /// See [`TxnIndex::collect`].
    pub fn collect(&self, fetch_offset: i64, upper_bound_offset: i64) -> Result<TxnSearch> {
        let mut out = TxnSearch::default();
        for e in self.entries()? {
            if e.last_offset >= fetch_offset && e.first_offset < upper_bound_offset {
                out.aborted.push(e);
            }
            if e.last_stable_offset >= upper_bound_offset {
                out.complete = true;
                return Ok(out);
            }
        }
        Ok(out)
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(LogError::io(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(pid: i64, first: i64, last: i64, lso: i64) -> AbortedTxn {
        AbortedTxn { producer_id: pid, first_offset: first, last_offset: last, last_stable_offset: lso }
    }

    #[test]
    fn entries_are_kafkas_34_bytes() {
        let b = txn(0x0102, 3, 9, 10).to_bytes();
        let mut want = vec![0u8, 0];
        for v in [0x0102i64, 3, 9, 10] {
            want.extend_from_slice(&v.to_be_bytes());
        }
        assert_eq!(b.to_vec(), want);
        assert_eq!(AbortedTxn::parse(&b), Ok(txn(0x0102, 3, 9, 10)));
    }

    #[test]
    fn created_lazily_appended_collected_truncated_and_reopened() -> Result<()> {
        let dir = tempfile::tempdir().map_err(LogError::io("tmp"))?;
        let p = dir.path().join("00000000000000000100.txnindex");
        let (mut idx, problem) = TxnIndex::open(&p, 100)?;
        assert!(problem.is_none() && idx.is_empty());
        assert!(!p.exists(), "no file until the first entry");
        idx.append(&txn(1, 90, 105, 106))?;
        idx.append(&txn(2, 100, 110, 108))?;
        idx.append(&txn(3, 108, 120, 130))?;
        assert!(idx.append(&txn(4, 100, 120, 121)).is_err(), "last offsets must increase");
        assert_eq!(std::fs::metadata(&p).map_err(LogError::io(&p))?.len(), 3 * 34);
        // Overlap with [106, 109): the first entry ended before, the third starts at 108.
        let s = idx.collect(106, 109)?;
        assert_eq!(s.aborted, vec![txn(2, 100, 110, 108), txn(3, 108, 120, 130)]);
        assert!(s.complete, "an LSO of 130 >= 109 ends the search");
        let s = idx.collect(0, 200)?;
        assert_eq!(s.aborted.len(), 3);
        assert!(!s.complete);
        idx.sync()?;
        let (reopened, problem) = TxnIndex::open(&p, 100)?;
        assert!(problem.is_none());
        assert_eq!(reopened.entries()?, idx.entries()?);
        // Truncation drops the entries whose marker is at or after the offset.
        idx.truncate_to(110)?;
        assert_eq!(idx.entries()?, vec![txn(1, 90, 105, 106)]);
        idx.append(&txn(5, 107, 109, 110))?;
        assert_eq!(idx.len(), 2);
        idx.truncate_to(0)?;
        assert!(idx.is_empty());
        Ok(())
    }

    #[test]
    fn damaged_files_are_reported() -> Result<()> {
        let dir = tempfile::tempdir().map_err(LogError::io("tmp"))?;
        let p = dir.path().join("00000000000000000100.txnindex");
        let (mut idx, _) = TxnIndex::open(&p, 100)?;
        idx.append(&txn(1, 90, 105, 106))?;
        let mut bytes = std::fs::read(&p).map_err(LogError::io(&p))?;
        bytes.extend_from_slice(&[0, 0, 1]);
        std::fs::write(&p, &bytes).map_err(LogError::io(&p))?;
        let (torn, problem) = TxnIndex::open(&p, 100)?;
        assert!(problem.is_some(), "a partial entry");
        assert_eq!(torn.len(), 1);
        // An entry below the segment's base offset.
        let (_, problem) = TxnIndex::open(&p, 200)?;
        assert!(problem.is_some());
        // A version this broker does not write.
        bytes.truncate(34);
        bytes[1] = 1;
        std::fs::write(&p, &bytes).map_err(LogError::io(&p))?;
        let (_, problem) = TxnIndex::open(&p, 100)?;
        assert!(problem.is_some());
        // A rebuild replaces it.
        let (mut idx, _) = TxnIndex::open(&p, 100)?;
        idx.rewrite(&[txn(7, 100, 101, 102)])?;
        let (idx, problem) = TxnIndex::open(&p, 100)?;
        assert!(problem.is_none());
        assert_eq!(idx.entries()?, vec![txn(7, 100, 101, 102)]);
        Ok(())
    }

    #[test]
    fn rewrites_replace_the_file_whole() -> Result<()> {
        let dir = tempfile::tempdir().map_err(LogError::io("tmp"))?;
        let p = dir.path().join("00000000000000000100.txnindex");
        let (mut idx, _) = TxnIndex::open(&p, 100)?;
        idx.append(&txn(1, 90, 105, 106))?;
        idx.append(&txn(2, 100, 110, 111))?;
        idx.sync()?;
        let before = std::fs::read(&p).map_err(LogError::io(&p))?;
        // A reader (or a crash) in the middle of the rewrite sees the old index whole: the new
        // one is written aside and renamed over it, never written into it.
        let reader = File::open(&p).map_err(LogError::io(&p))?;
        idx.rewrite(&[txn(7, 100, 101, 102)])?;
        let mut old = vec![0u8; before.len()];
        reader.read_exact_at(&mut old, 0).map_err(LogError::io(&p))?;
        assert_eq!(old, before, "the old file is untouched");
        assert_eq!(std::fs::read(&p).map_err(LogError::io(&p))?, txn(7, 100, 101, 102).to_bytes().to_vec());
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .map_err(LogError::io(dir.path()))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .collect();
        assert_eq!(names, vec!["00000000000000000100.txnindex".to_string()], "no temporary file left");
        // The handle follows the new file: appends go on after the rewritten entries.
        idx.append(&txn(8, 103, 104, 105))?;
        let (reopened, problem) = TxnIndex::open(&p, 100)?;
        assert!(problem.is_none());
        assert_eq!(reopened.entries()?, vec![txn(7, 100, 101, 102), txn(8, 103, 104, 105)]);
        // Entries out of order are refused and change nothing.
        assert!(idx.rewrite(&[txn(1, 100, 120, 121), txn(2, 100, 110, 111)]).is_err());
        assert_eq!(idx.len(), 2);
        // No entries: no file.
        idx.rewrite(&[])?;
        assert!(!p.exists() && idx.is_empty());
        Ok(())
    }
}
