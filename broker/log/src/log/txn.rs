//! The transaction side of a partition log, as Kafka's `UnifiedLog` and `LogSegment` do it:
//! markers the leader writes on WriteTxnMarkers, producer state and transaction indexes kept
//! up to date by every append (leader, marker, follower), the aborted transactions and last
//! stable offset a read_committed fetch needs, and the replay that rebuilds producer state,
//! open transactions and the transaction indexes of rescanned segments on open and truncation.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

use crate::batch::{self, BatchHeader};
use crate::control::{self, EndTxnMarker};
use crate::error::{LogError, Result};
use crate::log::{AppendResult, Log, list_offsets, snapshot_path};
use crate::producer_state::ProducerState;
use crate::segment::{ActiveSegment, SealedSegment, SegmentCore, read_at, scan_log};
use crate::txn_index::{AbortedTxn, TxnIndexReader};

/// Applies one appended batch to the producer state. A marker that ends a transaction hands
/// it to `index` first if it was aborted (with the LSO once it completes), then completes it:
/// Kafka's order, so a failed index write leaves the transaction open.
fn apply_batch(
    producers: &mut ProducerState,
    h: &BatchHeader,
    marker: Option<EndTxnMarker>,
    index: impl FnOnce(&AbortedTxn) -> Result<()>,
) -> Result<()> {
    let Some(txn) = producers.record(h, marker) else { return Ok(()) };
    if txn.aborted {
        index(&AbortedTxn {
            producer_id: txn.producer_id,
            first_offset: txn.first_offset,
            last_offset: txn.last_offset,
            last_stable_offset: producers.last_stable_offset(&txn),
        })?;
    }
    producers.complete_txn(&txn);
    Ok(())
}

/// Every segment's core, oldest first.
pub(super) fn segment_cores<'a>(
    sealed: &'a BTreeMap<i64, SealedSegment>,
    active: &'a ActiveSegment,
) -> impl Iterator<Item = &'a SegmentCore> {
    sealed.values().map(|s| &s.core).chain(std::iter::once(&active.core))
}

/// The marker a control batch read back from a segment carries; a damaged one is skipped (it
/// passed the CRC check, so this is a marker Kafka could not parse either).
fn marker_of(bytes: &[u8], h: &BatchHeader) -> Option<EndTxnMarker> {
    if !h.is_control() {
        return None;
    }
    control::parse_marker(bytes).unwrap_or_else(|e| {
        tracing::warn!(offset = h.base_offset, error = %e, "unreadable control batch; ignoring it");
        None
    })
}

impl Log {
    /// WriteTxnMarkers: appends the COMMIT (`commit`) or ABORT marker of `producer_id`'s
    /// transaction, stamped `leader_epoch`, as Kafka's leader does. The marker's producer epoch
    /// may not be older than the producer's ([`LogError::ProducerFenced`], Kafka's
    /// InvalidProducerEpoch), nor its coordinator epoch older than the last marker's
    /// ([`LogError::CoordinatorFenced`]). A producer with no open transaction gets the marker
    /// anyway and nothing completes. An ABORT of an open transaction is indexed in the active
    /// segment's `.txnindex`. Durability as [`Log::append`].
    pub fn append_marker(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        commit: bool,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendResult> {
        self.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)?;
        let marker = EndTxnMarker { commit, coordinator_epoch };
        let mut buf = control::encode_marker(producer_id, producer_epoch, marker, now_ms)?;
        if self.config.log_append_time {
            batch::set_log_append_time(&mut buf, now_ms);
        }
        let offset = self.log_end_offset();
        batch::patch_offset_and_epoch(&mut buf, offset, leader_epoch);
        let h = BatchHeader::parse(&buf)
            .ok_or_else(|| LogError::Batch(crate::error::BatchError::Corrupt("short marker".into())))?;
        if self.active.needs_roll(buf.len() as u64, offset, self.config.segment_bytes, self.config.segment_ms, now_ms) {
            self.roll(now_ms)?;
        }
        self.epochs.assign(leader_epoch, offset, &self.dir)?;
        let placed = [(0..buf.len(), h)];
        self.active.append(&buf, &placed)?;
        let records = self.appended(&buf, &placed, now_ms, super::Flush::Now)?;
        Ok(AppendResult {
            base_offset: offset,
            last_offset: offset,
            log_append_time: if self.config.log_append_time { now_ms } else { -1 },
            log_start_offset: self.log_start_offset,
            duplicate: false,
            records,
            bytes: buf.len(),
            flush_owed: false,
        })
    }

