//! Producer state of one partition, as Kafka keeps it: for each producer id, its epoch, the
//! metadata of its last five batches (`max.in.flight.requests.per.connection` is at most 5 for
//! idempotent producers, so five batches are enough to recognise any retry), the epoch of the
//! last transaction coordinator that wrote a marker for it, and the first offset of its open
//! transaction; plus the partition's open transactions ordered by first offset
//! ([`crate::txn_state`]).
//!
//! Pure state: [`ProducerState::check`] and [`ProducerState::check_marker`] decide,
//! [`ProducerState::record`] applies and returns the transaction a marker ended, which the log
//! indexes (if aborted) and then hands to [`ProducerState::complete_txn`]; until then the
//! transaction is open in every respect (the producer's entry and the partition's open
//! transactions agree), so a failed index write leaves it open and the LSO where it was. Snapshots are
//! written when a segment rolls and at clean shutdown; recovery loads the newest usable snapshot
//! and replays the batches after it.

use std::collections::{HashMap, VecDeque};

use crate::batch::BatchHeader;
use crate::control::EndTxnMarker;
use crate::error::LogError;
use crate::txn_state::{CompletedTxn, Transactions};

const MAX_BATCHES: usize = 5;
const SNAPSHOT_MAGIC: &[u8; 4] = b"OXPS";
/// Version 2 adds each producer's coordinator epoch, open transaction and last timestamp.
const SNAPSHOT_VERSION: u16 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMeta {
    pub first_seq: i32,
    pub last_seq: i32,
    pub first_offset: i64,
    pub last_offset: i64,
    pub timestamp: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    pub epoch: i16,
    pub batches: VecDeque<BatchMeta>,
    /// Epoch of the coordinator that wrote the producer's last marker, -1 if none.
    pub coordinator_epoch: i32,
    /// First offset of the producer's open transaction (Kafka's `currentTxnFirstOffset`).
    pub txn_first_offset: Option<i64>,
    /// Timestamp of its last batch or marker (`producer.id.expiration.ms` counts from it).
    pub last_timestamp: i64,
}

impl Default for ProducerEntry {
    fn default() -> Self {
        Self { epoch: -1, batches: VecDeque::new(), coordinator_epoch: -1, txn_first_offset: None, last_timestamp: -1 }
    }
}

impl ProducerEntry {
    /// A different epoch (newer, or any for replicated data) starts a new sequence history.
    fn set_epoch(&mut self, epoch: i16) {
        if self.epoch != epoch {
            self.epoch = epoch;
            self.batches.clear();
        }
    }
}

/// What the log cleaner must keep of a producer (Kafka's `LastRecord`): the batch holding its
/// last sequence, or with no data batch of its current epoch, its last marker (the epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastRecord {
    /// Last offset of its last data batch of the current epoch.
    pub last_data_offset: Option<i64>,
    pub producer_epoch: i16,
}

/// The outcome of checking a batch against the producer state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqCheck {
    /// Not idempotent, or the next batch in sequence: append it.
    Append,
    /// A retry of a batch already in the log: answer with its original offsets.
    Duplicate(BatchMeta),
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerState {
    producers: HashMap<i64, ProducerEntry>,
    txns: Transactions,
}

fn next_seq(seq: i32) -> i32 {
    if seq == i32::MAX { 0 } else { seq + 1 }
}

