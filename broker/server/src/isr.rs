//! ISR changes go to the active controller (AlterPartition) through one queue and one task, in
//! the role of Kafka's `AlterPartitionManager`: a leader that wants its ISR changed submits the
//! change and goes on serving; the task sends the queued changes one at a time, oldest first.
//!
//! A change submitted for a partition whose earlier change is still queued replaces it (it was
//! computed from newer state) and keeps its place. A refused or unanswered change is handed back
//! to its partition ([`Partition::isr_change_failed`], so a later fetch may propose again) only
//! after [`RETRY_PAUSE_MS`]: the metadata image that explains the refusal may still be on its
//! way. That pause holds back only the refused partition, never the queue.
//!
//! [`IsrQueue`] is the pure part (no I/O, no clock); [`run`] is the task, owned by `Server`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use indexmap::IndexMap;
use oxbow_meta::Command;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::clock::now_ms;
use crate::controller_client::ControllerClient;
use crate::partition::{IsrChange, Partition};

/// How long a refused change waits before its partition may propose again.
pub const RETRY_PAUSE_MS: i64 = 1_000;

/// Queued changes by key, oldest first, and refused ones waiting out their pause.
#[derive(Debug)]
pub struct IsrQueue<K, V, R> {
    queued: IndexMap<K, V>,
    /// (due at, what to hand back), in the order they were refused (so by due time).
    paused: Vec<(i64, R)>,
}

impl<K: std::hash::Hash + Eq, V, R> Default for IsrQueue<K, V, R> {
    fn default() -> Self {
        Self { queued: IndexMap::new(), paused: Vec::new() }
    }
}

impl<K: std::hash::Hash + Eq, V, R> IsrQueue<K, V, R> {
    /// Queues `change` for `key`, replacing (in place) one still queued for it.
    pub fn submit(&mut self, key: K, change: V) {
        self.queued.insert(key, change);
    }

    /// The oldest queued change, taken off the queue.
    pub fn pop(&mut self) -> Option<(K, V)> {
        self.queued.shift_remove_index(0)
    }

    pub fn len(&self) -> usize {
        self.queued.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }

    /// A change was refused at `now_ms`: `retry` is handed back once the pause is over.
    pub fn refused(&mut self, retry: R, now_ms: i64) {
        self.paused.push((now_ms + RETRY_PAUSE_MS, retry));
    }

    /// What is due to be handed back at `now_ms`.
    pub fn due(&mut self, now_ms: i64) -> Vec<R> {
        let n = self.paused.partition_point(|(at, _)| *at <= now_ms);
        self.paused.drain(..n).map(|(_, r)| r).collect()
    }

    /// When the next refused change is due, if any is waiting.
    pub fn next_due(&self) -> Option<i64> {
        self.paused.first().map(|(at, _)| *at)
    }
}

/// One change to send.
pub struct Queued {
    pub part: Arc<Partition>,
    pub change: IsrChange,
}

/// The broker's ISR change queue: leaders submit, [`run`] sends.
#[derive(Default)]
pub struct IsrChanges {
    queue: Mutex<IsrQueue<(Uuid, i32), Queued, Arc<Partition>>>,
    wake: Notify,
    /// Changes the controller accepted that added a follower (Kafka's IsrExpandsPerSec).
    expands: AtomicU64,
    /// Changes the controller accepted that removed followers (Kafka's IsrShrinksPerSec).
    shrinks: AtomicU64,
}

impl IsrChanges {
    /// ISR expands and shrinks of partitions led here that the controller accepted.
    pub fn counts(&self) -> (u64, u64) {
        (self.expands.load(Ordering::Relaxed), self.shrinks.load(Ordering::Relaxed))
    }

    /// Queues an ISR change for partition `part` of topic `topic_id`.
    pub fn submit(&self, topic_id: Uuid, part: Arc<Partition>, change: IsrChange) {
        self.queue.lock().submit((topic_id, part.index), Queued { part, change });
        self.wake.notify_one();
    }
}