    /// Updates producer state (and, for a marker that aborts a transaction, the active
    /// segment's transaction index) for a batch just written to the active segment. If the
    /// index write fails the transaction stays open (the LSO does not pass it), the segment is
    /// marked for an index rebuild and the recovery point drops below it, so recovery from the
    /// log completes the transaction and rebuilds the index.
    pub(super) fn record_batch(&mut self, h: &BatchHeader, bytes: &[u8]) -> Result<()> {
        let marker = marker_of(bytes, h);
        let active = &mut self.active;
        let r = apply_batch(&mut self.producers, h, marker, |txn| active.append_aborted_txn(txn));
        if let Err(e) = &r {
            tracing::error!(dir = %self.dir.display(), offset = h.base_offset, error = %e, "cannot index an aborted transaction; it stays open until the index is rebuilt");
            self.recovery_point = self.recovery_point.min(self.active.core.base_offset);
        }
        r
    }

    /// Refuses replicated control batches whose marker cannot be parsed, before they are written.
    pub(super) fn check_control_batches(
        records: &[u8],
        placed: &[(std::ops::Range<usize>, BatchHeader)],
    ) -> Result<()> {
        for (range, _) in placed.iter().filter(|(_, h)| h.is_control()) {
            control::parse_marker(&records[range.clone()])?;
        }
        Ok(())
    }

    /// The aborted transactions `(producer id, first offset)` that overlap
    /// `[fetch_offset, upper_bound_offset)`, for a read_committed fetch (Kafka's
    /// `collectAbortedTransactions`): from the segment holding `fetch_offset` onwards, stopping
    /// after the segment where an entry's last stable offset reaches the upper bound.
    pub fn aborted_transactions(&self, fetch_offset: i64, upper_bound_offset: i64) -> Result<Vec<(i64, i64)>> {
        Ok(self
            .collect_aborted(fetch_offset, upper_bound_offset)?
            .into_iter()
            .map(|t| (t.producer_id, t.first_offset))
            .collect())
    }

    /// [`Log::aborted_transactions`] with whole index entries.
    pub(crate) fn collect_aborted(&self, fetch_offset: i64, upper_bound_offset: i64) -> Result<Vec<AbortedTxn>> {
        let floor = if self.active.core.base_offset <= fetch_offset {
            self.active.core.base_offset
        } else {
            self.sealed.range(..=fetch_offset).next_back().map_or(i64::MIN, |(b, _)| *b)
        };
        let mut out = Vec::new();
        for core in self.sealed.range(floor..).map(|(_, s)| &s.core).chain(std::iter::once(&self.active.core)) {
            let found = core.txn_index().collect(fetch_offset, upper_bound_offset)?;
            out.extend(found.aborted);
            if found.complete {
                break;
            }
        }
        Ok(out)
    }

    /// Readers of the non-empty transaction indexes of the segments from the one holding
    /// `offset` on, for reading outside the lock (the cleaner). No I/O.
    pub(crate) fn txn_index_readers_from(&self, offset: i64) -> Vec<TxnIndexReader> {
        let floor = self.sealed.range(..=offset).next_back().map_or(i64::MIN, |(b, _)| *b);
        segment_cores(&self.sealed, &self.active)
            .filter(|c| c.base_offset >= floor && !c.txn_index().is_empty())
            .map(|c| c.txn_index().reader())
            .collect()
    }

