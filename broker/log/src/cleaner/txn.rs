//! The transactions a cleaning pass walks through, as Kafka's `CleanedTransactionMetadata`:
//! the aborted transactions of the cleaned range sorted by first offset, taken up as the pass
//! reaches their first offset, and per producer the aborted or committed transaction it is in.
//! Each batch costs a map lookup; the aborted list is walked once.
//!
//! It decides which data batches belong to aborted transactions (dropped, never a key's latest
//! value), which markers may go (their transaction has no batch left in the range), and which
//! aborted transactions the cleaned segment's `.txnindex` keeps (those whose marker stays
//! because batches of theirs were still there).

use std::collections::{HashMap, HashSet};

use crate::batch::BatchHeader;
use crate::control;
use crate::txn_index::{AbortedTxn, TxnIndexReader};

/// What a control batch is, for the walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ControlKind {
    /// No record: a marker an earlier pass emptied.
    Empty,
    Commit,
    Abort,
    /// Another control type, or a record this broker cannot parse: kept.
    Other,
}

impl ControlKind {
    /// The kind of the control batch `bytes` (whose header is `h`).
    pub(crate) fn of(h: &BatchHeader, bytes: &[u8]) -> Self {
        if h.record_count == 0 {
            return Self::Empty;
        }
        match control::parse_marker(bytes) {
            Ok(Some(m)) if m.commit => Self::Commit,
            Ok(Some(_)) => Self::Abort,
            Ok(None) | Err(_) => Self::Other,
        }
    }
}

/// The aborted transactions overlapping `[start, end)`, from the transaction indexes of the
/// segments from the one holding `start` on, read until an entry's last stable offset reaches
/// `end` (as a fetch collects them). Sorted by first offset.
pub(crate) fn collect_aborted(
    indexes: &[TxnIndexReader],
    start: i64,
    end: i64,
) -> crate::error::Result<Vec<AbortedTxn>> {
    let mut out = Vec::new();
    for index in indexes {
        let found = index.collect(start, end)?;
        out.extend(found.aborted);
        if found.complete {
            break;
        }
    }
    out.sort_by_key(|t| (t.first_offset, t.last_offset));
    Ok(out)
}

/// An aborted transaction the walk is inside of.
struct Ongoing {
    txn: AbortedTxn,
    /// A batch of it was seen in this pass.
    seen_data: bool,
}

pub(crate) struct CleanedTxns {
    /// Sorted by first offset; `next` is the first not yet taken up.
    aborted: Vec<AbortedTxn>,
    next: usize,
    ongoing_aborted: HashMap<i64, Ongoing>,
    ongoing_committed: HashSet<i64>,
    /// Aborted transactions whose marker the pass keeps because batches of theirs were seen,
    /// in marker order: the cleaned segment's index entries.
    retained: Vec<AbortedTxn>,
}

impl CleanedTxns {
    /// A walk over the aborted transactions `aborted` (sorted by first offset).
    pub(crate) fn new(aborted: Vec<AbortedTxn>) -> Self {
        Self {
            aborted,
            next: 0,
            ongoing_aborted: HashMap::new(),
            ongoing_committed: HashSet::new(),
            retained: Vec::new(),
        }
    }

    fn take_up_to(&mut self, offset: i64) {
        while let Some(t) = self.aborted.get(self.next).filter(|t| t.first_offset <= offset) {
            self.ongoing_aborted.entry(t.producer_id).or_insert(Ongoing { txn: *t, seen_data: false });
            self.next += 1;
        }
    }

    /// A data batch: whether it belongs to an aborted transaction (Kafka's `onBatchRead`).
    pub(crate) fn on_data(&mut self, h: &BatchHeader) -> bool {
        self.take_up_to(h.last_offset());
        if !h.is_transactional() {
            return false;
        }
        match self.ongoing_aborted.get_mut(&h.producer_id) {
            Some(t) => {
                t.seen_data = true;
                true
            }
            None => {
                self.ongoing_committed.insert(h.producer_id);
                false
            }
        }
    }

