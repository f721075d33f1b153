//! The leader epoch cache (Kafka's `leader-epoch-checkpoint`): each leader epoch that wrote to
//! the log and the first offset it wrote. Replication uses it to answer OffsetsForLeaderEpoch and
//! to find where a follower's log diverges from its leader's (KIP-101, KIP-279).
//!
//! The file is Kafka's text format: a version line (0), a count line, then `epoch offset` per
//! line. A new epoch is written to the file before the first batch of that epoch is appended,
//! so the file never misses an epoch the log holds; entries past the log end are dropped at
//! open.

use std::path::{Path, PathBuf};

use crate::checkpoint::write_atomic;
use crate::error::LogError;

pub const FILE: &str = "leader-epoch-checkpoint";

type Result<T> = std::result::Result<T, LogError>;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EpochCache {
    /// (epoch, start offset), both strictly increasing.
    entries: Vec<(i32, i64)>,
}

/// `(epoch, end offset)` as OffsetsForLeaderEpoch answers it; `(-1, -1)` when undefined.
pub const UNDEFINED: (i32, i64) = (-1, -1);

impl EpochCache {
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(FILE)
    }

    /// Reads the checkpoint; `None` if there is none.
    pub fn read(dir: &Path) -> Result<Option<Self>> {
        let p = Self::path(dir);
        let text = match std::fs::read_to_string(&p) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(LogError::io(&p)(e)),
        };
        let corrupt = |why: &str| LogError::Corrupt { path: p.clone(), reason: why.to_string() };
        let mut lines = text.lines();
        if lines.next().map(str::trim) != Some("0") {
            return Err(corrupt("unknown version"));
        }
        let n: usize = lines.next().and_then(|l| l.trim().parse().ok()).ok_or_else(|| corrupt("bad count"))?;
        let mut entries = Vec::with_capacity(n);
        for l in lines.take(n) {
            let mut it = l.split_whitespace();
            let e = it.next().and_then(|x| x.parse().ok()).ok_or_else(|| corrupt("bad epoch"))?;
            let o = it.next().and_then(|x| x.parse().ok()).ok_or_else(|| corrupt("bad offset"))?;
            entries.push((e, o));
        }
        if entries.len() != n {
            return Err(corrupt("fewer entries than the count"));
        }
        Ok(Some(Self { entries }))
    }

    fn write(&self, dir: &Path) -> Result<()> {
        let mut text = format!("0\n{}\n", self.entries.len());
        for (e, o) in &self.entries {
            text.push_str(&format!("{e} {o}\n"));
        }
        write_atomic(&Self::path(dir), text.as_bytes())
    }

    pub fn latest(&self) -> Option<(i32, i64)> {
        self.entries.last().copied()
    }

    /// Records that `epoch` starts at `offset` (if it is newer than the latest), writing the
    /// checkpoint before the caller appends.
    pub fn assign(&mut self, epoch: i32, offset: i64, dir: &Path) -> Result<()> {
        if epoch < 0 || self.latest().is_some_and(|(e, _)| e >= epoch) {
            return Ok(());
        }
        self.entries.push((epoch, offset));
        self.write(dir)
    }

    /// Drops the epochs that start at or after `offset` (the log was truncated there).
    pub fn truncate_from(&mut self, offset: i64, dir: &Path) -> Result<()> {
        let before = self.entries.len();
        self.entries.retain(|(_, o)| *o < offset);
        if self.entries.len() != before { self.write(dir) } else { Ok(()) }
    }

    /// Rebuilds the cache from batch headers `(epoch, base offset)` in log order.
    pub fn rebuild(headers: impl IntoIterator<Item = (i32, i64)>, dir: &Path) -> Result<Self> {
        let mut c = Self::default();
        for (e, o) in headers {
            if e >= 0 && c.latest().is_none_or(|(l, _)| e > l) {
                c.entries.push((e, o));
            }
        }
        c.write(dir)?;
        Ok(c)
    }

    /// Kafka's `endOffsetFor`: the largest epoch at most `epoch` and the offset where it ends
    /// (the start of the next epoch, or `log_end` for the latest one).
    pub fn end_offset_for(&self, epoch: i32, log_end: i64) -> (i32, i64) {
        let Some((latest, _)) = self.latest() else { return UNDEFINED };
        if epoch < 0 {
            return UNDEFINED;
        }
        if epoch == latest {
            return (epoch, log_end);
        }
        let Some(higher) = self.entries.iter().position(|(e, _)| *e > epoch) else {
            // Newer than anything here: unknown.
            return UNDEFINED;
        };
        match higher.checked_sub(1).map(|i| self.entries[i]) {
            Some((floor, _)) => (floor, self.entries[higher].1),
            // Older than the earliest epoch here: it ends where the log's first epoch starts.
            None => (epoch, self.entries[higher].1),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn end_offsets_follow_kafka() {
        let d = tempfile::tempdir().unwrap();
        let mut c = EpochCache::default();
        assert_eq!(c.end_offset_for(0, 0), UNDEFINED);
        c.assign(1, 0, d.path()).unwrap();
        c.assign(1, 5, d.path()).unwrap(); // same epoch: no new entry
        c.assign(3, 10, d.path()).unwrap();
        c.assign(4, 20, d.path()).unwrap();
        assert_eq!(c.end_offset_for(4, 25), (4, 25));
        assert_eq!(c.end_offset_for(3, 25), (3, 20));
        assert_eq!(c.end_offset_for(2, 25), (1, 10), "epoch 2 never wrote: epoch 1 ends at 10");
        assert_eq!(c.end_offset_for(0, 25), (0, 0));
        assert_eq!(c.end_offset_for(5, 25), UNDEFINED);
        let back = EpochCache::read(d.path()).unwrap().unwrap();
        assert_eq!(back, c);
        c.truncate_from(10, d.path()).unwrap();
        assert_eq!(c.latest(), Some((1, 0)));
        assert_eq!(EpochCache::read(d.path()).unwrap().unwrap(), c);
        let r = EpochCache::rebuild([(0, 0), (0, 3), (2, 7), (2, 9), (5, 12)], d.path()).unwrap();
        assert_eq!(r.entries, vec![(0, 0), (2, 7), (5, 12)]);
    }
}
