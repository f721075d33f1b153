//! A partition leader's verification guards (KIP-890 part 1, Kafka's `VerificationStateEntry`
//! and `VerificationGuard`): before the first transactional batch of a producer's transaction
//! is appended here, the leader asks the transaction coordinator whether this partition is in
//! the transaction (or, for transaction version 2 producers, adds it). A guard taken before
//! asking must still be in place when the batch is appended: a marker (or another transactional
//! batch) for the producer in between removes it, and the late batch is refused instead of
//! opening a transaction nobody will ever end (a "hanging" transaction).
//!
//! Pure state, kept under the partition's lock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Guards are unique across the broker, so a guard of an earlier verification never matches.
static NEXT_GUARD: AtomicU64 = AtomicU64::new(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    guard: u64,
    epoch: i16,
    /// Taken for a transaction version 2 producer (Produce v12+), whose next transaction may
    /// start verifying before the previous transaction's marker arrives here.
    epoch_bump: bool,
    created_ms: i64,
}

#[derive(Debug, Default)]
pub struct Verifications {
    by_producer: HashMap<i64, Entry>,
}

impl Verifications {
    /// The producer's guard, created if it has none: retries of a verification share it, as
    /// Kafka's `computeIfAbsent` does.
    pub fn start(&mut self, producer_id: i64, epoch: i16, epoch_bump: bool, now_ms: i64) -> u64 {
        let e = self.by_producer.entry(producer_id).or_insert_with(|| Entry {
            guard: NEXT_GUARD.fetch_add(1, Ordering::Relaxed),
            epoch,
            epoch_bump,
            created_ms: now_ms,
        });
        e.epoch = e.epoch.max(epoch);
        e.guard
    }

    /// Whether `guard` is the producer's current guard.
    pub fn holds(&self, producer_id: i64, guard: u64) -> bool {
        self.by_producer.get(&producer_id).is_some_and(|e| e.guard == guard)
    }

    /// A transactional data batch of the producer was appended: its verification is used up.
    pub fn batch_appended(&mut self, producer_id: i64) {
        self.by_producer.remove(&producer_id);
    }

    /// A marker of the producer was appended at `epoch`: the guard goes, unless it was taken
    /// by a transaction version 2 producer for the transaction after the one the marker ends.
    pub fn marker_appended(&mut self, producer_id: i64, epoch: i16) {
        if self.by_producer.get(&producer_id).is_some_and(|e| !(e.epoch_bump && e.epoch == epoch)) {
            self.by_producer.remove(&producer_id);
        }
    }

    /// Drops guards older than `max_age_ms` (`producer.id.expiration.ms`): verifications whose
    /// batch never came.
    pub fn expire(&mut self, now_ms: i64, max_age_ms: i64) {
        self.by_producer.retain(|_, e| now_ms - e.created_ms < max_age_ms);
    }

    pub fn len(&self) -> usize {
        self.by_producer.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_producer.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guard_is_shared_by_retries_and_used_up_by_the_batch() {
        let mut v = Verifications::default();
        let g = v.start(7, 0, false, 0);
        assert_eq!(v.start(7, 0, false, 5), g, "a retry shares the guard");
        assert!(v.holds(7, g));
        v.batch_appended(7);
        assert!(!v.holds(7, g));
        assert_ne!(v.start(7, 0, false, 10), g, "a new verification gets a new guard");
    }

    #[test]
    fn a_marker_between_verification_and_append_voids_the_guard() {
        let mut v = Verifications::default();
        let g = v.start(7, 3, false, 0);
        v.marker_appended(7, 3);
        assert!(!v.holds(7, g), "the late batch must be refused");
        assert!(v.is_empty());
    }

    #[test]
    fn a_version_2_producer_keeps_the_guard_of_its_next_transaction() {
        let mut v = Verifications::default();
        // The next transaction (epoch 5) verifies while the marker ending epoch 4's goes out
        // with epoch 5 (the bumped epoch).
        let g = v.start(7, 5, true, 0);
        v.marker_appended(7, 5);
        assert!(v.holds(7, g));
        // A marker of another epoch still voids it.
        v.marker_appended(7, 6);
        assert!(!v.holds(7, g));
    }

    #[test]
    fn old_guards_expire() {
        let mut v = Verifications::default();
        v.start(1, 0, false, 0);
        v.start(2, 0, false, 900);
        v.expire(1000, 500);
        assert_eq!(v.len(), 1);
    }
}