/// Sends queued ISR changes to the active controller (through `controller`, as node
/// `node_id`) until `stop`.
pub async fn run(changes: &IsrChanges, controller: &ControllerClient, node_id: i32, stop: CancellationToken) {
    loop {
        let (failed, next, pause) = {
            let mut q = changes.queue.lock();
            let failed = q.due(now_ms());
            let next = q.pop();
            let pause = q.next_due().map(|at| Duration::from_millis((at - now_ms()).max(1) as u64));
            (failed, next, pause)
        };
        for p in failed {
            p.isr_change_failed();
        }
        let Some(((topic_id, partition), Queued { part, change })) = next else {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = changes.wake.notified() => {}
                _ = tokio::time::sleep(pause.unwrap_or(Duration::from_secs(3600))) => {}
            }
            continue;
        };
        let cmd = Command::AlterPartition {
            node_id,
            broker_epoch: controller.broker_epoch(),
            topic_id,
            partition,
            leader_epoch: change.leader_epoch,
            partition_epoch: change.partition_epoch,
            isr: change.isr.clone(),
        };
        let result = tokio::select! {
            _ = stop.cancelled() => return,
            r = controller.execute(cmd) => r,
        };
        match result {
            Ok(_) => {
                let counter = if change.grows { &changes.expands } else { &changes.shrinks };
                counter.fetch_add(1, Ordering::Relaxed);
                tracing::info!(topic = %part.topic, partition, isr = ?change.isr, "ISR changed");
            }
            Err(e) => {
                tracing::warn!(topic = %part.topic, partition, isr = ?change.isr, error = %e, "ISR change refused");
                changes.queue.lock().refused(part, now_ms());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Q = IsrQueue<&'static str, Vec<i32>, &'static str>;

    #[test]
    fn changes_go_out_oldest_first() {
        let mut q = Q::default();
        q.submit("a", vec![1]);
        q.submit("b", vec![2]);
        q.submit("c", vec![3]);
        assert_eq!(q.pop(), Some(("a", vec![1])));
        assert_eq!(q.pop(), Some(("b", vec![2])));
        assert_eq!(q.pop(), Some(("c", vec![3])));
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn a_newer_change_replaces_a_queued_one_in_its_place() {
        let mut q = Q::default();
        q.submit("a", vec![1, 2]);
        q.submit("b", vec![2]);
        q.submit("a", vec![1, 2, 3]);
        assert_eq!(q.len(), 2);
        assert_eq!(q.pop(), Some(("a", vec![1, 2, 3])), "the newest state, at the oldest place");
        assert_eq!(q.pop(), Some(("b", vec![2])));
        assert!(q.is_empty());
    }

    #[test]
    fn a_change_for_a_partition_already_sent_queues_again() {
        let mut q = Q::default();
        q.submit("a", vec![1]);
        assert_eq!(q.pop(), Some(("a", vec![1])));
        q.submit("a", vec![1, 2]);
        assert_eq!(q.pop(), Some(("a", vec![1, 2])));
    }

    #[test]
    fn a_refused_change_is_handed_back_only_after_the_pause() {
        let mut q = Q::default();
        q.refused("a", 10_000);
        q.refused("b", 10_500);
        assert_eq!(q.next_due(), Some(10_000 + RETRY_PAUSE_MS));
        assert!(q.due(10_000 + RETRY_PAUSE_MS - 1).is_empty());
        assert_eq!(q.due(10_000 + RETRY_PAUSE_MS), vec!["a"]);
        assert_eq!(q.next_due(), Some(10_500 + RETRY_PAUSE_MS));
        assert_eq!(q.due(20_000), vec!["b"]);
        assert_eq!(q.next_due(), None);
    }

    #[test]
    fn a_paused_partition_does_not_hold_back_the_queue() {
        let mut q = Q::default();
        q.refused("a", 0);
        q.submit("b", vec![2]);
        assert_eq!(q.pop(), Some(("b", vec![2])), "sent while a waits out its pause");
    }
}
