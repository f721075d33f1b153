//! Replica state of a partition led by this broker: leader epoch, ISR and the high watermark
//! rule. Pure: the partition feeds it log end offsets and applies what it returns.
//!
//! The high watermark is the smallest log end offset among the in-sync replicas. With one
//! replica the ISR is the leader alone, so the high watermark follows the log end at once; the
//! same rule holds when followers arrive with replication.

use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaState {
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// Last known log end offset of each follower in the ISR.
    follower_leo: BTreeMap<i32, i64>,
}

impl ReplicaState {
    /// A partition whose only replica is `leader`.
    pub fn single(leader: i32, leader_epoch: i32) -> Self {
        Self { leader, leader_epoch, replicas: vec![leader], isr: vec![leader], follower_leo: BTreeMap::new() }
    }

    /// The state the metadata image gives a partition.
    pub fn from_record(p: &oxbow_meta::records::PartitionRecord) -> Self {
        Self {
            leader: p.leader,
            leader_epoch: p.leader_epoch,
            replicas: p.replicas.clone(),
            isr: p.isr.clone(),
            follower_leo: BTreeMap::new(),
        }
    }

    /// Takes the leader, epoch, replicas and ISR of `next`, keeping what is known of followers
    /// that stay in the ISR.
    pub fn update(&mut self, next: ReplicaState) {
        let kept: BTreeMap<i32, i64> =
            self.follower_leo.iter().filter(|(r, _)| next.isr.contains(r)).map(|(r, l)| (*r, *l)).collect();
        *self = Self { follower_leo: kept, ..next };
    }

    /// The high watermark given the leader's log end offset.
    pub fn high_watermark(&self, leader_leo: i64) -> i64 {
        self.isr
            .iter()
            .map(|r| if *r == self.leader { leader_leo } else { self.follower_leo.get(r).copied().unwrap_or(0) })
            .min()
            .unwrap_or(leader_leo)
    }

    /// Whether an acks=all write may proceed under `min.insync.replicas`.
    pub fn enough_in_sync(&self, min_insync: i32) -> bool {
        self.isr.len() >= usize::try_from(min_insync).unwrap_or(usize::MAX)
    }

    /// Records a follower's fetch position (used once replication exists).
    pub fn follower_fetched(&mut self, replica: i32, leo: i64) {
        if self.isr.contains(&replica) {
            self.follower_leo.insert(replica, leo);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hw_is_min_over_isr() {
        let mut s = ReplicaState::single(1, 0);
        assert_eq!(s.high_watermark(10), 10);
        assert!(s.enough_in_sync(1));
        assert!(!s.enough_in_sync(2));
        s.isr.push(2);
        s.replicas.push(2);
        s.follower_fetched(2, 7);
        assert_eq!(s.high_watermark(10), 7);
        s.follower_fetched(3, 1);
        assert_eq!(s.high_watermark(10), 7);
    }
}
