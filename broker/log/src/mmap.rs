//! The crate's only `unsafe`: memory maps of index files.
//!
//! Index files are created and written only by this process, under the partition's lock, and
//! never truncated while mapped (a writable map is dropped before `set_len`). Another process
//! truncating a mapped file would make reads fault; that is outside what the broker promises.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

use memmap2::{Mmap, MmapMut};

/// A writable map over a file preallocated to a fixed capacity.
pub struct MmapMutFile {
    file: File,
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
        Ok((Self { file, map }, old_len))
    }

    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.map
    }

    /// Writes dirty pages of the map back to the file.
    pub fn flush(&self) -> io::Result<()> {
        self.map.flush()
    }

    /// Drops the map and trims the file to `len` bytes.
    pub fn trim(self, len: u64) -> io::Result<()> {
        self.map.flush()?;
        let Self { file, map } = self;
        drop(map);
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