impl ProducerState {
    pub fn len(&self) -> usize {
        self.producers.len()
    }
    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }
    /// The sequence `producer_id`'s next batch at `epoch` starts at: after its last batch of
    /// that epoch, 0 for a new producer or a bumped epoch.
    pub fn next_sequence(&self, producer_id: i64, epoch: i16) -> i32 {
        match self.producers.get(&producer_id) {
            Some(e) if e.epoch == epoch => e.batches.back().map_or(0, |b| next_seq(b.last_seq)),
            _ => 0,
        }
    }

    pub fn get(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    /// `(producer id, epoch, last sequence (-1 if none), last timestamp)` of every producer, by
    /// id.
    pub fn entries(&self) -> Vec<(i64, i16, i32, i64)> {
        let mut v: Vec<_> = self
            .producers
            .iter()
            .map(|(id, e)| (*id, e.epoch, e.batches.back().map_or(-1, |b| b.last_seq), e.last_timestamp))
            .collect();
        v.sort_unstable();
        v
    }

    /// Every producer's [`LastRecord`] (Kafka's `lastRecordsOfActiveProducers`).
    pub fn last_records(&self) -> HashMap<i64, LastRecord> {
        self.producers
            .iter()
            .map(|(id, e)| {
                let last =
                    LastRecord { last_data_offset: e.batches.back().map(|b| b.last_offset), producer_epoch: e.epoch };
                (*id, last)
            })
            .collect()
    }

    /// Checks a client batch (offsets not yet assigned) against the state.
    pub fn check(&self, h: &BatchHeader) -> Result<SeqCheck, LogError> {
        if !h.has_producer_id() {
            return Ok(SeqCheck::Append);
        }
        let Some(entry) = self.producers.get(&h.producer_id) else {
            // Unknown producer (new, or its state expired): accept, as Kafka does since KIP-360.
            return Ok(SeqCheck::Append);
        };
        if h.producer_epoch < entry.epoch {
            return Err(LogError::ProducerFenced {
                producer_id: h.producer_id,
                current: entry.epoch,
                got: h.producer_epoch,
            });
        }
        let (first, last) = (h.base_sequence, h.last_sequence());
        if h.producer_epoch == entry.epoch {
            if let Some(dup) = entry.batches.iter().find(|b| b.first_seq == first && b.last_seq == last) {
                return Ok(SeqCheck::Duplicate(*dup));
            }
            // With no batch of this epoch yet (a marker bumped it), the sequence starts at 0.
            let expected = entry.batches.back().map_or(0, |b| next_seq(b.last_seq));
            if first != expected {
                return Err(LogError::OutOfOrderSequence { producer_id: h.producer_id, expected, got: first });
            }
        } else if first != 0 {
            // A bumped epoch starts again at sequence 0.
            return Err(LogError::OutOfOrderSequence { producer_id: h.producer_id, expected: 0, got: first });
        }
        if entry.txn_first_offset.is_some() && !h.is_transactional() {
            return Err(LogError::InvalidTxnState {
                producer_id: h.producer_id,
                reason: "a non-transactional batch while its transaction is open".into(),
            });
        }
        Ok(SeqCheck::Append)
    }

    /// Checks a marker the coordinator asks this leader to write: its producer epoch must not be
    /// older than the producer's (InvalidProducerEpoch), nor its coordinator epoch older than the
    /// last marker's (TransactionCoordinatorFenced). A producer with no state passes.
    pub fn check_marker(&self, producer_id: i64, producer_epoch: i16, coordinator_epoch: i32) -> Result<(), LogError> {
        let Some(entry) = self.producers.get(&producer_id) else { return Ok(()) };
        if producer_epoch < entry.epoch {
            return Err(LogError::ProducerFenced { producer_id, current: entry.epoch, got: producer_epoch });
        }
        if coordinator_epoch < entry.coordinator_epoch {
            return Err(LogError::CoordinatorFenced {
                producer_id,
                current: entry.coordinator_epoch,
                got: coordinator_epoch,
            });
        }
        Ok(())
    }

    /// Records an appended batch (with its assigned offsets). A transactional data batch opens
    /// the producer's transaction if none is; a marker (`marker`, parsed from a control batch)
    /// ends it and returns it (none if the producer had no open transaction). The returned
    /// transaction stays open, in the producer's entry as in the partition's open transactions,
    /// until [`ProducerState::complete_txn`].
    pub fn record(&mut self, h: &BatchHeader, marker: Option<EndTxnMarker>) -> Option<CompletedTxn> {
        if !h.has_producer_id() {
            return None;
        }
        if h.is_control() {
            let Some(m) = marker else {
                if h.record_count == 0 {
                    // A marker the cleaner emptied, kept as the producer's last batch: its
                    // transaction is gone from the log, its epoch still fences older ones.
                    let entry = self.producers.entry(h.producer_id).or_default();
                    entry.set_epoch(h.producer_epoch);
                    entry.last_timestamp = h.max_timestamp;
                }
                // Other control batches change nothing.
                return None;
            };
            let entry = self.producers.entry(h.producer_id).or_default();
            let done = entry.txn_first_offset.map(|first_offset| CompletedTxn {
                producer_id: h.producer_id,
                first_offset,
                last_offset: h.base_offset,
                aborted: !m.commit,
            });
            entry.set_epoch(h.producer_epoch);
            entry.coordinator_epoch = m.coordinator_epoch;
            entry.last_timestamp = h.max_timestamp;
            return done;
        }
        let entry = self.producers.entry(h.producer_id).or_default();
        entry.set_epoch(h.producer_epoch);
        entry.batches.push_back(BatchMeta {
            first_seq: h.base_sequence,
            last_seq: h.last_sequence(),
            first_offset: h.base_offset,
            last_offset: h.last_offset(),
            timestamp: h.max_timestamp,
        });
        while entry.batches.len() > MAX_BATCHES {
            entry.batches.pop_front();
        }
        entry.last_timestamp = h.max_timestamp;
        if h.is_transactional() && entry.txn_first_offset.is_none() {
            entry.txn_first_offset = Some(h.base_offset);
            self.txns.begin(h.producer_id, h.base_offset);
        }
        None
    }

    /// The LSO to index with `txn` (see [`Transactions::last_stable_offset`]).
    pub fn last_stable_offset(&self, txn: &CompletedTxn) -> i64 {
        self.txns.last_stable_offset(txn)
    }

    /// Marks a transaction [`ProducerState::record`] returned as complete (after its index entry
    /// is written): the producer's entry and the partition's open transactions both let it go.
    pub fn complete_txn(&mut self, txn: &CompletedTxn) {
        if let Some(entry) = self.producers.get_mut(&txn.producer_id)
            && entry.txn_first_offset == Some(txn.first_offset)
        {
            entry.txn_first_offset = None;
        }
        if !self.txns.complete(txn) {
            tracing::warn!(
                producer_id = txn.producer_id,
                first_offset = txn.first_offset,
                "completed a transaction that was not open"
            );
        }
    }

    /// Lowest first offset of a transaction not yet decided or whose marker is not yet below the
    /// high watermark.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.txns.first_unstable_offset()
    }

    /// Lowest first offset of an open transaction.
    pub fn first_undecided_offset(&self) -> Option<i64> {
        self.txns.first_undecided_offset()
    }

    /// Open transactions as (first offset, producer id), lowest first.
    pub fn ongoing_transactions(&self) -> Vec<(i64, i64)> {
        self.txns.ongoing().collect()
    }

    /// The high watermark moved: completed transactions whose marker it passed are stable.
    pub fn on_high_watermark(&mut self, high_watermark: i64) {
        self.txns.on_high_watermark(high_watermark);
    }

    /// Drops producers whose last batch or marker is older than `now_ms - expiration_ms`
    /// (`producer.id.expiration.ms`), except those with an open transaction (Kafka's
    /// `isProducerExpired`).
    pub fn expire(&mut self, now_ms: i64, expiration_ms: i64) {
        self.producers.retain(|_, e| e.txn_first_offset.is_some() || now_ms - e.last_timestamp < expiration_ms);
    }

    /// Serialises the state (with a trailing CRC32C). Completed transactions waiting for the
    /// high watermark are not kept, as in Kafka.
    pub fn to_snapshot(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.producers.len() * 80);
        out.extend_from_slice(SNAPSHOT_MAGIC);
        out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
        out.extend_from_slice(&(self.producers.len() as u32).to_be_bytes());
        let mut ids: Vec<_> = self.producers.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let e = &self.producers[&id];
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&e.epoch.to_be_bytes());
            out.extend_from_slice(&e.coordinator_epoch.to_be_bytes());
            out.extend_from_slice(&e.txn_first_offset.unwrap_or(-1).to_be_bytes());
            out.extend_from_slice(&e.last_timestamp.to_be_bytes());
            out.push(e.batches.len() as u8);
            for b in &e.batches {
                out.extend_from_slice(&b.first_seq.to_be_bytes());
                out.extend_from_slice(&b.last_seq.to_be_bytes());
                out.extend_from_slice(&b.first_offset.to_be_bytes());
                out.extend_from_slice(&b.last_offset.to_be_bytes());
                out.extend_from_slice(&b.timestamp.to_be_bytes());
            }
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    /// Parses a snapshot of version 2 or 1 (written before transactions: no coordinator epoch,
    /// no open transaction); `None` if it is damaged (the caller then rebuilds from the log).
    pub fn from_snapshot(b: &[u8]) -> Option<Self> {
        let (body, crc) = b.split_at_checked(b.len().checked_sub(4)?)?;
        if crc32c::crc32c(body).to_be_bytes() != crc || !body.starts_with(SNAPSHOT_MAGIC) {
            return None;
        }
        let mut r = Reader { b: body, at: 4 };
        let version = r.u16()?;
        if !(1..=SNAPSHOT_VERSION).contains(&version) {
            return None;
        }
        let n = r.u32()?;
        let mut state = Self::default();
        for _ in 0..n {
            let id = r.i64()?;
            let mut entry = ProducerEntry { epoch: r.u16()? as i16, ..ProducerEntry::default() };
            if version >= 2 {
                entry.coordinator_epoch = r.u32()? as i32;
                entry.txn_first_offset = Some(r.i64()?).filter(|o| *o >= 0);
                entry.last_timestamp = r.i64()?;
            }
            let k = r.u8()?;
            for _ in 0..k {
                entry.batches.push_back(BatchMeta {
                    first_seq: r.u32()? as i32,
                    last_seq: r.u32()? as i32,
                    first_offset: r.i64()?,
                    last_offset: r.i64()?,
                    timestamp: r.i64()?,
                });
            }
            if version == 1 {
                entry.last_timestamp = entry.batches.back().map_or(-1, |b| b.timestamp);
            }
            if let Some(first) = entry.txn_first_offset {
                state.txns.begin(id, first);
            }
            state.producers.insert(id, entry);
        }
        (r.at == body.len()).then_some(state)
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.b.get(self.at..self.at + n)?;
        self.at += n;
        Some(s)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|s| s[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|s| u16::from_be_bytes([s[0], s[1]]))
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4).map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn i64(&mut self) -> Option<i64> {
        let s = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Some(i64::from_be_bytes(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(pid: i64, epoch: i16, seq: i32, count: i32, base: i64) -> BatchHeader {
        BatchHeader {
            base_offset: base,
            batch_length: 100,
            leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: count - 1,
            base_timestamp: 0,
            max_timestamp: 1000,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            record_count: count,
        }
    }

    fn txn(pid: i64, epoch: i16, seq: i32, count: i32, base: i64) -> BatchHeader {
        BatchHeader { attributes: 0x10, ..hdr(pid, epoch, seq, count, base) }
    }

    fn marker_hdr(pid: i64, epoch: i16, offset: i64, ts: i64) -> BatchHeader {
        BatchHeader { attributes: 0x30, base_sequence: -1, max_timestamp: ts, ..hdr(pid, epoch, 0, 1, offset) }
    }

    fn end(s: &mut ProducerState, pid: i64, epoch: i16, offset: i64, commit: bool) -> Option<CompletedTxn> {
        let done = s.record(&marker_hdr(pid, epoch, offset, 2000), Some(EndTxnMarker { commit, coordinator_epoch: 0 }));
        if let Some(t) = &done {
            s.complete_txn(t);
        }
        done
    }

    #[test]
    fn in_order_duplicate_and_gap() {
        let mut s = ProducerState::default();
        assert_eq!(s.check(&hdr(7, 0, 0, 5, 0)).ok(), Some(SeqCheck::Append));
        s.record(&hdr(7, 0, 0, 5, 100), None);
        assert_eq!(s.check(&hdr(7, 0, 5, 5, 0)).ok(), Some(SeqCheck::Append));
        s.record(&hdr(7, 0, 5, 5, 105), None);
        // retry of the first batch: same offsets as before
        match s.check(&hdr(7, 0, 0, 5, 0)) {
            Ok(SeqCheck::Duplicate(m)) => assert_eq!((m.first_offset, m.last_offset), (100, 104)),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            s.check(&hdr(7, 0, 12, 1, 0)),
            Err(LogError::OutOfOrderSequence { expected: 10, got: 12, .. })
        ));
        assert!(matches!(s.check(&hdr(7, -1, 10, 1, 0)), Err(LogError::ProducerFenced { .. })));
        // a new epoch must start at 0
        assert!(s.check(&hdr(7, 1, 3, 1, 0)).is_err());
        assert_eq!(s.check(&hdr(7, 1, 0, 1, 0)).ok(), Some(SeqCheck::Append));
        // unknown producers are accepted at any sequence
        assert_eq!(s.check(&hdr(8, 0, 42, 1, 0)).ok(), Some(SeqCheck::Append));
    }

    #[test]
    fn keeps_five_batches_and_snapshots_round_trip() {
        let mut s = ProducerState::default();
        for i in 0..8 {
            s.record(&hdr(1, 0, i, 1, i64::from(i)), None);
        }
        s.record(&hdr(2, 3, 0, 2, 50), None);
        assert_eq!(s.get(1).map(|e| e.batches.len()), Some(5));
        let snap = s.to_snapshot();
        assert_eq!(ProducerState::from_snapshot(&snap), Some(s.clone()));
        let mut bad = snap.clone();
        bad[10] ^= 1;
        assert_eq!(ProducerState::from_snapshot(&bad), None);
        assert_eq!(ProducerState::from_snapshot(&snap[..3]), None);
    }

    #[test]
    fn sequence_wraps() {
        let mut s = ProducerState::default();
        s.record(&hdr(1, 0, i32::MAX - 1, 2, 0), None);
        assert_eq!(s.check(&hdr(1, 0, 0, 1, 0)).ok(), Some(SeqCheck::Append));
    }

    #[test]
    fn transactions_of_two_producers_and_the_first_unstable_offset() {
        let mut s = ProducerState::default();
        s.record(&hdr(1, 0, 0, 2, 0), None);
        assert_eq!(s.first_unstable_offset(), None, "idempotent batches open nothing");
        s.record(&txn(1, 0, 2, 3, 10), None);
        s.record(&txn(2, 5, 0, 2, 13), None);
        s.record(&txn(1, 0, 5, 1, 15), None);
        assert_eq!(s.get(1).and_then(|e| e.txn_first_offset), Some(10), "the first batch opened it");
        assert_eq!(s.ongoing_transactions(), vec![(10, 1), (13, 2)]);
        assert_eq!(s.first_unstable_offset(), Some(10));
        // Producer 1 aborts: its transaction is 10..=16, the LSO then producer 2's first offset.
        let done = s.record(&marker_hdr(1, 0, 16, 2000), Some(EndTxnMarker { commit: false, coordinator_epoch: 3 }));
        let done = done.unwrap_or_else(|| panic!("a transaction was open"));
        assert_eq!(done, CompletedTxn { producer_id: 1, first_offset: 10, last_offset: 16, aborted: true });
        assert_eq!(s.last_stable_offset(&done), 13);
        s.complete_txn(&done);
        assert_eq!(s.first_undecided_offset(), Some(13));
        assert_eq!(s.first_unstable_offset(), Some(10), "the marker is not below the high watermark yet");
        s.on_high_watermark(17);
        assert_eq!(s.first_unstable_offset(), Some(13));
        let e = s.get(1).cloned().unwrap_or_default();
        assert_eq!((e.txn_first_offset, e.coordinator_epoch, e.last_timestamp), (None, 3, 2000));
        // Producer 2 commits; the LSO after it is the offset after its marker.
        let done = s.record(&marker_hdr(2, 5, 17, 2000), Some(EndTxnMarker { commit: true, coordinator_epoch: 3 }));
        let done = done.unwrap_or_else(|| panic!("a transaction was open"));
        assert!(!done.aborted);
        assert_eq!(s.last_stable_offset(&done), 18);
        s.complete_txn(&done);
        s.on_high_watermark(18);
        assert_eq!(s.first_unstable_offset(), None);
        // A marker with nothing open completes nothing, but still records the coordinator.
        assert_eq!(end(&mut s, 9, 0, 18, true), None);
        assert_eq!(s.get(9).map(|e| (e.epoch, e.coordinator_epoch)), Some((0, 0)));
    }

    #[test]
    fn a_transaction_stays_open_until_it_is_completed() {
        let mut s = ProducerState::default();
        s.record(&txn(1, 0, 0, 2, 10), None);
        let done = s.record(&marker_hdr(1, 0, 12, 2000), Some(EndTxnMarker { commit: false, coordinator_epoch: 1 }));
        let done = done.unwrap_or_else(|| panic!("a transaction was open"));
        // The log failed to index it: nothing completed it. The entry and the partition's open
        // transactions agree that it is open, so the LSO stays at 10 and the producer is
        // treated as in a transaction (no plain batch, no expiry).
        assert_eq!(s.get(1).and_then(|e| e.txn_first_offset), Some(10));
        assert_eq!(s.ongoing_transactions(), vec![(10, 1)]);
        assert_eq!(s.first_unstable_offset(), Some(10));
        assert!(matches!(s.check(&hdr(1, 0, 2, 1, 0)), Err(LogError::InvalidTxnState { .. })));
        s.expire(1_000_000, 500);
        assert_eq!(s.len(), 1);
        // A snapshot taken now says so too.
        let back = ProducerState::from_snapshot(&s.to_snapshot()).unwrap_or_default();
        assert_eq!(back.get(1).and_then(|e| e.txn_first_offset), Some(10));
        // The coordinator's retry of the marker ends the same transaction at the new marker.
        let retry = s.record(&marker_hdr(1, 0, 13, 2000), Some(EndTxnMarker { commit: false, coordinator_epoch: 1 }));
        assert_eq!(retry.map(|t| (t.first_offset, t.last_offset)), Some((10, 13)));
        s.complete_txn(&retry.unwrap_or(done));
        assert_eq!(s.get(1).and_then(|e| e.txn_first_offset), None);
        assert!(s.ongoing_transactions().is_empty());
        assert_eq!(s.first_undecided_offset(), None);
    }

    #[test]
    fn a_marker_the_cleaner_emptied_still_carries_the_epoch() {
        let mut s = ProducerState::default();
        s.record(&txn(3, 0, 0, 1, 5), None);
        // The coordinator aborted with epoch 1; the cleaner later emptied the marker (no record).
        let emptied = BatchHeader { record_count: 0, ..marker_hdr(3, 1, 6, 2000) };
        assert_eq!(s.record(&emptied, None), None, "it completes nothing");
        assert_eq!(s.get(3).map(|e| (e.epoch, e.batches.len(), e.last_timestamp)), Some((1, 0, 2000)));
        assert!(matches!(s.check(&txn(3, 0, 1, 1, 0)), Err(LogError::ProducerFenced { current: 1, got: 0, .. })));
        // Another control type with a record changes nothing.
        assert_eq!(s.record(&marker_hdr(4, 0, 7, 2000), None), None);
        assert!(s.get(4).is_none());
        // What the cleaner must keep of each producer.
        s.record(&hdr(5, 2, 0, 3, 10), None);
        let last = s.last_records();
        assert_eq!(last.get(&3), Some(&LastRecord { last_data_offset: None, producer_epoch: 1 }));
        assert_eq!(last.get(&5), Some(&LastRecord { last_data_offset: Some(12), producer_epoch: 2 }));
    }

    #[test]
    fn transactional_checks_and_epochs() {
        let mut s = ProducerState::default();
        s.record(&txn(1, 2, 0, 2, 0), None);
        // No plain batch inside an open transaction.
        assert!(matches!(s.check(&hdr(1, 2, 2, 1, 0)), Err(LogError::InvalidTxnState { .. })));
        assert_eq!(s.check(&txn(1, 2, 2, 1, 0)).ok(), Some(SeqCheck::Append));
        // An older epoch is fenced; a newer one starts at sequence 0.
        assert!(matches!(s.check(&txn(1, 1, 2, 1, 0)), Err(LogError::ProducerFenced { current: 2, got: 1, .. })));
        assert!(matches!(s.check(&txn(1, 3, 2, 1, 0)), Err(LogError::OutOfOrderSequence { expected: 0, .. })));
        assert_eq!(s.check(&txn(1, 3, 0, 1, 0)).ok(), Some(SeqCheck::Append));
        // Markers: an older producer epoch, then an older coordinator epoch, are refused.
        assert!(matches!(s.check_marker(1, 1, 0), Err(LogError::ProducerFenced { current: 2, got: 1, .. })));
        assert!(s.check_marker(1, 2, 0).is_ok());
        assert!(s.check_marker(1, 3, 0).is_ok(), "a newer epoch (the coordinator bumped it)");
        let done = s.record(&marker_hdr(1, 3, 2, 2000), Some(EndTxnMarker { commit: false, coordinator_epoch: 4 }));
        s.complete_txn(&done.unwrap_or_else(|| panic!("a transaction was open")));
        assert!(matches!(s.check_marker(1, 3, 3), Err(LogError::CoordinatorFenced { current: 4, got: 3, .. })));
        assert!(s.check_marker(1, 3, 4).is_ok());
        assert!(s.check_marker(99, 0, 0).is_ok(), "no state, nothing to fence");
        // The marker bumped the epoch to 3: the producer's next batch starts at sequence 0.
        assert!(matches!(s.check(&txn(1, 3, 2, 1, 0)), Err(LogError::OutOfOrderSequence { expected: 0, .. })));
        assert_eq!(s.check(&hdr(1, 3, 0, 1, 0)).ok(), Some(SeqCheck::Append), "no transaction open now");
        assert_eq!(s.entries(), vec![(1, 3, -1, 2000)], "listed with no sequence yet");
    }

    #[test]
    fn expiry_skips_producers_with_an_open_transaction() {
        let mut s = ProducerState::default();
        s.record(&hdr(1, 0, 0, 1, 0), None);
        s.record(&txn(2, 0, 0, 1, 1), None);
        s.record(&txn(3, 0, 0, 1, 2), None);
        assert!(end(&mut s, 3, 0, 3, true).is_some());
        // All last wrote at 1000 (producer 3's marker at 2000); expiration is 500 ms.
        s.expire(2_400, 500);
        assert_eq!(s.entries().iter().map(|e| e.0).collect::<Vec<_>>(), vec![2, 3]);
        s.expire(2_500, 500);
        assert_eq!(s.entries().iter().map(|e| e.0).collect::<Vec<_>>(), vec![2], "open since 1000, kept");
        assert!(end(&mut s, 2, 0, 4, false).is_some());
        s.expire(2_499, 500);
        assert_eq!(s.entries().iter().map(|e| e.0).collect::<Vec<_>>(), vec![2], "its marker was at 2000");
        s.expire(3_000, 500);
        assert!(s.is_empty());
    }

    #[test]
    fn snapshots_carry_transactions() {
        let mut s = ProducerState::default();
        s.record(&txn(1, 0, 0, 3, 10), None);
        s.record(&txn(2, 1, 0, 1, 13), None);
        assert!(end(&mut s, 2, 1, 14, true).is_some());
        s.record(&txn(2, 1, 1, 1, 15), None);
        s.on_high_watermark(16);
        let back = ProducerState::from_snapshot(&s.to_snapshot());
        assert_eq!(back.as_ref(), Some(&s));
        let back = back.unwrap_or_default();
        assert_eq!(back.ongoing_transactions(), vec![(10, 1), (15, 2)]);
        assert_eq!(back.get(2).map(|e| e.coordinator_epoch), Some(0));
    }

    #[test]
    fn version_1_snapshots_are_still_read() {
        // The layout written before transactions: no coordinator epoch, open transaction or
        // last timestamp per producer.
        let mut v1 = Vec::new();
        v1.extend_from_slice(b"OXPS");
        v1.extend_from_slice(&1u16.to_be_bytes());
        v1.extend_from_slice(&1u32.to_be_bytes());
        v1.extend_from_slice(&7i64.to_be_bytes());
        v1.extend_from_slice(&2i16.to_be_bytes());
        v1.push(1);
        for v in [4i32, 6] {
            v1.extend_from_slice(&v.to_be_bytes());
        }
        for v in [100i64, 102, 5_000] {
            v1.extend_from_slice(&v.to_be_bytes());
        }
        let crc = crc32c::crc32c(&v1);
        v1.extend_from_slice(&crc.to_be_bytes());
        let s = ProducerState::from_snapshot(&v1).unwrap_or_else(|| panic!("a v1 snapshot"));
        let e = s.get(7).cloned().unwrap_or_default();
        assert_eq!((e.epoch, e.coordinator_epoch, e.txn_first_offset, e.last_timestamp), (2, -1, None, 5_000));
        assert_eq!(
            e.batches.back().map(|b| (b.first_seq, b.last_seq, b.first_offset, b.last_offset)),
            Some((4, 6, 100, 102))
        );
        assert_eq!(s.check(&hdr(7, 2, 7, 1, 0)).ok(), Some(SeqCheck::Append));
        assert_eq!(s.first_unstable_offset(), None);
        // What is written now is version 2.
        assert_eq!(&s.to_snapshot()[4..6], &2u16.to_be_bytes());
    }
}
