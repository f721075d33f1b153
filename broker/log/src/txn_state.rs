//! A partition's transactions, as Kafka's `ProducerStateManager` tracks them: the open ones by
//! first offset (so the first unstable offset is the lowest key), and the completed ones whose
//! marker is not yet below the high watermark (still unstable: the marker may be lost with the
//! leader). Pure state; [`crate::producer_state::ProducerState`] drives it.

use std::collections::BTreeMap;

/// A transaction a marker ended: `first_offset..=last_offset`, the marker at `last_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
    pub aborted: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transactions {
    /// Open transactions: first offset -> producer id.
    ongoing: BTreeMap<i64, i64>,
    /// Completed, marker at or above the high watermark: first offset -> (producer id, marker).
    unreplicated: BTreeMap<i64, (i64, i64)>,
}

impl Transactions {
    pub fn begin(&mut self, producer_id: i64, first_offset: i64) {
        self.ongoing.insert(first_offset, producer_id);
    }

    /// Open transactions as (first offset, producer id), lowest first.
    pub fn ongoing(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.ongoing.iter().map(|(o, p)| (*o, *p))
    }

    /// The LSO once `txn` completes, before it is marked complete (Kafka's
    /// `lastStableOffset(CompletedTxn)`): the first offset of the lowest open transaction of
    /// another producer, else the offset after the marker. It goes into the aborted-transaction
    /// index entry.
    pub fn last_stable_offset(&self, txn: &CompletedTxn) -> i64 {
        self.ongoing.iter().find(|(_, p)| **p != txn.producer_id).map_or(txn.last_offset + 1, |(o, _)| *o)
    }

    /// Marks `txn` complete; it stays unstable until the high watermark passes its marker.
    /// Returns false if no transaction started at its first offset.
    pub fn complete(&mut self, txn: &CompletedTxn) -> bool {
        if self.ongoing.remove(&txn.first_offset).is_none() {
            return false;
        }
        self.unreplicated.insert(txn.first_offset, (txn.producer_id, txn.last_offset));
        true
    }

    /// Forgets completed transactions whose marker is below `offset` (the high watermark moved,
    /// or the log start did).
    pub fn on_high_watermark(&mut self, offset: i64) {
        self.unreplicated.retain(|_, (_, last)| *last >= offset);
    }

    /// The lowest first offset of an open transaction, or of a completed one whose marker is not
    /// yet replicated (Kafka's `firstUnstableOffset`).
    pub fn first_unstable_offset(&self) -> Option<i64> {
        let open = self.ongoing.keys().next();
        let unreplicated = self.unreplicated.keys().next();
        open.into_iter().chain(unreplicated).min().copied()
    }

    /// The lowest first offset of an open transaction (Kafka's `firstUndecidedOffset`).
    pub fn first_undecided_offset(&self) -> Option<i64> {
        self.ongoing.keys().next().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(pid: i64, first: i64, last: i64) -> CompletedTxn {
        CompletedTxn { producer_id: pid, first_offset: first, last_offset: last, aborted: true }
    }

    #[test]
    fn unstable_until_the_marker_is_replicated() {
        let mut t = Transactions::default();
        assert_eq!(t.first_unstable_offset(), None);
        t.begin(1, 10);
        t.begin(2, 15);
        assert_eq!(t.first_unstable_offset(), Some(10));
        // Producer 1's LSO skips its own transaction: the lowest other one starts at 15.
        assert_eq!(t.last_stable_offset(&done(1, 10, 20)), 15);
        assert!(t.complete(&done(1, 10, 20)));
        assert!(!t.complete(&done(1, 10, 20)), "completed once");
        assert_eq!(t.first_undecided_offset(), Some(15));
        assert_eq!(t.first_unstable_offset(), Some(10), "marker 20 not yet below the high watermark");
        t.on_high_watermark(21);
        assert_eq!(t.first_unstable_offset(), Some(15));
        assert_eq!(t.last_stable_offset(&done(2, 15, 30)), 31);
        assert!(t.complete(&done(2, 15, 30)));
        t.on_high_watermark(30);
        assert_eq!(t.first_unstable_offset(), Some(15));
        t.on_high_watermark(31);
        assert_eq!(t.first_unstable_offset(), None);
    }
}