    /// A control batch: whether it may be discarded, its transaction having no batch left in
    /// the range (Kafka's `onControlBatchRead`). An ABORT kept for its batches is recorded for
    /// the cleaned index.
    pub(crate) fn on_control(&mut self, h: &BatchHeader, kind: ControlKind) -> bool {
        self.take_up_to(h.last_offset());
        match kind {
            ControlKind::Empty => true,
            ControlKind::Abort => match self.ongoing_aborted.remove(&h.producer_id) {
                Some(t) if t.seen_data => {
                    self.retained.push(t.txn);
                    false
                }
                _ => true,
            },
            ControlKind::Commit => !self.ongoing_committed.remove(&h.producer_id),
            ControlKind::Other => false,
        }
    }

    /// The index entries retained since the last call (one segment's).
    pub(crate) fn take_retained(&mut self) -> Vec<AbortedTxn> {
        std::mem::take(&mut self.retained)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pid: i64, base: i64, count: i32, transactional: bool) -> BatchHeader {
        BatchHeader {
            base_offset: base,
            batch_length: 100,
            leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: if transactional { 0x10 } else { 0 },
            last_offset_delta: count - 1,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: pid,
            producer_epoch: 0,
            base_sequence: 0,
            record_count: count,
        }
    }

    fn marker(pid: i64, offset: i64) -> BatchHeader {
        BatchHeader { attributes: 0x30, ..data(pid, offset, 1, true) }
    }

    fn aborted(pid: i64, first: i64, last: i64) -> AbortedTxn {
        AbortedTxn { producer_id: pid, first_offset: first, last_offset: last, last_stable_offset: last + 1 }
    }

    #[test]
    fn aborted_and_committed_transactions_of_the_same_producers() {
        // Producer 1: aborted 0..=3, committed 4..=6, aborted 7..=9 (data at 7 only).
        // Producer 2: committed 1..=5 interleaved, then aborted 8..=10 with no data left.
        // Producer 3: idempotent batches between them are never aborted.
        let mut w = CleanedTxns::new(vec![aborted(1, 0, 3), aborted(1, 7, 9), aborted(2, 8, 10)]);
        assert!(w.on_data(&data(1, 0, 1, true)));
        assert!(!w.on_data(&data(2, 1, 1, true)));
        assert!(!w.on_data(&data(3, 2, 1, false)));
        assert!(!w.on_control(&marker(1, 3), ControlKind::Abort), "its batch at 0 was seen: kept");
        assert!(!w.on_data(&data(1, 4, 1, true)), "a new transaction of producer 1, committed");
        assert!(!w.on_control(&marker(2, 5), ControlKind::Commit), "producer 2's batch at 1 was seen");
        assert!(!w.on_control(&marker(1, 6), ControlKind::Commit));
        assert!(w.on_data(&data(1, 7, 1, true)));
        assert!(!w.on_data(&data(3, 8, 1, false)));
        assert!(!w.on_control(&marker(1, 9), ControlKind::Abort));
        assert!(w.on_control(&marker(2, 10), ControlKind::Abort), "nothing of it left: it may go");
        assert!(w.on_control(&marker(2, 11), ControlKind::Commit), "nothing of it either");
        assert!(w.on_control(&marker(2, 12), ControlKind::Empty));
        assert!(!w.on_control(&marker(2, 13), ControlKind::Other));
        assert_eq!(w.take_retained(), vec![aborted(1, 0, 3), aborted(1, 7, 9)]);
        assert!(w.take_retained().is_empty());
    }

    #[test]
    fn a_transaction_that_started_before_the_walk() {
        // The walk starts at 10 inside producer 1's aborted 5..=12: its entry is taken up at
        // the first batch, and a later transaction of producer 1 is not aborted.
        let mut w = CleanedTxns::new(vec![aborted(1, 5, 12)]);
        assert!(w.on_data(&data(1, 10, 2, true)));
        assert!(!w.on_control(&marker(1, 12), ControlKind::Abort));
        assert!(!w.on_data(&data(1, 13, 1, true)));
    }
}
