//! Replica state of a hosted partition: leader, epochs, replicas, ISR, and (on the leader) what
//! is known of each follower. Pure: the partition feeds it log end offsets and fetch positions
//! and applies what it returns.
//!
//! The high watermark is the smallest log end offset among the in-sync replicas. A follower is
//! caught up when it fetches from the leader's log end; it joins the ISR once it has fetched up
//! to the high watermark and into the current leader epoch, and leaves it when it has not been
//! caught up for `replica.lag.time.max.ms` (Kafka's rules). ISR changes go through the active
//! controller (AlterPartition); until it answers, the ISR here is the one the image holds, and
//! the high watermark counts the larger of the two (Kafka's "maximal ISR"): a follower asked in
//! holds every record acknowledged from then on, so the controller may elect it (a reassignment
//! completes in the change that admits its new replicas, and leadership moves to one of them)
//! without losing an acknowledged write; one asked out still holds back the high watermark
//! until the controller has confirmed it gone.

use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Follower {
    /// Log end offset as of its last fetch (-1: not heard from under this leadership).
    leo: i64,
    /// Log start offset it reported with its last fetch (-1: not known).
    log_start: i64,
    /// Last time it fetched from the leader's log end.
    caught_up_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaState {
    pub leader: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    followers: BTreeMap<i32, Follower>,
    /// The ISR sent to the controller and not yet seen in the image.
    pending_isr: Option<Vec<i32>>,
}

impl ReplicaState {
    /// A partition whose only replica is `leader`.
    pub fn single(leader: i32, leader_epoch: i32) -> Self {
        Self {
            leader,
            leader_epoch,
            partition_epoch: 0,
            replicas: vec![leader],
            isr: vec![leader],
            followers: BTreeMap::new(),
            pending_isr: None,
        }
    }

    /// The state the metadata image gives a partition.
    pub fn from_record(p: &oxbow_meta::records::PartitionRecord) -> Self {
        Self {
            leader: p.leader,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            replicas: p.replicas.clone(),
            isr: p.isr.clone(),
            followers: BTreeMap::new(),
            pending_isr: None,
        }
    }

    /// Takes the leader, epochs, replicas and ISR of `next`. Under the same leadership what is
    /// known of followers is kept; a new leadership starts every follower afresh, caught up as
    /// of `now_ms` (so none leaves the ISR before it had a chance to fetch).
    pub fn update(&mut self, next: ReplicaState, now_ms: i64) {
        let same = next.leader == self.leader && next.leader_epoch == self.leader_epoch;
        let followers = next
            .replicas
            .iter()
            .filter(|r| **r != next.leader)
            .map(|r| {
                let kept = self.followers.get(r).copied().filter(|_| same);
                (*r, kept.unwrap_or(Follower { leo: -1, log_start: -1, caught_up_ms: now_ms }))
            })
            .collect();
        let keep = same && next.partition_epoch == self.partition_epoch;
        let pending_isr = self.pending_isr.take().filter(|_| keep);
        *self = Self { followers, pending_isr, ..next };
    }

    /// Whether an ISR change is with the controller.
    pub fn isr_change_pending(&self) -> bool {
        self.pending_isr.is_some()
    }

    /// Records that `isr` was sent to the controller.
    pub fn propose(&mut self, isr: Vec<i32>) {
        self.pending_isr = Some(isr);
    }

    /// The controller refused or did not answer: the image's ISR alone counts again.
    pub fn proposal_failed(&mut self) {
        self.pending_isr = None;
    }

    /// The high watermark given the leader's log end offset: the smallest log end offset among
    /// the in-sync replicas and any the pending change adds.
    pub fn high_watermark(&self, leader_leo: i64) -> i64 {
        let pending = self.pending_isr.iter().flatten().filter(|r| !self.isr.contains(r));
        self.isr
            .iter()
            .chain(pending)
            .map(|r| if *r == self.leader { leader_leo } else { self.followers.get(r).map_or(0, |f| f.leo.max(0)) })
            .min()
            .unwrap_or(leader_leo)
    }

    /// Whether an acks=all write may proceed under `min.insync.replicas`.
    pub fn enough_in_sync(&self, min_insync: i32) -> bool {
        self.isr.len() >= usize::try_from(min_insync).unwrap_or(usize::MAX)
    }

    /// A follower fetched at `offset` while the leader's log ended at `leader_leo` and its
    /// high watermark was `hw`; `epoch_start` is where the current leader epoch begins.
    /// Returns the ISR to ask for if the follower should join it.
    #[allow(clippy::too_many_arguments)]
    pub fn follower_fetched(
        &mut self,
        replica: i32,
        offset: i64,
        log_start: i64,
        leader_leo: i64,
        hw: i64,
        epoch_start: i64,
        now_ms: i64,
    ) -> Option<Vec<i32>> {
        let f = self.followers.get_mut(&replica)?;
        f.leo = offset;
        f.log_start = log_start;
        if offset >= leader_leo {
            f.caught_up_ms = now_ms;
        }
        if self.isr.contains(&replica)
            || !self.isr.contains(&self.leader)
            || self.isr_change_pending()
            || offset < hw
            || offset < epoch_start
        {
            return None;
        }
        let mut isr = self.isr.clone();
        isr.push(replica);
        isr.sort_unstable();
        Some(isr)
    }

    /// DeleteRecords' low watermark: the smallest log start offset among the in-sync replicas
    /// (`leader_log_start` for this one); -1 while an in-sync follower has not reported its own
    /// under this leadership. (Kafka takes every live replica; the ISR are the ones that can
    /// lead without an unclean election, and a replica outside it takes the leader's log start
    /// when it fetches again.)
    pub fn low_watermark(&self, leader_log_start: i64) -> i64 {
        self.isr
            .iter()
            .map(
                |r| {
                    if *r == self.leader { leader_log_start } else { self.followers.get(r).map_or(-1, |f| f.log_start) }
                },
            )
            .min()
            .unwrap_or(leader_log_start)
    }

    /// The ISR without followers that have not been caught up for `lag_ms`, if any is to go.
    pub fn lagging(&self, now_ms: i64, lag_ms: i64) -> Option<Vec<i32>> {
        if self.isr_change_pending() || !self.isr.contains(&self.leader) {
            return None;
        }
        let out: Vec<i32> = self
            .isr
            .iter()
            .copied()
            .filter(|r| *r == self.leader || self.followers.get(r).is_none_or(|f| now_ms - f.caught_up_ms <= lag_ms))
            .collect();
        (out.len() < self.isr.len()).then_some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three() -> ReplicaState {
        let mut s = ReplicaState::single(1, 3);
        s.update(
            ReplicaState {
                replicas: vec![1, 2, 3],
                isr: vec![1, 2, 3],
                partition_epoch: 5,
                ..ReplicaState::single(1, 3)
            },
            0,
        );
        s
    }

    #[test]
    fn hw_is_min_over_isr() {
        let s = ReplicaState::single(1, 0);
        assert_eq!(s.high_watermark(10), 10);
        assert!(s.enough_in_sync(1));
        assert!(!s.enough_in_sync(2));
        let mut s = three();
        assert_eq!(s.high_watermark(10), 0, "followers not heard from yet hold the HW");
        assert_eq!(s.follower_fetched(2, 7, 0, 10, 0, 0, 1), None);
        assert_eq!(s.follower_fetched(3, 10, 0, 10, 0, 0, 1), None);
        assert_eq!(s.high_watermark(10), 7);
        assert_eq!(s.follower_fetched(4, 1, 0, 10, 7, 0, 1), None, "not a replica");
    }

    #[test]
    fn followers_leave_when_lagging_and_join_when_caught_up() {
        let mut s = three();
        s.follower_fetched(2, 10, 0, 10, 10, 0, 1_000);
        s.follower_fetched(3, 4, 0, 10, 10, 0, 1_000);
        assert_eq!(s.lagging(20_000, 30_000), None, "caught up at the start of the leadership");
        s.follower_fetched(2, 10, 0, 10, 10, 0, 39_000);
        assert_eq!(s.lagging(40_000, 30_000), Some(vec![1, 2]), "3 never reached the log end");
        s.update(ReplicaState { isr: vec![1, 2], partition_epoch: 6, ..s.clone() }, 40_000);
        assert_eq!(s.follower_fetched(3, 8, 0, 12, 10, 0, 41_000), None, "below the HW");
        assert_eq!(s.follower_fetched(3, 10, 0, 12, 10, 11, 41_000), None, "not yet into the current epoch");
        assert_eq!(s.follower_fetched(3, 12, 0, 12, 10, 11, 41_000), Some(vec![1, 2, 3]));
        s.propose(vec![1, 2, 3]);
        assert_eq!(s.follower_fetched(3, 12, 0, 12, 10, 11, 41_000), None, "one change at a time");
        // A new leader epoch starts every follower afresh.
        s.update(ReplicaState { leader_epoch: 4, ..s.clone() }, 50_000);
        assert!(!s.isr_change_pending());
        assert_eq!(s.high_watermark(12), 0);
    }

    #[test]
    fn a_follower_asked_into_the_isr_holds_back_the_hw_at_once() {
        let mut s = three();
        s.follower_fetched(2, 10, 0, 10, 10, 0, 1);
        s.update(ReplicaState { isr: vec![1, 2], partition_epoch: 6, ..s.clone() }, 2);
        s.follower_fetched(2, 10, 0, 10, 10, 0, 3);
        assert_eq!(s.follower_fetched(3, 10, 0, 10, 10, 0, 3), Some(vec![1, 2, 3]));
        s.propose(vec![1, 2, 3]);
        // The leader appends two more; 2 fetches them, 3 has not yet: nothing past 10 is
        // acknowledged, for the controller may make 3 the leader with the change.
        s.follower_fetched(2, 12, 0, 12, 10, 0, 4);
        assert_eq!(s.high_watermark(12), 10);
        s.follower_fetched(3, 12, 0, 12, 10, 0, 5);
        assert_eq!(s.high_watermark(12), 12);
        // Refused: the image's ISR alone counts again.
        s.follower_fetched(2, 14, 0, 14, 12, 0, 6);
        s.proposal_failed();
        assert_eq!(s.high_watermark(14), 14);
        // Asked out: the follower holds back the HW until the controller confirms.
        s.propose(vec![1]);
        assert_eq!(s.high_watermark(16), 14);
        s.update(ReplicaState { isr: vec![1], partition_epoch: 7, ..s.clone() }, 7);
        assert_eq!(s.high_watermark(16), 16);
    }

    #[test]
    fn low_watermark_is_min_log_start_over_isr() {
        assert_eq!(ReplicaState::single(1, 0).low_watermark(40), 40);
        let mut s = three();
        assert_eq!(s.low_watermark(40), -1, "followers not heard from yet");
        s.follower_fetched(2, 10, 40, 10, 10, 0, 1);
        s.follower_fetched(3, 10, 0, 10, 10, 0, 1);
        assert_eq!(s.low_watermark(40), 0);
        s.follower_fetched(3, 10, 40, 10, 10, 0, 2);
        assert_eq!(s.low_watermark(40), 40);
        // Out of the ISR, a follower's log start no longer counts.
        s.follower_fetched(3, 10, 0, 10, 10, 0, 3);
        s.update(ReplicaState { isr: vec![1, 2], partition_epoch: 6, ..s.clone() }, 4);
        assert_eq!(s.low_watermark(40), 40);
    }
}