    /// The first offset of a transaction that is open, or whose marker is not yet below the high
    /// watermark; never below the log start (Kafka's `firstUnstableOffset`).
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.producers.first_unstable_offset().map(|o| o.max(self.log_start_offset))
    }

    /// How far a read_committed consumer may read: the high watermark, or the first unstable
    /// offset below it.
    pub fn last_stable_offset(&self) -> i64 {
        self.first_unstable_offset().map_or(self.high_watermark, |o| o.min(self.high_watermark))
    }

    /// Loads the newest usable snapshot at or below the log end and replays the batches after
    /// it, rebuilding open transactions. Snapshots above the log end (the log was truncated) are
    /// deleted. With `rebuild_txn_indexes`, the transaction index of every segment marked for it
    /// (rescanned by recovery or reopened by a truncation, an index that failed its check, or an
    /// index write that failed) is rebuilt from the replay, which then starts at a snapshot at or
    /// below the first of them, as Kafka rebuilds producer state up to a segment before
    /// recovering it; snapshots above that first segment are deleted, since they may hold what
    /// the rebuild corrects (a transaction left open by a failed index write). Returns whether
    /// it did so (the caller then snapshots the rebuilt state).
    pub(super) fn load_producer_state(&mut self, clean: bool, rebuild_txn_indexes: bool) -> Result<bool> {
        let leo = self.log_end_offset();
        let stale: Vec<i64> = if rebuild_txn_indexes {
            segment_cores(&self.sealed, &self.active).filter(|c| c.txn_rebuild).map(|c| c.base_offset).collect()
        } else {
            Vec::new()
        };
        let upto = stale.first().copied().unwrap_or(leo);
        let mut snaps = list_offsets(&self.dir, "snapshot")?;
        for &o in snaps.iter().filter(|&&o| o > upto) {
            let _ = std::fs::remove_file(snapshot_path(&self.dir, o));
        }
        snaps.retain(|&o| o <= upto);
        self.producers = ProducerState::default();
        let mut from = self.first_segment_base();
        while let Some(o) = snaps.pop() {
            let p = snapshot_path(&self.dir, o);
            match std::fs::read(&p).ok().and_then(|b| ProducerState::from_snapshot(&b)) {
                Some(state) => {
                    self.producers = state;
                    from = o;
                    break;
                }
                None => {
                    tracing::warn!(path = %p.display(), "producer snapshot unreadable; ignoring it");
                    let _ = std::fs::remove_file(&p);
                }
            }
        }
        if clean && from == leo && stale.is_empty() {
            return Ok(false);
        }
        let segs: Vec<(Arc<File>, PathBuf, i64, i64, u64)> = self
            .sealed
            .values()
            .map(|s| (&s.core, s.lookup_position(from)))
            .chain(std::iter::once((&self.active.core, self.active.lookup_position(from))))
            .map(|(c, pos)| (c.file.clone(), c.log_path.clone(), c.base_offset, c.next_offset, pos))
            .collect();
        let mut rebuilt: BTreeMap<i64, Vec<AbortedTxn>> = stale.iter().map(|b| (*b, Vec::new())).collect();
        for (file, path, base, next, pos) in &segs {
            if *next <= from {
                continue;
            }
            let start = if *base >= from { 0 } else { *pos };
            let mut batches: Vec<(u64, BatchHeader)> = Vec::new();
            scan_log(file, path, start, *base, |at, h| {
                if h.last_offset() >= from && h.has_producer_id() {
                    batches.push((at, *h));
                }
            })?;
            let mut index = rebuilt.get_mut(base);
            for (at, h) in &batches {
                let marker =
                    if h.is_control() { marker_of(&read_at(file, path, *at, h.total_size())?, h) } else { None };
                apply_batch(&mut self.producers, h, marker, |txn| {
                    if let Some(entries) = index.as_mut() {
                        entries.push(*txn);
                    }
                    Ok(())
                })?;
            }
        }
        for (base, entries) in rebuilt {
            if base == self.active.core.base_offset {
                self.active.rebuild_txn_index(&entries)?;
            } else if let Some(seg) = self.sealed.get_mut(&base) {
                seg.rebuild_txn_index(&entries)?;
            }
            if !entries.is_empty() {
                tracing::info!(dir = %self.dir.display(), base_offset = base, aborted = entries.len(), "rebuilt transaction index");
            }
        }
        self.producers.on_high_watermark(self.high_watermark);
        Ok(!stale.is_empty())
    }
}

#[cfg(test)]
mod compaction_tests;
#[cfg(test)]
mod tests;
