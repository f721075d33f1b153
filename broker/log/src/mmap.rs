//! The crate's only `unsafe`: memory maps of index files, and positional reads into buffers
//! that are not zeroed first ([`read_exact_at`]).
//!
//! Index files are created and written only by this process, under the partition's lock, and
//! never truncated while mapped (a writable map is dropped before `set_len`). Another process
//! truncating a mapped file would make reads fault; that is outside what the broker promises.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

/// Exactly `len` bytes of `file` from `pos` (pread), in a vector that is not zeroed before the
/// read fills it: log reads for fetches are up to `fetch.max.bytes`, and zeroing them was a
/// tenth of a consumer's broker CPU. A file shorter than `pos + len` is an `UnexpectedEof`.
pub fn read_exact_at(file: &File, pos: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buf: Vec<u8> = crate::buffers::take(len);
    let mut filled = 0;
    while filled < len {
        let at = pos
            .checked_add(filled as u64)
            .and_then(|p| libc::off_t::try_from(p).ok())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "read position past off_t"))?;
        // SAFETY: the pointer and length describe the vector's spare capacity past `filled`
        // (len - filled bytes: `take` gives an empty vector of at least len); pread writes at most that
        // many bytes there and nothing else.
        let n = unsafe { libc::pread(file.as_raw_fd(), buf.as_mut_ptr().add(filled).cast(), len - filled, at) };
        match n {
            0 => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
            n if n < 0 => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            // n <= len - filled, as pread returns at most the count it was given.
            n => filled += n as usize,
        }
    }
    // SAFETY: pread initialised the first `filled` == `len` bytes, within the capacity.
    unsafe { buf.set_len(len) };
    Ok(buf)
}

use memmap2::{Mmap, MmapMut};

/// A writable map over a file preallocated to a fixed capacity. The file is not kept open
/// (the map alone keeps it), as Kafka closes an index's file once mapped: each partition's
/// active segment would otherwise hold three descriptors (log, offset and time index), not one.
/// Nor is its path kept: the owner knows it (every active segment's two would cost two heap
/// allocations per partition).
pub struct MmapMutFile {
    map: MmapMut,
}

impl MmapMutFile {
    /// Opens (creating if needed) `path`, grows it to `capacity` bytes and maps it. Returns the
    /// map and the file's length before it was grown.
    pub fn open(path: &Path, capacity: u64) -> io::Result<(Self, u64)> {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
        let old_len = file.metadata()?.len();
        file.set_len(capacity.max(old_len))?;
        // SAFETY: the file is private to this broker and is not resized while this map lives
        // (see the module docs); the map is dropped before any set_len.
        let map = unsafe { MmapMut::map_mut(&file)? };
        Ok((Self { map }, old_len))
    }

    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.map
    }

    /// Drops the map and trims the file, at `path` (where it was opened: it must not have been
    /// removed or replaced meanwhile), to `len` bytes.
    pub fn trim(self, path: &Path, len: u64) -> io::Result<()> {
        self.map.flush()?;
        drop(self.map);
        let file = OpenOptions::new().write(true).open(path)?;
        file.set_len(len)?;
        file.sync_all()
    }
}

/// A read-only map; empty files (which cannot be mapped) have none.
pub struct MmapFile {
    map: Option<Mmap>,
}

impl MmapFile {
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = File::open(path)?;
        if file.metadata()?.len() == 0 {
            return Ok(Self { map: None });
        }
        // SAFETY: sealed index files are never written again by this process (only replaced by
        // rename, which leaves this inode intact), see the module docs.
        let map = unsafe { Mmap::map(&file)? };
        Ok(Self { map: Some(map) })
    }

    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn reads_exactly_what_the_file_holds_and_refuses_past_its_end() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 256) as u8).collect();
        File::create(&path).and_then(|mut f| f.write_all(&data)).unwrap_or_else(|e| panic!("{e}"));
        let f = File::open(&path).unwrap_or_else(|e| panic!("{e}"));
        for (pos, len) in [(0, 0), (0, 1), (5, 1000), (123_456, 100_000), (0, 300_000), (299_999, 1)] {
            let got = read_exact_at(&f, pos as u64, len).unwrap_or_else(|e| panic!("{pos} {len}: {e}"));
            assert_eq!(got, data[pos..pos + len], "{pos} {len}");
        }
        let e = read_exact_at(&f, 299_999, 2).err().map(|e| e.kind());
        assert_eq!(e, Some(io::ErrorKind::UnexpectedEof));
    }
}
