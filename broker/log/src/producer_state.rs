//! Idempotent producer state of one partition: for each producer id, its epoch and the
//! metadata of its last five batches, as Kafka keeps it (`max.in.flight.requests.per.connection`
//! is at most 5 for idempotent producers, so five batches are enough to recognise any retry).
//!
//! Pure state: [`ProducerState::check`] decides, [`ProducerState::record`] applies. Snapshots are
//! written when a segment rolls and at clean shutdown; recovery loads the newest snapshot at or
//! below the log end and replays the batches after it.

use std::collections::{HashMap, VecDeque};

use crate::batch::BatchHeader;
use crate::error::LogError;

const MAX_BATCHES: usize = 5;
const SNAPSHOT_MAGIC: &[u8; 4] = b"OXPS";
const SNAPSHOT_VERSION: u16 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMeta {
    pub first_seq: i32,
    pub last_seq: i32,
    pub first_offset: i64,
    pub last_offset: i64,
    pub timestamp: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerEntry {
    pub epoch: i16,
    pub batches: VecDeque<BatchMeta>,
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
    pub fn get(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    /// `(producer id, epoch, last sequence, last timestamp)` of every producer, by id.
    pub fn entries(&self) -> Vec<(i64, i16, i32, i64)> {
        let mut v: Vec<_> = self
            .producers
            .iter()
            .filter_map(|(id, e)| e.batches.back().map(|b| (*id, e.epoch, b.last_seq, b.timestamp)))
            .collect();
        v.sort_unstable();
        v
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
            let expected = entry.batches.back().map_or(0, |b| next_seq(b.last_seq));
            if entry.batches.is_empty() || first == expected {
                return Ok(SeqCheck::Append);
            }
            return Err(LogError::OutOfOrderSequence { producer_id: h.producer_id, expected, got: first });
        }
        // A bumped epoch starts again at sequence 0.
        if first != 0 {
            return Err(LogError::OutOfOrderSequence { producer_id: h.producer_id, expected: 0, got: first });
        }
        Ok(SeqCheck::Append)
    }

    /// Records an appended batch (with its assigned offsets).
    pub fn record(&mut self, h: &BatchHeader) {
        if !h.has_producer_id() {
            return;
        }
        let entry = self.producers.entry(h.producer_id).or_default();
        if entry.epoch != h.producer_epoch {
            entry.epoch = h.producer_epoch;
            entry.batches.clear();
        }
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
    }

    /// Drops producers whose last batch is older than `now_ms - expiration_ms`
    /// (`producer.id.expiration.ms`).
    pub fn expire(&mut self, now_ms: i64, expiration_ms: i64) {
        self.producers.retain(|_, e| e.batches.back().is_some_and(|b| now_ms - b.timestamp < expiration_ms));
    }

    /// Serialises the state (with a trailing CRC32C).
    pub fn to_snapshot(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.producers.len() * 64);
        out.extend_from_slice(SNAPSHOT_MAGIC);
        out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
        out.extend_from_slice(&(self.producers.len() as u32).to_be_bytes());
        let mut ids: Vec<_> = self.producers.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let e = &self.producers[&id];
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&e.epoch.to_be_bytes());
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

    /// Parses a snapshot; `None` if it is damaged (the caller then rebuilds from the log).
    pub fn from_snapshot(b: &[u8]) -> Option<Self> {
        let (body, crc) = b.split_at_checked(b.len().checked_sub(4)?)?;
        if crc32c::crc32c(body).to_be_bytes() != crc || !body.starts_with(SNAPSHOT_MAGIC) {
            return None;
        }
        let mut r = Reader { b: body, at: 4 };
        if r.u16()? != SNAPSHOT_VERSION {
            return None;
        }
        let n = r.u32()?;
        let mut producers = HashMap::with_capacity(n as usize);
        for _ in 0..n {
            let id = r.i64()?;
            let epoch = r.u16()? as i16;
            let k = r.u8()?;
            let mut batches = VecDeque::with_capacity(k as usize);
            for _ in 0..k {
                batches.push_back(BatchMeta {
                    first_seq: r.u32()? as i32,
                    last_seq: r.u32()? as i32,
                    first_offset: r.i64()?,
                    last_offset: r.i64()?,
                    timestamp: r.i64()?,
                });
            }
            producers.insert(id, ProducerEntry { epoch, batches });
        }
        Some(Self { producers })
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

    #[test]
    fn in_order_duplicate_and_gap() {
        let mut s = ProducerState::default();
        assert_eq!(s.check(&hdr(7, 0, 0, 5, 0)).ok(), Some(SeqCheck::Append));
        s.record(&hdr(7, 0, 0, 5, 100));
        assert_eq!(s.check(&hdr(7, 0, 5, 5, 0)).ok(), Some(SeqCheck::Append));
        s.record(&hdr(7, 0, 5, 5, 105));
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
            s.record(&hdr(1, 0, i, 1, i64::from(i)));
        }
        s.record(&hdr(2, 3, 0, 2, 50));
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
        s.record(&hdr(1, 0, i32::MAX - 1, 2, 0));
        assert_eq!(s.check(&hdr(1, 0, 0, 1, 0)).ok(), Some(SeqCheck::Append));
    }
}
