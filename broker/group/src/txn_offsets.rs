//! Transactional offset commits (TxnOffsetCommit) between their record and their transaction's
//! end, after Kafka's `OffsetMetadataManager`: each producer's open transaction holds the
//! offsets it commits, by group; the COMMIT marker makes them the committed offsets (unless a
//! newer record already committed the partition), ABORT drops them. OffsetFetch with
//! `require_stable` answers UNSTABLE_OFFSET_COMMIT for a partition one of them holds.

use std::collections::{BTreeMap, HashMap};

use crate::records::OffsetValue;

/// An offset commit with the log offset of its record: of two commits of one partition the
/// later record wins, whatever order their transactions end in (as Kafka, so that compacting
/// `__consumer_offsets` cannot change which one a reload sees).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub value: OffsetValue,
    pub record_offset: i64,
}

type ByPartition = BTreeMap<(String, i32), Committed>;

/// The offsets of open transactions, by producer id and group.
#[derive(Debug, Default, Clone)]
pub struct TxnOffsets {
    by_producer: HashMap<i64, HashMap<String, ByPartition>>,
}

impl TxnOffsets {
    /// A transactional commit's record of `producer_id`, at `record_offset`.
    pub fn add(&mut self, producer_id: i64, group: &str, topic: &str, partition: i32, c: Committed) {
        let parts = self.by_producer.entry(producer_id).or_default().entry(group.to_string()).or_default();
        parts.insert((topic.to_string(), partition), c);
    }

    /// The end of `producer_id`'s transaction: on commit, the offsets it held, by group, to
    /// merge into the committed ones (see [`merge`]); nothing on abort.
    pub fn end(&mut self, producer_id: i64, commit: bool) -> Vec<(String, ByPartition)> {
        let Some(groups) = self.by_producer.remove(&producer_id) else { return Vec::new() };
        if commit { groups.into_iter().collect() } else { Vec::new() }
    }

    /// Whether an open transaction commits an offset of `group`'s partition.
    pub fn has_pending(&self, group: &str, topic: &str, partition: i32) -> bool {
        let key = (topic.to_string(), partition);
        self.by_producer.values().any(|g| g.get(group).is_some_and(|p| p.contains_key(&key)))
    }

    /// Whether an open transaction commits any offset of `group`.
    pub fn has_group(&self, group: &str) -> bool {
        self.by_producer.values().any(|g| g.contains_key(group))
    }

    /// Every group an open transaction commits offsets of.
    pub fn groups(&self) -> impl Iterator<Item = &String> {
        self.by_producer.values().flat_map(|g| g.keys())
    }

    /// A non-transactional tombstone of the partition (OffsetDelete, DeleteGroups, expiry): the
    /// open transactions' offsets of it go too, as Kafka's replay of the tombstone does.
    pub fn remove(&mut self, group: &str, topic: &str, partition: i32) {
        let key = (topic.to_string(), partition);
        for groups in self.by_producer.values_mut() {
            if let Some(parts) = groups.get_mut(group) {
                parts.remove(&key);
                if parts.is_empty() {
                    groups.remove(group);
                }
            }
        }
        self.by_producer.retain(|_, g| !g.is_empty());
    }

    /// How many producers have an open transaction with offsets here.
    pub fn open_transactions(&self) -> usize {
        self.by_producer.len()
    }
}

/// Merges a committed transaction's offsets into `committed`: each replaces the committed
/// offset only if its record is later.
pub fn merge(committed: &mut ByPartition, ended: ByPartition) {
    for (k, c) in ended {
        match committed.get(&k) {
            Some(old) if old.record_offset > c.record_offset => {}
            _ => {
                committed.insert(k, c);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(offset: i64, record_offset: i64) -> Committed {
        Committed {
            value: OffsetValue {
                offset,
                leader_epoch: -1,
                metadata: String::new(),
                commit_timestamp: 0,
                expire_timestamp: None,
            },
            record_offset,
        }
    }

    #[test]
    fn a_commit_marker_makes_the_offsets_committed_an_abort_drops_them() {
        let mut t = TxnOffsets::default();
        t.add(7, "g", "t", 0, at(10, 100));
        t.add(7, "g", "t", 1, at(11, 100));
        t.add(8, "g", "t", 0, at(20, 101));
        assert!(t.has_pending("g", "t", 0) && t.has_pending("g", "t", 1));
        assert!(!t.has_pending("g", "t", 2) && !t.has_pending("h", "t", 0));
        assert_eq!(t.open_transactions(), 2);
        assert!(t.end(8, false).is_empty());
        assert!(t.has_pending("g", "t", 0), "producer 7 still holds t-0");
        let ended = t.end(7, true);
        assert_eq!(ended.len(), 1);
        let mut committed = ByPartition::new();
        merge(&mut committed, ended.into_iter().next().map(|(_, p)| p).unwrap_or_default());
        assert_eq!(committed.get(&("t".to_string(), 0)).map(|c| c.value.offset), Some(10));
        assert!(!t.has_group("g") && t.open_transactions() == 0);
    }

    #[test]
    fn a_later_record_wins_whatever_order_the_transactions_end_in() {
        let mut committed = ByPartition::new();
        committed.insert(("t".into(), 0), at(50, 200));
        let mut t = TxnOffsets::default();
        // Written before the plain commit at 200, committed after it: the plain one stays.
        t.add(1, "g", "t", 0, at(40, 150));
        t.add(1, "g", "t", 1, at(41, 150));
        for (_, p) in t.end(1, true) {
            merge(&mut committed, p);
        }
        assert_eq!(committed.get(&("t".to_string(), 0)).map(|c| c.value.offset), Some(50));
        assert_eq!(committed.get(&("t".to_string(), 1)).map(|c| c.value.offset), Some(41));
    }

    #[test]
    fn a_tombstone_removes_the_open_transactions_offsets_of_the_partition() {
        let mut t = TxnOffsets::default();
        t.add(1, "g", "t", 0, at(1, 1));
        t.add(2, "g", "t", 0, at(2, 2));
        t.add(2, "g", "t", 1, at(3, 3));
        t.remove("g", "t", 0);
        assert!(!t.has_pending("g", "t", 0));
        assert!(t.has_pending("g", "t", 1));
        assert_eq!(t.open_transactions(), 1);
        assert_eq!(t.groups().collect::<Vec<_>>(), vec!["g"]);
    }
}
